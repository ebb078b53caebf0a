// bench_nccl_busbw: nccl-tests-style rows for lattice's NCCL communicator
// (comm/nccl_communicator.h), one rank per GPU, f32 sum on device memory:
//
//   # collective      size(B)      count   time(us)   algbw   busbw  #bad
//     all_reduce      1048576     262144      ...
//
// size, algbw and busbw follow nccl-tests (collectives/collective_case.h:
// busbw = algbw * 2(n-1)/n for all_reduce, (n-1)/n for all_gather and
// reduce_scatter; GB/s = 1e9 bytes/s). time is the slowest rank's mean over
// --iters calls started back to back on the communicator's stream after 5
// warm-up calls, as nccl-tests times them. #bad counts wrong elements of one
// more call on exact small-integer data, summed over ranks.
//
// usage: mpirun -np <GPUs> bench_nccl_busbw [--min-bytes 1M] [--max-bytes 1G] [--step 2]
//                                           [--ops all_reduce,all_gather,reduce_scatter] [--iters 20]
// Exit status: 0, 1 (wrong elements or an error), 2 (bad argument), 77 when a
// rank sees no CUDA device: every such rank prints "no CUDA device: <reason>"
// and no row is printed.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "collectives/collective_case.h"
#include "comm/device_placement.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_runtime.h"
#include "comm/nccl_communicator.h"
#include "core/backend.h"
#include "core/error.h"
#include "core/timer.h"
#include "mpi_main.h"

namespace {

using namespace lattice;
using bench::Collective;
using bench::CollectiveCase;

constexpr int kNoDevice = 77;
constexpr int kWarmup = 5;

double over_ranks(comm::Communicator& world, double v, comm::ReduceOp op) {
  Tensor t = Tensor::from<double>({v}, {1});
  world.all_reduce(t, {.op = op})->wait();
  return t.data<double>()[0];
}

// The device make_nccl_communicator drives on this rank (comm/device_placement.h).
Device this_rank_device(const comm::MpiRuntime& mpi) {
  std::string why;
  const int count = cuda_backend().device_count(&why);
  return Device::cuda(comm::choose_cuda_device({.local_rank = mpi.local_rank(),
                                                .local_size = mpi.local_size(),
                                                .device_count = count,
                                                .cuda_visible_devices = std::getenv("CUDA_VISIBLE_DEVICES"),
                                                .host = host_name(),
                                                .why_none = why}));
}

// Mean seconds per call of `iters` calls started back to back, slowest rank.
double time_case(CollectiveCase& k, comm::Communicator& nccl, comm::Communicator& world, int iters) {
  k.init();
  for (int i = 0; i < kWarmup; ++i) k.start(nccl)->wait();
  world.barrier({})->wait();
  Timer timer;
  std::vector<comm::WorkPtr> works;
  for (int i = 0; i < iters; ++i) works.push_back(k.start(nccl));
  for (comm::WorkPtr& w : works) w->wait();
  return over_ranks(world, timer.seconds() / iters, comm::ReduceOp::max);
}

int run(int argc, char** argv, const comm::MpiRuntime& mpi) {
  bench::SweepOptions o;
  o.min_bytes = 1 << 20;
  o.max_bytes = int64_t(1) << 30;
  o.factor = 2;
  o.ops = {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter};
  o.iters = 20;
  const bool leader = mpi.world_rank() == 0;
  if (std::optional<std::string> bad = bench::parse_sweep_options(argc, argv, o)) {
    if (leader) std::fprintf(stderr, "bench_nccl_busbw: %s\n", bad->c_str());
    return 2;
  }
  auto world = comm::make_world_communicator(600);
  std::string why;
  const bool have_device = cuda_available(&why);
  if (!have_device)
    std::fprintf(stderr, "no CUDA device: rank %d on %s: %s\n", world->rank(), host_name().c_str(), why.c_str());
  if (over_ranks(*world, have_device ? 1 : 0, comm::ReduceOp::min) == 0) return kNoDevice;

  auto nccl = comm::make_nccl_communicator(*world, mpi.local_rank(), mpi.local_size());
  const Device dev = this_rank_device(mpi);
  const int n = nccl->size();
  if (leader) {
    std::printf(
        "# bench_nccl_busbw: %d ranks, one GPU each, f32 sum; time = slowest rank's mean of %d calls (us), "
        "bw in GB/s\n",
        n, o.iters);
    std::printf("# %-14s %11s %10s %10s %8s %8s %5s\n", "collective", "size(B)", "count", "time(us)", "algbw", "busbw",
                "#bad");
  }
  int64_t total_wrong = 0;
  for (Collective op : o.ops) {
    for (int64_t bytes : bench::size_sweep(o.min_bytes, o.max_bytes, o.factor)) {
      CollectiveCase k(op, bytes, nccl->rank(), n, dev);
      if (k.empty()) continue;
      const double s = time_case(k, *nccl, *world, o.iters);
      k.init();  // the timed calls summed in place; check one clean call
      k.start(*nccl)->wait();
      const int64_t bad = int64_t(over_ranks(*world, double(k.wrong()), comm::ReduceOp::sum));
      total_wrong += bad;
      const bench::Bandwidth bw = bench::bandwidth(op, n, k.shape.bytes(), s);
      if (leader)
        std::printf("  %-14s %11lld %10lld %10.1f %8.2f %8.2f %5lld\n", bench::collective_name(op),
                    (long long)k.shape.bytes(), (long long)k.shape.total, s * 1e6, bw.algbw, bw.busbw, (long long)bad);
      std::fflush(stdout);
    }
  }
  if (leader && total_wrong) std::printf("# %lld wrong elements\n", (long long)total_wrong);
  return total_wrong ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return lattice::bench::mpi_main("bench_nccl_busbw", argc, argv, run); }
