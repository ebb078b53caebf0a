// Hugging Face interop for GPT-2 (`lattice convert`, issue 6 item 6).
//
// An HF GPT-2 directory is what `GPT2LMHeadModel.save_pretrained` writes:
// config.json (GPT2Config) and model.safetensors, or shards named by
// model.safetensors.index.json. The mapping derives from GPT-2's parameter
// table (one row per parameter):
//   Lattice                     HF                                      layout
//   wte.weight (V, C)           transformer.wte.weight                  same
//   wpe.weight (P, C)           transformer.wpe.weight                  same
//   h.N.<...>.weight (OC, C)    transformer.h.N.<...>.weight (C, OC)    transposed: Conv1D
//     (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj: the column- and row-parallel weights)
//   h.N.<norms, biases>         transformer.h.N.<...>                   same
//   ln_f.{weight,bias}          transformer.ln_f.{weight,bias}          same
//   lm_head.weight (V, C)       lm_head.weight (untied only)            same
// A tied head has no lm_head.weight in the HF file (tie_word_embeddings).
// Vocabulary rows are the logical ones on both sides (no padding).
//
// Import also reads files saved from a bare GPT2Model (no `transformer.`
// prefix), skips the causal-mask buffers old files carry (h.N.attn.bias,
// h.N.attn.masked_bias) and converts F16 / BF16 / F64 weights to F32. Every
// setting of config.json that changes what the model computes is checked:
// Lattice's GPT-2 computes GELU with the tanh approximation (HF
// "gelu_new" / "gelu_pytorch_tanh" / "gelu_fast"; core/kernels/math.h),
// d_ff = 4 C (n_inner null), attention scaled by 1/sqrt(head size) only.
// Anything else is refused with one Error line naming the file, the key, the
// value and what Lattice needs.
#pragma once

#include <cstdint>
#include <string>

#include "checkpoint/model_checkpoint.h"
#include "core/param.h"

namespace lattice::checkpoint {

// The HF name of a GPT-2 parameter and whether HF stores it transposed.
struct HfTensorName {
  std::string name;
  bool transposed = false;  // HF Conv1D: (C, OC) for Lattice's (OC, C)
};
HfTensorName gpt2_hf_name(const ParamSpec& spec);

// GPT2Config (config.json text) for a Lattice model; one Error line for a
// model HF GPT-2 cannot express (another arch, d_ff != 4 C, rotary, ...).
std::string gpt2_hf_config_json(const ModelConfig& m);
// The Lattice model config for an HF GPT-2 config.json (a path).
ModelConfig gpt2_config_from_hf(const std::string& config_json_path);

// Reads an HF GPT-2 directory into a checked LogicalModel.
LogicalModel read_hf_gpt2(const std::string& hf_dir);
// Writes `out_dir`/config.json and `out_dir`/model.safetensors (HF names,
// __metadata__ {"format": "pt"}); `out_dir` must be new or empty.
void write_hf_gpt2(const LogicalModel& m, const std::string& out_dir);

struct ConvertSummary {
  ModelConfig model;
  int64_t parameters = 0;  // logical elements written
  std::string out;         // the directory written
  std::string hf_class;    // "GPT2LMHeadModel" or "LlamaForCausalLM"
};
// lattice convert --to-hf STEP_DIR OUT_DIR: a verified checkpoint to HF, as
// GPT-2 or LLaMA (checkpoint/hf_llama.h) by the arch of its config; another
// arch is one InputError line naming the archs there are exporters for.
// manifest: Manifest::verified when the caller has just verified step_dir.
ConvertSummary convert_to_hf(const std::string& step_dir, const std::string& out_dir,
                             Manifest manifest = Manifest::verify);
// lattice convert --from-hf HF_DIR PARENT: a model-only PARENT/step_0000000,
// read as GPT-2 or LLaMA by config.json's model_type.
ConvertSummary convert_from_hf(const std::string& hf_dir, const std::string& out_parent);

}  // namespace lattice::checkpoint
