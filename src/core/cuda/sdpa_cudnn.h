// Attention through cuDNN's fused scaled dot-product attention (the graph
// API's flash-attention patterns), for the backend's bf16 precision. The
// graphs, tensor layouts, saved state and the rules for when this path runs
// are the plain C++ plan of core/cuda/sdpa_plan.h; this file turns a plan
// into cuDNN backend descriptors (one per tensor and op, the operation
// graph, then the engine sdpa_pinned_engine names where it names one and
// cuDNN takes it, else the first engine config of heuristics mode A that
// finalizes into an execution plan) and runs it.
//
// Both graphs of a shape are built together on its first use and cached by
// (device, shape, dtype), so a shape whose forward ran fused also has its
// backward. When the plan says no, nothing is logged: the call takes the
// plain path (core/cuda/attention.h). When cuDNN refuses a graph the plan
// allows (a descriptor that does not finalize, no engine), one line goes to
// stderr, once per process, and the shape is remembered as refused and takes
// the plain path from then on. So does a shape whose built graph cuDNN then
// fails to execute (forward and backward return false; the caller runs the
// plain path, and a backward whose forward ran fused first reruns the plain
// forward for the probabilities it saves).
//
// Data: with f32 activations forward converts qkv to an io-typed copy in
// scratch, runs the fused forward (O into the saved buffer, Stats next to
// it) and writes O back to `out` as fp32; backward converts qkv and dout,
// runs the fused backward and writes dqkv as fp32 (overwritten). With
// io-typed activations (SdpaShape::act16) the graphs read qkv and dout and
// write dqkv where they are, and `out` is a copy of the saved O; a buffer not
// aligned as the descriptors declare is staged through a same-type copy in
// scratch (sdpa_staging). `scratch` holds the staged copies, the
// backward's f32 rowsum(dO * O) and (accumulating form) dQ_accum, and cuDNN's
// workspace (scratch_bytes, sdpa_scratch_layout). Enqueues on `stream` only: the device's cuDNN
// handle is set to it (cudnnSetStream) whenever a call brings another stream
// than the last one.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>

#include "core/cuda/attention.h"
#include "core/cuda/sdpa_plan.h"

namespace lattice::cuda {

class CudnnSdpa {
 public:
  CudnnSdpa();
  ~CudnnSdpa();
  CudnnSdpa(const CudnnSdpa&) = delete;
  CudnnSdpa& operator=(const CudnnSdpa&) = delete;

  // True when the call takes the fused path on the current device `dev`:
  // the plan supports it and cuDNN built both graphs (built here on first use).
  bool usable(int dev, const SdpaShape& s);
  // Why cuDNN refused this shape on `dev` (empty when it did not, or was never asked).
  std::string refusal(int dev, const SdpaShape& s) const;

  // True when the fused backward of this usable shape may give other bits
  // from run to run (sdpa_backward_may_vary of the form and engine it was
  // built with).
  bool backward_may_vary(int dev, const SdpaShape& s);
  // Bytes of scratch a pass needs with `staged` buffers; the shape must be usable.
  size_t scratch_bytes(int dev, const SdpaShape& s, SdpaPass pass, const SdpaStaging& staged);
  // out (B, T, C), qkv (B, T, 3C): f32, or the io type under s.act16; att
  // ((B, NH, T, T), or sdpa_saved_elems: the compact state) receives Stats
  // and O. `staged`: sdpa_staging of these
  // buffers. False: cuDNN failed to execute the graph (now refused; nothing
  // written that the plain path needs).
  bool forward(int dev, cudaStream_t stream, void* out, void* att, const void* qkv, const SdpaShape& s,
               const SdpaStaging& staged, void* scratch);
  // dqkv (B, T, 3C) overwritten; att as forward left it. False as forward.
  bool backward(int dev, cudaStream_t stream, void* dqkv, const void* dout, const void* qkv, const void* att,
                const SdpaShape& s, const SdpaStaging& staged, void* scratch);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The plan's view of an attention call; act16: the activations are of the io type.
inline SdpaShape sdpa_shape(const AttentionArgs& a, SdpaDType dtype, bool act16) {
  return SdpaShape{.B = a.B,
                   .T = a.T,
                   .NH = a.NH,
                   .HS = a.HS,
                   .causal = a.causal,
                   .key_mask = a.key_mask != nullptr,
                   .p = a.p,
                   .dtype = dtype,
                   .act16 = act16};
}

}  // namespace lattice::cuda
