// Roll call: which rank a timed-out collective is waiting for.
//
// A collective that times out knows only its group: "all_reduce on group dp
// (world ranks 0-63) timed out". Before it reports, the rank asks every other
// member what it is doing, on a communicator of its own (a duplicate of
// MPI_COMM_WORLD that MpiRuntime opens and closes), and waits a short grace
// period for the answers. Every rank answers from inside its waits
// (MpiWork::wait and test poll roll_call_answer), with what it is blocked in
// ("all_reduce on group dp", "recv from rank 1 (world rank 5) on group pp") or that it
// is running outside a wait. A rank that does not answer is stopped, dead or
// busy outside communication (a long compute, a hang in a kernel): the one to
// look at. The report reads
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
// Thread level: called only by the thread that makes Lattice's MPI calls
// (FUNNELED, comm/mpi_runtime.h). The MPI backend only: NCCL's waits neither
// answer nor ask (docs/gpu.md).
#pragma once

#include <string>
#include <vector>

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
// min(2 s, timeout_s), at least 0.1 s.
double roll_call_grace_s(double timeout_s);

}  // namespace lattice::comm
