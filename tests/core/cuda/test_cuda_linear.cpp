// GPU linear forward through cuBLASLt (src/core/cuda/lt_linear.cpp, planned by
// lt_plan.h) against the CPU linear: the bias in the epilogue, the bias by
// kernel (a bias view at an odd float offset), no bias, operands at offsets
// that lower the alignment preferences, sizes of one and ragged sizes, an
// empty batch, and the same bits on a second run. f32 without TF32, compared
// at the f32 tolerance (the sums run in a different order); see
// cuda_test_support.h. The plan itself is tested on the CPU (test_lt_plan).
#include <cmath>

#include "core/kernels/cpu/matmul_f16.h"
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

// runtime.precision: bf16 or fp16 on the GPU: both operands rounded to the
// 16-bit type (nearest even; in fp16 beyond 65504 to inf), the products
// summed in fp32. So the GPU result is the CPU's fp32 gemm of the operands
// rounded as the CPU does it (f32_to_bf16; for fp16 the CPU emulation's own
// cpu::round_to_f16), up to the order of the sums.
Tensor rounded_to(const Tensor& t, DType operands) {
  Tensor r = t.clone();
  float* v = r.data<float>();
  if (operands == DType::f16) {
    cpu::round_to_f16(v, t.data<float>(), 1, t.numel(), t.numel());
    return r;
  }
  for (int64_t i = 0; i < r.numel(); ++i) v[i] = bf16_to_f32(f32_to_bf16(v[i]));
  return r;
}

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
