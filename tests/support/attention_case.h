// One attention call of the 16-bit attention tests (tests/core/
// test_ops_attention16.cpp on the CPU, tests/core/cuda/
// test_cuda_attention16.cpp on the GPU): the shape, causal or key-padding
// mask, dropout and tp head offset, and a forward + backward through
// lattice::ops on the device and dtype of the inputs.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/ops.h"
#include "core/tensor.h"
#include "support/test_support.h"

namespace lattice::test {

struct AttentionCase {
  std::string name;
  int64_t B, T, NH, HS;
  bool masked;  // bidirectional with key_mask(); else causal
  float p;      // dropout on the probabilities
  int head_offset;
  bool fused = false;  // on CUDA under 16-bit matmuls: cuDNN's fused path takes it
  int64_t C() const { return NH * HS; }
};

inline ops::Dropout attention_dropout(float p) {
  ops::Dropout d;
  d.p = p;
  d.key = RngKey{.seed = 77, .purpose = RngPurpose::dropout, .step = 2, .layer = 1, .site = 0};
  d.sample0 = 4;
  return d;
}

// (B, T) i32 on the host: sample b pads its last 2b keys; sample 2 (when
// there is one) has no valid key.
inline Tensor attention_key_mask(const AttentionCase& c) {
  Tensor m = Tensor::empty({c.B, c.T}, DType::i32);
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t t = 0; t < c.T; ++t) m.data<int32_t>()[b * c.T + t] = b == 2 ? 0 : int32_t(t < c.T - 2 * b);
  return m;
}

// What one forward and backward leave, on the host: out, att, dqkv and the
// scratch (dS on CUDA's plain path; the CPU kernels do not use it).
struct AttentionResults {
  Tensor out, att, dqkv, dS;
};

// Forward on qkv, then backward on dout with `saved` as the probabilities
// (forward's own att when undefined), on qkv's device and dtype.
// att and scratch of shape `state` when given (a compact state,
// ops::attention_state_shape), else (B, NH, T, T).
inline AttentionResults run_attention(const AttentionCase& c, const Tensor& qkv, const Tensor& dout,
                                      const Tensor& saved = Tensor(), const Shape& state = {}) {
  const DType dt = qkv.dtype();
  const Device dev = qkv.device();
  const ops::Dropout d = attention_dropout(c.p);
  const int nh = int(c.NH);
  const Shape att_shape = state.empty() ? Shape{c.B, c.NH, c.T, c.T} : state;
  Tensor out = Tensor::empty({c.B, c.T, c.C()}, dt, dev), att = Tensor::empty(att_shape, dt, dev);
  Tensor dqkv = Tensor::zeros(qkv.shape(), dt, dev), dS = Tensor::empty(att.shape(), dt, dev);
  const Tensor mask = attention_key_mask(c).to(dev);
  if (c.masked)
    ops::attention_masked_forward(out, att, qkv, &mask, nh, d, c.head_offset);
  else
    ops::attention_forward(out, att, qkv, nh, d, c.head_offset);
  const Tensor& p = saved.defined() ? saved : att;
  if (c.masked)
    ops::attention_masked_backward(dqkv, dS, dout, qkv, p, &mask, nh, d, c.head_offset);
  else
    ops::attention_backward(dqkv, dS, dout, qkv, p, nh, d, c.head_offset);
  return {out.to(Device::cpu()), att.to(Device::cpu()), dqkv.to(Device::cpu()), dS.to(Device::cpu())};
}

// Two causal calls as a pipeline runs them: forward on each input, then
// backward on each (each its own att, one scratch), att and scratch of shape
// `state`, on the inputs' device and dtype; out and dqkv of each, on the
// host. A backward that read another call's state (a temporary the forward
// left) gives the other call's numbers.
inline std::array<AttentionResults, 2> run_attention_interleaved(const AttentionCase& c, const Tensor (&qkv)[2],
                                                                 const Tensor (&dout)[2], const Shape& state) {
  const DType dt = qkv[0].dtype();
  const Device dev = qkv[0].device();
  const ops::Dropout d = attention_dropout(c.p);
  Tensor att[2], out[2], dqkv[2];
  Tensor scratch = Tensor::zeros(state, dt, dev);
  for (int i = 0; i < 2; ++i) {
    att[i] = Tensor::zeros(state, dt, dev), out[i] = Tensor::zeros({c.B, c.T, c.C()}, dt, dev);
    dqkv[i] = Tensor::zeros(qkv[i].shape(), dt, dev);
    ops::attention_forward(out[i], att[i], qkv[i], int(c.NH), d, c.head_offset);
  }
  std::array<AttentionResults, 2> r;
  for (int i = 0; i < 2; ++i) {
    ops::attention_backward(dqkv[i], scratch, dout[i], qkv[i], att[i], int(c.NH), d, c.head_offset);
    r[size_t(i)].out = out[i].to(Device::cpu()), r[size_t(i)].dqkv = dqkv[i].to(Device::cpu());
  }
  return r;
}

// Interleaved calls on a compact state (`got`) against the same on the full
// (B, NH, T, T) one, both on the fused path: out bit for bit (the same
// graphs), dqkv bit for bit where the backward is `repeatable`, else within
// `tol`.
inline void expect_bits_of_full_state(const std::array<AttentionResults, 2>& got,
                                      const std::array<AttentionResults, 2>& full, bool repeatable, Tolerance tol) {
  auto same = [](const Tensor& a, const Tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
  };
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(same(got[i].out, full[i].out)) << "call " << i;
    if (repeatable)
      EXPECT_TRUE(same(got[i].dqkv, full[i].dqkv)) << "call " << i;
    else
      EXPECT_TENSOR_NEAR(got[i].dqkv.to(DType::f32), full[i].dqkv.to(DType::f32), tol) << "call " << i;
  }
}

}  // namespace lattice::test
