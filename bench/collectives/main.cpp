// bench_collectives: nccl-tests-style rows for every collective, through
// MpiCommunicator ("lattice") and through raw MPI in the same run, so the
// cost of the abstraction is visible:
//   lattice  MpiCommunicator: non-blocking MPI call + Work::wait (poll with backoff)
//   mpi-nb   the same non-blocking MPI call + MPI_Wait (what lattice wraps)
//   mpi      the blocking MPI call (Open MPI's tuned algorithms)
// size is the bytes of the largest buffer, as nccl-tests counts it (all_gather:
// the gathered output; reduce_scatter: the input). algbw = size / time;
// busbw = algbw * factor: all_reduce 2(n-1)/n, all_gather and reduce_scatter
// (n-1)/n, broadcast and sendrecv 1. time is the slowest rank's mean.
// #wrong counts elements that differ from the exact small-integer answer.
//
// usage: mpirun -np N bench_collectives [--min-bytes B] [--max-bytes B] [--step F] [--ops a,b,...]
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"

namespace {

using namespace lattice;
using namespace lattice::comm;

enum class Op { all_reduce, all_gather, reduce_scatter, broadcast, sendrecv };
enum class Impl { lattice, mpi_nb, mpi };
constexpr Op kOps[] = {Op::all_reduce, Op::all_gather, Op::reduce_scatter, Op::broadcast, Op::sendrecv};
constexpr Impl kImpls[] = {Impl::lattice, Impl::mpi_nb, Impl::mpi};

const char* op_name(Op op) {
  constexpr const char* names[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv"};
  return names[int(op)];
}

double bus_factor(Op op, int n) {
  if (op == Op::all_reduce) return 2.0 * (n - 1) / n;
  if (op == Op::all_gather || op == Op::reduce_scatter) return double(n - 1) / n;
  return 1.0;
}

float pattern(int64_t i) { return float(i % 7 + 1); }

// One benchmark case: the buffers for one op at one size on this rank.
struct Case {
  Op op;
  int rank, n;
  int64_t total;  // elements of the "size" buffer
  int64_t block;  // elements each rank contributes (all_gather) or receives (reduce_scatter)
  Tensor in, out;

  Case(Op o, int64_t bytes, int r, int size) : op(o), rank(r), n(size) {
    total = bytes / 4;
    if (op == Op::all_gather || op == Op::reduce_scatter) total = total / n * n;
    block = (op == Op::all_gather || op == Op::reduce_scatter) ? total / n : total;
    const int64_t in_elems = op == Op::all_gather ? block : total;
    const int64_t out_elems = op == Op::reduce_scatter ? block : total;
    in = Tensor::zeros({in_elems}, DType::f32);
    out = op == Op::all_reduce || op == Op::broadcast ? in : Tensor::zeros({out_elems}, DType::f32);
  }

  void init() {
    float* p = in.data<float>();
    for (int64_t i = 0; i < in.numel(); ++i) {
      p[i] = op == Op::broadcast ? (rank == 0 ? pattern(i) : 0.f) : float(rank + 1) * pattern(i);
    }
  }

  int64_t wrong() const {
    const float* o = out.data<float>();
    const float tri = float(n * (n + 1) / 2);
    const int prev = (rank + n - 1) % n;
    int64_t bad = 0;
    for (int64_t i = 0; i < out.numel(); ++i) {
      float want = 0;
      switch (op) {
        case Op::all_reduce:
          want = tri * pattern(i);
          break;
        case Op::all_gather:
          want = float(i / block + 1) * pattern(i % block);
          break;
        case Op::reduce_scatter:
          want = tri * pattern(rank * block + i);
          break;
        case Op::broadcast:
          want = pattern(i);
          break;
        case Op::sendrecv:
          want = float(prev + 1) * pattern(i);
          break;
      }
      bad += o[i] != want;
    }
    return bad;
  }

  void run(Impl impl, MpiCommunicator& comm) {
    MPI_Comm c = comm.mpi_comm();
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    const int cnt = int(op == Op::all_gather || op == Op::reduce_scatter ? block : total);
    MPI_Request req[2];
    if (impl == Impl::lattice) {
      switch (op) {
        case Op::all_reduce:
          comm.all_reduce(in, {})->wait();
          break;
        case Op::all_gather:
          comm.all_gather(out, in, {})->wait();
          break;
        case Op::reduce_scatter:
          comm.reduce_scatter(out, in, {})->wait();
          break;
        case Op::broadcast:
          comm.broadcast(in, 0, {})->wait();
          break;
        case Op::sendrecv:
          comm.batch_send_recv({{P2POp::Kind::recv, out, prev}, {P2POp::Kind::send, in, next}}, 0)->wait();
          break;
      }
      return;
    }
    const bool nb = impl == Impl::mpi_nb;
    switch (op) {
      case Op::all_reduce:
        if (nb)
          MPI_Iallreduce(MPI_IN_PLACE, in.raw(), cnt, MPI_FLOAT, MPI_SUM, c, req);
        else
          MPI_Allreduce(MPI_IN_PLACE, in.raw(), cnt, MPI_FLOAT, MPI_SUM, c);
        break;
      case Op::all_gather:
        if (nb)
          MPI_Iallgather(in.raw(), cnt, MPI_FLOAT, out.raw(), cnt, MPI_FLOAT, c, req);
        else
          MPI_Allgather(in.raw(), cnt, MPI_FLOAT, out.raw(), cnt, MPI_FLOAT, c);
        break;
      case Op::reduce_scatter:
        if (nb)
          MPI_Ireduce_scatter_block(in.raw(), out.raw(), cnt, MPI_FLOAT, MPI_SUM, c, req);
        else
          MPI_Reduce_scatter_block(in.raw(), out.raw(), cnt, MPI_FLOAT, MPI_SUM, c);
        break;
      case Op::broadcast:
        if (nb)
          MPI_Ibcast(in.raw(), cnt, MPI_FLOAT, 0, c, req);
        else
          MPI_Bcast(in.raw(), cnt, MPI_FLOAT, 0, c);
        break;
      case Op::sendrecv:
        if (nb) {
          MPI_Irecv(out.raw(), cnt, MPI_FLOAT, prev, 0, c, &req[0]);
          MPI_Isend(in.raw(), cnt, MPI_FLOAT, next, 0, c, &req[1]);
          MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
          return;
        }
        MPI_Sendrecv(in.raw(), cnt, MPI_FLOAT, next, 0, out.raw(), cnt, MPI_FLOAT, prev, 0, c, MPI_STATUS_IGNORE);
        return;
    }
    if (nb) MPI_Wait(req, MPI_STATUS_IGNORE);
  }
};

struct Result {
  double us;
  int64_t wrong;
};

Result measure(Case& k, Impl impl, MpiCommunicator& comm, int iters) {
  k.init();
  for (int i = 0; i < 2; ++i) k.run(impl, comm);  // warm-up
  MPI_Barrier(comm.mpi_comm());
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) k.run(impl, comm);
  double t = (MPI_Wtime() - t0) / iters;
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm.mpi_comm());
  k.init();  // the timed runs summed in place; check one clean run
  k.run(impl, comm);
  long long bad = k.wrong();
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG_LONG, MPI_SUM, comm.mpi_comm());
  return {t * 1e6, bad};
}

