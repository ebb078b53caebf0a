// GPU matmuls on 16-bit activations (CudaBackend::gemm16, linear_forward16,
// linear_gelu_forward16, linear_backward16) and the mixed-dtype element-wise
// ops (add_mixed, convert) against the CPU, for bf16 and f16:
//  - the reference is the CPU's fp32 op on the widened 16-bit inputs and the
//    weight rounded as the matmuls round it (rounded_to), so it needs no CPU
//    bf16 matmuls; a 16-bit GPU output is within one 16-bit ulp of it
//    (relative, plus 1e-5: cuBLAS sums in another order, and a sum that
//    cancels may round the other way), an f32 output within the f32
//    tolerance;
//  - a 16-bit weight (the shadow) and its fp32 master give the same bits;
//  - GELU's output is the CPU's 16-bit GELU of the GPU's pre within one ulp
//    (tanhf against the CPU's vectorised tanh);
//  - outputs past 2^24 elements (the fp32 scratch in row blocks, and
//    cuBLAS's own 16-bit output without a bias);
//  - outputs without a bias go through cuBLAS's own rounding where the probe
//    of half_out_probe.h allows it (the test prints which), else the fp32
//    scratch; both are checked against the CPU;
//  - convert and the mixed adds are bitwise the CPU's (one fp32 op, rounded);
//  - activations of another type than the matmuls are one error.
// Without a device every test skips, saying why.
#include <cmath>
#include <cstdio>

#include "support/act16.h"
#include "support/cuda_test_support.h"
#include "support/error_text.h"

