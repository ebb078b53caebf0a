// Kernel entry points: the dispatch layer every layer and model calls.
//
// Each op takes Tensors, checks shapes and dtypes, and dispatches by device
// and dtype: CPU f32 and f64 go to the templated kernels in
// core/kernels/cpu/ (OpenBLAS for matmuls, OpenMP loops for the rest); CUDA f32
// goes to the CUDA backend (core/backend.h); bf16/f16 activations (the ops
// that have 16-bit kernels, under runtime.precision bf16|fp16) go to both's
// 16-bit kernels; anything else is an Error that names the op, dtype and
// device.
//
// Conventions (ARCHITECTURE.md §2): forward and backward sit side by side with
// mirrored signatures (outputs, saved state, inputs, parameters). Parameter
// gradients ACCUMULATE (+=); activation gradients OVERWRITE (=). Shape letters
// are those of core/shapes.h. Leading dims are folded: "(N, C)" accepts any
// tensor whose last dim is C, with N the product of the others.
#pragma once

#include <cstdint>

#include "core/rng.h"
#include "core/shapes.h"
#include "core/tensor.h"

namespace lattice::ops {

// ---- matmul -------------------------------------------------------------
// Matmul operands (gemm's a and b, the linear layers' weight) have the
// product's dtype, or, for an f32 product under runtime.precision bf16/fp16,
// may be that 16-bit type: a parameter's 16-bit shadow (core/param.h), read
// as it is where an f32 operand would be rounded on the call, with the same
// bits as the result. Any other 16-bit operand is an error naming the
// precision it needs.
//
// 16-bit activations. Activations (inp, dout, a 16-bit c) of type S = bf16 or
// f16 need the matmuls on their device to run in S (cpu::matmul_dtype(),
// CudaBackend::matmul_dtype(); runtime.precision bf16|fp16); otherwise the
// op fails naming itself, both dtypes and the precision needed. Beside them
// a weight is f32 (rounded to S on the call) or S (its shadow; same bits),
// bias, dweight and dbias are f32. All arithmetic accumulates in fp32; a
// 16-bit output is rounded ONCE to nearest even, after the bias (and before
// GELU, which rounds its own output): the bits of the f32 op under S
// matmuls on the widened inputs, rounded. An f32 out or dinp beside 16-bit
// activations is that fp32 result unrounded (a tensor-parallel partial sum,
// all-reduced in fp32 before it is rounded).
//
// c (M, N) = alpha * op(a) @ op(b) + beta * c, with op(x) = x or x^T.
// a is (M, K) or (K, M) when trans_a; b is (K, N) or (N, K) when trans_b.
// c of S: c = round(alpha * op(a) op(b) + beta * widen(c)), a and b each S or
// f32 (rounded); c f32 with a and/or b of the matmul type: unrounded.
void gemm(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha = 1.0f,
          float beta = 0.0f);

// out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC); bias may be null.
// inp S: out S (rounded once, after the bias) or f32 (unrounded).
void linear_forward(Tensor& out, const Tensor& inp, const Tensor& weight, const Tensor* bias);
// pre (N, OC) = linear_forward(inp, weight, bias), act (N, OC) = gelu(pre)
// (tanh form), for a layer whose backward needs pre: the same values as the
// two calls, one fused cuBLASLt matmul on the GPU where it can be. inp, act
// and pre share one dtype; for S, pre = round(linear) and act =
// round(gelu(widen(pre))), the bits of linear_forward then gelu_forward.
void linear_gelu_forward(Tensor& act, Tensor& pre, const Tensor& inp, const Tensor& weight, const Tensor* bias);
// dinp (N, C) = dout @ weight                 (overwrite; skipped when null)
// dweight (OC, C) += dout^T @ inp             (skipped when null)
// dbias (OC) += column sums of dout           (skipped when null)
// dout and inp S: dinp S (rounded once) or f32 (unrounded); dweight and dbias
// f32, accumulated in fp32 from the 16-bit values as they are.
void linear_backward(Tensor* dinp, Tensor* dweight, Tensor* dbias, const Tensor& dout, const Tensor& inp,
                     const Tensor& weight);

// out (N, OC) += bias (OC) broadcast over rows: a bias added on its own, e.g.
// once after a tp reduce (tp/linear.h RowParallelLinear).
void add_bias_forward(Tensor& out, const Tensor& bias);
// dbias (OC) += column sums of dout (N, OC).
void add_bias_backward(Tensor& dbias, const Tensor& dout);

// ---- normalisation ------------------------------------------------------
// out (N, C) = (inp - mean) * rstd * weight + bias; saves mean (N), rstd (N).
void layernorm_forward(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& inp, const Tensor& weight,
                       const Tensor& bias, float eps);
void layernorm_backward(Tensor& dinp, Tensor& dweight, Tensor& dbias, const Tensor& dout, const Tensor& inp,
                        const Tensor& weight, const Tensor& mean, const Tensor& rstd);

// out (N, C) = inp * rstd * weight, rstd = 1 / sqrt(mean(inp^2) + eps); saves rstd (N).
void rmsnorm_forward(Tensor& out, Tensor& rstd, const Tensor& inp, const Tensor& weight, float eps);
void rmsnorm_backward(Tensor& dinp, Tensor& dweight, const Tensor& dout, const Tensor& inp, const Tensor& weight,
                      const Tensor& rstd);

// ---- activations --------------------------------------------------------
// GELU, tanh approximation (GPT-2). Any shape.
void gelu_forward(Tensor& out, const Tensor& inp);
void gelu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp);

