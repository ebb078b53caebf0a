// Hugging Face interop for LLaMA (`lattice convert`, issue 6 item 6).
//
// An HF LLaMA directory is what `LlamaForCausalLM.save_pretrained` writes:
// config.json (LlamaConfig) and model.safetensors, or shards named by
// model.safetensors.index.json. Lattice's LLaMA parameter table already uses
// HF's names and layouts (models/llama/llama.h), so every tensor maps to the
// same name and shape:
//   model.embed_tokens.weight (V, C)              model.norm.weight (C)
//   model.layers.N.self_attn.{q,o}_proj.weight (C, C), {k,v}_proj (KV HS, C)
//   model.layers.N.mlp.{gate,up}_proj.weight (F, C), down_proj (C, F)
//   model.layers.N.{input,post_attention}_layernorm.weight (C)
//   lm_head.weight (V, C)                          (untied only)
// Linear weights are (out, in) on both sides (nn.Linear), and Lattice's rotary
// embedding is HF's rotate-half convention, so q/k need no permutation.
// Vocabulary rows are the logical ones on both sides (no padding).
//
// config.json <-> ModelConfig:
//   hidden_size d_model, intermediate_size d_ff, num_hidden_layers n_layer,
//   num_attention_heads n_head, num_key_value_heads n_kv_head (null: n_head),
//   vocab_size, max_position_embeddings max_seq_len, rms_norm_eps norm_eps,
//   rope_theta, tie_word_embeddings (LlamaConfig's default: false),
//   attention_dropout dropout, initializer_range init_std.
// What Lattice's LLaMA cannot compute is refused on import with one Error
// line naming the file and the key: rope_scaling not null, attention_bias or
// mlp_bias true, hidden_act other than silu, head_dim other than
// hidden_size / num_attention_heads. Import skips the rotary inv_freq buffers
// older files carry and converts F16 / BF16 / F64 weights to F32.
#pragma once

#include <string>

#include "checkpoint/model_checkpoint.h"

namespace lattice::checkpoint {

inline constexpr const char* kLlamaHfClass = "LlamaForCausalLM";

// LlamaConfig (config.json text) for a Lattice LLaMA; one Error line for
// another arch.
std::string llama_hf_config_json(const ModelConfig& m);
// The Lattice model config for an HF LLaMA config.json (a path).
ModelConfig llama_config_from_hf(const std::string& config_json_path);

// Reads an HF LLaMA directory into a checked LogicalModel.
LogicalModel read_hf_llama(const std::string& hf_dir);
// Writes `out_dir`/config.json and `out_dir`/model.safetensors (HF names,
// __metadata__ {"format": "pt"}); `out_dir` must be new or empty.
void write_hf_llama(const LogicalModel& m, const std::string& out_dir);

}  // namespace lattice::checkpoint
