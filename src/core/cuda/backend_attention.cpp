// The CUDA backend's attention (backend_impl.h): cuDNN's fused attention
// (sdpa_cudnn.h) under bf16 or fp16 matmuls where it takes the shape, else
// the plain path of cuda/attention.h, on f32 or 16-bit activations.
#include <cublas_v2.h>

#include <cstdint>
#include <mutex>
#include <string>

#include "core/cuda/attention.h"
#include "core/cuda/backend_impl.h"
#include "core/cuda/sdpa_cudnn.h"

namespace lattice::cuda {

// The io type of the fused attention: the matmuls' 16-bit type.
SdpaDType Backend::sdpa_dtype() const { return matmul_dtype_ == DType::f16 ? SdpaDType::fp16 : SdpaDType::bf16; }

// Attention takes cuDNN's fused path: bf16 or fp16 matmuls and the shape usable (sdpa_cudnn.h).
bool Backend::fused_attention(int dev, const SdpaShape& s) {
  if (matmul_dtype_ == DType::f32) return false;
  use(dev);
  return sdpa_.usable(dev, s);
}

// 16-bit attention multiplies its operands as they are: in the matmul type only.
void Backend::check_attention16(DType act) const {
  LATTICE_CHECK(act == matmul_dtype_,
                "cuda attention: {} activations need the matmuls in {} (runtime.precision {}), but they run in {}",
                dtype_name(act), dtype_name(act), act == DType::bf16 ? "bf16" : "fp16", dtype_name(matmul_dtype_));
}

// The plain path's work buffer (cuda/attention.h), kept per device and
// grown on demand (the calls that use it run in stream order, so one
// suffices); null when a call needs none.
void* Backend::attention_work(int dev, size_t bytes) {
  if (bytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  return grown(attention_work_, dev, bytes);
}

// The plain path's probabilities P and dS of one sample for a compact call
// (CudaAttentionArgs::compact_state, whose att and scratch have no room for
// them), which runs sample by sample: two (NH, T, T) buffers of storage S,
// one block kept per device and grown on demand as attention_work's. *dS is
// set to the second.
template <typename S>
S* Backend::attention_temps(int dev, const CudaAttentionArgs& a, S** dS) {
  const size_t probs = (size_t(a.NH * a.T * a.T) * sizeof(S) + 255) / 256 * 256;
  std::lock_guard<std::mutex> lock(mu_);
  auto* P = static_cast<S*>(grown(attention_temps_, dev, 2 * probs));
  if (dS) *dS = reinterpret_cast<S*>(reinterpret_cast<char*>(P) + probs);
  return P;
}

namespace {
// Sample b of call a as a call of its own: the dropout masks and key mask
// of sample b (the plain kernels index both by sample0 + the sample).
CudaAttentionArgs sample_of(const CudaAttentionArgs& a, int64_t b) {
  CudaAttentionArgs one = a;
  one.B = 1;
  one.sample0 = a.sample0 + b;
  if (a.key_mask) one.key_mask = a.key_mask + b * a.T;
  return one;
}
}  // namespace

// When the fused path takes s: runs `pass(scratch)` with the pass's
// scratch (sdpa_mu_ held) and says whether it ran; false, for the plain
// path, when the path does not take s or cuDNN failed to execute the pass.
template <typename Pass>
bool Backend::ran_fused(int dev, const SdpaShape& s, SdpaPass which, const SdpaStaging& st, Pass&& pass) {
  if (!fused_attention(dev, s)) return false;
  std::lock_guard<std::mutex> lock(sdpa_mu_);
  if (!pass(grown(sdpa_scratch_, dev, sdpa_.scratch_bytes(dev, s, which, st)))) return false;
  finish();
  return true;
}

// Which path last wrote `att`: the fused forward leaves O and its row
// statistics there, the plain one P. Backward must read what the forward of
// that buffer wrote, not what the shape would take now: a key mask (BERT's
// padding) sends the forward to the plain path while its backward, which
// takes no mask, would qualify for the fused one, and a shape cuDNN refuses
// mid-step (a failed execution) leaves the layers it already ran fused.
void Backend::note_forward(const void* att, bool fused) {
  std::lock_guard<std::mutex> lock(sdpa_mu_);
  if (fused)
    fused_att_.insert(att);
  else
    fused_att_.erase(att);
}

bool Backend::forward_was_fused(const void* att) {
  std::lock_guard<std::mutex> lock(sdpa_mu_);
  return fused_att_.count(att) > 0;
}

// Either path, on activations of dtype `act` (f32: the f32 calls).
void Backend::attention_forward_on(int dev, DType act, void* out, void* att, const void* qkv,
                                   const CudaAttentionArgs& a) {
  check_attention(a);
  // out null: att alone (ops::attention_probs), in the full (B, NH, T, T) buffer.
  LATTICE_CHECK(out != nullptr || !a.compact_state, "cuda attention: att alone needs the full state");
  const SdpaShape s = sdpa_shape(a, sdpa_dtype(), act != DType::f32);
  const SdpaStaging st = sdpa_staging(s, SdpaPass::forward, reinterpret_cast<uintptr_t>(qkv), 0, 0);
  const bool fused = ran_fused(dev, s, SdpaPass::forward, st, [&](void* scratch) {
    // The fused path keeps O and Stats in att as a forward with an output
    // would (so its backward stays fused, the same bits), and writes a copy
    // of O somewhere: into the attention work buffer when no output is wanted.
    void* o = out ? out : attention_work(dev, size_t(a.B * a.T * a.NH * a.HS) * (act == DType::f32 ? 4 : 2));
    return sdpa_.forward(dev, kStream, o, att, qkv, s, st, scratch);
  });
  note_forward(att, fused);
  if (fused) return;
  cublasHandle_t h = blas(dev);
  storage(act, [&](auto t) {
    using S = decltype(t);
    void* work = attention_work(dev, attention_work_bytes<S>(a));
    if (!a.compact_state)
      return cuda::attention_forward<S>(h, kStream, static_cast<S*>(out), static_cast<S*>(att), work,
                                        static_cast<const S*>(qkv), a);
    // Compact: sample by sample, P in the temporary (backward computes it again).
    S* P = attention_temps<S>(dev, a, nullptr);
    const int64_t C = a.NH * a.HS;
    for (int64_t b = 0; b < a.B; ++b)
      cuda::attention_forward<S>(h, kStream, static_cast<S*>(out) + b * a.T * C, P, work,
                                 static_cast<const S*>(qkv) + b * a.T * 3 * C, sample_of(a, b));
  });
  finish();
}

void Backend::attention_backward_on(int dev, DType act, void* dqkv, void* scratch, const void* dout, const void* qkv,
                                    const void* att, const CudaAttentionArgs& a) {
  check_attention(a);
  const SdpaShape s = sdpa_shape(a, sdpa_dtype(), act != DType::f32);
  const SdpaStaging st = sdpa_staging(s, SdpaPass::backward, reinterpret_cast<uintptr_t>(qkv),
                                      reinterpret_cast<uintptr_t>(dout), reinterpret_cast<uintptr_t>(dqkv));
  const bool fused_forward = forward_was_fused(att);  // then att holds O and Stats, not P
  if (fused_forward && ran_fused(dev, s, SdpaPass::backward, st, [&](void* scratch) {
        return sdpa_.backward(dev, kStream, dqkv, dout, qkv, att, s, st, scratch);
      }))
    return;
  cublasHandle_t h = blas(dev);
  storage(act, [&](auto t) {
    using S = decltype(t);
    void* work = attention_work(dev, attention_work_bytes<S>(a));
    if (a.compact_state) {
      // Sample by sample: P computed again into the temporary by the plain
      // forward (its own bits: deterministic; or, after a fused forward, the
      // same P: no dropout there), without its output; dS in the other
      // temporary.
      S* dS = nullptr;
      S* P = attention_temps<S>(dev, a, &dS);
      const int64_t C = a.NH * a.HS;
      for (int64_t b = 0; b < a.B; ++b) {
        const CudaAttentionArgs one = sample_of(a, b);
        S* dq = static_cast<S*>(dqkv) + b * a.T * 3 * C;
        const S* q = static_cast<const S*>(qkv) + b * a.T * 3 * C;
        cuda::attention_forward<S>(h, kStream, static_cast<S*>(nullptr), P, work, q, one);
        cuda::attention_backward<S>(h, kStream, dq, dS, work, static_cast<const S*>(dout) + b * a.T * C, q, P, one);
      }
      return;
    }
    if (fused_forward) {  // cuDNN failed to execute the backward: the plain forward again, for P alone in att
                          // (no dropout on the fused path, so the same P)
      cuda::attention_forward<S>(h, kStream, static_cast<S*>(nullptr), static_cast<S*>(const_cast<void*>(att)), work,
                                 static_cast<const S*>(qkv), a);
      note_forward(att, false);  // att holds P now
    }
    cuda::attention_backward<S>(h, kStream, static_cast<S*>(dqkv), static_cast<S*>(scratch), work,
                                static_cast<const S*>(dout), static_cast<const S*>(qkv), static_cast<const S*>(att), a);
  });
  finish();
}

void Backend::attention_forward(int dev, float* out, float* att, const float* qkv, const CudaAttentionArgs& a) {
  attention_forward_on(dev, DType::f32, out, att, qkv, a);
}

void Backend::attention_backward(int dev, float* dqkv, float* scratch, const float* dout, const float* qkv,
                                 const float* att, const CudaAttentionArgs& a) {
  attention_backward_on(dev, DType::f32, dqkv, scratch, dout, qkv, att, a);
}

void Backend::attention_forward16(int dev, DType act, void* out, void* att, const void* qkv,
                                  const CudaAttentionArgs& a) {
  check_attention16(act);
  attention_forward_on(dev, act, out, att, qkv, a);
}

void Backend::attention_backward16(int dev, DType act, void* dqkv, void* scratch, const void* dout, const void* qkv,
                                   const void* att, const CudaAttentionArgs& a) {
  check_attention16(act);
  attention_backward_on(dev, act, dqkv, scratch, dout, qkv, att, a);
}

std::string Backend::attention_plain_reason(int dev, const CudaAttentionArgs& a, DType act) {
  check_attention(a);
  if (matmul_dtype_ == DType::f32) return "runtime.precision is fp32 (cuDNN's fused attention takes bf16 or fp16 only)";
  if (act != DType::f32) check_attention16(act);
  const SdpaShape s = sdpa_shape(a, sdpa_dtype(), act != DType::f32);
  std::string why;
  if (!sdpa_supported(s, &why)) return why;
  return fused_attention(dev, s) ? std::string() : sdpa_.refusal(dev, s);
}

bool Backend::attention_backward_repeatable(int dev, const CudaAttentionArgs& a, DType act) {
  if (!attention_plain_reason(dev, a, act).empty()) return true;  // the plain path: no atomics
  return !sdpa_.backward_may_vary(dev, sdpa_shape(a, sdpa_dtype(), act != DType::f32));
}

}  // namespace lattice::cuda
