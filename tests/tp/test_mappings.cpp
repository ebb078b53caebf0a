// Tests of src/tp/mappings.cpp: the four region ops, forward and backward,
// exact on small-integer data; expectations are functions of (size, rank).
#include <gtest/gtest.h>

#include <functional>

#include "tp/mappings.h"
#include "tp_test_helpers.h"

using namespace lattice;
using namespace lattice::test;

namespace {

constexpr int64_t kRows = 3;

// A (kRows, k) f32 tensor with element (i, j) = f(i, j) (small integers: exact in f32).
Tensor table(int64_t k, const std::function<int64_t(int64_t, int64_t)>& f) {
  std::vector<float> v;
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t j = 0; j < k; ++j) v.push_back(float(f(i, j)));
  return Tensor::from<float>(v, {kRows, k});
}

void expect_equal(const Tensor& got, const Tensor& expect, const std::string& what) {
  ASSERT_EQ(got.shape(), expect.shape()) << what;
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_EQ(got.data<float>()[i], expect.data<float>()[i]) << what << ", element " << i;
}

}  // namespace

TEST(TpMappings, CopyToIsIdentityForwardAndSumBackward) {
  for (comm::Group& tp : tp_test_groups()) {
    const int p = tp.size(), r = tp.rank();
    Tensor x = table(4, [&](int64_t i, int64_t j) { return 10 * i + j + 100 * r; });
    Tensor before = x.clone();
    tp::copy_to_tp_region_forward(x, tp);
    expect_equal(x, before, "copy_to forward");
    tp::copy_to_tp_region_backward(x, tp);  // sum over ranks of (10 i + j + 100 r)
    expect_equal(x, table(4, [&](int64_t i, int64_t j) { return p * (10 * i + j) + 100 * p * (p - 1) / 2; }),
                 "copy_to backward at tp " + std::to_string(p));
  }
}

TEST(TpMappings, ReduceFromIsSumForwardAndIdentityBackward) {
  for (comm::Group& tp : tp_test_groups()) {
    const int p = tp.size(), r = tp.rank();
    Tensor x = table(5, [&](int64_t i, int64_t j) { return i * j - 7 * (r + 1); });
    tp::reduce_from_tp_region_forward(x, tp);
    expect_equal(x, table(5, [&](int64_t i, int64_t j) { return p * i * j - 7 * p * (p + 1) / 2; }),
                 "reduce_from forward at tp " + std::to_string(p));
    Tensor d = table(5, [&](int64_t i, int64_t j) { return i - j + r; }), before = d.clone();
    tp::reduce_from_tp_region_backward(d, tp);
    expect_equal(d, before, "reduce_from backward");
  }
}

TEST(TpMappings, ScatterSplitsForwardAndGathersBackward) {
  for (comm::Group& tp : tp_test_groups()) {
    const int p = tp.size(), r = tp.rank();
    const int64_t kl = 3, K = kl * p;  // 3 columns per rank
    Tensor full = table(K, [&](int64_t i, int64_t j) { return 100 * i + j; });
    Tensor local = Tensor::zeros({kRows, kl}, DType::f32);
    tp::scatter_to_tp_region_forward(local, full, tp);
    expect_equal(local, table(kl, [&](int64_t i, int64_t j) { return 100 * i + r * kl + j; }), "scatter forward");

    // Backward: every rank's local gradient lands in its own column block.
    Tensor dlocal = table(kl, [&](int64_t i, int64_t j) { return 1000 * r + 10 * i + j; });
    Tensor dfull = Tensor::zeros({kRows, K}, DType::f32);
    tp::scatter_to_tp_region_backward(dfull, dlocal, tp);
    expect_equal(dfull, table(K, [&](int64_t i, int64_t j) { return 1000 * (j / kl) + 10 * i + j % kl; }),
                 "scatter backward at tp " + std::to_string(p));
  }
}

TEST(TpMappings, GatherConcatenatesForwardAndSplitsBackward) {
  for (comm::Group& tp : tp_test_groups()) {
    const int p = tp.size(), r = tp.rank();
    const int64_t kl = 2, K = kl * p;
    Tensor local = table(kl, [&](int64_t i, int64_t j) { return 1000 * r + 10 * i + j; });
    Tensor full = Tensor::zeros({kRows, K}, DType::f32);
    tp::gather_from_tp_region_forward(full, local, tp);
    expect_equal(full, table(K, [&](int64_t i, int64_t j) { return 1000 * (j / kl) + 10 * i + j % kl; }),
                 "gather forward at tp " + std::to_string(p));

    Tensor dfull = table(K, [&](int64_t i, int64_t j) { return 50 * i - j; });
    Tensor dlocal = Tensor::zeros({kRows, kl}, DType::f32);
    tp::gather_from_tp_region_backward(dlocal, dfull, tp);
    expect_equal(dlocal, table(kl, [&](int64_t i, int64_t j) { return 50 * i - (r * kl + j); }), "gather backward");
  }
}

TEST(TpMappings, FusedPartsGatherInLogicalOrder) {
  // A fused [q | k | v] row: each part split over tp separately, so a local row
  // is [q_r | k_r | v_r] and the gathered row is [q | k | v].
  for (comm::Group& tp : tp_test_groups()) {
    const int p = tp.size(), r = tp.rank();
    const int64_t block = 2, part = block * p, K = 3 * part;
    Tensor local = table(3 * block, [&](int64_t i, int64_t j) {
      return 100 * (j / block) + 10 * r + j % block + 1000 * i;  // part f = j / block
    });
    Tensor full = Tensor::zeros({kRows, K}, DType::f32);
    tp::gather_from_tp_region_forward(full, local, tp, 3);
    auto logical = [&](int64_t i, int64_t j) {
      int64_t f = j / part, rank = (j % part) / block;
      return 100 * f + 10 * rank + j % block + 1000 * i;
    };
    expect_equal(full, table(K, logical), "fused gather forward at tp " + std::to_string(p));
    Tensor back = Tensor::zeros({kRows, 3 * block}, DType::f32);
    tp::gather_from_tp_region_backward(back, full, tp, 3);
    expect_equal(back, local, "fused gather backward");
    tp::scatter_to_tp_region_forward(back, full, tp, 3);
    expect_equal(back, local, "fused scatter forward");
  }
}

TEST(TpMappings, RejectsALastDimThatDoesNotSplit) {
  for (comm::Group& tp : tp_test_groups()) {
    if (tp.size() == 1) continue;
    Tensor full = Tensor::zeros({kRows, tp.size() + 1}, DType::f32), local = Tensor::zeros({kRows, 1}, DType::f32);
    EXPECT_THROW(tp::scatter_to_tp_region_forward(local, full, tp), Error);  // checked before any collective
  }
}
