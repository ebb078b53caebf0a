// Tests the CUDA backend library (src/core/cuda/).
//
// Always run: the library loads through the core's loader, says why there is
// no device when there is none, and its errors reach this binary as
// lattice::Error across the dlopen boundary (the library has its own copy of
// core/error.cpp). With a device: Tensor storage and copies on cuda:0, and
// every backend op, through lattice::ops, matches the CPU path within the f32
// tolerance. Without one those tests skip and say why.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "core/allocator.h"
#include "core/backend.h"
#include "core/ops.h"
#include "support/cuda_test_support.h"
#include "support/test_support.h"

namespace lattice {
namespace {

using test::random_tensor;
using test::tolerance;

TEST(CudaBackend, LoadsAndReportsDevices) {
  CudaBackend& backend = cuda_backend();  // throws when the library cannot be loaded
  std::string why;
  int n = backend.device_count(&why);
  EXPECT_GE(n, 0);
  EXPECT_FALSE(why.empty());
  std::string available_why;
  EXPECT_EQ(cuda_available(&available_why), n > 0);
  // Without the driver library cuda_available answers before asking the
  // backend (core/backend_loader.cpp) and says so; otherwise it is the backend's reason.
  if (available_why.rfind("no NVIDIA driver on this host", 0) != 0) {
    EXPECT_EQ(available_why, why);
  }
  if (n == 0) {
    EXPECT_NE(why.find("CUDA"), std::string::npos) << why;
  }
}

TEST(CudaBackend, CudaErrorIsCaughtAsLatticeError) {
  // Device 1000000 exists nowhere: cudaSetDevice fails with "invalid device
  // ordinal" on a GPU machine and with the driver error on one without.
  try {
    cuda_backend().malloc(16, 1000000);
    FAIL() << "malloc on device 1000000 did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.expression(), "cudaSetDevice(dev)");
    EXPECT_NE(e.message().find("CUDA error cuda"), std::string::npos) << e.message();
    EXPECT_NE(e.describe().find("core/cuda/backend.cpp:"), std::string::npos) << e.describe();
  }
}

TEST(CudaBackend, GemmRejectsSizesCublasCannotTake) {
  // Checked before any CUDA call, so this runs without a device too.
  float dummy = 0;
  try {
    cuda_backend().gemm(0, false, false, int64_t(1) << 32, 1, 1, 1.0f, &dummy, &dummy, 0.0f, &dummy);
    FAIL() << "gemm with m = 2^32 did not throw";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("m = 4294967296"), std::string::npos) << e.message();
  }
}

// ---- with a device ----------------------------------------------------------

using test::CudaOps;
using test::expect_activation_matches_cpu;

TEST_F(CudaOps, TensorStorageAndCopies) {
  Device dev = Device::cuda(0);
  Tensor t = random_tensor({37, 5}, DType::f32, 1);
  MemoryStats before = memory_stats(dev);
  {
    Tensor g = gpu(t);  // h2d
    EXPECT_EQ(g.device(), dev);
    EXPECT_EQ(memory_stats(dev).live_bytes, before.live_bytes + int64_t(t.nbytes()));
    Tensor back = host(g.clone());  // d2d then d2h
    EXPECT_EQ(std::memcmp(back.raw(), t.raw(), t.nbytes()), 0);

    Tensor z = Tensor::zeros({37, 5}, DType::f32, dev);
    z.copy_from(g);  // d2d into existing storage
    EXPECT_EQ(std::memcmp(host(z).raw(), t.raw(), t.nbytes()), 0);
    z.zero_();
    Tensor zh = host(z);
    for (int64_t i = 0; i < zh.numel(); ++i) ASSERT_EQ(zh.data<float>()[i], 0.0f);
  }
  EXPECT_EQ(memory_stats(dev).live_bytes, before.live_bytes);
}

// Between two devices (Backend::copy's peer path: the source's stream drained,
// the copy on the destination's, both waits within the host wait limit),
// after kernels on the source that the copy must follow.
TEST_F(CudaOps, CopiesBetweenDevices) {
  if (cuda_backend().device_count(nullptr) < 2) GTEST_SKIP() << "needs two GPUs; this machine has fewer";
  Tensor t = random_tensor({1031, 7}, DType::f32, 2);
  Tensor src = gpu(t);
  ops::add_inplace(src, src);  // queued on cuda:0 before the copy
  Tensor other = Tensor::zeros({1031, 7}, DType::f32, Device::cuda(1));
  other.copy_from(src);
  EXPECT_EQ(other.device(), Device::cuda(1));
  Tensor back = Tensor::zeros({1031, 7}, DType::f32, Device::cuda(0));
  back.copy_from(other);
  const Tensor got = host(back);
  for (int64_t i = 0; i < got.numel(); ++i) ASSERT_EQ(got.data<float>()[i], 2.0f * t.data<float>()[i]) << i;
}

TEST_F(CudaOps, GemmAllTransposesMatchCpu) {
  const int64_t m = 33, n = 17, k = 45;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(testing::Message() << "trans_a " << ta << " trans_b " << tb);
      Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, DType::f32, 2);
      Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, DType::f32, 3);
      Tensor c_cpu = random_tensor({m, n}, DType::f32, 4);
      Tensor c_gpu = gpu(c_cpu);
      ops::gemm(c_cpu, a, b, ta, tb, 1.5f, 0.5f);
      ops::gemm(c_gpu, gpu(a), gpu(b), ta, tb, 1.5f, 0.5f);
      EXPECT_TENSOR_NEAR(host(c_gpu), c_cpu, tolerance(DType::f32));
    }
  }
}

