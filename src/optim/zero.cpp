#include "optim/zero.h"

#include <algorithm>

#include "core/ops.h"
#include "optim/grad_clip.h"

namespace lattice::optim {

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
  if (dp.size() > 1) staging_ = Tensor::zeros({size_}, params.dtype(), device);
  // The fp32-read entries' ranges, merged where adjacent, cut at the shard edges.
  std::vector<Range> fp32;
  for (const ParamEntry& e : params.entries()) {
    if (e.spec.matmul_weight || e.numel == 0) continue;
    if (!fp32.empty() && fp32.back().end == e.offset)
      fp32.back().end += e.numel;
    else
      fp32.push_back({e.offset, e.offset + e.numel});
  }
  // Cut at the shard edges: per rank, long pieces broadcast in place, short ones packed.
  fp32_counts_.assign(size_t(dp.size()), 0);
  in_place_.resize(size_t(dp.size()));
  packed_.resize(size_t(dp.size()));
  packed_offsets_.assign(size_t(dp.size()) + 1, 0);
  for (int r = 0; r < dp.size(); ++r) {
    const int64_t lo = int64_t(r) * size_, hi = lo + size_;
    int64_t packed = 0;
    for (const Range& f : fp32) {
      const Range g{std::max(lo, f.begin), std::min(hi, f.end)};
      if (g.begin >= g.end) continue;
      fp32_counts_[size_t(r)] += g.end - g.begin;
      if (g.end - g.begin >= in_place_min) {
        in_place_[size_t(r)].push_back(g);
      } else {
        packed_[size_t(r)].push_back(g);
        packed += g.end - g.begin;
      }
    }
    packed_offsets_[size_t(r) + 1] = packed_offsets_[size_t(r)] + packed;
  }
}

int64_t ZeroOptimizer::in_place_pieces() const {
  int64_t n = 0;
  for (const auto& r : in_place_) n += int64_t(r.size());
  return n;
}

int64_t ZeroOptimizer::packed_pieces() const {
  int64_t n = 0;
  for (const auto& r : packed_) n += int64_t(r.size());
  return n;
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
  if (dp_.size() > 1 && half_gather_ && params.has_shadow()) {
    params.mark_written();  // the shard's update
    gather_half(params);
    return;
  }
  if (dp_.size() > 1) {
    Tensor& all = params.padded_values();
    dp_.all_gather(all, all.view(begin_, {size_}))->wait();  // in place: this rank's block is its shard
  }
  params.mark_written();  // the shard's update and the gathered values
  params.mark_values_complete();
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
  if (packed_offsets_.back() > 0 && !packed_staging_.defined())
    packed_staging_ = Tensor::zeros({packed_offsets_.back()}, values.dtype(), values.device());
  auto each_packed = [&](int r, auto&& f) {  // f(flat range, its place in rank r's block)
    int64_t at = packed_offsets_[size_t(r)];
    for (const Range& g : packed_[size_t(r)]) {
      f(values.view(g.begin, {g.end - g.begin}), packed_staging_.view(at, {g.end - g.begin}));
      at += g.end - g.begin;
    }
  };
  each_packed(dp_.rank(), [](const Tensor& v, Tensor s) { s.copy_from(v); });
  for (int r = 0; r < dp_.size(); ++r) {
    const int64_t n = packed_offsets_[size_t(r) + 1] - packed_offsets_[size_t(r)];
    if (n > 0) {
      Tensor block = packed_staging_.view(packed_offsets_[size_t(r)], {n});
      works.push_back(dp_.broadcast(block, r));
    }
    for (const Range& g : in_place_[size_t(r)]) {
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
  if (!params.values_partial()) return;
  Tensor& all = params.padded_values();
  dp_.all_gather(all, all.view(begin_, {size_}))->wait();
  params.mark_values_complete();  // the shadow already is their rounding
}

std::vector<std::pair<std::string, Tensor*>> ZeroOptimizer::state() {
  if (v_.defined()) return {{"exp_avg", &m_}, {"exp_avg_sq", &v_}};
  return {{"momentum_buffer", &m_}};
}

}  // namespace lattice::optim
