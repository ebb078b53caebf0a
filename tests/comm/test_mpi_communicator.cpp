// MpiCommunicator under mpirun: every collective exact on small integers, for
// the world, for split groups and for size-1 groups; P2P rings; the deadline.
// Expectations are functions of the group's size and rank only.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "comm/gather_strings.h"
#include "comm/mpi_communicator.h"

namespace lattice::comm {
namespace {

constexpr double kTimeout = 60;  // a hang fails the test instead of the CTest timeout

// Element i of a tensor holding small integers, read as double whatever the dtype.
double at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::f64:
      return t.data<double>()[i];
    case DType::f32:
      return t.data<float>()[i];
    case DType::i32:
      return t.data<int32_t>()[i];
    case DType::bf16:
      return bf16_to_f32(static_cast<const uint16_t*>(t.raw())[i]);
    case DType::f16:
      return f16_to_f32(static_cast<const uint16_t*>(t.raw())[i]);
    case DType::u16:
      return static_cast<const uint16_t*>(t.raw())[i];
  }
  return 0;
}

void set(Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::f64:
      t.data<double>()[i] = v;
      break;
    case DType::f32:
      t.data<float>()[i] = float(v);
      break;
    case DType::i32:
      t.data<int32_t>()[i] = int32_t(v);
      break;
    case DType::bf16:
      static_cast<uint16_t*>(t.raw())[i] = f32_to_bf16(float(v));
      break;
    case DType::f16:
      static_cast<uint16_t*>(t.raw())[i] = f32_to_f16(float(v));
      break;
    case DType::u16:
      static_cast<uint16_t*>(t.raw())[i] = uint16_t(v);
      break;
  }
}

template <typename F>
Tensor filled(int64_t n, DType dt, F f) {
  Tensor t = Tensor::empty({n}, dt);
  for (int64_t i = 0; i < n; ++i) set(t, i, f(i));
  return t;
}

// The groups every collective is checked on: world, two halves (even and odd
// world ranks, sizes differ when the world is odd), and one rank alone.
struct Groups {
  std::unique_ptr<MpiCommunicator> world = make_world_communicator(kTimeout);
  std::unique_ptr<Communicator> halves = world->split(world->rank() % 2, world->rank(), "half");
  std::unique_ptr<Communicator> alone = world->split(world->rank(), 0, "alone");
  std::vector<Communicator*> all() { return {world.get(), halves.get(), alone.get()}; }
};

TEST(MpiCommunicator, SplitGroupsKnowTheirWorldRanks) {
  Groups g;
  const int me = g.world->rank(), n = g.world->size();
  std::vector<int> expected;
  for (int r = me % 2; r < n; r += 2) expected.push_back(r);
  EXPECT_EQ(g.halves->world_ranks(), expected);
  EXPECT_EQ(g.halves->rank(), me / 2);
  EXPECT_EQ(g.halves->name(), "half");
  EXPECT_EQ(g.alone->size(), 1);
  EXPECT_EQ(g.alone->world_ranks(), std::vector<int>{me});
  std::vector<int> world(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) world[size_t(r)] = r;
  EXPECT_EQ(g.world->world_ranks(), world);
}

TEST(MpiCommunicator, AllReduceSumMaxMinEveryDtype) {
  Groups g;
  for (Communicator* c : g.all()) {
    const int p = c->size(), r = c->rank();
    for (DType dt : {DType::f32, DType::f64, DType::i32, DType::bf16, DType::f16}) {
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max, ReduceOp::min}) {
        // Element i on group rank r: (r + 1) * (i % 5 + 1).
        Tensor t = filled(37, dt, [&](int64_t i) { return (r + 1) * (i % 5 + 1); });
        c->all_reduce(t, {.op = op})->wait();
        for (int64_t i = 0; i < t.numel(); ++i) {
          double base = double(i % 5 + 1);
          double want = op == ReduceOp::sum ? base * p * (p + 1) / 2 : op == ReduceOp::max ? base * p : base;
          ASSERT_EQ(at(t, i), want) << c->name() << " " << dtype_name(dt) << " op " << int(op) << " i " << i;
        }
      }
    }
  }
}

TEST(MpiCommunicator, AllGatherPlacesBlockRAtOffsetRN) {
  Groups g;
  for (Communicator* c : g.all()) {
    const int p = c->size(), r = c->rank();
    const int64_t n = 7;
    for (DType dt : {DType::f32, DType::i32, DType::u16, DType::bf16}) {
      Tensor in = filled(n, dt, [&](int64_t j) { return r * 10 + j; });
      Tensor out = Tensor::zeros({p * n}, dt);
      c->all_gather(out, in, {})->wait();
      for (int q = 0; q < p; ++q)
        for (int64_t j = 0; j < n; ++j) ASSERT_EQ(at(out, q * n + j), q * 10 + j) << c->name() << " block " << q;
    }
    // In place: `in` is block r of `out`.
    Tensor out = filled(p * n, DType::f32, [](int64_t) { return -1; });
    Tensor mine = out.view(r * n, {n});
    for (int64_t j = 0; j < n; ++j) set(mine, j, r * 10 + j);
    c->all_gather(out, mine, {})->wait();
    for (int q = 0; q < p; ++q)
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(at(out, q * n + j), q * 10 + j) << c->name() << " in place";
  }
}