namespace lattice::test {
namespace {

Tensor on_gpu(const Tensor& t) { return t.to(Device::cuda(0)); }
Tensor zeros_gpu(const Shape& s, DType d) { return Tensor::zeros(s, d, Device::cuda(0)); }

// A 16-bit GPU output against an fp32 reference: within one ulp of the
// 16-bit type (relative) plus 1e-5, everywhere.
void expect_within_ulp(const Tensor& got_gpu, const Tensor& ref) {
  const Tensor got = as_f32(got_gpu);
  ASSERT_EQ(got.numel(), ref.numel());
  const double ulp = got_gpu.dtype() == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  int bad = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double g = got.data<float>()[i], r = ref.data<float>()[i];
    if (!(std::fabs(g - r) <= ulp * std::fabs(r) + 1e-5) && bad++ < 5)
      ADD_FAILURE() << "element " << i << ": " << g << " vs " << r;
  }
  EXPECT_EQ(bad, 0) << dtype_name(got_gpu.dtype());
}

// 16-bit inputs on both devices and a weight with its 16-bit GPU shadow.
struct Inputs {
  Tensor inp, dout, w, bias, dw0;  // host: inp and dout 16-bit, the rest f32
  Tensor w_r;                      // the weight rounded as the matmuls round it, fp32 (CPU reference)
  Tensor w16_gpu;                  // its 16-bit shadow on the GPU
};
Inputs inputs(DType d, int64_t N, int64_t C, int64_t OC) {
  Inputs in{act16({N, C}, d, 1),
            act16({N, OC}, d, 2),
            random_tensor({OC, C}, DType::f32, 3, 1.0 / std::sqrt(double(C))),
            random_tensor({OC}, DType::f32, 4),
            random_tensor({OC, C}, DType::f32, 5),
            {},
            {}};
  in.w_r = rounded_to(in.w, d);
  in.w16_gpu = zeros_gpu({OC, C}, d);
  ops::round_to_half(in.w16_gpu, on_gpu(in.w));
  return in;
}

void expect_linear16_matches_cpu(DType d, int64_t N, int64_t C, int64_t OC, bool with_bias) {
  SCOPED_TRACE(testing::Message() << dtype_name(d) << " N " << N << " C " << C << " OC " << OC << " bias "
                                  << with_bias);
  const Inputs in = inputs(d, N, C, OC);
  const Tensor* bias = with_bias ? &in.bias : nullptr;
  Tensor ref = Tensor::zeros({N, OC}, DType::f32);
  ops::linear_forward(ref, as_f32(in.inp), in.w_r, bias);

  const GpuMatmuls on(d);
  Tensor inp_g = on_gpu(in.inp), bias_g = on_gpu(in.bias), w_g = on_gpu(in.w);
  const Tensor* b = with_bias ? &bias_g : nullptr;
  Tensor out = zeros_gpu({N, OC}, d), out_pc = zeros_gpu({N, OC}, d), out32 = zeros_gpu({N, OC}, DType::f32);
  ops::linear_forward(out, inp_g, in.w16_gpu, b);
  ops::linear_forward(out_pc, inp_g, w_g, b);  // the fp32 master, rounded on the call
  ops::linear_forward(out32, inp_g, in.w16_gpu, b);
  expect_within_ulp(out.on_host(), ref);
  EXPECT_TRUE(same_bits(out.on_host(), out_pc.on_host())) << "shadow and per-call rounding differ";
  EXPECT_TENSOR_NEAR(out32.on_host(), ref, tolerance(DType::f32));

  Tensor act = zeros_gpu({N, OC}, d), pre = zeros_gpu({N, OC}, d);
  ops::linear_gelu_forward(act, pre, inp_g, in.w16_gpu, b);
  if (with_bias) {  // both through the fp32 scratch and the same kernel
    EXPECT_TRUE(same_bits(pre.on_host(), out.on_host())) << "linear_gelu's pre is linear_forward's out";
  } else {  // out rounded by cuBLAS, whose 16-bit-output kernel may sum in another order
    expect_rounded_equal(pre.on_host(), out.on_host(), 1, kCancelAtol);
  }
  Tensor act_ref = Tensor::zeros({N, OC}, DType::f32);
  ops::gelu_forward(act_ref, as_f32(pre));
  expect_rounded_equal(act.on_host(), act_ref, 1, kCancelAtol);

  // Backward: dinp 16-bit and f32, dweight and dbias accumulating.
  Tensor dinp_ref = Tensor::zeros({N, C}, DType::f32), dw_ref = in.dw0.clone();
  Tensor db_ref = Tensor::zeros({OC}, DType::f32);
  ops::linear_backward(&dinp_ref, &dw_ref, &db_ref, as_f32(in.dout), as_f32(in.inp), in.w_r);
  Tensor dout_g = on_gpu(in.dout), dinp = zeros_gpu({N, C}, d), dinp32 = zeros_gpu({N, C}, DType::f32);
  Tensor dw = on_gpu(in.dw0), db = zeros_gpu({OC}, DType::f32);
  ops::linear_backward(&dinp, &dw, &db, dout_g, inp_g, in.w16_gpu);
  ops::linear_backward(&dinp32, nullptr, nullptr, dout_g, inp_g, w_g);
  expect_within_ulp(dinp.on_host(), dinp_ref);
  EXPECT_TENSOR_NEAR(dinp32.on_host(), dinp_ref, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(dw.on_host(), dw_ref, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(db.on_host(), db_ref, tolerance(DType::f32));
}

TEST_F(CudaOps, Linear16MatchesCpu) {
  for (DType d : kAct16) {
    {  // which path the outputs without a bias took: a speed note, either is correct
      const GpuMatmuls on(d);
      std::printf("%s outputs without a bias: %s\n", std::string(dtype_name(d)).c_str(),
                  cuda_backend().half_outputs_direct(0) ? "rounded by cuBLAS"
                                                        : "fp32 scratch (the probe's stderr line says why)");
    }
    expect_linear16_matches_cpu(d, 64, 768, 2304, true);  // GPT-2 small's qkv projection
    expect_linear16_matches_cpu(d, 37, 129, 67, false);   // ragged sizes
    expect_linear16_matches_cpu(d, 5, 17, 3, true);
    expect_linear16_matches_cpu(d, 0, 32, 64, true);  // empty batch
  }
}

TEST_F(CudaOps, Gemm16MatchesCpu) {
  const int64_t m = 37, n = 53, k = 70;
  for (DType d : kAct16)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 0.75f}) {
          SCOPED_TRACE(testing::Message() << dtype_name(d) << " ta " << ta << " tb " << tb << " beta " << beta);
          Tensor a = act16(ta ? Shape{k, m} : Shape{m, k}, d, 11),
                 b32 = random_tensor(tb ? Shape{n, k} : Shape{k, n}, DType::f32, 12);
          Tensor c0 = act16({m, n}, d, 13);
          Tensor ref = as_f32(c0);
          ops::gemm(ref, as_f32(a), rounded_to(b32, d), ta, tb, 1.5f, beta);
          const GpuMatmuls on(d);
          Tensor c = on_gpu(c0);
          ops::gemm(c, on_gpu(a), on_gpu(b32), ta, tb, 1.5f, beta);  // b fp32, rounded on the call
          expect_within_ulp(c.on_host(), ref);
        }
}

TEST_F(CudaOps, Linear16LargeOutputsInRowBlocks) {
  const int64_t N = (int64_t(1) << 17) + 3, C = 8, OC = 130;  // N * OC > 2^24
  for (DType d : kAct16) {
    SCOPED_TRACE(dtype_name(d));
    const Inputs in = inputs(d, N, C, OC);
    Tensor ref = Tensor::zeros({N, OC}, DType::f32);
    ops::linear_forward(ref, as_f32(in.inp), in.w_r, &in.bias);
    const GpuMatmuls on(d);
    Tensor out = zeros_gpu({N, OC}, d), bias_g = on_gpu(in.bias);
    ops::linear_forward(out, on_gpu(in.inp), in.w16_gpu, &bias_g);
    expect_within_ulp(out.on_host(), ref);
    Tensor ref_nb = Tensor::zeros({N, OC}, DType::f32), out_nb = zeros_gpu({N, OC}, d);  // no bias: cuBLAS rounds
    ops::linear_forward(ref_nb, as_f32(in.inp), in.w_r, nullptr);
    ops::linear_forward(out_nb, on_gpu(in.inp), in.w16_gpu, nullptr);
    expect_within_ulp(out_nb.on_host(), ref_nb);
  }
}

TEST_F(CudaOps, ConvertAndMixedAddsAreTheCpuBits) {
  for (DType d : kAct16) {
    SCOPED_TRACE(dtype_name(d));
    Tensor x = random_tensor({3, 5001}, DType::f32, 21, 1e3), h = act16({3, 5001}, d, 22);
    Tensor conv = Tensor::zeros(x.shape(), d), conv_g = zeros_gpu(x.shape(), d);
    ops::convert(conv, x);
    ops::convert(conv_g, on_gpu(x));
    EXPECT_TRUE(same_bits(conv_g.on_host(), conv));
    Tensor wide_g = zeros_gpu(x.shape(), DType::f32);
    ops::convert(wide_g, on_gpu(h));
    EXPECT_TRUE(same_bits(wide_g.on_host(), as_f32(h)));
    const DType other = d == DType::bf16 ? DType::f16 : DType::bf16;
    Tensor cross = Tensor::zeros(x.shape(), other), cross_g = zeros_gpu(x.shape(), other);
    ops::convert(cross, h);
    ops::convert(cross_g, on_gpu(h));
    EXPECT_TRUE(same_bits(cross_g.on_host(), cross));

    Tensor acc = h.clone(), acc_g = on_gpu(h);  // 16-bit rows += an fp32 table
    ops::add_inplace(acc, x);
    ops::add_inplace(acc_g, on_gpu(x));
    EXPECT_TRUE(same_bits(acc_g.on_host(), acc));
    Tensor acc32 = x.clone(), acc32_g = on_gpu(x);  // an fp32 gradient += 16-bit rows
    ops::add_inplace(acc32, h);
    ops::add_inplace(acc32_g, on_gpu(h));
    EXPECT_TRUE(same_bits(acc32_g.on_host(), acc32));
    Tensor out = Tensor::zeros(x.shape(), d), out_g = zeros_gpu(x.shape(), d);
    ops::add(out, x, h);
    ops::add(out_g, on_gpu(x), on_gpu(h));
    EXPECT_TRUE(same_bits(out_g.on_host(), out));
  }
}

TEST_F(CudaOps, Activations16OfAnotherTypeThanTheMatmulsAreRefused) {
  Tensor inp = on_gpu(act16({4, 8}, DType::bf16, 1)), out = zeros_gpu({4, 3}, DType::bf16);
  Tensor w = on_gpu(random_tensor({3, 8}, DType::f32, 2));
  EXPECT_HAS(error_text([&] { ops::linear_forward(out, inp, w, nullptr); }), "runtime.precision bf16");
  const GpuMatmuls on(DType::f16);
  EXPECT_HAS(error_text([&] { ops::linear_forward(out, inp, w, nullptr); }), "but they run in f16");
}

}  // namespace
}  // namespace lattice::test
