// The roll call (comm/roll_call.h) as a table of function pointers, for the
// libraries opened at run time: liblattice_nccl.so (NcclWork::wait,
// NcclCommunicator::before_device_wait) and liblattice_cuda.so (the backend's
// host waits for its compute stream, which an NCCL transfer can stall).
//
// Why a table: the roll call's state (the duplicate of MPI_COMM_WORLD that
// MpiRuntime opens, what this rank waits in) lives in roll_call.cpp, linked
// into the lattice binary. A library that compiled roll_call.cpp in would
// hold a second copy, never opened, and would neither answer nor ask. So the
// binary hands each library its table, roll_call_hooks() (roll_call.h): the
// NCCL loader passes it to lattice_nccl_communicator_create (each
// communicator keeps it, and split passes it on), and DeviceGroups to
// CudaBackend::set_roll_call. The library calls the binary's functions
// through it, so both answer and ask from the one roll call.
//
// Null hooks mean no roll call: the waits poll as before and a timeout's
// message is the one without the roll call's part (a communicator made
// without them, the tests; roll_call.h's own fallback covers a process
// whose MpiRuntime opened none).
//
// Thread level: as roll_call.h, only the thread that makes Lattice's MPI
// calls (FUNNELED). The NCCL and backend waits run there: the training loop
// issues every collective, waits for it and copies to the host on that one
// thread (OpenMP threads run CPU kernels only).
//
// No MPI here: roll_call_hooks.cpp is compiled into lattice_comm and into
// both libraries, as device_placement.cpp is.
#pragma once

#include <string>
#include <vector>

namespace lattice::comm {

struct RollCallHooks {
  // Sets what this rank waits in ("" = not in a wait) and returns what it was.
  std::string (*set_waiting_in)(std::string what);
  // roll_call_answer: answers the queries that have arrived.
  void (*answer)();
  // roll_call: asks world_ranks, then the rest of the world; "" when no roll call is open.
  std::string (*roll_call)(const std::vector<int>& world_ranks, double grace_s);
};

// What this rank waits in, for the answers, while the object lives (WaitingIn
// through `hooks`); nothing when hooks is null.
class HookedWaitingIn {
 public:
  HookedWaitingIn(const RollCallHooks* hooks, std::string what);
  ~HookedWaitingIn();
  HookedWaitingIn(const HookedWaitingIn&) = delete;
  HookedWaitingIn& operator=(const HookedWaitingIn&) = delete;

 private:
  const RollCallHooks* hooks_;
  std::string previous_;
};

// Answers the roll-call queries that have arrived; nothing when hooks is null.
void hooked_answer(const RollCallHooks* hooks);

// The roll call's part of the message of a wait that timed out after
// timeout_s: " — roll call (2 s): ..." after asking world_ranks for
// roll_call_grace_s(timeout_s), as MpiWork's timeouts end; "" when hooks is
// null or the roll call heard nothing (none open, no peers).
std::string hooked_roll_call(const RollCallHooks* hooks, const std::vector<int>& world_ranks, double timeout_s);

}  // namespace lattice::comm
