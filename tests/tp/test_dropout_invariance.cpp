// Layout-invariant dropout under tp (ARCHITECTURE.md §2): masks are keyed by
// logical coordinates, so a replicated activation gets the same mask on every
// tp rank, and attention on this rank's heads (head_offset = rank * NH / tp)
// equals those heads of the full attention, dropout on, forward and backward.
#include <gtest/gtest.h>

#include "core/ops.h"
#include "tp_test_helpers.h"

using namespace lattice;
using namespace lattice::test;

namespace {

ops::Dropout dropout(float p) {
  ops::Dropout d;
  d.p = p;
  d.key = RngKey{.seed = 77, .purpose = RngPurpose::dropout, .step = 3, .layer = 1, .site = 0};
  d.sample0 = 4;  // this micro-batch starts at global sample 4
  return d;
}

// Heads [h0, h0 + nh) of att (B, NH, T, T).
Tensor head_slice(const Tensor& att, int64_t h0, int64_t nh) {
  const int64_t B = att.dim(0), NH = att.dim(1), TT = att.dim(2) * att.dim(3);
  Tensor out = Tensor::empty({B, nh, att.dim(2), att.dim(3)}, att.dtype());
  for (int64_t b = 0; b < B; ++b) {
    Tensor dst = out.view(b * nh * TT, {nh * TT});
    dst.copy_from(att.view((b * NH + h0) * TT, {nh * TT}));
  }
  return out;
}

}  // namespace

TEST(TpDropout, ReplicatedActivationGetsTheSameMaskOnEveryRank) {
  for (comm::Group& tp : tp_test_groups()) {
    const int p = tp.size();
    Tensor x = random_tensor({2, 3, 8}, DType::f32, 91, 1.0), y = Tensor::zeros({2, 3, 8}, DType::f32);
    ops::dropout_forward(y, x, dropout(0.3f));
    int64_t zeros = 0;
    for (int64_t i = 0; i < y.numel(); ++i) zeros += y.data<float>()[i] == 0.0f;
    EXPECT_GT(zeros, 0);
    EXPECT_LT(zeros, y.numel());  // a mask that drops something and keeps something
    Tensor all = Tensor::zeros({p * y.numel()}, DType::f32);
    tp.all_gather(all, y)->wait();
    for (int r = 0; r < p; ++r)
      EXPECT_EQ(closeness(all.view(r * y.numel(), y.shape()), y, kExact), 0.0) << "rank " << r << "'s mask differs";
  }
}

TEST(TpDropout, AttentionOnLocalHeadsEqualsThoseHeadsOfTheFullAttention) {
  for (comm::Group& tp : tp_test_groups()) {
    const int p = tp.size(), r = tp.rank();
    const int64_t B = 2, T = 5, HS = 3, NH = 2 * p, C = NH * HS, nh = NH / p;
    SCOPED_TRACE(fmt::format("tp {} rank {}", p, r));
    const ops::Dropout d = dropout(0.25f);
    Tensor qkv = random_tensor({B, T, 3 * C}, DType::f64, 92, 1.5), dout = random_tensor({B, T, C}, DType::f64, 93);
    Tensor out = Tensor::zeros({B, T, C}, DType::f64), att = Tensor::zeros({B, NH, T, T}, DType::f64);
    Tensor dqkv = Tensor::zeros(qkv.shape(), DType::f64), scratch = att.clone();
    ops::attention_forward(out, att, qkv, int(NH), d);
    ops::attention_backward(dqkv, scratch, dout, qkv, att, int(NH), d);

    // This rank's heads: [q_r | k_r | v_r], the output of a fused column-parallel QKV.
    Tensor lqkv = slice_last_dim(qkv, r, p, 3), ldout = slice_last_dim(dout, r, p);
    Tensor lout = Tensor::zeros({B, T, C / p}, DType::f64), latt = Tensor::zeros({B, nh, T, T}, DType::f64);
    Tensor ldqkv = Tensor::zeros(lqkv.shape(), DType::f64), lscratch = latt.clone();
    ops::attention_forward(lout, latt, lqkv, int(nh), d, int(r * nh));
    ops::attention_backward(ldqkv, lscratch, ldout, lqkv, latt, int(nh), d, int(r * nh));
    const Tolerance tol = tolerance(DType::f64);
    EXPECT_TENSOR_NEAR(lout, slice_last_dim(out, r, p), tol) << "output heads";
    EXPECT_TENSOR_NEAR(latt, head_slice(att, r * nh, nh), tol) << "attention probabilities";
    EXPECT_TENSOR_NEAR(ldqkv, slice_last_dim(dqkv, r, p, 3), tol) << "qkv gradient";

    if (r > 0) {  // the offset matters: rank r's heads with rank 0's masks differ
      Tensor wrong = Tensor::zeros(lout.shape(), DType::f64);
      ops::attention_forward(wrong, latt, lqkv, int(nh), d, 0);
      EXPECT_GT(closeness(wrong, slice_last_dim(out, r, p), tol), 1.0);
    }
  }
}