// SwiGLU: inp (N, 2F) holds [gate | up]; out (N, F) = silu(gate) * up.
void swiglu_forward(Tensor& out, const Tensor& inp);
void swiglu_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp);

// Row softmax over the last dim: out (N, K).
void softmax_forward(Tensor& out, const Tensor& inp);
void softmax_backward(Tensor& dinp, const Tensor& dout, const Tensor& out);

// ---- dropout --------------------------------------------------------------
// Inverted dropout on x (B, S): element (b, s) is kept with probability 1 - p
// and scaled by 1 / (1 - p); the mask is rng_keep(key, sample0 + b, s, p), so
// it is regenerated in backward and never stored. p == 0 is a copy.
struct Dropout {
  float p = 0.0f;
  RngKey key;
  int64_t sample0 = 0;  // global index of row 0's sample in the step's batch
};
void dropout_forward(Tensor& out, const Tensor& inp, const Dropout& d);
void dropout_backward(Tensor& dinp, const Tensor& dout, const Dropout& d);

// ---- attention ------------------------------------------------------------
// Causal multi-head self-attention on a fused projection. f32 or f64, or
// 16-bit activations (below).
//   qkv (B, T, 3 * NH * HS): [q | k | v], head h at columns h * HS of each part
//   out (B, T, NH * HS)
//   att (B, NH, T, T): saved for backward: the softmax probabilities BEFORE
//       dropout (entries above the diagonal are 0). Memory: B * NH * T * T
//       elements; together with qkv (which the caller keeps) that is all
//       backward needs. Dropout on the probabilities (d.p > 0) uses logical
//       element index ((head_offset + h) * T + i) * T + j of sample b, so masks
//       do not depend on how heads are split. On CUDA att (and backward's
//       scratch) may instead be compact: attention_state_shape below.
void attention_forward(Tensor& out, Tensor& att, const Tensor& qkv, int n_head, const Dropout& d, int head_offset = 0);
// att as attention_forward leaves it, bit for bit, without the output: no
// dropout, no P @ V (parallel.recompute_attention computes the probabilities
// again for backward; ChunkModel::recompute_attention). att must be the full
// (B, NH, T, T) state; a compact one is one error line.
void attention_probs(Tensor& att, const Tensor& qkv, int n_head, const Dropout& d, int head_offset = 0);
// Incremental decoding with a key/value cache (evaluation only: no dropout,
// nothing saved for backward; ChunkModel::forward_cached). qkv (B, Tn, 3 C)
// holds the new positions pos0 .. pos0 + Tn - 1, C = NH * HS; their k and v go
// into rows [pos0, pos0 + Tn) of `cache` (B, capacity, 2 KV HS: each
// position's k then v), and out (B, Tn, C) is the causal attention of their
// queries over cache rows [0, pos0 + t]: attention_forward's rows pos0 ..
// pos0 + Tn - 1 of the whole sequence, up to rounding. n_kv_head KV (0: NH)
// < NH: qkv's k and v are repeat_kv's, each group's heads copies of one, and
// the cache keeps one head per group (core/kernels/cpu/attention_cached.h).
// CPU, f32 or f64.
void attention_cached(Tensor& out, Tensor& cache, const Tensor& qkv, int n_head, int64_t pos0, int n_kv_head = 0);
// dqkv (B, T, 3 * NH * HS) overwrite. On CUDA uses `scratch`, att's shape,
// as workspace; the CPU kernels never read it, so there it may also be empty
// (attention_scratch_shape).
//
// 16-bit activations (this op and attention_masked_*): qkv, out, att, dout,
// dqkv and scratch all bf16, or all f16 (key_mask stays i32), and the
// matmuls must run in that type (cpu::matmul_dtype() on the CPU,
// CudaBackend::matmul_dtype() on CUDA; runtime.precision bf16 or fp16),
// else one error naming the op, the dtypes and the precision needed. The
// semantics are the f32 op's under 16-bit matmuls, with 16-bit storage:
//   - the products read their 16-bit operands as they are and accumulate in
//     fp32; scores, softmax, row sums, dropout scaling and the softmax
//     backward are fp32;
//   - att holds P rounded to nearest even (the product P @ V rounds P to the
//     same bits under 16-bit matmuls, so this changes no forward bit against
//     an fp32 P); with dropout, forward drops the fp32 P;
//   - backward reads the stored P widened (dV reads it dropped, rounded);
//     dS is rounded into scratch, which is what the products read;
//   - out and dqkv are rounded once to nearest even;
//   - dropout masks are those of the f32 op (the same Philox keys and
//     logical element indices); no float atomics, so results are
//     deterministic and do not depend on the thread count.
// On the CPU the results are those of the f32 kernel on the same values
// rounded (bitwise, tests/core/test_ops_attention16.cpp). On CUDA a shape
// cuDNN's fused attention takes (sdpa_plan.h) runs there: fp32 P inside
// the kernel, Stats and O in att.
void attention_backward(Tensor& dqkv, Tensor& scratch, const Tensor& dout, const Tensor& qkv, const Tensor& att,
                        int n_head, const Dropout& d, int head_offset = 0);