TEST_F(CudaOps, LinearForwardBackwardMatchCpu) {
  const int64_t B = 2, T = 3, C = 24, OC = 10;
  Tensor inp = random_tensor({B, T, C}, DType::f32, 5);
  Tensor weight = random_tensor({OC, C}, DType::f32, 6);
  Tensor bias = random_tensor({OC}, DType::f32, 7);
  Tensor out = Tensor::empty({B, T, OC}, DType::f32);
  Tensor out_g = Tensor::empty({B, T, OC}, DType::f32, Device::cuda(0));
  Tensor inp_g = gpu(inp), weight_g = gpu(weight), bias_g = gpu(bias);
  ops::linear_forward(out, inp, weight, &bias);
  ops::linear_forward(out_g, inp_g, weight_g, &bias_g);
  EXPECT_TENSOR_NEAR(host(out_g), out, tolerance(DType::f32));

  // Parameter gradients start non-zero to check that they accumulate.
  Tensor dout = random_tensor({B, T, OC}, DType::f32, 8);
  Tensor dinp = random_tensor({B, T, C}, DType::f32, 9);
  Tensor dweight = random_tensor({OC, C}, DType::f32, 10);
  Tensor dbias = random_tensor({OC}, DType::f32, 11);
  Tensor dinp_g = gpu(dinp), dweight_g = gpu(dweight), dbias_g = gpu(dbias);
  ops::linear_backward(&dinp, &dweight, &dbias, dout, inp, weight);
  ops::linear_backward(&dinp_g, &dweight_g, &dbias_g, gpu(dout), inp_g, weight_g);
  EXPECT_TENSOR_NEAR(host(dinp_g), dinp, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(host(dweight_g), dweight, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(host(dbias_g), dbias, tolerance(DType::f32));
}

TEST_F(CudaOps, GeluForwardBackwardMatchCpu) {
  expect_activation_matches_cpu(ops::gelu_forward, ops::gelu_backward, {7, 129}, {7, 129}, 12, 4.0);
}

TEST_F(CudaOps, AddMatchesCpu) {
  Tensor a = random_tensor({1000}, DType::f32, 14), b = random_tensor({1000}, DType::f32, 15);
  Tensor out = Tensor::empty({1000}, DType::f32), out_g = gpu(out);
  ops::add(out, a, b);
  ops::add(out_g, gpu(a), gpu(b));
  EXPECT_TENSOR_NEAR(host(out_g), out, tolerance(DType::f32));
}

TEST_F(CudaOps, AdamWUpdateMatchesCpu) {
  const Shape shape{300};
  Tensor param = random_tensor(shape, DType::f32, 16);
  Tensor m = Tensor::zeros(shape, DType::f32), v = Tensor::zeros(shape, DType::f32);
  Tensor param_g = gpu(param), m_g = gpu(m), v_g = gpu(v);
  for (int64_t step = 1; step <= 3; ++step) {
    Tensor grad = random_tensor(shape, DType::f32, 100 + uint64_t(step));
    ops::AdamWStep s{.lr = 1e-2f,
                     .beta1 = 0.9f,
                     .beta2 = 0.95f,
                     .eps = 1e-8f,
                     .weight_decay = 0.1f,
                     .step = step,
                     .grad_scale = 0.5f};
    ops::adamw_update(param, grad, m, v, s);
    ops::adamw_update(param_g, gpu(grad), m_g, v_g, s);
  }
  EXPECT_TENSOR_NEAR(host(param_g), param, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(host(m_g), m, tolerance(DType::f32));
  EXPECT_TENSOR_NEAR(host(v_g), v, tolerance(DType::f32));
}

}  // namespace
}  // namespace lattice
