// The six P2P verbs under mpirun over the pp group of a mesh (pp = world, and
// tp = 2 x pp = world / 2 at 4 ranks, where pp neighbours are not adjacent
// world ranks): exact small integers, no-ops on the first and last stage, the
// interleaved ring, and microbatch tags that keep a batch's transfers apart.
#include <gtest/gtest.h>

#include "comm/mpi_communicator.h"
#include "mesh/process_group_mesh.h"
#include "pipeline/p2p.h"

namespace lattice::pipeline {
namespace {

constexpr int64_t kN = 6;

int world_size() { return comm::make_world_communicator(60)->size(); }

// Element i holds base + i.
Tensor filled(int base) {
  Tensor t = Tensor::empty({kN}, DType::i32);
  for (int64_t i = 0; i < kN; ++i) t.data<int32_t>()[i] = base + int32_t(i);
  return t;
}

void expect_filled(const Tensor& t, int base, const std::string& what) {
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(t.data<int32_t>()[i], base + i) << what << " element " << i;
}

struct Setup {
  mesh::ProcessGroupMesh mesh;
  PipelineStageManager stages;
  P2P p2p;
  static std::unique_ptr<Setup> make(int tp, int virtual_stages) {
    const int pp = world_size() / tp;
    auto m = mesh::ProcessGroupMesh::create(comm::Group(comm::make_world_communicator(60)), {tp, pp, 0});
    StageConfig c;
    c.pp = pp;
    c.virtual_stages = virtual_stages;
    c.interleaved = virtual_stages > 1;
    c.microbatches = pp;
    c.n_layer = pp * virtual_stages;
    return std::unique_ptr<Setup>(new Setup(std::move(m), make_stage_layout(c)));
  }
  Setup(mesh::ProcessGroupMesh m, StageLayout l)
      : mesh(std::move(m)),
        stages(std::move(l), mesh.pp().rank(), mesh.pp().world_ranks()),
        p2p(mesh.pp(), stages, 30) {}
  int stage() const { return stages.stage(); }
  int pp() const { return stages.num_stages(); }
};

std::vector<int> tps() { return world_size() >= 4 ? std::vector<int>{1, 2} : std::vector<int>{1}; }

TEST(P2P, SingleVerbsMoveExactValuesAndNoOpAtTheEnds) {
  for (int tp : tps()) {
    auto s = Setup::make(tp, 1);
    SCOPED_TRACE(testing::Message() << "tp " << tp << " stage " << s->stage());
    const int st = s->stage(), pp = s->pp();
    // Forward: stage s sends 100 s + i, stage s + 1 receives it.
    Tensor out = filled(100 * st), in = filled(-1000);
    s->p2p.send_forward(out)->wait();  // the last stage: a no-op
    s->p2p.recv_forward(in)->wait();   // stage 0: a no-op, `in` untouched
    expect_filled(in, st == 0 ? -1000 : 100 * (st - 1), "recv_forward");
    // Backward: stage s sends 7 s + 1, stage s - 1 receives it.
    Tensor din = filled(7 * st + 1), dout = filled(-1000);
    s->p2p.send_backward(din)->wait();  // stage 0: a no-op
    s->p2p.recv_backward(dout)->wait();
    expect_filled(dout, st == pp - 1 ? -1000 : 7 * (st + 1) + 1, "recv_backward");
    EXPECT_EQ(s->p2p.peer_world_rank(P2PKind::send_forward, 0), st == pp - 1 ? -1 : s->stages.next_rank());
    EXPECT_EQ(s->p2p.peer_world_rank(P2PKind::recv_forward, 0), st == 0 ? -1 : s->stages.prev_rank());
  }
}

TEST(P2P, FusedVerbsPairStagesLikeOneFOneB) {
  for (int tp : tps()) {
    auto s = Setup::make(tp, 1);
    const int st = s->stage(), pp = s->pp();
    for (int parity : {0, 1}) {
      SCOPED_TRACE(testing::Message() << "tp " << tp << " stage " << st << " round " << parity);
      // Round `parity`: stage 2k + parity runs send_forward_recv_backward with
      // stage 2k + parity + 1, which runs send_backward_recv_forward. Stages
      // outside a pair call the other verb, a no-op at the ends.
      Tensor out = filled(10 * st), dout = filled(-1), din = filled(1000 + st), in = filled(-1);
      const bool sender = (st - parity) % 2 == 0 && st >= parity;
      if (sender) {
        s->p2p.send_forward_recv_backward(out, dout, 0, /*microbatch=*/3, /*recv_microbatch=*/1)->wait();
        expect_filled(dout, st + 1 < pp ? 1000 + st + 1 : -1, "dout");
      } else {
        s->p2p.send_backward_recv_forward(din, in, 0, /*microbatch=*/1, /*recv_microbatch=*/3)->wait();
        expect_filled(in, st > 0 ? 10 * (st - 1) : -1, "in");
      }
    }
  }
}

TEST(P2P, InterleavedRingAndMicrobatchTagsInOneBatch) {
  auto s = Setup::make(1, 2);
  const int st = s->stage(), pp = s->pp();
  // Every stage sends chunk 0's output of microbatches 5 and 6 onward (the
  // last stage round the ring to stage 0's chunk 1) and receives its next
  // input, posting the receives in the opposite microbatch order.
  Tensor o5 = filled(500 + 10 * st), o6 = filled(600 + 10 * st), i5 = filled(-1), i6 = filled(-1);
  const int recv_chunk = st == 0 ? 1 : 0;
  s->p2p
      .start({{P2PKind::recv_forward, i6, recv_chunk, 6},
              {P2PKind::send_forward, o5, 0, 5},
              {P2PKind::send_forward, o6, 0, 6},
              {P2PKind::recv_forward, i5, recv_chunk, 5}})
      ->wait();
  const int from = (st + pp - 1) % pp;
  expect_filled(i5, 500 + 10 * from, "microbatch 5");
  expect_filled(i6, 600 + 10 * from, "microbatch 6");
  // And back: chunk 1 of stage 0 returns gradients to the last stage's chunk 0.
  Tensor g = filled(70 + st), dg = filled(-1);
  const int send_chunk = st == 0 ? 1 : 0;
  s->p2p.start({{P2PKind::send_backward, g, send_chunk, 2}, {P2PKind::recv_backward, dg, 0, 2}})->wait();
  expect_filled(dg, 70 + (st + 1) % pp, "recv_backward");
  // The first model chunk (stage 0 chunk 0) has no input; the last (stage pp-1 chunk 1) no successor.
  EXPECT_EQ(s->p2p.peer_stage(P2PKind::recv_forward, 0), st == 0 ? -1 : st - 1);
  EXPECT_EQ(s->p2p.peer_stage(P2PKind::send_forward, 1), st == pp - 1 ? -1 : st + 1);
  EXPECT_NE(s->p2p.tag(P2PKind::send_forward, 0, 5), s->p2p.tag(P2PKind::send_forward, 0, 6));
  EXPECT_NE(s->p2p.tag(P2PKind::send_forward, 0, 5), s->p2p.tag(P2PKind::send_backward, 1, 5));
}

}  // namespace
}  // namespace lattice::pipeline
