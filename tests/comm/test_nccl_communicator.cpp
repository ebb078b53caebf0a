// make_nccl_communicator under mpirun. Without a GPU (or without
// liblattice_nccl.so) the factory must refuse with one clear reason; with
// GPUs it must move device memory exactly like the MPI communicator.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "comm/device_placement.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"
#include "comm/nccl_communicator.h"
#include "comm/roll_call.h"
#include "core/backend.h"
#include "core/ops.h"
#include "support/error_text.h"
#include "support/gpu_ranks.h"

namespace lattice::comm {
namespace {

std::string exe_dir() { return std::filesystem::read_symlink("/proc/self/exe").parent_path().string(); }

// The device tests' fixture: an NCCL communicator over the whole job on this
// rank's GPU, or a skip saying why not: "no GPU: ..." when none is visible
// (the refusal test covers that), "no CUDA device: ..." (CTest's skip
// pattern) when the ranks do not each have one.
class NcclOnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no GPU: covered by RefusesClearlyWithoutAGpuOrLibrary";
    job_ = Group(make_world_communicator(60));
    const std::string why = test::why_not_one_gpu_per_rank(job_, true);
    if (!why.empty()) GTEST_SKIP() << "no CUDA device: " << why;
    const NodeLocal local = node_local();
    nccl_ = make_nccl_communicator(job_.comm(), local.rank, local.size);
    dev_ = Device::cuda(test::this_rank_gpu());  // the factory's choice
  }
  Group job_;
  std::unique_ptr<Communicator> nccl_;
  Device dev_ = Device::cpu();
};

TEST(NcclCommunicator, RefusesClearlyWithoutAGpuOrLibrary) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is visible: the device test below covers this machine";
  auto world = make_world_communicator(60);
  try {
    const NodeLocal local = node_local();
    make_nccl_communicator(*world, local.rank, local.size);
    FAIL() << "make_nccl_communicator succeeded without a GPU";
  } catch (const Error& e) {
    // Built (CUDA build, or $LATTICE_NCCL_LIB): the library loads and finds no device.
    // Not built: the loader names the missing library.
    const std::string m = e.message();
    const char* env = std::getenv("LATTICE_NCCL_LIB");
    const std::string built = env ? env : exe_dir() + "/../lib/liblattice_nccl.so";
    if (std::filesystem::exists(built)) {
      EXPECT_NE(m.find("no CUDA device is visible"), std::string::npos) << m;
    } else {
      EXPECT_NE(m.find("NCCL communicators need liblattice_nccl.so"), std::string::npos) << m;
    }
    std::printf("make_nccl_communicator refused: %s\n", m.c_str());
  }
}

TEST_F(NcclOnGpu, AllReduceAndRingOnDeviceMemory) {
  Communicator* nccl = nccl_.get();
  const Device dev = dev_;
  const int p = nccl->size(), r = nccl->rank();
  std::vector<float> host(17);
  for (size_t i = 0; i < host.size(); ++i) host[i] = float((r + 1) * (int(i) % 3 + 1));
  Tensor t = Tensor::from<float>(host, {17}).to(dev);
  nccl->all_reduce(t, {})->wait();
  Tensor back = t.to(Device::cpu());
  for (int64_t i = 0; i < 17; ++i) ASSERT_EQ(back.data<float>()[i], float((i % 3 + 1) * p * (p + 1) / 2));

  Tensor send = Tensor::from<float>(std::vector<float>(5, float(r)), {5}).to(dev);
  Tensor recv = Tensor::zeros({5}, DType::f32, dev);
  nccl->batch_send_recv({{P2POp::Kind::send, send, (r + 1) % p}, {P2POp::Kind::recv, recv, (r + p - 1) % p}}, 0)
      ->wait();
  Tensor got = recv.to(Device::cpu());
  for (int64_t i = 0; i < 5; ++i) ASSERT_EQ(got.data<float>()[i], float((r + p - 1) % p));
}

// wait_on_device: the compute stream, not the host, waits for each
// all-reduce, and the kernel after it (ops::add_inplace, t += t) reads the
// sum. Chained three times with no host wait in between, then through a
// second communicator (tp then pp in a training step): a kernel or an
// operation that started before the transfer finished gives another number.
TEST_F(NcclOnGpu, WaitOnDeviceOrdersKernelsAndOtherCommunicators) {
  Communicator* nccl = nccl_.get();
  const Device dev = dev_;
  auto second = nccl->split(0, nccl->rank(), "second");
  const int p = nccl->size(), r = nccl->rank();
  const int64_t n = 1 << 20;  // large enough that a kernel racing the transfer would see old values
  Tensor t = Tensor::from<float>(std::vector<float>(size_t(n), float(r + 1)), {n}).to(dev);
  double want = double(p) * (p + 1) / 2;  // after the first sum
  for (int i = 0; i < 3; ++i) {
    nccl->all_reduce(t, {})->wait_on_device();
    ops::add_inplace(t, t);  // a kernel on the compute stream, after the sum
    if (i > 0) want *= p;    // the sum of p equal values
    want *= 2;
  }
  second->all_reduce(t, {})->wait_on_device();  // another communicator's stream, after the kernel above
  want *= p;
  Tensor back = t.to(Device::cpu());
  for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ(double(back.data<float>()[i]), want) << "element " << i;
}

