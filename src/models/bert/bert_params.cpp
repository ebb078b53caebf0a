// BERT's parameter table (HF BertForMaskedLM names, (OC, C) linear weights)
// and its sharding policy.
#include "models/bert/bert.h"

namespace lattice::bert {

ShardingPolicy sharding_policy(const BertConfig& cfg) {
  ShardingPolicy p;
  // First match wins: attention.output.dense before the MLP's output.dense.
  p.rules = {{"attention.self.query.weight", Role::attn_qkv},
             {"attention.self.query.bias", Role::attn_qkv},
             {"attention.self.key.weight", Role::attn_qkv},
             {"attention.self.key.bias", Role::attn_qkv},
             {"attention.self.value.weight", Role::attn_qkv},
             {"attention.self.value.bias", Role::attn_qkv},
             {"attention.output.dense.weight", Role::attn_out},
             {"intermediate.dense.weight", Role::mlp_in},
             {"intermediate.dense.bias", Role::mlp_in},
             {"output.dense.weight", Role::mlp_out},
             {"embeddings.word_embeddings.weight", Role::vocab_embedding},
             {"cls.predictions.decoder.weight", Role::lm_head}};
  // The tied decoder is the word embedding table: a replica on the head's stage.
  if (cfg.tie_embeddings) p.ties = {{"bert.embeddings.word_embeddings.weight", "word_embeddings", cfg.n_layer}};
  return p;
}

std::vector<ParamSpec> param_specs(const BertConfig& cfg) {
  const int64_t C = cfg.d_model, V = cfg.vocab_size, F = cfg.d_ff, L = cfg.n_layer;
  const float std = cfg.init_std;
  std::vector<ParamSpec> t;
  t.push_back(matrix_param("bert.embeddings.word_embeddings.weight", {V, C}, kEmbeddingLayer, std));
  t.push_back(matrix_param("bert.embeddings.position_embeddings.weight", {cfg.max_seq_len, C}, kEmbeddingLayer, std));
  t.push_back(
      matrix_param("bert.embeddings.token_type_embeddings.weight", {cfg.type_vocab_size, C}, kEmbeddingLayer, std));
  t.push_back(vector_param("bert.embeddings.LayerNorm.weight", C, kEmbeddingLayer, InitKind::ones));
  t.push_back(vector_param("bert.embeddings.LayerNorm.bias", C, kEmbeddingLayer, InitKind::zeros));
  for (int i = 0; i < L; ++i) {
    const std::string h = "bert.encoder.layer." + std::to_string(i) + ".";
    // query, key, value weights adjacent, then their biases: the model reads
    // each triple as one fused (3 C_l, C) weight and (3 C_l) bias.
    for (const char* qkv : {"query", "key", "value"})
      t.push_back(matrix_param(h + "attention.self." + qkv + ".weight", {C, C}, i, std));
    for (const char* qkv : {"query", "key", "value"})
      t.push_back(vector_param(h + "attention.self." + qkv + ".bias", C, i, InitKind::zeros));
    t.push_back(matrix_param(h + "attention.output.dense.weight", {C, C}, i, std));
    t.push_back(vector_param(h + "attention.output.dense.bias", C, i, InitKind::zeros));
    t.push_back(vector_param(h + "attention.output.LayerNorm.weight", C, i, InitKind::ones));
    t.push_back(vector_param(h + "attention.output.LayerNorm.bias", C, i, InitKind::zeros));
    t.push_back(matrix_param(h + "intermediate.dense.weight", {F, C}, i, std));
    t.push_back(vector_param(h + "intermediate.dense.bias", F, i, InitKind::zeros));
    t.push_back(matrix_param(h + "output.dense.weight", {C, F}, i, std));
    t.push_back(vector_param(h + "output.dense.bias", C, i, InitKind::zeros));
    t.push_back(vector_param(h + "output.LayerNorm.weight", C, i, InitKind::ones));
    t.push_back(vector_param(h + "output.LayerNorm.bias", C, i, InitKind::zeros));
  }
  const int head = int(L);
  t.push_back(matrix_param("cls.predictions.transform.dense.weight", {C, C}, head, std));
  t.push_back(vector_param("cls.predictions.transform.dense.bias", C, head, InitKind::zeros));
  t.push_back(vector_param("cls.predictions.transform.LayerNorm.weight", C, head, InitKind::ones));
  t.push_back(vector_param("cls.predictions.transform.LayerNorm.bias", C, head, InitKind::zeros));
  if (!cfg.tie_embeddings) t.push_back(matrix_param("cls.predictions.decoder.weight", {V, C}, head, std));
  t.push_back(vector_param("cls.predictions.bias", V, head, InitKind::zeros));
  return apply_policy(std::move(t), sharding_policy(cfg));
}

}  // namespace lattice::bert
