// GPU linear forward and backward through cuBLASLt (src/core/cuda/lt_linear.cpp,
// planned by lt_plan.h) against the CPU linear: the bias in the epilogue, the
// bias by kernel (a bias view at an odd float offset), no bias, operands at
// offsets that lower the alignment preferences, sizes of one and ragged
// sizes, an empty batch, and the same bits on a second run; backward with
// dbias through the BGRADB epilogue accumulating into a nonzero dbias and
// dweight, each gradient alone, and the same shapes again on other buffers
// (the cached descriptors get the new pointers). f32 without TF32, compared
// at the f32 tolerance (the sums run in a different order); see
// cuda_test_support.h. The plans themselves are tested on the CPU
// (test_lt_plan).
#include <cmath>

#include "support/cuda_test_support.h"

namespace lattice::test {
namespace {

struct Case {
  int64_t N, C, OC;
  bool bias;
  int64_t inp_off = 0, weight_off = 0, out_off = 0, bias_off = 0;  // elements into a device buffer
};

// A device copy of t that starts `off` floats into its own buffer.
Tensor gpu_at(const Tensor& t, int64_t off) {
  Tensor buf = Tensor::zeros({t.numel() + off}, DType::f32, Device::cuda(0));
  Tensor v = buf.view(off, t.shape());
  v.copy_from(t);
  return v;
}

void expect_linear_matches_cpu(const Case& c) {
  SCOPED_TRACE(testing::Message() << "N " << c.N << " C " << c.C << " OC " << c.OC << " bias " << c.bias << " offsets "
                                  << c.inp_off << "/" << c.weight_off << "/" << c.out_off << "/" << c.bias_off);
  // Weights scaled by 1 / sqrt(C), as initialisations do: outputs of order
  // one, so the f32 tolerance measures the sums' rounding, not their size.
  Tensor inp = random_tensor({c.N, c.C}, DType::f32, 1);
  Tensor weight = random_tensor({c.OC, c.C}, DType::f32, 2, 1.0 / std::sqrt(double(c.C)));
  Tensor bias = random_tensor({c.OC}, DType::f32, 3);
  Tensor out = Tensor::empty({c.N, c.OC}, DType::f32);
  ops::linear_forward(out, inp, weight, c.bias ? &bias : nullptr);

  Tensor inp_g = gpu_at(inp, c.inp_off), weight_g = gpu_at(weight, c.weight_off), bias_g = gpu_at(bias, c.bias_off);
  Tensor out_g = gpu_at(random_tensor({c.N, c.OC}, DType::f32, 4), c.out_off);  // overwritten
  ops::linear_forward(out_g, inp_g, weight_g, c.bias ? &bias_g : nullptr);
  EXPECT_TENSOR_NEAR(out_g.on_host(), out, tolerance(DType::f32));
  Tensor again = gpu_at(Tensor::zeros({c.N, c.OC}, DType::f32), c.out_off);
  ops::linear_forward(again, inp_g, weight_g, c.bias ? &bias_g : nullptr);
  EXPECT_TRUE(same_bits(again.on_host(), out_g.on_host()));
}

// linear_gelu_forward: pre and act against the CPU's linear_forward then
// gelu_forward (tanh form), through the GELU epilogue (OC a multiple of 8,
// aligned) and the kernel fallback (ragged OC, a misaligned bias or pre, no
// bias); the first call also runs the backend's probe of cuBLASLt's GELU.
void expect_linear_gelu_matches_cpu(const Case& c) {
  SCOPED_TRACE(testing::Message() << "linear+gelu N " << c.N << " C " << c.C << " OC " << c.OC << " bias " << c.bias
                                  << " offsets " << c.inp_off << "/" << c.weight_off << "/" << c.out_off << "/"
                                  << c.bias_off);
  Tensor inp = random_tensor({c.N, c.C}, DType::f32, 1);
  Tensor weight = random_tensor({c.OC, c.C}, DType::f32, 2, 3.0 / std::sqrt(double(c.C)));  // pre spans the GELU bend
  Tensor bias = random_tensor({c.OC}, DType::f32, 3);
  Tensor pre = Tensor::empty({c.N, c.OC}, DType::f32), act = Tensor::empty({c.N, c.OC}, DType::f32);
  ops::linear_forward(pre, inp, weight, c.bias ? &bias : nullptr);
  ops::gelu_forward(act, pre);

  Tensor inp_g = gpu_at(inp, c.inp_off), weight_g = gpu_at(weight, c.weight_off), bias_g = gpu_at(bias, c.bias_off);
  Tensor pre_g = gpu_at(random_tensor({c.N, c.OC}, DType::f32, 4), c.out_off);  // both overwritten
  Tensor act_g = gpu_at(random_tensor({c.N, c.OC}, DType::f32, 5), 0);
  ops::linear_gelu_forward(act_g, pre_g, inp_g, weight_g, c.bias ? &bias_g : nullptr);
  EXPECT_TENSOR_NEAR(pre_g.on_host(), pre, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(act_g.on_host(), act, tolerance(DType::f32));
}

TEST_F(CudaOps, LinearGeluForwardMatchesCpu) {
  expect_linear_gelu_matches_cpu({64, 768, 3072, true});           // GPT-2 small's MLP up-projection: the epilogue
  expect_linear_gelu_matches_cpu({40, 64, 128, false});            // GELU_AUX without a bias
  expect_linear_gelu_matches_cpu({37, 129, 67, true});             // OC % 8 != 0: the kernel
  expect_linear_gelu_matches_cpu({16, 32, 64, true, 0, 0, 0, 1});  // misaligned bias: the kernel
  expect_linear_gelu_matches_cpu({16, 32, 64, true, 0, 0, 3, 0});  // misaligned pre: the kernel
  expect_linear_gelu_matches_cpu({0, 32, 64, true});               // empty batch
}

TEST_F(CudaOps, LinearForwardBiasEpilogueMatchesCpu) {
  expect_linear_matches_cpu({64, 768, 2304, true});  // GPT-2 small's qkv projection, 64 tokens
  expect_linear_matches_cpu({37, 129, 67, true});    // ragged sizes, leading dims not multiples of 4
  expect_linear_matches_cpu({1, 1, 1, true});
}

TEST_F(CudaOps, LinearForwardWithoutBiasMatchesCpu) {
  expect_linear_matches_cpu({33, 17, 9, false});
  expect_linear_matches_cpu({128, 256, 64, false});
}

TEST_F(CudaOps, LinearForwardMisalignedOperandsMatchCpu) {
  // A bias 4 bytes past 256-byte alignment: plan_lt_linear adds it by kernel.
  expect_linear_matches_cpu({16, 32, 8, true, 0, 0, 0, 1});
  // inp, weight and out at odd float offsets (alignment preferences 4 bytes),
  // bias 16-byte aligned: still in the epilogue.
  expect_linear_matches_cpu({16, 32, 8, true, 1, 3, 2, 4});
  expect_linear_matches_cpu({16, 32, 8, false, 5, 1, 7, 0});
}

TEST_F(CudaOps, LinearForwardEmptyBatchDoesNothing) {
  Tensor inp = empty_gpu({0, 8}), weight = gpu(random_tensor({3, 8}, DType::f32, 5));
  Tensor bias = gpu(random_tensor({3}, DType::f32, 6)), out = empty_gpu({0, 3});
  ops::linear_forward(out, inp, weight, &bias);
  EXPECT_EQ(out.numel(), 0);
}

struct Grads {
  bool dinp = true, dweight = true, dbias = true;
};

// linear_backward on both devices; dweight and dbias start nonzero, so the
// GPU's accumulation (beta 1, the BGRADB vector added into dbias) is checked.
void expect_linear_backward_matches_cpu(const Case& c, Grads g = {}) {
  SCOPED_TRACE(testing::Message() << "backward N " << c.N << " C " << c.C << " OC " << c.OC << " grads " << g.dinp
                                  << g.dweight << g.dbias << " offsets " << c.inp_off << "/" << c.weight_off << "/"
                                  << c.out_off << "/" << c.bias_off);
  Tensor inp = random_tensor({c.N, c.C}, DType::f32, 1);
  Tensor weight = random_tensor({c.OC, c.C}, DType::f32, 2, 1.0 / std::sqrt(double(c.C)));
  Tensor dout = random_tensor({c.N, c.OC}, DType::f32, 3);
  Tensor dinp = Tensor::empty({c.N, c.C}, DType::f32);
  Tensor dweight = random_tensor({c.OC, c.C}, DType::f32, 4), dbias = random_tensor({c.OC}, DType::f32, 5);
  // The GPU's copies first: the CPU call below accumulates into dweight and dbias.
  Tensor inp_g = gpu_at(inp, c.inp_off), weight_g = gpu_at(weight, c.weight_off), dout_g = gpu_at(dout, c.out_off);
  Tensor dinp_g = gpu_at(random_tensor({c.N, c.C}, DType::f32, 6), 1);  // overwritten
  Tensor dweight_g = gpu_at(dweight, c.weight_off), dbias_g = gpu_at(dbias, c.bias_off);
  ops::linear_backward(g.dinp ? &dinp : nullptr, g.dweight ? &dweight : nullptr, g.dbias ? &dbias : nullptr, dout, inp,
                       weight);
  ops::linear_backward(g.dinp ? &dinp_g : nullptr, g.dweight ? &dweight_g : nullptr, g.dbias ? &dbias_g : nullptr,
                       dout_g, inp_g, weight_g);
  if (g.dinp) {
    EXPECT_TENSOR_NEAR(dinp_g.on_host(), dinp, tolerance(DType::f32));
  }
  EXPECT_TENSOR_NEAR(dweight_g.on_host(), dweight, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(dbias_g.on_host(), dbias, tolerance(DType::f32));
}

TEST_F(CudaOps, LinearBackwardMatchesCpu) {
  expect_linear_backward_matches_cpu({64, 768, 2304, true});  // GPT-2 small's qkv projection: BGRADB
  expect_linear_backward_matches_cpu({37, 129, 67, true});    // ragged sizes
  expect_linear_backward_matches_cpu({1, 1, 1, true});
  expect_linear_backward_matches_cpu({16, 32, 8, true, 1, 3, 2, 5});  // every operand at an odd float offset
}

TEST_F(CudaOps, LinearBackwardEachGradientAloneMatchesCpu) {
  const Case c{40, 64, 48, true};
  expect_linear_backward_matches_cpu(c, {.dinp = true, .dweight = false, .dbias = false});
  expect_linear_backward_matches_cpu(c, {.dinp = false, .dweight = true, .dbias = false});  // no epilogue
  expect_linear_backward_matches_cpu(c, {.dinp = false, .dweight = false, .dbias = true});  // the column-sum kernel
  expect_linear_backward_matches_cpu(c, {.dinp = false, .dweight = true, .dbias = true});   // tp's second half
}

TEST_F(CudaOps, LinearBackwardEmptyShapesMatchCpu) {
  expect_linear_backward_matches_cpu({0, 32, 16, true});  // nothing added
  expect_linear_backward_matches_cpu({8, 32, 0, true});   // dinp = 0 (C == 0 cannot reach the op: no rows)
}

// The same bits twice, and a cached plan run on other buffers (same shape and
// alignments) uses their pointers, not the first call's.
TEST_F(CudaOps, LinearCachedPlansTakeEachCallsBuffers) {
  const int64_t N = 32, C = 64, OC = 48;
  for (uint64_t seed : {10, 20, 30}) {
    SCOPED_TRACE(seed);
    Tensor inp = random_tensor({N, C}, DType::f32, seed), weight = random_tensor({OC, C}, DType::f32, seed + 1);
    Tensor bias = random_tensor({OC}, DType::f32, seed + 2), dout = random_tensor({N, OC}, DType::f32, seed + 3);
    Tensor out = Tensor::empty({N, OC}, DType::f32), dinp = Tensor::empty({N, C}, DType::f32);
    Tensor dweight = Tensor::zeros({OC, C}, DType::f32), dbias = Tensor::zeros({OC}, DType::f32);
    ops::linear_forward(out, inp, weight, &bias);
    ops::linear_backward(&dinp, &dweight, &dbias, dout, inp, weight);
    Tensor inp_g = gpu(inp), weight_g = gpu(weight), bias_g = gpu(bias), dout_g = gpu(dout), out_g = empty_gpu({N, OC});
    Tensor dinp_g = empty_gpu({N, C}), dweight_g = gpu(Tensor::zeros({OC, C}, DType::f32));
    Tensor dbias_g = gpu(Tensor::zeros({OC}, DType::f32));
    ops::linear_forward(out_g, inp_g, weight_g, &bias_g);
    ops::linear_backward(&dinp_g, &dweight_g, &dbias_g, dout_g, inp_g, weight_g);
    EXPECT_TENSOR_NEAR(host(out_g), out, tolerance(DType::f32));
    EXPECT_TENSOR_NEAR(host(dinp_g), dinp, tolerance(DType::f32));
    EXPECT_TENSOR_NEAR(host(dweight_g), dweight, tolerance(DType::f32));
    EXPECT_TENSOR_NEAR(host(dbias_g), dbias, tolerance(DType::f32));
    Tensor dweight2 = gpu(Tensor::zeros({OC, C}, DType::f32)), dbias2 = gpu(Tensor::zeros({OC}, DType::f32));
    ops::linear_backward(nullptr, &dweight2, &dbias2, dout_g, inp_g, weight_g);
    EXPECT_TRUE(same_bits(host(dweight2), host(dweight_g)));
    EXPECT_TRUE(same_bits(host(dbias2), host(dbias_g)));
  }
}

// runtime.precision: bf16 or fp16 on the GPU: both operands rounded to the
// 16-bit type, the products summed in fp32. So the GPU result is the CPU's
// fp32 gemm of the operands rounded as the CPU does it (rounded_to,
// cuda_test_support.h), up to the order of the sums.

void expect_sums_of_rounded_operands(DType operands) {
  const auto gpu = [](const Tensor& t) { return t.to(Device::cuda(0)); };
  const auto host = [](const Tensor& t) { return t.to(Device::cpu()); };
  const auto empty_gpu = [](const Shape& s) { return Tensor::empty(s, DType::f32, Device::cuda(0)); };
  struct MatmulDtype {  // on for the test's GPU calls, off again however it ends
    explicit MatmulDtype(DType d) { cuda_backend().set_matmul_dtype(d); }
    ~MatmulDtype() { cuda_backend().set_matmul_dtype(DType::f32); }
  };
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(testing::Message() << "trans_a " << ta << " trans_b " << tb);
      const int64_t M = 37, K = 129, N = 67;
      Tensor a = random_tensor(ta ? Shape{K, M} : Shape{M, K}, DType::f32, 11);
      Tensor b = random_tensor(tb ? Shape{N, K} : Shape{K, N}, DType::f32, 12, 1.0 / std::sqrt(double(K)));
      Tensor c = random_tensor({M, N}, DType::f32, 13);
      Tensor want = c.clone(), c_g = gpu(c);
      ops::gemm(want, rounded_to(a, operands), rounded_to(b, operands), ta, tb, 0.5f, 0.25f);
      {
        MatmulDtype on(operands);
        ops::gemm(c_g, gpu(a), gpu(b), ta, tb, 0.5f, 0.25f);
      }
      EXPECT_TENSOR_NEAR(host(c_g), want, tolerance(DType::f32));
    }
  Tensor inp = random_tensor({64, 768}, DType::f32, 14);
  Tensor weight = random_tensor({2304, 768}, DType::f32, 15, 1.0 / std::sqrt(768.0));
  Tensor bias = random_tensor({2304}, DType::f32, 16);
  Tensor want = Tensor::empty({64, 2304}, DType::f32), out_g = empty_gpu({64, 2304});
  ops::linear_forward(want, rounded_to(inp, operands), rounded_to(weight, operands), &bias);  // the bias stays fp32
  {
    MatmulDtype on(operands);
    Tensor inp_g = gpu(inp), weight_g = gpu(weight), bias_g = gpu(bias);
    ops::linear_forward(out_g, inp_g, weight_g, &bias_g);
  }
  EXPECT_TENSOR_NEAR(host(out_g), want, tolerance(DType::f32));
  // And they differ from plain fp32: the switch did something.
  Tensor fp32 = Tensor::empty({64, 2304}, DType::f32);
  ops::linear_forward(fp32, inp, weight, &bias);
  EXPECT_GT(closeness(host(out_g), fp32, {0.0, 1e-6}), 1.0);
}

TEST_F(CudaOps, Bf16GemmAndLinearAreFp32SumsOfRoundedOperands) { expect_sums_of_rounded_operands(DType::bf16); }

TEST_F(CudaOps, F16GemmAndLinearAreFp32SumsOfRoundedOperands) { expect_sums_of_rounded_operands(DType::f16); }

// fp16 overflow on the GPU as on the CPU: an operand beyond 65504 is inf, so is the product.
TEST_F(CudaOps, F16GemmOverflowsToInfLikeTheCpuEmulation) {
  Tensor a = Tensor::from<float>({70000.0f, 1.0f}, {1, 2}), b = Tensor::from<float>({1e-3f, 1.0f}, {2, 1});
  Tensor c_g = empty_gpu({1, 1});
  cuda_backend().set_matmul_dtype(DType::f16);
  ops::gemm(c_g, gpu(a), gpu(b), false, false, 1.0f, 0.0f);
  cuda_backend().set_matmul_dtype(DType::f32);
  EXPECT_TRUE(std::isinf(host(c_g).data<float>()[0]));
}

}  // namespace
}  // namespace lattice::test