// Which saved state attention calls on a device take:
//   - full_cpu, full_cuda: (B, NH, T, T) probabilities, P before dropout;
//   - compact_cpu: the CPU kernels' row statistics (core/kernels/cpu/
//     attention.h), 2 * B * NH * T fp32 values (f64 for f64 activations),
//     linear in T; backward computes P again block by block from them, with
//     the full state's bits, for one more q k^T product per row block. Every
//     attention op, causal or masked, dropout or not, takes it.
//     parallel.cpu_attention: compact (the default) on the CPU;
//   - fused_cuda: cuDNN's fused path's Stats and O where its rules take the
//     calls, else full (below).
// The device is part of the state because backward's scratch depends on it
// (attention_scratch_shape).
enum class AttentionState { full_cpu, compact_cpu, full_cuda, fused_cuda };

// What a model allocates for att and for backward's scratch, per layer, for
// the attention calls `c` describes (the training calls: dropout p as
// configured, whether a key mask may come), under state `where`:
//   - full_cpu, full_cuda: (B, NH, T, T);
//   - compact_cpu: ({2 * B * NH * T * k}) of `act`, k = 2 for 16-bit act
//     (fp32 statistics in 16-bit elements), else 1;
//   - fused_cuda: compact, ({n}), the fused path's Stats and O only
//     (sdpa_saved_elems of core/cuda/sdpa_plan.h: (B, NH, T) f32 and
//     (B, T, C) 16-bit, linear in T), when the calls are causal (CUDA's
//     attention_masked_* take (B, NH, T, T) only: their backward reads the
//     key mask from P) and the fused path's rules take them (sdpa_supported:
//     no dropout, no key mask, head size, T); else (B, NH, T, T).
// A fused_cuda call that takes the plain path after all (cuDNN refuses the
// shape or fails to run it) runs sample by sample through two (NH, T, T)
// temporaries the backend keeps per device (not counted by lattice plan or
// peak_mem_bytes): forward computes P there, backward computes it again
// (the plain forward: the same bits) and works in the other. That costs one
// more attention forward per layer in backward.
struct AttentionCalls {
  int64_t B = 0, T = 0, NH = 0, HS = 0;
  bool causal = true;
  bool key_mask = false;  // a key-padding mask may come (BERT)
  float p = 0.0f;         // dropout on the probabilities
};
Shape attention_state_shape(const AttentionCalls& c, DType act, AttentionState where);
// What a model allocates for backward's scratch, per layer: on CUDA the
// state's shape (the plain backward writes dP and dS there; the fused path,
// which keeps its row sums in cuDNN's own scratch, does not use it, but a
// shape cuDNN then refuses falls back to the plain path); on the CPU
// nothing, {0}: its kernels work in per-thread blocks and never read the
// scratch (under full_cpu that saves a (B, NH, T, T) buffer per chunk).
Shape attention_scratch_shape(const AttentionCalls& c, DType act, AttentionState where);
// The state calls on `dev` take now (the one rule the ops' shape checks and
// the models use): CUDA with 16-bit matmuls, fused_cuda; other CUDA, full;
// the CPU, compact_cpu unless set_cpu_attention_compact(false).
AttentionState attention_state_on(Device dev);
// The rule itself, for a device that need not be this process's (lattice
// plan): CUDA with 16-bit matmuls, fused_cuda; other CUDA, full; the CPU,
// compact_cpu where `cpu_compact` (parallel.cpu_attention), else full.
AttentionState attention_state_of(DeviceType dev, bool matmuls_16bit, bool cpu_compact);
// Process-wide, for the CPU (parallel.cpu_attention; default true). Models
// read it when they allocate, so set it before building one.
void set_cpu_attention_compact(bool compact);
bool cpu_attention_compact();

