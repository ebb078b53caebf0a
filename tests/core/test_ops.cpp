// Tests of core/ops.cpp, the dispatch layer: errors for unsupported
// (op, device, dtype) combinations, mixed arguments, and the CUDA f32 path
// against the CPU kernels (skipped without a GPU).
#include <gtest/gtest.h>

#include <string>

#include "core/backend.h"
#include "core/ops.h"
#include "ops_test_helpers.h"
#include "support/cuda_test_support.h"

using namespace lattice;
using namespace lattice::test;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}
}  // namespace

TEST(Ops, UnsupportedDtypeNamesOpAndDtype) {
  Tensor p = Tensor::zeros({2, 3}, DType::bf16), g = Tensor::zeros({2, 3}, DType::bf16);
  Tensor m = Tensor::zeros({2, 3}, DType::bf16);
  std::string msg = error_of([&] { ops::sgd_update(p, g, m, 0.1f, 0.9f, 0.0f); });  // parameters are never 16-bit
  EXPECT_NE(msg.find("ops::sgd_update"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bf16"), std::string::npos) << msg;
  Tensor ids = Tensor::zeros({2}, DType::i32);
  EXPECT_THROW(ops::sum_squares(ids), Error);
}

TEST(Ops, MixedDtypesNameBothTensors) {
  Tensor a = Tensor::zeros({2, 3}, DType::f32), b = Tensor::zeros({2, 3}, DType::f64);
  Tensor c = Tensor::zeros({2, 3}, DType::f32);
  std::string msg = error_of([&] { ops::add(c, a, b); });
  EXPECT_NE(msg.find("ops::add"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f64"), std::string::npos) << msg;
  Tensor undefined;
  EXPECT_THROW(ops::add_inplace(a, undefined), Error);
}

using OpsCuda = test::CudaOps;

TEST_F(OpsCuda, LinearGemmGeluAddAdamwMatchCpu) {
  Tensor inp = random_tensor({6, 4}, DType::f32, 1), w = random_tensor({5, 4}, DType::f32, 2);
  Tensor bias = random_tensor({5}, DType::f32, 3), R = random_tensor({6, 5}, DType::f32, 4);
  Tensor out = Tensor::zeros({6, 5}, DType::f32), gout = gpu(out);
  Tensor ginp = gpu(inp), gw = gpu(w), gbias = gpu(bias), gR = gpu(R);
  ops::linear_forward(out, inp, w, &bias);
  ops::linear_forward(gout, ginp, gw, &gbias);
  EXPECT_TENSOR_NEAR(host(gout), out, tolerance(DType::f32));
  Tensor dinp = zeros_like(inp), dw = zeros_like(w), db = zeros_like(bias);
  Tensor gdinp = gpu(dinp), gdw = gpu(dw), gdb = gpu(db);
  for (int i = 0; i < 2; ++i) {  // twice: parameter gradients accumulate on both devices
    ops::linear_backward(&dinp, &dw, &db, R, inp, w);
    ops::linear_backward(&gdinp, &gdw, &gdb, gR, ginp, gw);
  }
  EXPECT_TENSOR_NEAR(host(gdinp), dinp, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(host(gdw), dw, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(host(gdb), db, tolerance(DType::f32));

  Tensor c = Tensor::zeros({4, 5}, DType::f32), gc = gpu(c);
  ops::gemm(c, inp, R, true, false);
  ops::gemm(gc, ginp, gR, true, false);
  EXPECT_TENSOR_NEAR(host(gc), c, tolerance(DType::f32));

  Tensor y = zeros_like(R), gy = gpu(y), dx = zeros_like(R), gdx = gpu(dx);
  ops::gelu_forward(y, R);
  ops::gelu_forward(gy, gR);
  ops::gelu_backward(dx, out, R);
  ops::gelu_backward(gdx, gout, gR);
  EXPECT_TENSOR_NEAR(host(gy), y, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(host(gdx), dx, tolerance(DType::f32));
  ops::add(y, y, R);
  ops::add(gy, gy, gR);
  ops::add_inplace(y, out);
  ops::add_inplace(gy, gout);
  EXPECT_TENSOR_NEAR(host(gy), y, tolerance(DType::f32));

  Tensor m = zeros_like(w), v = zeros_like(w), gm = gpu(m), gv = gpu(v);
  for (int64_t step = 1; step <= 2; ++step) {
    ops::AdamWStep s{.lr = 0.01f,
                     .beta1 = 0.9f,
                     .beta2 = 0.95f,
                     .eps = 1e-8f,
                     .weight_decay = 0.1f,
                     .step = step,
                     .grad_scale = 0.5f};
    ops::adamw_update(w, dw, m, v, s);
    ops::adamw_update(gw, gdw, gm, gv, s);
  }
  EXPECT_TENSOR_NEAR(host(gw), w, tolerance(DType::f32));
}

TEST_F(OpsCuda, OpsWithoutCudaKernelSayWhich) {
  // Every op has an f32 CUDA kernel; other dtypes on the GPU have none.
  Tensor x = Tensor::zeros({2, 3}, DType::f64, Device::cuda(0)), y = Tensor::zeros({2, 3}, DType::f64, Device::cuda(0));
  std::string msg = error_of([&] { ops::softmax_forward(y, x); });
  EXPECT_NE(msg.find("ops::softmax_forward: no CUDA kernel yet (f64 on cuda:0)"), std::string::npos) << msg;
  Tensor x32 = gpu(random_tensor({2, 3}, DType::f32, 5)), y32 = gpu(Tensor::zeros({2, 3}, DType::f32));
  Tensor cpu_x = Tensor::zeros({2, 3}, DType::f32);
  EXPECT_THROW(ops::add(y32, x32, cpu_x), Error);  // mixed devices
}
