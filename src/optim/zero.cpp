#include "optim/zero.h"

#include <algorithm>

#include "core/ops.h"
#include "optim/grad_clip.h"

namespace lattice::optim {

HalfGatherPlan plan_half_gather(const std::vector<ParamEntry>& entries, int64_t shard, int dp, int64_t in_place_min) {
  using Range = HalfGatherPlan::Range;
  std::vector<Range> fp32;  // the fp32-read entries' ranges, merged where adjacent
  for (const ParamEntry& e : entries) {
    if (e.spec.matmul_weight || e.numel == 0) continue;
    if (!fp32.empty() && fp32.back().end == e.offset)
      fp32.back().end += e.numel;
    else
      fp32.push_back({e.offset, e.offset + e.numel});
  }
  HalfGatherPlan p;
  p.fp32_counts.assign(size_t(dp), 0);
  p.in_place.resize(size_t(dp));
  p.packed.resize(size_t(dp));
  p.packed_offsets.assign(size_t(dp) + 1, 0);
  for (int r = 0; r < dp; ++r) {
    const int64_t lo = int64_t(r) * shard, hi = lo + shard;
    int64_t packed = 0;
    for (const Range& f : fp32) {
      const Range g{std::max(lo, f.begin), std::min(hi, f.end)};
      if (g.begin >= g.end) continue;
      p.fp32_counts[size_t(r)] += g.end - g.begin;
      if (g.end - g.begin >= in_place_min) {
        p.in_place[size_t(r)].push_back(g);
      } else {
        p.packed[size_t(r)].push_back(g);
        packed += g.end - g.begin;
      }
    }
    p.packed_offsets[size_t(r) + 1] = p.packed_offsets[size_t(r)] + packed;
  }
  return p;
}

ZeroOptimizer::ZeroOptimizer(const OptimizerOptions& opts, const FlatParams& params, comm::Group& dp,
                             int64_t in_place_min)
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
  half_ = plan_half_gather(params.entries(), size_, dp.size(), in_place_min);
}

int64_t HalfGatherPlan::fp32_total() const {
  int64_t n = 0;
  for (int64_t c : fp32_counts) n += c;
  return n;
}

bool ZeroOptimizer::gathers_half(const FlatParams& params) const {
  return half_gather_ && params.has_shadow() && half_.saves_bytes(params.padded_numel());
}

int64_t ZeroOptimizer::gather_bytes(const FlatParams& params) const {
  const int64_t n = params.padded_numel();
  return gathers_half(params) ? half_.bytes(n) : n * int64_t(dtype_size(params.dtype()));
}

void ZeroOptimizer::reduce_scatter_grads(FlatParams& params) {
  if (dp_.size() == 1) return;  // the local gradients are the sum
  if (!staging_.defined()) staging_ = Tensor::zeros({size_}, params.dtype(), params.padded_grads().device());
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
  params.mark_written();  // the shard's update and what the gather brings
  if (dp_.size() > 1 && gathers_half(params)) return gather_half(params);
  gather_fp32(params);
}

void ZeroOptimizer::gather_fp32(FlatParams& params) {
  if (dp_.size() > 1) {
    Tensor& all = params.padded_values();
    dp_.all_gather(all, all.view(begin_, {size_}))->wait();  // in place: this rank's block is its shard
  }
  params.mark_values_complete();  // a shadow is then refreshed whole by the caller
}

void ZeroOptimizer::gather_half(FlatParams& params) {
  Tensor& values = params.padded_values();
  Tensor& shadow = params.padded_shadow();
  Tensor mine = shadow.view(begin_, {size_});
  ops::round_to_half(mine, values.view(begin_, {size_}));
  std::vector<comm::WorkPtr> works;
  works.push_back(dp_.all_gather(shadow, mine));  // in place, as the fp32 gather
  // The fp32-read entries: rank r's short pieces packed into its block of
  // packed_staging_, then per rank that block and its long pieces in place.
  if (half_.packed_offsets.back() > 0 && !packed_staging_.defined())
    packed_staging_ = Tensor::zeros({half_.packed_offsets.back()}, values.dtype(), values.device());
  auto each_packed = [&](int r, auto&& f) {  // f(flat range, its place in rank r's block)
    int64_t at = half_.packed_offsets[size_t(r)];
    for (const HalfGatherPlan::Range& g : half_.packed[size_t(r)]) {
      f(values.view(g.begin, {g.end - g.begin}), packed_staging_.view(at, {g.end - g.begin}));
      at += g.end - g.begin;
    }
  };
  each_packed(dp_.rank(), [](const Tensor& v, Tensor s) { s.copy_from(v); });
  for (int r = 0; r < dp_.size(); ++r) {
    const int64_t n = half_.packed_offsets[size_t(r) + 1] - half_.packed_offsets[size_t(r)];
    if (n > 0) {
      Tensor block = packed_staging_.view(half_.packed_offsets[size_t(r)], {n});
      works.push_back(dp_.broadcast(block, r));
    }
    for (const HalfGatherPlan::Range& g : half_.in_place[size_t(r)]) {
      Tensor piece = values.view(g.begin, {g.end - g.begin});
      works.push_back(dp_.broadcast(piece, r));
    }
  }
  for (comm::WorkPtr& w : works) w->wait();
  for (int r = 0; r < dp_.size(); ++r)
    if (r != dp_.rank()) each_packed(r, [](Tensor v, const Tensor& s) { v.copy_from(s); });
  params.mark_shadow_gathered();
}

void ZeroOptimizer::gather_values(FlatParams& params) {
  if (params.values_partial()) gather_fp32(params);  // the shadow already is their rounding
}

std::vector<std::pair<std::string, Tensor*>> ZeroOptimizer::state() {
  if (v_.defined()) return {{"exp_avg", &m_}, {"exp_avg_sq", &v_}};
  return {{"momentum_buffer", &m_}};
}

}  // namespace lattice::optim
