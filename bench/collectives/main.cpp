// bench_collectives: nccl-tests-style rows for every collective, through
// MpiCommunicator ("lattice") and through raw MPI in the same run, so the
// cost of the abstraction is visible:
//   lattice  MpiCommunicator: non-blocking MPI call + Work::wait (poll with backoff)
//   mpi-nb   the same non-blocking MPI call + MPI_Wait (what lattice wraps)
//   mpi      the blocking MPI call (Open MPI's tuned algorithms)
// size, algbw and busbw follow nccl-tests (collectives/collective_case.h);
// time is the slowest rank's mean. #bad counts elements that differ from the
// exact small-integer answer.
//
// usage: mpirun -np N bench_collectives [--min-bytes B] [--max-bytes B] [--step F] [--ops a,b,...] [--iters N]
#include <mpi.h>

#include <cstdio>
#include <optional>
#include <string>

#include "collectives/collective_case.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"

namespace {

using namespace lattice;
using namespace lattice::comm;
using bench::Collective;
using bench::CollectiveCase;

enum class Impl { lattice, mpi_nb, mpi };
constexpr Impl kImpls[] = {Impl::lattice, Impl::mpi_nb, Impl::mpi};

// The case through raw MPI: non-blocking + MPI_Wait, or the blocking call.
void run_mpi(CollectiveCase& k, bool nb, MpiCommunicator& comm) {
  MPI_Comm c = comm.mpi_comm();
  const int next = (k.rank + 1) % k.n, prev = (k.rank + k.n - 1) % k.n;
  const int cnt =
      int(k.op == Collective::all_gather || k.op == Collective::reduce_scatter ? k.shape.block : k.shape.total);
  void *in = k.in.raw(), *out = k.out.raw();
  MPI_Request req[2];
  switch (k.op) {
    case Collective::all_reduce:
      if (nb)
        MPI_Iallreduce(MPI_IN_PLACE, in, cnt, MPI_FLOAT, MPI_SUM, c, req);
      else
        MPI_Allreduce(MPI_IN_PLACE, in, cnt, MPI_FLOAT, MPI_SUM, c);
      break;
    case Collective::all_gather:
      if (nb)
        MPI_Iallgather(in, cnt, MPI_FLOAT, out, cnt, MPI_FLOAT, c, req);
      else
        MPI_Allgather(in, cnt, MPI_FLOAT, out, cnt, MPI_FLOAT, c);
      break;
    case Collective::reduce_scatter:
      if (nb)
        MPI_Ireduce_scatter_block(in, out, cnt, MPI_FLOAT, MPI_SUM, c, req);
      else
        MPI_Reduce_scatter_block(in, out, cnt, MPI_FLOAT, MPI_SUM, c);
      break;
    case Collective::broadcast:
      if (nb)
        MPI_Ibcast(in, cnt, MPI_FLOAT, 0, c, req);
      else
        MPI_Bcast(in, cnt, MPI_FLOAT, 0, c);
      break;
    case Collective::sendrecv:
      if (nb) {
        MPI_Irecv(out, cnt, MPI_FLOAT, prev, 0, c, &req[0]);
        MPI_Isend(in, cnt, MPI_FLOAT, next, 0, c, &req[1]);
        MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
        return;
      }
      MPI_Sendrecv(in, cnt, MPI_FLOAT, next, 0, out, cnt, MPI_FLOAT, prev, 0, c, MPI_STATUS_IGNORE);
      return;
  }
  if (nb) MPI_Wait(req, MPI_STATUS_IGNORE);
}

void run(CollectiveCase& k, Impl impl, MpiCommunicator& comm) {
  if (impl == Impl::lattice)
    k.start(comm)->wait();
  else
    run_mpi(k, impl == Impl::mpi_nb, comm);
}

struct Result {
  double us;
  int64_t wrong;
};

Result measure(CollectiveCase& k, Impl impl, MpiCommunicator& comm, int iters) {
  k.init();
  for (int i = 0; i < 2; ++i) run(k, impl, comm);  // warm-up
  MPI_Barrier(comm.mpi_comm());
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) run(k, impl, comm);
  double t = (MPI_Wtime() - t0) / iters;
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm.mpi_comm());
  k.init();  // the timed runs summed in place; check one clean run
  run(k, impl, comm);
  long long bad = k.wrong();
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG_LONG, MPI_SUM, comm.mpi_comm());
  return {t * 1e6, bad};
}

}  // namespace

int main(int argc, char** argv) {
  MpiRuntime mpi(&argc, &argv);
  bench::SweepOptions o;
  if (std::optional<std::string> bad = bench::parse_sweep_options(argc, argv, o)) {
    if (mpi.world_rank() == 0) std::fprintf(stderr, "bench_collectives: %s\n", bad->c_str());
    return 2;
  }
  auto world = make_world_communicator(600);
  const int n = world->size(), rank = world->rank();
  if (rank == 0) {
    std::printf("# bench_collectives: %d ranks, f32, sum; time = slowest rank's mean (us), bw in GB/s\n", n);
    std::printf("# %-14s %10s %9s |%9s %7s %7s %5s |%9s %7s %7s %5s |%9s %7s %7s %5s\n", "collective", "size(B)",
                "count", "lattice", "algbw", "busbw", "#bad", "mpi-nb", "algbw", "busbw", "#bad", "mpi", "algbw",
                "busbw", "#bad");
  }
  int64_t total_wrong = 0;
  for (Collective op : o.ops) {
    for (int64_t bytes : bench::size_sweep(o.min_bytes, o.max_bytes, o.factor)) {
      CollectiveCase k(op, bytes, rank, n);
      if (k.empty()) continue;
      const int64_t sz = k.shape.bytes();
      const int iters = o.iters > 0 ? o.iters : sz <= (256 << 10) ? 50 : sz <= (8 << 20) ? 10 : 3;
      std::string row = "";
      for (Impl impl : kImpls) {
        Result r = measure(k, impl, *world, iters);
        total_wrong += r.wrong;
        const bench::Bandwidth bw = bench::bandwidth(op, n, sz, r.us * 1e-6);
        char cell[96];
        std::snprintf(cell, sizeof(cell), " |%9.1f %7.3f %7.3f %5lld", r.us, bw.algbw, bw.busbw, (long long)r.wrong);
        row += cell;
      }
      if (rank == 0)
        std::printf("  %-14s %10lld %9lld%s\n", bench::collective_name(op), (long long)sz, (long long)k.shape.total,
                    row.c_str());
      std::fflush(stdout);
    }
  }
  if (rank == 0 && total_wrong) std::printf("# %lld wrong elements\n", (long long)total_wrong);
  return total_wrong ? 1 : 0;
}
