// The communicator of one rank (comm/self_communicator.h): collectives as
// copies or no-ops, P2P to itself matched by tag (send before recv, recv
// before send, batches, FIFO per tag), the errors (another peer, sizes that
// disagree, waiting on a recv no send can meet), names and world ranks, split.
// Every check runs on host tensors; the SelfCommunicatorCuda cases run the
// same checks on cuda:0 tensors (device copies on the compute stream) and are
// registered as test_cuda_self_communicator, which skips without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/self_communicator.h"
#include "core/backend.h"

namespace lattice::comm {
namespace {

Tensor ints(const std::vector<int32_t>& v, Device d) { return Tensor::from<int32_t>(v, {int64_t(v.size())}).to(d); }
std::vector<int32_t> values(const Tensor& t) {
  Tensor h = t.to(Device::cpu());
  return {h.data<int32_t>(), h.data<int32_t>() + h.numel()};
}

void collectives_are_copies_or_no_ops(Device d) {
  auto c = make_self_communicator("tp", 3);
  Tensor t = ints({1, 2, 3}, d);
  EXPECT_TRUE(c->all_reduce(t, {})->test());
  EXPECT_EQ(values(t), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(c->broadcast(t, 0, {})->test());
  EXPECT_EQ(values(t), (std::vector<int32_t>{1, 2, 3}));
  Tensor out = ints({0, 0, 0}, d);
  c->all_gather(out, t, {})->wait();
  EXPECT_EQ(values(out), (std::vector<int32_t>{1, 2, 3}));
  Tensor rs = ints({0, 0, 0}, d);
  c->reduce_scatter(rs, ints({7, 8, 9}, d), {})->wait();
  EXPECT_EQ(values(rs), (std::vector<int32_t>{7, 8, 9}));
  c->barrier({})->wait();
  EXPECT_THROW(c->broadcast(t, 1, {}), Error);
}

void send_then_recv_copies_a_snapshot(Device d) {
  auto c = make_self_communicator("pp");
  Tensor src = ints({4, 5}, d), dst = ints({0, 0}, d);
  WorkPtr s = c->send(src, 0, {.tag = 7});
  EXPECT_TRUE(s->test()) << "a buffered send completes at once";
  s->wait();
  src.copy_from(ints({-1, -1}, d));  // the sender's buffer is its own again
  WorkPtr r = c->recv(dst, 0, {.tag = 7});
  EXPECT_TRUE(r->test());
  r->wait();
  EXPECT_EQ(values(dst), (std::vector<int32_t>{4, 5}));
}

void recv_then_send_completes_the_recv(Device d) {
  auto c = make_self_communicator("pp");
  Tensor dst = ints({0, 0}, d);
  WorkPtr r = c->recv(dst, 0, {.tag = 1});
  EXPECT_FALSE(r->test());
  c->send(ints({6, 7}, d), 0, {.tag = 1})->wait();
  EXPECT_TRUE(r->test());
  r->wait();
  EXPECT_EQ(values(dst), (std::vector<int32_t>{6, 7}));
}

void tags_match_and_each_tag_is_fifo(Device d) {
  auto c = make_self_communicator("pp");
  c->send(ints({1}, d), 0, {.tag = 0})->wait();
  c->send(ints({2}, d), 0, {.tag = 5})->wait();
  c->send(ints({3}, d), 0, {.tag = 0})->wait();
  Tensor a = ints({0}, d), b = ints({0}, d), e = ints({0}, d);
  c->recv(a, 0, {.tag = 5})->wait();
  c->recv(b, 0, {.tag = 0})->wait();
  c->recv(e, 0, {.tag = 0})->wait();
  EXPECT_EQ(values(a), std::vector<int32_t>{2});
  EXPECT_EQ(values(b), std::vector<int32_t>{1});
  EXPECT_EQ(values(e), std::vector<int32_t>{3});
}

void a_batch_meets_its_own_sends(Device d) {
  auto c = make_self_communicator("pp");
  Tensor x = ints({0, 0, 0}, d), y = ints({0}, d);
  // The recvs come first in the list: the batch starts its sends first, as one NCCL group would.
  WorkPtr w = c->batch_send_recv({{P2POp::Kind::recv, x, 0, 2},
                                  {P2POp::Kind::recv, y, 0, 3},
                                  {P2POp::Kind::send, ints({9}, d), 0, 3},
                                  {P2POp::Kind::send, ints({1, 2, 3}, d), 0, 2}},
                                 0);
  EXPECT_TRUE(w->test());
  w->wait();
  EXPECT_EQ(values(x), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(values(y), std::vector<int32_t>{9});
  EXPECT_TRUE(c->batch_send_recv({}, 0)->test());
}

void errors_name_the_problem(Device d) {
  auto c = make_self_communicator("pp", 2);
  Tensor t = ints({1, 2}, d);
  try {
    c->send(t, 1, {});
    FAIL() << "a send to rank 1 of a group of one";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("send to rank 1 in group 'pp', which has only this rank"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(c->recv(t, -1, {}), Error);
  Tensor lonely = ints({0, 0}, d);
  WorkPtr r = c->recv(lonely, 0, {.tag = 4});
  try {
    r->wait();
    FAIL() << "a recv no send met returned from wait()";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("recv from rank 0 (world rank 2) with tag 4 of group pp (world ranks 2)"),
              std::string::npos)
        << e.what();
  }
  c->send(ints({5, 6}, d), 0, {.tag = 4})->wait();  // the recv is still pending: met now
  EXPECT_TRUE(r->test());
  c->send(ints({1, 2, 3}, d), 0, {.tag = 8})->wait();
  Tensor small = ints({0, 0}, d);
  try {
    c->recv(small, 0, {.tag = 8});
    FAIL() << "3 elements received into 2";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("i32 (3) met a recv of i32 (2)"), std::string::npos) << e.what();
  }
}

TEST(SelfCommunicator, NamesWorldRanksAndSplit) {
  auto c = make_self_communicator("tie", 6);
  EXPECT_EQ(c->rank(), 0);
  EXPECT_EQ(c->size(), 1);
  EXPECT_EQ(c->name(), "tie");
  EXPECT_EQ(c->world_ranks(), std::vector<int>{6});
  EXPECT_FALSE(c->progresses_in_calls());
  auto s = c->split(0, 0, "sub");
  EXPECT_EQ(s->name(), "sub");
  EXPECT_EQ(s->world_ranks(), std::vector<int>{6});
  EXPECT_EQ(make_self_communicator()->world_ranks(), std::vector<int>{0});
}

TEST(SelfCommunicator, CollectivesAreCopiesOrNoOps) { collectives_are_copies_or_no_ops(Device::cpu()); }
TEST(SelfCommunicator, SendThenRecvCopiesASnapshot) { send_then_recv_copies_a_snapshot(Device::cpu()); }
TEST(SelfCommunicator, RecvThenSendCompletesTheRecv) { recv_then_send_completes_the_recv(Device::cpu()); }
TEST(SelfCommunicator, TagsMatchAndEachTagIsFifo) { tags_match_and_each_tag_is_fifo(Device::cpu()); }
TEST(SelfCommunicator, ABatchMeetsItsOwnSends) { a_batch_meets_its_own_sends(Device::cpu()); }
TEST(SelfCommunicator, ErrorsNameTheProblem) { errors_name_the_problem(Device::cpu()); }

// The same on device tensors: the copies are device copies on the compute
// stream, read back through host copies that wait for it.
class SelfCommunicatorCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_available(&why)) GTEST_SKIP() << "no CUDA device: " << why;
  }
  static Device gpu() { return Device::cuda(0); }
};

TEST_F(SelfCommunicatorCuda, CollectivesAreCopiesOrNoOps) { collectives_are_copies_or_no_ops(gpu()); }
TEST_F(SelfCommunicatorCuda, SendThenRecvCopiesASnapshot) { send_then_recv_copies_a_snapshot(gpu()); }
TEST_F(SelfCommunicatorCuda, RecvThenSendCompletesTheRecv) { recv_then_send_completes_the_recv(gpu()); }
TEST_F(SelfCommunicatorCuda, TagsMatchAndEachTagIsFifo) { tags_match_and_each_tag_is_fifo(gpu()); }
TEST_F(SelfCommunicatorCuda, ABatchMeetsItsOwnSends) { a_batch_meets_its_own_sends(gpu()); }
TEST_F(SelfCommunicatorCuda, ErrorsNameTheProblem) { errors_name_the_problem(gpu()); }

// A kernel's output sent to itself and received reads what the kernel wrote:
// the copy follows the kernel on the compute stream, and a kernel after the
// recv reads the copy.
TEST_F(SelfCommunicatorCuda, CopiesFollowEarlierKernelsAndPrecedeLaterOnes) {
  auto c = make_self_communicator("pp");
  const int64_t n = 1 << 20;  // large enough that a copy racing the kernels would show
  Tensor x = Tensor::zeros({n}, DType::f32, gpu()), y = Tensor::zeros({n}, DType::f32, gpu());
  Tensor ones = Tensor::from<float>(std::vector<float>(size_t(n), 1.0f), {n}).to(gpu());
  cuda_backend().add(0, static_cast<float*>(x.raw()), static_cast<const float*>(x.raw()),
                     static_cast<const float*>(ones.raw()), n);  // x = 1, enqueued
  c->send(x, 0, {})->wait();
  WorkPtr r = c->recv(y, 0, {});
  r->wait();
  cuda_backend().scale(0, static_cast<float*>(y.raw()), 3.0f, n);  // y = 3 only if the copy came first
  Tensor h = y.to(Device::cpu());
  for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ(h.data<float>()[i], 3.0f) << i;
}

}  // namespace
}  // namespace lattice::comm
