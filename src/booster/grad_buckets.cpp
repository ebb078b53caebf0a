#include "booster/grad_buckets.h"

#include <algorithm>

#include "core/error.h"

namespace lattice {

GradBuckets::GradBuckets(FlatParams& params, comm::Group& dp, double bucket_mb)
    : params_(params), dp_(dp), progress_(dp.comm().progresses_in_calls() ? comm::mpi_progress() : nullptr) {
  const int64_t limit = std::max<int64_t>(1, int64_t(bucket_mb * 1024 * 1024) / dtype_size(params.dtype()));
  const std::vector<ParamEntry>& entries = params.entries();
  std::vector<size_t> order(entries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return entries[a].offset > entries[b].offset; });
  bool open = false;  // may the next entry (towards the buffer's start) join the last bucket?
  for (size_t i : order) {
    const ParamEntry& e = entries[i];
    if (!e.spec.tie_group.empty()) {  // reduced over the tie group first: never in a bucket
      open = false;
      continue;
    }
    if (e.numel == 0) continue;
    if (!open || buckets_.back().end - e.offset > limit) {
      buckets_.emplace_back();
      buckets_.back().end = e.offset + e.numel;
    }
    Bucket& b = buckets_.back();
    b.begin = e.offset;  // the range covers alignment gaps too: their gradients are zero everywhere
    ++b.entries;
    layer_bucket_.push_back({e.spec.layer, int(buckets_.size() - 1)});
    open = true;
  }
  std::sort(layer_bucket_.begin(), layer_bucket_.end());
  begin_step();
}

GradBuckets::~GradBuckets() {
  if (holding_) progress_->release();  // a step that ended in an error
}

void GradBuckets::begin_step() {
  for (Bucket& b : buckets_) {
    LATTICE_CHECK(b.work == nullptr, "grad buckets: a bucket's all-reduce is still open at the start of a step");
    b.pending = b.entries;
    b.started = false;
  }
  started_early_ = 0;
  reported_.clear();
}

void GradBuckets::start(Bucket& b) {
  if (progress_ && !holding_) {
    progress_->hold();
    holding_ = true;
  }
  Tensor view = params_.grads().view(b.begin, {b.end - b.begin});
  b.work = dp_.all_reduce(view);
  b.started = true;
}

void GradBuckets::poll() {
  for (Bucket& b : buckets_)
    if (b.work && b.work->test()) b.work.reset();
}

void GradBuckets::layer_ready(int layer) {
  LATTICE_CHECK(std::find(reported_.begin(), reported_.end(), layer) == reported_.end(),
                "grad buckets: layer {} reported twice in one step", layer);
  reported_.push_back(layer);
  auto it = std::lower_bound(layer_bucket_.begin(), layer_bucket_.end(), std::pair<int, int>{layer, -1});
  for (; it != layer_bucket_.end() && it->first == layer; ++it) {
    Bucket& b = buckets_[size_t(it->second)];
    if (--b.pending == 0) {
      start(b);
      ++started_early_;
    }
  }
  poll();
}

void GradBuckets::finish() {
  for (Bucket& b : buckets_)
    if (!b.started) start(b);
  for (Bucket& b : buckets_)
    if (b.work) {
      b.work->wait();
      b.work.reset();
    }
  if (holding_) {
    progress_->release();
    holding_ = false;
  }
}

}  // namespace lattice
