// GradBuckets: the data-parallel gradient all-reduce in buckets, started while
// backward is still running (PyTorch DDP's idea, on the flat gradient buffer).
//
// The buffer's non-tied entries are cut, from its end (the last layers, which
// backward finishes first) towards its start, into contiguous buckets of about
// `bucket_mb` MiB; a bucket never crosses a tied entry, whose gradient is
// first summed over the tie group after the schedule and then over dp
// (HybridParallelPlugin does that part). During the last microbatch's backward
// of each model chunk, the model reports each layer whose gradients are final
// (LanguageModel::on_grads_ready) and layer_ready() starts every bucket that
// layer completes as a non-blocking all-reduce. MPI progresses only inside MPI
// calls, so layer_ready() tests the open buckets, and from the first bucket's
// start until finish() the buckets hold the job's MPI progress thread, when
// it runs (comm::mpi_progress(): opt-in, LATTICE_MPI_PROGRESS_US) and the dp
// group progresses only inside calls. finish() starts whatever is left
// (nothing, when every layer reported), waits, and releases the thread, which
// then sleeps until the next step's first bucket.
//
// Every dp rank of a stage runs the same chunks and schedule, so buckets start
// in the same order on each (the MPI ordering rule for collectives on a group).
// Summation is per element, so the result equals one big all-reduce up to the
// reduction order MPI picks for a message size.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "comm/mpi_runtime.h"
#include "core/param.h"

namespace lattice {

class GradBuckets {
 public:
  GradBuckets(FlatParams& params, comm::Group& dp, double bucket_mb);
  ~GradBuckets();
  GradBuckets(const GradBuckets&) = delete;
  GradBuckets& operator=(const GradBuckets&) = delete;

  void begin_step();            // every bucket back to "waiting for its layers"
  void layer_ready(int layer);  // the gradients of `layer` (a ParamSpec layer) are final
  void finish();                // starts the remaining buckets and waits for all

  struct Bucket {
    int64_t begin = 0, end = 0;  // element range of the flat gradient buffer
    int entries = 0;             // entries in it
    int pending = 0;             // entries whose layer has not reported this step
    comm::WorkPtr work;          // open all-reduce, null before start and after completion
    bool started = false;
  };
  const std::vector<Bucket>& buckets() const { return buckets_; }
  int64_t started_early() const { return started_early_; }  // buckets of the last step started before finish()

 private:
  void start(Bucket& b);
  void poll();

  FlatParams& params_;
  comm::Group& dp_;
  std::vector<Bucket> buckets_;                    // in start order for a whole-model backward
  std::vector<std::pair<int, int>> layer_bucket_;  // (layer, bucket) per bucketed entry, sorted by layer
  std::vector<int> reported_;                      // layers reported this step
  int64_t started_early_ = 0;
  comm::MpiProgress* progress_ = nullptr;  // the job's progress thread, when it runs and dp_ needs it
  bool holding_ = false;                   // progress_ held: a bucket of this step is open
};

}  // namespace lattice
