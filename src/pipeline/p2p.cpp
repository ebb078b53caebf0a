#include "pipeline/p2p.h"

#include "core/error.h"

namespace lattice::pipeline {
namespace {

constexpr int kTagSpace = 32768;  // MPI guarantees tags up to 32767

class DoneWork final : public comm::Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

bool is_send(P2PKind k) { return k == P2PKind::send_forward || k == P2PKind::send_backward; }
bool is_forward(P2PKind k) { return k == P2PKind::send_forward || k == P2PKind::recv_forward; }

}  // namespace

P2P::P2P(comm::Group& pp, const PipelineStageManager& stages, double timeout_s)
    : pp_(pp), stages_(stages), timeout_s_(timeout_s) {
  LATTICE_CHECK(pp.size() == stages.num_stages() && pp.rank() == stages.stage(),
                "P2P: the pp group has {} ranks and this is rank {}, but the stage manager says stage {} of {}",
                pp.size(), pp.rank(), stages.stage(), stages.num_stages());
  LATTICE_CHECK(2 * stages.layout().num_chunks() <= kTagSpace, "P2P: {} model chunks exceed the tag space",
                stages.layout().num_chunks());
}

int P2P::peer_stage(P2PKind kind, int chunk) const {
  const int c = stages_.model_chunk(chunk), last = stages_.layout().num_chunks() - 1;
  const int pp = stages_.num_stages(), s = stages_.stage();
  // Sends forward and receives backward go to the next chunk; the others come from the previous one.
  const bool towards_next = kind == P2PKind::send_forward || kind == P2PKind::recv_backward;
  if (towards_next) return c < last ? (s + 1) % pp : -1;
  return c > 0 ? (s + pp - 1) % pp : -1;
}

int P2P::peer_world_rank(P2PKind kind, int chunk) const {
  const int peer = peer_stage(kind, chunk);
  return peer < 0 ? -1 : pp_.world_ranks()[size_t(peer)];
}

int P2P::tag_microbatches() const { return kTagSpace / (2 * stages_.layout().num_chunks()); }

int P2P::tag(P2PKind kind, int chunk, int microbatch) const {
  const int c = stages_.model_chunk(chunk);
  // The boundary between model chunks b and b + 1 that the transfer crosses.
  const int boundary = kind == P2PKind::send_forward || kind == P2PKind::recv_backward ? c : c - 1;
  const int mb = microbatch % tag_microbatches();
  return (mb * stages_.layout().num_chunks() + boundary) * 2 + (is_forward(kind) ? 0 : 1);
}

comm::WorkPtr P2P::start(const std::vector<Transfer>& batch, double timeout_s) {
  std::vector<comm::P2POp> ops;
  for (const Transfer& t : batch) {
    const int peer = peer_stage(t.kind, t.chunk);
    if (peer < 0) continue;
    LATTICE_CHECK(t.tensor.defined(), "P2P: {} of chunk {} microbatch {} has no buffer",
                  is_send(t.kind) ? "send" : "recv", t.chunk, t.microbatch);
    ops.push_back({is_send(t.kind) ? comm::P2POp::Kind::send : comm::P2POp::Kind::recv, t.tensor, peer,
                   tag(t.kind, t.chunk, t.microbatch)});
  }
  if (ops.empty()) return std::make_unique<DoneWork>();
  return pp_.batch_send_recv(ops, timeout_s > 0 ? timeout_s : timeout_s_);
}

comm::WorkPtr P2P::send_forward(const Tensor& output, int chunk, int microbatch) {
  return start({{P2PKind::send_forward, output, chunk, microbatch}});
}

comm::WorkPtr P2P::recv_forward(Tensor& input, int chunk, int microbatch) {
  return start({{P2PKind::recv_forward, input, chunk, microbatch}});
}

comm::WorkPtr P2P::send_backward(const Tensor& dinput, int chunk, int microbatch) {
  return start({{P2PKind::send_backward, dinput, chunk, microbatch}});
}

comm::WorkPtr P2P::recv_backward(Tensor& doutput, int chunk, int microbatch) {
  return start({{P2PKind::recv_backward, doutput, chunk, microbatch}});
}

comm::WorkPtr P2P::send_forward_recv_backward(const Tensor& output, Tensor& doutput, int chunk, int microbatch,
                                              int recv_microbatch) {
  return start({{P2PKind::send_forward, output, chunk, microbatch},
                {P2PKind::recv_backward, doutput, chunk, recv_microbatch < 0 ? microbatch : recv_microbatch}});
}

comm::WorkPtr P2P::send_backward_recv_forward(const Tensor& dinput, Tensor& input, int chunk, int microbatch,
                                              int recv_microbatch) {
  return start({{P2PKind::send_backward, dinput, chunk, microbatch},
                {P2PKind::recv_forward, input, chunk, recv_microbatch < 0 ? microbatch : recv_microbatch}});
}

}  // namespace lattice::pipeline
