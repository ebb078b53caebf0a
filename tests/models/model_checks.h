// The checks every model in the zoo passes (tests/models/test_<arch>.cpp):
// whole-model finite-difference gradients in f64, f32 against f64, pipeline
// chunks chained by hand against the whole model, recomputed blocks, and a
// tiny model overfitting one batch. Each takes the model through
// LanguageModel and a `Build` function, so a new model's test file is its
// config plus one line per check (docs/adding-a-model.md).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/self_communicator.h"
#include "core/param.h"
#include "models/model.h"

namespace lattice::test {

// (B, T) i32 ids drawn uniformly from [0, n_ids), keyed by `seed`.
Tensor random_tokens(int64_t B, int64_t T, int n_ids, uint64_t seed);

// Builds chunk `span` of the model on `params` (which hold that chunk's
// entries, unsharded) over a one-rank tp group.
using BuildModel = std::function<std::unique_ptr<LanguageModel>(FlatParams& params, comm::Group& tp, StageSpan span)>;

// A model's parameter table and builder: all the checks need.
struct ModelUnderTest {
  std::vector<ParamSpec> specs;  // the whole model's table
  int n_layer = 0;
  int64_t hidden = 0;  // C: the activation between chunks is (B, T, C)
  BuildModel build;
  int n_ids = 0;  // ids the inputs draw from (below any special ids)
};

// The ModelUnderTest of Model (a ChunkModel taking (cfg, params, tp, span))
// with config `cfg` and table `specs`; inputs draw from [0, n_ids).
template <class Model, class Cfg>
ModelUnderTest model_under_test(const Cfg& cfg, std::vector<ParamSpec> specs, int n_ids) {
  return {std::move(specs), cfg.n_layer, cfg.d_model,
          [cfg](FlatParams& p, comm::Group& tp, StageSpan span) -> std::unique_ptr<LanguageModel> {
            return std::make_unique<Model>(cfg, p, tp, span);
          },
          n_ids};
}

// The spec named `name` (a test failure and an exception if absent).
const ParamSpec& spec_named(const std::vector<ParamSpec>& specs, const std::string& name);

// A whole model on one rank: parameters (initialised with seed 7) and model.
struct WholeModel {
  comm::Group tp = comm::self_group("tp");
  FlatParams params;
  std::unique_ptr<LanguageModel> model;
  WholeModel(const ModelUnderTest& m, DType dtype, StageSpan span = {});
};

// f64: the gradient of loss / count with respect to every parameter entry
// against central finite differences (24 sampled elements each), relative
// error below 1e-5. `y` may hold kIgnoreIndex; `count` is its valid targets.
void check_gradients(const ModelUnderTest& m, const Tensor& x, const Tensor& y, double count,
                     const std::string& label = "");
// Loss within 1e-4 and gradients within (1e-3, 1e-5) of the f64 model.
void check_fp32_matches_fp64(const ModelUnderTest& m, int64_t B, int64_t T);
// The model cut into chunks `spans` (each with its own parameters, as on its
// own rank) and chained by hand: the loss of the whole model, and the
// gradients of every parameter summed over the chunks that hold it (the two
// replicas of a tied embedding) equal the whole model's; on_grads_ready
// reports the head, each block from the last, then the embedding.
void check_chunks_match_whole(const ModelUnderTest& m, const std::vector<StageSpan>& spans, int64_t B, int64_t T);
// Recomputing the first r blocks (each r in `recompute`, increasing) gives the
// same loss and gradients with a smaller context, which activation_bytes()
// predicts exactly.
void check_recompute(const ModelUnderTest& m, const std::vector<int>& recompute, int64_t B, int64_t T);
// parallel.recompute_attention (StageSpan::recompute_attention), alone and
// with the first block recomputed whole: two microbatches in flight (forward
// A, forward B, backward A, backward B, as 1F1B runs them) give the losses and
// gradients of the model that keeps every block's probabilities, bit for bit;
// each context holds one (B, NH, T, T) buffer less per block that keeps its
// tensors, the workspace one more (none where a block recomputed whole had
// one there already), and the allocator holds what activation_bytes() says
// for the contexts and the workspace. `pad_id` >= 0
// puts that id into the inputs (a key-padding mask). The model's dropout
// should be on, so that the masks are checked too.
void check_recompute_attention(const ModelUnderTest& m, int64_t B, int64_t T, int pad_id = -1);
// parallel.head_chunk_tokens (StageSpan::head_chunk) at 5 rows (uneven
// chunks of the B * T), B * T and more, with the head's gradients computed in
// backward (logits again) or in forward (set_loss_weight): two microbatches
// in flight (forward A, forward B, backward A, backward B, as GPipe runs
// them), some targets ignored, give the losses and gradients of the head run
// whole, in f64; gradients exist after the forwards exactly when forward
// computes them; each context holds no logits, the workspace one chunk's, the
// allocator holds what activation_bytes() says, logits() refuses, and a
// backward given another dloss than forward's refuses. B * T must exceed 5.
void check_head_chunks(const ModelUnderTest& m, int64_t B, int64_t T);
// runtime.precision bf16 (where this CPU has bf16 matmuls) and fp16: the model
// with 16-bit activations (set_activation_dtype) against the same model with
// fp32 activations, both with matmuls in that type: loss within 5 units of
// roundoff, every gradient within 40 in relative L2, and a context that
// activation_bytes() predicts exactly and that is at most 0.6 times the fp32
// one (statistics stay fp32).
void check_16bit_activations(const ModelUnderTest& m, int64_t B, int64_t T);
// AdamW (lr 3e-3, no weight decay) on one (B, T) batch for at most
// `max_steps`: the mean loss starts near ln(n_ids) and ends below 0.05.
void check_overfits_one_batch(const ModelUnderTest& m, int64_t B, int64_t T, int max_steps = 300);

}  // namespace lattice::test
