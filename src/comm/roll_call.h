// Roll call: which rank a timed-out collective is waiting for.
//
// A collective that times out knows only its group: "all_reduce on group dp
// (world ranks 0-63) timed out". Before it reports, the rank asks every other
// member what it is doing, on a communicator of its own (a duplicate of
// MPI_COMM_WORLD that MpiRuntime opens and closes), and waits a short grace
// period for the answers. Every rank answers from inside its waits
// (MpiWork::wait and test poll roll_call_answer; the NCCL and CUDA backend
// waits too, below), with what it is blocked in ("all_reduce on group dp",
// "recv from rank 1 (world rank 5) on group pp", "all_reduce on group dp
// (NCCL)") or that it is running outside a wait. A rank that does not answer
// is stopped, dead or busy outside communication (a long compute, a hang in a
// kernel): the one to look at. The report reads
//
//   roll call (2 s): no answer from world rank 3 (stopped, or busy outside
//   communication); world ranks 1,2: waiting in all_reduce on group dp
//
// When every rank asked answers (each waits on someone else: a dp peer in
// its tp all_reduce with a stopped partner, a pipeline peer), the rest of the
// world is asked too, and the report goes on "; the other ranks: no answer
// from world rank 3 (...); world rank 1: waiting in ...".
//
// Messages: a query is 8 bytes (the asker's nonce, so a late answer to an
// earlier roll call is told apart and dropped); an answer is the nonce and the
// text. Errors on the roll-call communicator are ignored (MPI_ERRORS_RETURN):
// it runs on the way to an error report and must not replace it.
//
// GPU jobs: NCCL's waits (NcclWork::test and wait,
// NcclCommunicator::before_device_wait) and the CUDA backend's host waits for
// its compute stream (which a device-waited transfer can stall) answer and
// ask too, from their shared libraries, through the table roll_call_hooks()
// hands them (comm/roll_call_hooks.h), and append the same report to their
// timeout messages. Those libraries never call the functions below directly:
// the state is the lattice binary's, and a copy linked into a library would
// never be opened (their link, -Wl,--no-undefined without lattice_comm,
// refuses such a call). Built, never run on a GPU (docs/gpu.md).
//
// Thread level: called only by the thread that makes Lattice's MPI calls
// (FUNNELED, comm/mpi_runtime.h).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "comm/roll_call_hooks.h"

namespace lattice::comm {

// MpiRuntime's constructor (collective over MPI_COMM_WORLD) and destructor.
void roll_call_open();
void roll_call_close();

// What this rank is blocked in, for the answers, while the object lives.
class WaitingIn {
 public:
  explicit WaitingIn(std::string what);
  ~WaitingIn();
  WaitingIn(const WaitingIn&) = delete;
  WaitingIn& operator=(const WaitingIn&) = delete;

 private:
  std::string previous_;
};

// Answers the queries that have arrived, at most every 10 ms (a cheap clock
// read otherwise). No-op without an open roll call.
void roll_call_answer();

// Asks `world_ranks` (this rank is skipped) what they are doing and waits up
// to grace_s for the answers, answering others meanwhile; when all of them
// answer, asks the other ranks of the world the same way (up to grace_s
// more). Returns the report above; "" without an open roll call or without
// peers.
std::string roll_call(const std::vector<int>& world_ranks, double grace_s);

// The grace period for a collective that timed out after timeout_s:
// min(2 s, timeout_s), at least 0.1 s. Inline, as roll_call_tail: the
// libraries' roll_call_hooks.cpp uses both.
inline double roll_call_grace_s(double timeout_s) { return std::clamp(timeout_s, 0.1, 2.0); }

// What a timeout message ends with: " — " and roll_call's report, or "" when
// it heard nothing.
inline std::string roll_call_tail(const std::string& heard) { return heard.empty() ? "" : " — " + heard; }

// These functions as the table the shared libraries call (roll_call_hooks.h).
const RollCallHooks& roll_call_hooks();

}  // namespace lattice::comm