// A transfer the compute stream waits for that never completes (rank 1 does
// not join until rank 0 has given up): rank 0's next host wait fails at the
// host wait limit with the one clear line, not a hang, ending with the roll
// call's report (the others answer from their MPI barrier); once rank 1
// joins, the sum arrives and the stream goes on.
TEST_F(NcclOnGpu, AStalledDeviceWaitFailsTheNextHostWaitAtTheLimit) {
  Communicator* nccl = nccl_.get();
  Group& job = job_;
  const int r = nccl->rank();
  // Rank 0 stalls only while another rank holds the all-reduce back: alone (one process, as
  // scripts/gpu-tests.sh runs it from a bundle on a one-GPU machine) the sum completes at once.
  if (nccl->size() < 2) GTEST_SKIP() << "needs two ranks (one GPU each) to stall an all-reduce; this launch has 1";
  Tensor t = Tensor::from<float>(std::vector<float>(64, 1.0f), {64}).to(dev_);
  // Connected first: NCCL connects lazily (NCCL_RUNTIME_CONNECT=1 by default), inside the first call on the host,
  // which would wait for rank 1 there instead of on the device.
  nccl->all_reduce(t, {})->wait();
  t = Tensor::from<float>(std::vector<float>(64, 1.0f), {64}).to(dev_);
  struct Restore {
    ~Restore() {
      cuda_backend().set_host_wait_timeout(0);
      cuda_backend().set_roll_call(nullptr, {});
    }
  } restore;  // the limit and the roll call are process-wide: back to none however the test ends
  if (r == 0) {
    cuda_backend().set_host_wait_timeout(1.0);
    cuda_backend().set_roll_call(&roll_call_hooks(), job.world_ranks());
    nccl->all_reduce(t, {})->wait_on_device();
    const std::string message = test::error_text([&] { t.to(Device::cpu()); });
    EXPECT_HAS(message, "waited 1 s for the compute stream");
    EXPECT_HAS(message, "runtime.comm_timeout_s");
    EXPECT_HAS(message, "roll call (1 s): world rank");
    EXPECT_HAS(message, ": waiting in barrier on group world");
    job.barrier()->wait();  // now rank 1 joins the all-reduce
    cuda_backend().set_host_wait_timeout(60);
    Tensor back = t.to(Device::cpu());
    EXPECT_EQ(back.data<float>()[0], float(nccl->size()));
  } else {
    job.barrier()->wait();
    nccl->all_reduce(t, {})->wait();
  }
}

// A host wait on an all-reduce that rank 1 joins only later times out with
// NCCL's message, then the roll call's report of the communicator's ranks:
// the others answer from their MPI barrier. Once they join, the kernel rank 0
// launched completes (its communicator is broken, and aborted when it goes).
TEST_F(NcclOnGpu, AHostWaitThatTimesOutHoldsARollCall) {
  Communicator* nccl = nccl_.get();
  Group& job = job_;
  if (nccl->size() < 2) GTEST_SKIP() << "needs two ranks (one GPU each) to stall an all-reduce; this launch has 1";
  Tensor t = Tensor::from<float>(std::vector<float>(64, 1.0f), {64}).to(dev_);
  nccl->all_reduce(t, {})->wait();  // connected first, as above
  if (nccl->rank() == 0) {
    WorkPtr w = nccl->all_reduce(t, {.timeout_s = 1.0});
    const std::string message = test::error_text([&] { w->wait(); });
    EXPECT_HAS(message, "all_reduce on group world (world ranks 0");
    EXPECT_HAS(message, "timed out after 1 s (runtime.comm_timeout_s)");
    EXPECT_HAS(message, " — roll call (1 s): world rank");
    EXPECT_HAS(message, ": waiting in barrier on group world");
    job.barrier()->wait();
  } else {
    job.barrier()->wait();
    nccl->all_reduce(t, {})->wait();
  }
  job.barrier()->wait();  // the others' sums arrived before rank 0's teardown aborts the broken communicator
}

}  // namespace
}  // namespace lattice::comm
