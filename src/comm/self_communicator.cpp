#include "comm/self_communicator.h"

#include "core/error.h"

namespace lattice::comm {

namespace {

struct Done final : Work {
  void wait() override {}
  bool test() override { return true; }
};

class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(std::string name) : name_(std::move(name)) {}
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
  WorkPtr send(const Tensor&, int peer, const P2POptions&) override { no_peer("send", peer); }
  WorkPtr recv(Tensor&, int peer, const P2POptions&) override { no_peer("recv", peer); }
  WorkPtr batch_send_recv(const std::vector<P2POp>& ops, double) override {
    if (!ops.empty()) no_peer("batch_send_recv", ops.front().peer);
    return done();
  }
  WorkPtr barrier(const CollectiveOptions&) override { return done(); }
  std::unique_ptr<Communicator> split(int, int, const std::string& name) override {
    return std::make_unique<SelfCommunicator>(name);
  }

 private:
  static WorkPtr done() { return std::make_unique<Done>(); }
  static WorkPtr copy(Tensor& out, const Tensor& in) {
    out.copy_from(in);
    return done();
  }
  [[noreturn]] void no_peer(const char* op, int peer) const {
    LATTICE_FAIL("{} to rank {} in group '{}', which has only this rank", op, peer, name_);
  }
  std::string name_;
  std::vector<int> ranks_{0};
};

}  // namespace

std::unique_ptr<Communicator> make_self_communicator(const std::string& name) {
  return std::make_unique<SelfCommunicator>(name);
}

}  // namespace lattice::comm