// Strings of different lengths (empty, with a NUL, every byte value) come back
// in group-rank order on every rank.
TEST(MpiCommunicator, AllGatherStringsKeepsLengthsAndBytes) {
  Groups g;
  auto text_of = [](int world_rank) {
    std::string s(size_t(world_rank * 3), 'a');
    if (world_rank % 2 == 1) s += std::string("x\0y\xff", 4);
    return s;
  };
  for (Communicator* c : g.all()) {
    Group view(c->split(0, c->rank(), c->name()));  // a Group to call the helper with
    std::vector<std::string> got = all_gather_strings(view, text_of(g.world->rank()));
    ASSERT_EQ(got.size(), size_t(c->size()));
    for (int r = 0; r < c->size(); ++r) EXPECT_EQ(got[size_t(r)], text_of(c->world_ranks()[size_t(r)])) << c->name();
  }
}

TEST(MpiCommunicator, ReduceScatterGivesRankRBlockR) {
  Groups g;
  for (Communicator* c : g.all()) {
    const int p = c->size(), r = c->rank();
    const int64_t n = 5;
    for (DType dt : {DType::f32, DType::f64, DType::i32}) {
      // Element k of rank q's input: q + k; block r of the sum: sum_q q + p * (r * n + j).
      Tensor in = filled(p * n, dt, [&](int64_t k) { return r + k; });
      Tensor out = Tensor::zeros({n}, dt);
      c->reduce_scatter(out, in, {})->wait();
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(at(out, j), p * (p - 1) / 2 + p * (r * n + j)) << c->name();
      Tensor mx = Tensor::zeros({n}, dt);
      c->reduce_scatter(mx, in, {.op = ReduceOp::max})->wait();
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(at(mx, j), (p - 1) + r * n + j) << c->name();
    }
  }
}

TEST(MpiCommunicator, BroadcastFromEveryRoot) {
  Groups g;
  for (Communicator* c : g.all()) {
    for (int root = 0; root < c->size(); ++root) {
      Tensor t = filled(11, DType::f32, [&](int64_t j) { return c->rank() == root ? root * 100 + j : -1; });
      c->broadcast(t, root, {})->wait();
      for (int64_t j = 0; j < 11; ++j) ASSERT_EQ(at(t, j), root * 100 + j) << c->name() << " root " << root;
    }
  }
}

TEST(MpiCommunicator, SendRecvRing) {
  Groups g;
  for (Communicator* c : g.all()) {
    const int p = c->size(), r = c->rank();
    const int right = (r + 1) % p, left = (r + p - 1) % p;
    Tensor out = filled(9, DType::i32, [&](int64_t j) { return r * 1000 + j; });
    Tensor in = Tensor::zeros({9}, DType::i32);
    WorkPtr rw = c->recv(in, left, {.tag = 7});
    WorkPtr sw = c->send(out, right, {.tag = 7});
    sw->wait();
    rw->wait();
    EXPECT_TRUE(rw->test());
    for (int64_t j = 0; j < 9; ++j) ASSERT_EQ(at(in, j), left * 1000 + j) << c->name();
  }
}

TEST(MpiCommunicator, BatchSendRecvWithBothNeighbours) {
  Groups g;
  for (Communicator* c : g.all()) {
    const int p = c->size(), r = c->rank();
    const int right = (r + 1) % p, left = (r + p - 1) % p;
    // Tags tell the directions apart when left == right (two ranks) or both are self (one rank).
    Tensor to_right = filled(6, DType::f32, [&](int64_t j) { return r * 10 + j; });
    Tensor to_left = filled(6, DType::f32, [&](int64_t j) { return -(r * 10 + j); });
    Tensor from_left = Tensor::zeros({6}, DType::f32), from_right = Tensor::zeros({6}, DType::f32);
    c->batch_send_recv({{P2POp::Kind::recv, from_left, left, 1},
                        {P2POp::Kind::recv, from_right, right, 2},
                        {P2POp::Kind::send, to_right, right, 1},
                        {P2POp::Kind::send, to_left, left, 2}},
                       0)
        ->wait();
    for (int64_t j = 0; j < 6; ++j) {
      ASSERT_EQ(at(from_left, j), left * 10 + j) << c->name();
      ASSERT_EQ(at(from_right, j), -(right * 10 + j)) << c->name();
    }
  }
}

