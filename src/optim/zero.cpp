#include "optim/zero.h"

#include <algorithm>

#include "core/ops.h"
#include "optim/grad_clip.h"

namespace lattice::optim {

ZeroOptimizer::ZeroOptimizer(const OptimizerOptions& opts, const FlatParams& params, comm::Group& dp)
    : o_(opts), dp_(dp) {
  LATTICE_CHECK(o_.name == "adamw" || o_.name == "sgd",
                "optimizer.name: unknown optimizer '{}' (expected adamw or sgd)", o_.name);
  const int64_t padded = params.padded_numel();
  LATTICE_CHECK(padded % dp.size() == 0,
                "parallel.zero: {} parameters (padded to {}) do not split into {} equal dp shards; build the "
                "FlatParams with pad_multiple = dp",
                params.numel(), padded, dp.size());
  size_ = padded / dp.size();
  begin_ = int64_t(dp.rank()) * size_;
  const Device device = params.values().device();
  m_ = Tensor::zeros({size_}, params.dtype(), device);
  if (o_.name == "adamw") v_ = Tensor::zeros({size_}, params.dtype(), device);
  if (dp.size() > 1) staging_ = Tensor::zeros({size_}, params.dtype(), device);
}

void ZeroOptimizer::reduce_scatter_grads(FlatParams& params) {
  if (dp_.size() == 1) return;  // the local gradients are the sum
  dp_.reduce_scatter(staging_, params.padded_grads())->wait();
  params.padded_grads().view(begin_, {size_}).copy_from(staging_);
}

double ZeroOptimizer::shard_grad_squares(const FlatParams& params, int tp_size) const {
  return weighted_grad_squares(params, tp_size, begin_, begin_ + size_);
}

void ZeroOptimizer::step(FlatParams& params, double lr, int64_t step, float grad_scale) {
  const int64_t end = begin_ + size_;
  for (const ParamEntry& e : params.entries()) {
    const int64_t lo = std::max(begin_, e.offset), hi = std::min(end, e.offset + e.numel);
    if (lo >= hi) continue;
    const Shape piece{hi - lo};
    Tensor value = params.values().view(lo, piece), grad = params.grads().view(lo, piece);
    Tensor m = m_.view(lo - begin_, piece);
    const float wd = e.spec.weight_decay ? float(o_.weight_decay) : 0.0f;
    if (v_.defined()) {
      Tensor v = v_.view(lo - begin_, piece);
      ops::adamw_update(value, grad, m, v,
                        {float(lr), float(o_.beta1), float(o_.beta2), float(o_.eps), wd, step, grad_scale});
    } else {
      ops::sgd_update(value, grad, m, float(lr), float(o_.momentum), wd, grad_scale);
    }
  }
  if (dp_.size() > 1) {
    Tensor& all = params.padded_values();
    dp_.all_gather(all, all.view(begin_, {size_}))->wait();  // in place: this rank's block is its shard
  }
  params.mark_written();  // the shard's update and the gathered values
}

std::vector<std::pair<std::string, Tensor*>> ZeroOptimizer::state() {
  if (v_.defined()) return {{"exp_avg", &m_}, {"exp_avg_sq", &v_}};
  return {{"momentum_buffer", &m_}};
}

}  // namespace lattice::optim