// ---- embedding ------------------------------------------------------------
// out (N, C) = weight[ids - vocab_start]; ids outside [vocab_start,
// vocab_start + V) give zero rows (vocab-parallel shards). ids are i32.
void embedding_forward(Tensor& out, const Tensor& ids, const Tensor& weight, int64_t vocab_start = 0);
// dweight (V, C) += scatter of dout (N, C) by ids (same masking).
void embedding_backward(Tensor& dweight, const Tensor& dout, const Tensor& ids, int64_t vocab_start = 0);

// ---- loss -----------------------------------------------------------------
// Fused softmax + cross-entropy over logits (N, V) with i32 targets (N).
// losses (N) = logsumexp(logits) - logits[target], 0 where target == ignore_index;
// lse (N) saves logsumexp for backward.
void cross_entropy_forward(Tensor& losses, Tensor& lse, const Tensor& logits, const Tensor& targets, int ignore_index);
// dlogits (N, V) = (softmax(logits) - onehot(target)) * dloss, rows with
// ignored targets 0. dlogits may be the same tensor as logits (in place).
void cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse, const Tensor& targets,
                            float dloss, int ignore_index);

// Cross-entropy over a column shard of the logits (the vocab-parallel loss of
// tp/cross_entropy.h reduces these per-row statistics over tp in between).
// logits (N, K) hold global columns [col_start, col_start + K); local columns
// j >= n_valid are padding: never in a max or a sum, zero gradient. Targets
// are global ids; a target outside the shard (or ignore_index) picks nothing.
// row_max (N) = max over the valid columns (-inf when there are none).
void shard_row_max(Tensor& row_max, const Tensor& logits, int64_t n_valid);
// sums (2, N): sums[0] = sum of exp(logits - row_max) over the valid columns;
// sums[1] = the target's logit when this shard holds it, else 0.
void shard_softmax_partials(Tensor& sums, const Tensor& logits, const Tensor& row_max, const Tensor& targets,
                            int64_t col_start, int64_t n_valid);
