// The communicator of one rank (comm/self_communicator.h): collectives as
// copies or no-ops, P2P to itself as buffered copies matched by tag.
#include "comm/self_communicator.h"

#include <deque>

#include "comm/describe.h"
#include "core/error.h"

namespace lattice::comm {

namespace {

struct Done final : Work {
  void wait() override {}
  bool test() override { return true; }
};

// The recvs of one call that no send has met yet; each flag is set by the send that meets it.
class RecvWork final : public Work {
 public:
  RecvWork(std::vector<std::shared_ptr<bool>> met, std::string what) : met_(std::move(met)), what_(std::move(what)) {}
  bool test() override {
    for (const auto& m : met_)
      if (!*m) return false;
    return true;
  }
  void wait() override {
    LATTICE_CHECK(test(), "{}: no send to this rank with its tag was started, and none can be while wait() blocks",
                  what_);
  }

 private:
  std::vector<std::shared_ptr<bool>> met_;
  std::string what_;
};

class SelfCommunicator final : public Communicator {
 public:
  SelfCommunicator(std::string name, int world_rank) : name_(std::move(name)), ranks_{world_rank} {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return ranks_; }

  WorkPtr all_reduce(Tensor&, const CollectiveOptions&) override { return done(); }
  WorkPtr all_gather(Tensor& out, const Tensor& in, const CollectiveOptions&) override { return copy(out, in); }
  WorkPtr reduce_scatter(Tensor& out, const Tensor& in, const CollectiveOptions&) override { return copy(out, in); }
  WorkPtr broadcast(Tensor&, int root, const CollectiveOptions&) override {
    LATTICE_CHECK(root == 0, "broadcast from rank {} in a group of one ({})", root, name_);
    return done();
  }
  WorkPtr send(const Tensor& t, int peer, const P2POptions& o) override {
    return batch_send_recv({P2POp{P2POp::Kind::send, t, peer, o.tag}}, o.timeout_s);
  }
  WorkPtr recv(Tensor& t, int peer, const P2POptions& o) override {
    return batch_send_recv({P2POp{P2POp::Kind::recv, t, peer, o.tag}}, o.timeout_s);
  }
  WorkPtr batch_send_recv(const std::vector<P2POp>& ops, double) override {
    for (const P2POp& p : ops)
      if (p.peer != 0) no_peer(p.kind == P2POp::Kind::send ? "send" : "recv", p.peer);
    for (const P2POp& p : ops)
      if (p.kind == P2POp::Kind::send) start_send(p.tensor, p.tag);
    std::vector<std::shared_ptr<bool>> unmet;
    std::string what;
    for (const P2POp& p : ops) {
      if (p.kind != P2POp::Kind::recv || start_recv(p.tensor, p.tag)) continue;
      unmet.push_back(recvs_.back().met);
      what += fmt::format("{}{} with tag {}", what.empty() ? "" : ", ", describe_p2p(false, 0, ranks_), p.tag);
    }
    if (unmet.empty()) return done();
    return std::make_unique<RecvWork>(std::move(unmet), fmt::format("{} of {}", what, describe_group(name_, ranks_)));
  }
  WorkPtr barrier(const CollectiveOptions&) override { return done(); }
  std::unique_ptr<Communicator> split(int, int, const std::string& name) override {
    return std::make_unique<SelfCommunicator>(name, ranks_.front());
  }

 private:
  struct PendingSend {
    Tensor data;  // a snapshot: the sender's buffer is its own again at once
    int tag;
  };
  struct PendingRecv {
    Tensor into;
    int tag;
    std::shared_ptr<bool> met;
  };

  static WorkPtr done() { return std::make_unique<Done>(); }
  static WorkPtr copy(Tensor& out, const Tensor& in) {
    out.copy_from(in);
    return done();
  }

  void start_send(const Tensor& t, int tag) {
    for (auto it = recvs_.begin(); it != recvs_.end(); ++it) {
      if (it->tag != tag) continue;
      matched_copy(it->into, t, tag);
      *it->met = true;
      recvs_.erase(it);
      return;
    }
    Tensor snapshot = Tensor::empty(t.shape(), t.dtype(), t.device());
    snapshot.copy_from(t);
    sends_.push_back({std::move(snapshot), tag});
  }

  // True when a pending send met the recv; else the recv is left pending.
  bool start_recv(const Tensor& into, int tag) {
    for (auto it = sends_.begin(); it != sends_.end(); ++it) {
      if (it->tag != tag) continue;
      Tensor dst = into;
      matched_copy(dst, it->data, tag);
      sends_.erase(it);
      return true;
    }
    recvs_.push_back({into, tag, std::make_shared<bool>(false)});
    return false;
  }

  void matched_copy(Tensor& dst, const Tensor& src, int tag) const {
    LATTICE_CHECK(dst.dtype() == src.dtype() && dst.numel() == src.numel(),
                  "send to itself in {} with tag {}: {} {} met a recv of {} {}", describe_group(name_, ranks_), tag,
                  dtype_name(src.dtype()), shape_str(src.shape()), dtype_name(dst.dtype()), shape_str(dst.shape()));
    dst.copy_from(src);
  }

  [[noreturn]] void no_peer(const char* op, int peer) const {
    LATTICE_FAIL("{} to rank {} in group '{}', which has only this rank", op, peer, name_);
  }

  std::string name_;
  std::vector<int> ranks_;
  std::deque<PendingSend> sends_;  // oldest first
  std::deque<PendingRecv> recvs_;  // oldest first
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator(const std::string& name, int world_rank) {
  return std::make_unique<SelfCommunicator>(name, world_rank);
}

}  // namespace lattice::comm
