// Pipeline stages: which model layers each stage (and each model chunk of an
// interleaved stage) holds, and where this rank sits in the pp group.
//
// Model chunks. The model's n_layer blocks are cut into pp * virtual_stages
// consecutive chunks. Chunk c lives on stage c % pp as its virtual stage
// (local chunk) c / pp, as in Megatron: with pp = 2, virtual_stages = 2 the
// chunks 0, 1, 2, 3 sit on stages 0, 1, 0, 1. Model chunk 0 also holds the
// embedding, the last model chunk the final norm, LM head and loss. Without
// interleaving there is one chunk per stage and "chunk" == "stage".
//
// Splits (parallel.layers_per_stage):
//   list      one count per model chunk, in chunk order; sum == n_layer, each >= 1.
//   uniform   n_layer / chunks each; the remainder goes one layer each to the
//             middle chunks (centred), since the first and last also carry the
//             embedding and the head; only when every middle chunk has one more
//             does the first, then the last, get one. With interleaving, n_layer
//             must divide evenly: the interleaved schedule runs one chunk per
//             slot and assumes equal chunk times.
//   balanced  a cost model (see split_balanced below): the split that minimises
//             the most expensive chunk's compute; among those, the one that
//             minimises the largest parameter memory per chunk.
//
// Errors are one line naming the config key (lattice::Error).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lattice::pipeline {

enum class StageSplit { uniform, balanced, list };

// What the balanced split needs to know about the model (GPT-2 letters).
struct StageCostModel {
  int64_t d_model = 0;     // C
  int64_t vocab_size = 0;  // V
  int64_t seq_len = 0;     // T
};

struct StageConfig {
  int n_layer = 0;
  int pp = 1;
  int virtual_stages = 1;    // model chunks per stage; > 1 only with interleaved
  bool interleaved = false;  // parallel.schedule == interleaved
  int microbatches = 0;      // 0: not checked here
  StageSplit split = StageSplit::uniform;
  std::vector<int> layers_per_stage;  // split == list: one count per model chunk
  StageCostModel cost;                // split == balanced
};

struct LayerRange {
  int begin = 0, end = 0;  // model layers [begin, end)
  int size() const { return end - begin; }
  bool operator==(const LayerRange&) const = default;
};

// The layer-to-chunk map of a whole job (pure; the same on every rank).
struct StageLayout {
  int n_layer = 0, pp = 1, virtual_stages = 1;
  std::vector<LayerRange> chunks;  // by model chunk c (= vstage * pp + stage)

  int num_chunks() const { return pp * virtual_stages; }
  int model_chunk(int stage, int vstage) const { return vstage * pp + stage; }
  const LayerRange& layers(int stage, int vstage = 0) const;
  int layers_on_stage(int stage) const;  // summed over its chunks
  // "stage 0: layers 0-3 (4) + embedding" per stage, chunks listed when interleaved.
  std::string describe() const;
};

// Validates `c` (one-line errors, see the header comment) and splits.
StageLayout make_stage_layout(const StageConfig& c);

// The pieces, for `lattice plan` and tests. Each returns one count per chunk.
std::vector<int> split_uniform(int n_layer, int chunks);
// Cost of one transformer block = 1 unit = 24 C^2 + 4 C T flops per token
// (QKV, attention projection and the 4C MLP: 2 * 12 C^2; QK^T and AV: 2 * 2 T C).
// Model chunk 0 adds the embedding, 2 C / block (token lookup plus position add);
// the last chunk adds the LM head and loss, (2 V C + 5 V) / block (the logits
// matmul plus ~5 flops per logit for softmax and cross-entropy). Backward costs
// twice forward for every part, so the ratios hold for a training step.
// Memory tie-break, in parameters per chunk: 12 C^2 per block, plus V C + T C
// (token and position tables) on chunk 0 and V C (the LM head, or the tied
// replica) on the last chunk (as DeepSpeed's partition_method=parameters).
// For GPT-2 124M (C 768, V 50257, T 1024) the head costs ~4.5 blocks.
std::vector<int> split_balanced(int n_layer, int chunks, const StageCostModel& cost);
double head_cost_in_blocks(const StageCostModel& cost);
double embedding_cost_in_blocks(const StageCostModel& cost);

// This rank's place in the pipeline.
class PipelineStageManager {
 public:
  // pp_world_ranks: world rank of each stage (the pp group's world_ranks()),
  // or empty where world ranks are unknown (plans, tests): then ranks read -1.
  PipelineStageManager(StageLayout layout, int stage, std::vector<int> pp_world_ranks = {});

  const StageLayout& layout() const { return layout_; }
  int stage() const { return stage_; }
  int num_stages() const { return layout_.pp; }
  int virtual_stages() const { return layout_.virtual_stages; }
  bool is_first_stage() const { return stage_ == 0; }
  bool is_last_stage() const { return stage_ == layout_.pp - 1; }
  // This rank's chunk `vstage` is the model's first (embedding) / last (head, loss) chunk.
  bool is_first_chunk(int vstage) const { return model_chunk(vstage) == 0; }
  bool is_last_chunk(int vstage) const { return model_chunk(vstage) == layout_.num_chunks() - 1; }
  int model_chunk(int vstage) const { return layout_.model_chunk(stage_, vstage); }
  const LayerRange& layers(int vstage = 0) const { return layout_.layers(stage_, vstage); }
  std::string describe() const { return layout_.describe(); }  // the start-up map

  // Neighbours in the pp group; a ring when interleaved (the last stage feeds
  // stage 0's next chunk). -1 where there is none.
  int prev_stage() const;
  int next_stage() const;
  int prev_rank() const { return world_rank_of(prev_stage()); }  // world ranks
  int next_rank() const { return world_rank_of(next_stage()); }
  int world_rank_of(int stage) const;

 private:
  StageLayout layout_;
  int stage_;
  std::vector<int> world_ranks_;
};

}  // namespace lattice::pipeline