// shard_row_max, then shard_softmax_partials with that max: the statistics of
// a shard that is the whole vocabulary (tp = 1), in one pass over the logits
// on the CPU instead of two.
void shard_softmax_stats(Tensor& row_max, Tensor& sums, const Tensor& logits, const Tensor& targets, int64_t col_start,
                         int64_t n_valid);
// From the reduced statistics: lse (N) = row_max + log(sums[0]);
// losses (N) = lse - sums[1], 0 where target == ignore_index.
void cross_entropy_from_partials(Tensor& losses, Tensor& lse, const Tensor& row_max, const Tensor& sums,
                                 const Tensor& targets, int ignore_index);
// dlogits (N, K) = (softmax - onehot(target)) * dloss on the valid columns, 0 on
// padding columns and ignored rows; dlogits may be the same tensor as logits.
void shard_cross_entropy_backward(Tensor& dlogits, const Tensor& logits, const Tensor& lse, const Tensor& targets,
                                  float dloss, int64_t col_start, int64_t n_valid, int ignore_index);

// ---- element-wise and reductions --------------------------------------------
// out = a + b (residual); acc += x. One dtype, or mixed: each tensor f32 or
// one 16-bit type, out = round(widen(a) + widen(b)) in out's dtype (one fp32
// add, rounded once when out is 16-bit): a 16-bit acc += an f32 x (an fp32
// position table into 16-bit embedding rows), an f32 acc += a 16-bit x (16-bit
// row gradients into the fp32 table gradient, exact widening).
void add(Tensor& out, const Tensor& a, const Tensor& b);
void add_inplace(Tensor& acc, const Tensor& x);
void scale_inplace(Tensor& x, double s);  // x *= s
double sum_squares(const Tensor& x);      // sum x^2, accumulated in double
// acc (1) f64 += the sum of x (f32), accumulated in double in index order on
// the CPU; on a GPU in the device's stream order, without waiting for it.
void sum_into(Tensor& acc, const Tensor& x);
bool all_finite(const Tensor& x);
// out (n) bf16 or f16 = inp (n) f32 rounded to nearest even (dtype.h's
// f32_to_bf16 / f32_to_f16): the rounding a 16-bit matmul applies to an f32
// operand; a parameter shadow's refresh (core/param.h).
void round_to_half(Tensor& out, const Tensor& inp);
// out = in in out's dtype: any of f32, bf16, f16 to any of them, same numel
// and device. f32 to 16-bit rounds to nearest even as round_to_half (fp16
// beyond 65504 to inf); 16-bit to f32 is exact; bf16 <-> f16 goes through f32;
// the same dtype copies.
void convert(Tensor& out, const Tensor& in);
// A block of `rows` rows of `width` elements between two row-major layouts of
// row lengths dst_ld and src_ld: dst[dst_off + r dst_ld + j] = src[src_off +
// r src_ld + j] (any dtype; one device). One strided copy on CUDA, ordered on
// the compute stream; a memcpy per row on the CPU. The two spans must not share
// memory. Column blocks of a tensor-parallel split (tp/mappings.cpp).
void copy_rows(Tensor& dst, int64_t dst_off, int64_t dst_ld, const Tensor& src, int64_t src_off, int64_t src_ld,
               int64_t rows, int64_t width);

