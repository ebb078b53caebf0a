// GPU matmuls with a 16-bit weight (a parameter's shadow, core/param.h) under
// runtime.precision bf16 and fp16: cublasGemmEx reads the weight where it
// lies, with no conversion kernel for it. Each case compares
//  - with the CPU path: the CPU's fp32 linear of the operands rounded as the
//    matmuls round them, at the f32 tolerance (the GPU sums in another order),
//    for linear forward, linear + GELU, linear backward (dinp, dweight, dbias)
//    and gemm with the 16-bit operand on either side;
//  - with the GPU's own per-call rounding of the fp32 weight, bit for bit,
//    where the weight view is 256-byte aligned as the per-call copies are
//    (cuBLAS chooses its kernel from the shape and the alignments, so the same
//    both ways gives the same kernel); a view at an odd offset only at the
//    tolerance;
// and FlatParams' refresh on the device gives the CPU's bits, and a 16-bit
// weight under fp32 matmuls is refused. The ops' CPU side of the same
// contract is test_ops_matmul_half.
#include <cmath>

#include "core/param.h"
#include "support/cuda_test_support.h"
#include "support/error_text.h"

namespace lattice::test {
namespace {

// The 16-bit device copy of host tensor w, `off` elements into its own buffer
// (off 0: the buffer's 256-byte aligned start).
Tensor gpu_half(const Tensor& w, DType d, int64_t off) {
  Tensor buf = Tensor::zeros({w.numel() + off}, d, Device::cuda(0));
  Tensor v = buf.view(off, w.shape());
  Tensor src = w.to(Device::cuda(0));
  ops::round_to_half(v, src);
  return v;
}

Tensor on_gpu(const Tensor& t) { return t.to(Device::cuda(0)); }

struct Case {
  int64_t N, C, OC;
  bool bias;
  int64_t weight_off;  // elements into the 16-bit weight's buffer
};

void expect_linear_with_half_weight(DType d, const Case& c) {
  SCOPED_TRACE(testing::Message() << dtype_name(d) << " N " << c.N << " C " << c.C << " OC " << c.OC << " bias "
                                  << c.bias << " weight offset " << c.weight_off);
  Tensor inp = random_tensor({c.N, c.C}, DType::f32, 1);
  Tensor w = random_tensor({c.OC, c.C}, DType::f32, 2, 1.0 / std::sqrt(double(c.C)));
  Tensor bias = random_tensor({c.OC}, DType::f32, 3), dout = random_tensor({c.N, c.OC}, DType::f32, 4);
  Tensor dw0 = random_tensor({c.OC, c.C}, DType::f32, 5);
  // The CPU reference (fp32 matmuls on the rounded operands; the bias stays fp32).
  const Tensor inp_r = rounded_to(inp, d), w_r = rounded_to(w, d), dout_r = rounded_to(dout, d);
  Tensor out = Tensor::empty({c.N, c.OC}, DType::f32), act = Tensor::empty({c.N, c.OC}, DType::f32);
  ops::linear_forward(out, inp_r, w_r, c.bias ? &bias : nullptr);
  ops::gelu_forward(act, out);
  Tensor dinp = Tensor::empty({c.N, c.C}, DType::f32), dw = dw0.clone(), db = Tensor::zeros({c.OC}, DType::f32);
  ops::linear_backward(&dinp, &dw, nullptr, dout_r, inp_r, w_r);
  ops::add_bias_backward(db, dout);

  const GpuMatmuls on(d);
  Tensor inp_g = on_gpu(inp), w_g = on_gpu(w), bias_g = on_gpu(bias), dout_g = on_gpu(dout);
  Tensor w16 = gpu_half(w, d, c.weight_off);
  const Tensor* b = c.bias ? &bias_g : nullptr;
  Tensor out_g = Tensor::zeros({c.N, c.OC}, DType::f32, Device::cuda(0));
  ops::linear_forward(out_g, inp_g, w16, b);
  EXPECT_TENSOR_NEAR(out_g.on_host(), out, tolerance(DType::f32));
  Tensor act_g = Tensor::zeros({c.N, c.OC}, DType::f32, Device::cuda(0)), pre_g = act_g.clone();
  ops::linear_gelu_forward(act_g, pre_g, inp_g, w16, b);
  EXPECT_TENSOR_NEAR(pre_g.on_host(), out, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(act_g.on_host(), act, tolerance(DType::f32));
  Tensor dinp_g = Tensor::zeros({c.N, c.C}, DType::f32, Device::cuda(0)), dw_g = on_gpu(dw0);
  Tensor db_g = Tensor::zeros({c.OC}, DType::f32, Device::cuda(0));
  ops::linear_backward(&dinp_g, &dw_g, &db_g, dout_g, inp_g, w16);
  EXPECT_TENSOR_NEAR(dinp_g.on_host(), dinp, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(dw_g.on_host(), dw, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(db_g.on_host(), db, tolerance(DType::f32));

  // The same calls with the fp32 weight, rounded per call.
  Tensor out_pc = Tensor::zeros({c.N, c.OC}, DType::f32, Device::cuda(0));
  ops::linear_forward(out_pc, inp_g, w_g, b);
  Tensor dinp_pc = Tensor::zeros({c.N, c.C}, DType::f32, Device::cuda(0));
  ops::linear_backward(&dinp_pc, nullptr, nullptr, dout_g, inp_g, w_g);
  if (c.weight_off == 0) {
    EXPECT_TRUE(same_bits(out_pc.on_host(), out_g.on_host())) << "forward: shadow and per-call rounding differ";
    EXPECT_TRUE(same_bits(dinp_pc.on_host(), dinp_g.on_host())) << "backward dinp: shadow and per-call rounding differ";
  } else {
    EXPECT_TENSOR_NEAR(out_pc.on_host(), out_g.on_host(), tolerance(DType::f32));
    EXPECT_TENSOR_NEAR(dinp_pc.on_host(), dinp_g.on_host(), tolerance(DType::f32));
  }
}

TEST_F(CudaOps, LinearWithA16BitWeightMatchesCpuAndPerCallRounding) {
  for (DType d : {DType::bf16, DType::f16}) {
    expect_linear_with_half_weight(d, {64, 768, 2304, true, 0});  // GPT-2 small's qkv projection
    expect_linear_with_half_weight(d, {37, 129, 67, false, 0});   // ragged sizes
    expect_linear_with_half_weight(d, {16, 32, 64, true, 3});     // a weight view 6 bytes past alignment
    expect_linear_with_half_weight(d, {0, 32, 64, true, 0});      // empty batch
  }
}

TEST_F(CudaOps, GemmTakesA16BitOperandOnEitherSide) {
  for (DType d : {DType::bf16, DType::f16})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        SCOPED_TRACE(testing::Message() << dtype_name(d) << " trans_a " << ta << " trans_b " << tb);
        const int64_t M = 37, K = 129, N = 67;
        Tensor a = random_tensor(ta ? Shape{K, M} : Shape{M, K}, DType::f32, 11);
        Tensor b = random_tensor(tb ? Shape{N, K} : Shape{K, N}, DType::f32, 12, 1.0 / std::sqrt(double(K)));
        Tensor c = random_tensor({M, N}, DType::f32, 13);
        Tensor want = c.clone();
        ops::gemm(want, rounded_to(a, d), rounded_to(b, d), ta, tb, 0.5f, 0.25f);
        const GpuMatmuls on(d);
        for (int which = 0; which < 3; ++which) {  // a, b or both 16-bit
          Tensor a_g = which != 1 ? gpu_half(a, d, 0) : on_gpu(a), b_g = which != 0 ? gpu_half(b, d, 0) : on_gpu(b);
          Tensor c_g = on_gpu(c), per_call = on_gpu(c);
          ops::gemm(c_g, a_g, b_g, ta, tb, 0.5f, 0.25f);
          EXPECT_TENSOR_NEAR(c_g.on_host(), want, tolerance(DType::f32)) << "16-bit operand(s) " << which;
          ops::gemm(per_call, on_gpu(a), on_gpu(b), ta, tb, 0.5f, 0.25f);
          EXPECT_TRUE(same_bits(per_call.on_host(), c_g.on_host())) << "16-bit operand(s) " << which;
        }
      }
}

// The shadow's refresh on the device: the CPU FlatParams' bits, padding included.
TEST_F(CudaOps, ShadowRefreshOnTheDeviceGivesTheCpuBits) {
  const std::vector<ParamSpec> specs = {
      ParamSpec{.name = "w", .shape = {33, 17}, .init = InitKind::normal, .init_std = 3.0f},
      ParamSpec{.name = "big", .shape = {5}, .init = InitKind::uniform, .init_std = 1e5f}};  // fp16: inf
  for (DType d : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(d));
    FlatParams cpu_p(specs, DType::f32, Device::cpu(), {}, 4), gpu_p(specs, DType::f32, Device::cuda(0), {}, 4);
    cpu_p.enable_shadow(d);
    gpu_p.enable_shadow(d);
    cpu_p.init(9);
    gpu_p.init(9);
    cpu_p.refresh_shadow();
    gpu_p.refresh_shadow();
    EXPECT_TRUE(same_bits(gpu_p.shadow().on_host(), cpu_p.shadow()));
    const ShadowView w = gpu_p.shadow_view(gpu_p.entry("w"));
    EXPECT_NO_THROW(w.get());
  }
}

TEST_F(CudaOps, A16BitWeightUnderFp32MatmulsIsRefused) {
  Tensor inp = on_gpu(random_tensor({4, 8}, DType::f32, 1)), out = empty_gpu({4, 3});
  Tensor w16 = gpu_half(random_tensor({3, 8}, DType::f32, 2), DType::bf16, 0);
  EXPECT_HAS(error_text([&] { ops::linear_forward(out, inp, w16, nullptr); }), "runtime.precision bf16");
}

}  // namespace
}  // namespace lattice::test