int64_t parse_bytes(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return int64_t(v);
}

}  // namespace

int main(int argc, char** argv) {
  MpiRuntime mpi(&argc, &argv);
  int64_t min_bytes = 8, max_bytes = 64 << 20, step = 4;
  std::string ops = "all_reduce,all_gather,reduce_scatter,broadcast,sendrecv";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--min-bytes")
      min_bytes = parse_bytes(argv[i + 1]);
    else if (a == "--max-bytes")
      max_bytes = parse_bytes(argv[i + 1]);
    else if (a == "--step")
      step = std::atoll(argv[i + 1]);
    else if (a == "--ops")
      ops = argv[i + 1];
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
  for (Op op : kOps) {
    if (ops.find(op_name(op)) == std::string::npos) continue;
    std::vector<int64_t> sizes;
    for (int64_t b = min_bytes; b <= max_bytes; b = b * step + (b * step == b)) sizes.push_back(b);
    if (sizes.empty() || sizes.back() != max_bytes) sizes.push_back(max_bytes);
    for (int64_t bytes : sizes) {
      Case k(op, bytes, rank, n);
      if (k.total == 0 || k.block == 0) continue;
      const int64_t sz = k.total * 4;
      const int iters = sz <= (256 << 10) ? 50 : sz <= (8 << 20) ? 10 : 3;
      std::string row = "";
      for (Impl impl : kImpls) {
        Result r = measure(k, impl, *world, iters);
        total_wrong += r.wrong;
        double algbw = double(sz) / (r.us * 1e-6) / 1e9;
        char cell[96];
        std::snprintf(cell, sizeof(cell), " |%9.1f %7.3f %7.3f %5lld", r.us, algbw, algbw * bus_factor(op, n),
                      (long long)r.wrong);
        row += cell;
      }
      if (rank == 0)
        std::printf("  %-14s %10lld %9lld%s\n", op_name(op), (long long)sz, (long long)k.total, row.c_str());
      std::fflush(stdout);
    }
  }
  if (rank == 0 && total_wrong) std::printf("# %lld wrong elements\n", (long long)total_wrong);
  return total_wrong ? 1 : 0;
}