// ---- optimizer updates (one tensor, usually a view into the flat buffer) -----
struct AdamWStep {
  float lr, beta1, beta2, eps, weight_decay;  // weight_decay already 0 for no-decay params
  int64_t step;                               // 1-based, for bias correction
  float grad_scale = 1.0f;                    // e.g. the clipping factor
};
// Decoupled weight decay: p -= lr * (wd * p + mhat / (sqrt(vhat) + eps)).
void adamw_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWStep& s);
// SGD with momentum (PyTorch semantics, dampening 0): buf = mu * buf + g + wd * p; p -= lr * buf.
void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum, float lr, float mu, float weight_decay,
                float grad_scale = 1.0f);

// ---- BERT: bidirectional attention, exact GELU ------------------------------
// Bidirectional (non-causal) multi-head self-attention with a key padding
// mask (core/kernels/cpu/attention_masked.h). qkv, out, att and dropout as for
// attention_forward, but every query attends to every key j with
// key_mask[b, j] != 0; key_mask (B, T) i32 may be null (every key valid).
// att (B, NH, T, T) is 0 at masked keys (and on a row with no valid key).
// 16-bit activations as for attention_backward.
void attention_masked_forward(Tensor& out, Tensor& att, const Tensor& qkv, const Tensor* key_mask, int n_head,
                              const Dropout& d, int head_offset = 0);
// dqkv (B, T, 3 * NH * HS) overwrite; `scratch` as for attention_backward.
// key_mask: forward's. The full state's backward reads the mask from att
// (zero where masked) and ignores it; the CPU's compact state computes P
// again and needs it.
void attention_masked_backward(Tensor& dqkv, Tensor& scratch, const Tensor& dout, const Tensor& qkv, const Tensor& att,
                               const Tensor* key_mask, int n_head, const Dropout& d, int head_offset = 0);
// attention_probs of the masked op.
void attention_masked_probs(Tensor& att, const Tensor& qkv, const Tensor* key_mask, int n_head, const Dropout& d,
                            int head_offset = 0);

// GELU with erf: out = 0.5 x (1 + erf(x / sqrt 2)) (BERT). Any shape.
void gelu_erf_forward(Tensor& out, const Tensor& inp);
void gelu_erf_backward(Tensor& dinp, const Tensor& dout, const Tensor& inp);

// ---- rotary position embeddings and grouped k/v heads (LLaMA) ---------------
// RoPE, HF's rotate-half convention: row (b, t) of inp (B, T, W) holds heads of
// HS columns; each of heads [0, n_rot) is x = [x1 | x2] (HS/2 each), rotated by
// a_i = p * theta^(-2i / HS) at position p = pos0 + t: out1 = x1 cos a - x2 sin a,
// out2 = x2 cos a + x1 sin a (pos0: the position of row 0, nonzero when a
// key/value cache holds the earlier ones). The columns after n_rot * HS are
// copied. out may be inp (in place).
void rope_forward(Tensor& out, const Tensor& inp, int n_rot, int64_t head_size, double theta, int64_t pos0 = 0);
// dinp (B, T, W) = the transposed rotation of dout (overwrite; may be in place).
void rope_backward(Tensor& dinp, const Tensor& dout, int n_rot, int64_t head_size, double theta);

// inp (N, (NH + 2 KV) HS) = [q | k | v] with NH query and KV key/value heads;
// out (N, 3 NH HS) = [q | k' | v'], head h of k', v' being kv head h / (NH / KV)
// (the layout attention_forward takes).
void repeat_kv_forward(Tensor& out, const Tensor& inp, int n_head, int n_kv_head);
// dinp (N, (NH + 2 KV) HS) = [dq | group sums of dk' | of dv'] (overwrite).
void repeat_kv_backward(Tensor& dinp, const Tensor& dout, int n_head, int n_kv_head);

}  // namespace lattice::ops
