#include "comm/roll_call_hooks.h"

#include <utility>

#include "comm/roll_call.h"

namespace lattice::comm {

HookedWaitingIn::HookedWaitingIn(const RollCallHooks* hooks, std::string what) : hooks_(hooks) {
  if (hooks_) previous_ = hooks_->set_waiting_in(std::move(what));
}

HookedWaitingIn::~HookedWaitingIn() {
  if (hooks_) hooks_->set_waiting_in(std::move(previous_));
}

void hooked_answer(const RollCallHooks* hooks) {
  if (hooks) hooks->answer();
}

std::string hooked_roll_call(const RollCallHooks* hooks, const std::vector<int>& world_ranks, double timeout_s) {
  if (!hooks) return "";
  return roll_call_tail(hooks->roll_call(world_ranks, roll_call_grace_s(timeout_s)));
}

}  // namespace lattice::comm