TEST(MpiCommunicator, BarrierWaitsForTheSlowestRank) {
  Groups g;
  using namespace std::chrono;
  for (Communicator* c : g.all()) {
    if (c->size() == 1) {
      c->barrier({})->wait();
      continue;
    }
    // The last rank of the group arrives 300 ms late; nobody may leave before it arrives.
    auto start = steady_clock::now();
    if (c->rank() == c->size() - 1) std::this_thread::sleep_for(milliseconds(300));
    c->barrier({})->wait();
    EXPECT_GE(duration<double>(steady_clock::now() - start).count(), 0.25) << c->name();
  }
}

TEST(MpiCommunicator, RecvThatNobodySendsTimesOutNamingOpGroupAndPeer) {
  Groups g;
  const int p = g.world->size(), r = g.world->rank();
  const int peer = (r + 1) % p;
  Tensor t = Tensor::zeros({4}, DType::f32);
  auto start = std::chrono::steady_clock::now();
  WorkPtr w = g.world->recv(t, peer, {.tag = 99, .timeout_s = 0.5});
  EXPECT_FALSE(w->test());
  try {
    w->wait();
    FAIL() << "wait() returned for a recv nobody sends";
  } catch (const Error& e) {
    const std::string m = e.message();
    EXPECT_NE(m.find(fmt::format("recv from rank {} (world rank {})", peer, peer)), std::string::npos) << m;
    EXPECT_NE(m.find("group world (world ranks 0"), std::string::npos) << m;
    EXPECT_NE(m.find("timed out after 0.5 s"), std::string::npos) << m;
  }
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(waited, 0.5);
  EXPECT_LT(waited, 5.0);
  EXPECT_THROW(w->wait(), Error);  // a timed-out Work stays failed
  EXPECT_FALSE(w->test());
  // The recv was cancelled: the communicator still works and tag 99 matches nothing stale.
  Tensor one = Tensor::from<float>({1.0f}, {1});
  g.world->all_reduce(one, {})->wait();
  EXPECT_EQ(one.data<float>()[0], float(p));
}

// The last rank is busy outside communication while the others' all_reduce
// times out: their report names it as the rank that did not answer the roll
// call, and the others as waiting in the same all_reduce. It joins late, which
// completes the collective MPI still holds, and the communicator goes on.
TEST(MpiCommunicator, CollectiveTimeoutNamesTheRankThatDidNotAnswer) {
  Groups g;
  const int p = g.world->size(), r = g.world->rank();
  if (p < 2) GTEST_SKIP() << "needs two ranks";
  const int late = p - 1;
  Tensor t = Tensor::from<float>({1.0f}, {1});
  if (r == late) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // timeout 0.5 s + grace 0.5 s, with room
    g.world->all_reduce(t, {})->wait();
  } else {
    WorkPtr w = g.world->all_reduce(t, {.timeout_s = 0.5});
    try {
      w->wait();
      FAIL() << "the all_reduce finished without rank " << late;
    } catch (const Error& e) {
      const std::string m = e.message();
      EXPECT_NE(m.find("all_reduce on group world"), std::string::npos) << m;
      EXPECT_NE(m.find(fmt::format("roll call (0.5 s): no answer from world rank {} (stopped, or busy", late)),
                std::string::npos)
          << m;
      std::string waiting;
      for (int q = 0; q < late; ++q)
        if (q != r) waiting += fmt::format("{}{}", waiting.empty() ? "" : ",", q);
      if (!waiting.empty()) {
        EXPECT_NE(m.find(fmt::format("{}: waiting in all_reduce on group world",
                                     late == 2 ? "world rank " + waiting : "world ranks " + waiting)),
                  std::string::npos)
            << m;
      }
    }
  }
  Tensor one = Tensor::from<float>({1.0f}, {1});
  g.world->all_reduce(one, {})->wait();
  EXPECT_EQ(one.data<float>()[0], float(p));
}

TEST(MpiCommunicator, BadArgumentsAreRefusedBeforeAnyTransfer) {
  Groups g;
  const int p = g.world->size();
  Tensor small = Tensor::zeros({3}, DType::f32), wrong = Tensor::zeros({3 * p + 1}, DType::f32);
  EXPECT_THROW(g.world->all_gather(wrong, small, {}), Error);
  EXPECT_THROW(g.world->reduce_scatter(small, wrong, {}), Error);
  Tensor u16 = Tensor::zeros({3}, DType::u16);
  try {
    g.world->all_reduce(u16, {});
    FAIL() << "u16 all_reduce accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("u16"), std::string::npos) << e.message();
  }
  EXPECT_THROW(g.world->send(small, p, {}), Error);
  EXPECT_THROW(g.world->broadcast(small, -1, {}), Error);
  EXPECT_THROW(g.world->send(small, 0, {.tag = -1}), Error);
}

}  // namespace
}  // namespace lattice::comm
