#include "core/param.h"

#include <cmath>

#include "core/ops.h"
#include "core/rng.h"

namespace lattice {

std::string_view placement_name(Placement p) {
  switch (p) {
    case Placement::replicated:
      return "replicated";
    case Placement::column:
      return "column";
    case Placement::row:
      return "row";
    case Placement::vocab:
      return "vocab";
  }
  return "?";
}

int64_t padded_vocab(int64_t vocab, const TpShard& shard) {
  int64_t m = int64_t(shard.size) * std::max<int64_t>(1, shard.vocab_multiple);
  return (vocab + m - 1) / m * m;
}

int tp_replicas(const ParamSpec& s, const TpShard& shard) {
  if (s.placement != Placement::column || s.max_shards <= 0 || shard.size <= s.max_shards) return 1;
  return shard.size / s.max_shards;
}

void check_shardable(const ParamSpec& s, const TpShard& shard) {
  const int tp = shard.size;
  LATTICE_CHECK(tp >= 1 && shard.rank >= 0 && shard.rank < tp, "tp shard rank {} of {}", shard.rank, tp);
  if (tp == 1 || s.placement == Placement::replicated || s.placement == Placement::vocab) return;
  LATTICE_CHECK(!s.shape.empty(), "parameter '{}' is a scalar and cannot be split", s.name);
  if (s.placement == Placement::column) {
    int64_t rows = s.shape[0];
    LATTICE_CHECK(s.max_shards <= 0 || s.max_shards % tp == 0 || tp % s.max_shards == 0,
                  "parameter '{}' {}: tp = {} is neither a divisor nor a multiple of its {} blocks", s.name,
                  shape_str(s.shape), tp, s.max_shards);
    const int splits = tp / tp_replicas(s, shard);
    LATTICE_CHECK(s.n_fused >= 1 && rows % s.n_fused == 0 && (rows / s.n_fused) % splits == 0,
                  "parameter '{}' {}: {} fused part(s) of {} rows cannot be split over tp = {}", s.name,
                  shape_str(s.shape), s.n_fused, rows / std::max(1, s.n_fused), tp);
  } else {
    LATTICE_CHECK(s.shape.back() % tp == 0, "parameter '{}' {}: last dim {} cannot be split over tp = {}", s.name,
                  shape_str(s.shape), s.shape.back(), tp);
  }
}

Shape local_shape(const ParamSpec& s, const TpShard& shard) {
  check_shardable(s, shard);
  Shape out = s.shape;
  switch (s.placement) {
    case Placement::replicated:
      break;
    case Placement::column:
      out[0] /= shard.size / tp_replicas(s, shard);
      break;
    case Placement::row:
      out.back() /= shard.size;
      break;
    case Placement::vocab:
      out[0] = padded_vocab(s.shape[0], shard) / shard.size;
      break;
  }
  return out;
}

int64_t local_to_logical(const ParamSpec& s, const TpShard& shard, int64_t local) {
  if (s.placement == Placement::replicated || (shard.size == 1 && s.placement != Placement::vocab)) return local;
  const Shape ls = local_shape(s, shard);
  const int64_t inner = ls[0] ? shape_numel(ls) / ls[0] : 0;  // elements per dim-0 row (local)
  switch (s.placement) {
    case Placement::column: {
      const int reps = tp_replicas(s, shard);
      const int64_t part = s.shape[0] / s.n_fused, local_part = part / (shard.size / reps);
      const int64_t row = local / inner, f = row / local_part, r = row % local_part;
      return (f * part + (shard.rank / reps) * local_part + r) * inner + local % inner;
    }
    case Placement::row: {
      const int64_t cols = s.shape.back(), local_cols = cols / shard.size;
      return (local / local_cols) * cols + shard.rank * local_cols + local % local_cols;
    }
    case Placement::vocab: {
      const int64_t row = shard.rank * ls[0] + local / inner;
      return row < s.shape[0] ? row * inner + local % inner : -1;
    }
    case Placement::replicated:
      break;
  }
  return local;
}

std::vector<ParamEntry> lay_out_params(const std::vector<ParamSpec>& specs, const TpShard& shard) {
  std::vector<ParamEntry> entries;
  int64_t offset = 0;
  for (const ParamSpec& s : specs) {
    ParamEntry e{s, local_shape(s, shard), offset, 0};
    e.numel = shape_numel(e.local_shape);
    offset += e.numel;
    entries.push_back(std::move(e));
  }
  return entries;
}

FlatParams::FlatParams(const std::vector<ParamSpec>& specs, DType dtype, Device device, const TpShard& shard,
                       int64_t pad_multiple)
    : shard_(shard) {
  LATTICE_CHECK(pad_multiple >= 1, "FlatParams: pad_multiple must be at least 1, got {}", pad_multiple);
  for (ParamEntry& e : lay_out_params(specs, shard)) {
    LATTICE_CHECK(!has(e.spec.name), "parameter '{}' listed twice", e.spec.name);
    entries_.push_back(std::move(e));
  }
  const int64_t offset = entries_.empty() ? 0 : entries_.back().offset + entries_.back().numel;
  const int64_t padded = (offset + pad_multiple - 1) / pad_multiple * pad_multiple;
  padded_values_ = Tensor::zeros({padded}, dtype, device);
  padded_grads_ = Tensor::zeros({padded}, dtype, device);
  values_ = padded_values_.view(0, {offset});
  grads_ = padded_grads_.view(0, {offset});
}

bool FlatParams::has(const std::string& name) const {
  for (const ParamEntry& e : entries_)
    if (e.spec.name == name) return true;
  return false;
}

const ParamEntry& FlatParams::entry(const std::string& name) const {
  for (const ParamEntry& e : entries_)
    if (e.spec.name == name) return e;
  LATTICE_FAIL("no parameter named '{}'", name);
}

Tensor FlatParams::value(const std::string& name) const { return value(entry(name)); }
Tensor FlatParams::grad(const std::string& name) const { return grad(entry(name)); }

namespace {

// The initial value of logical element e of `spec` (see InitKind).
double init_value(const ParamSpec& s, const RngKey& key, int64_t e) {
  const double fan_out = s.shape.empty() ? 1.0 : double(s.shape.front());
  const double fan_in = s.shape.size() < 2 ? fan_out : double(s.shape.back());
  auto uniform = [&](double a) { return a * (2.0 * rng_uniform(key, 0, uint64_t(e)) - 1.0); };
  auto normal = [&](double std) { return std * rng_normal(key, 0, uint64_t(e)); };
  switch (s.init) {
    case InitKind::zeros:
      return 0.0;
    case InitKind::ones:
      return 1.0;
    case InitKind::normal:
    case InitKind::scaled_normal:
      return normal(s.init_std);
    case InitKind::uniform:
      return uniform(s.init_std);
    case InitKind::xavier_uniform:
      return uniform(std::sqrt(6.0 / (fan_in + fan_out)));
    case InitKind::xavier_normal:
      return normal(std::sqrt(2.0 / (fan_in + fan_out)));
    case InitKind::kaiming_uniform:
      return uniform(std::sqrt(3.0 / fan_in));
    case InitKind::kaiming_normal:
      return normal(std::sqrt(1.0 / fan_in));
  }
  return 0.0;
}

template <typename T>
void init_entry(T* p, const ParamEntry& e, const TpShard& shard, uint64_t seed) {
  const RngKey key = init_key(seed, e.spec.name);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < e.numel; ++i) {
    int64_t logical = local_to_logical(e.spec, shard, i);
    p[i] = logical < 0 ? T(0) : T(init_value(e.spec, key, logical));
  }
}

}  // namespace

void FlatParams::init(uint64_t seed) {
  Tensor host = values_.device().is_cpu() ? values_ : Tensor::empty(values_.shape(), values_.dtype());
  for (const ParamEntry& e : entries_) {
    if (host.dtype() == DType::f64)
      init_entry(host.data<double>() + e.offset, e, shard_, seed);
    else
      init_entry(host.data<float>() + e.offset, e, shard_, seed);
  }
  if (!values_.device().is_cpu()) values_.copy_from(host);
  mark_written();
  mark_values_complete();
}

const Tensor& ShadowView::get() const& {
  const ShadowVersions& v = *versions_;
  if (v.shadow != v.values) {
    const std::string made = v.shadow == ShadowVersions::kNever ? std::string("has never been rounded")
                                                                : fmt::format("was rounded at write {}", v.shadow);
    LATTICE_FAIL(
        "parameter '{}': its {} copy {} and the fp32 values are at write {}: something wrote the values "
        "(FlatParams::mark_written) and nothing refreshed the 16-bit copy before this read; call "
        "FlatParams::refresh_shadow() after the write (the plugin does after init, each optimizer step and a "
        "checkpoint load)",
        name_, dtype_name(view_.dtype()), made, v.values);
  }
  return view_;
}

void FlatParams::enable_shadow(DType half) {
  LATTICE_CHECK(half == DType::bf16 || half == DType::f16, "FlatParams: the shadow is bf16 or f16, not {}",
                dtype_name(half));
  LATTICE_CHECK(dtype() == DType::f32, "FlatParams: only f32 parameters have a 16-bit shadow, these are {}",
                dtype_name(dtype()));
  LATTICE_CHECK(!has_shadow(), "FlatParams: the shadow is already enabled ({})", dtype_name(shadow_.dtype()));
  shadow_ = Tensor::zeros({padded_numel()}, half, padded_values_.device());
  versions_->shadow = ShadowVersions::kNever;
}

void FlatParams::refresh_shadow() {
  if (!has_shadow() || shadow_current()) return;  // nothing written since the last rounding
  LATTICE_CHECK(!values_partial_,
                "FlatParams: the values were written at write {} while the fp32 matmul weights outside this rank's "
                "ZeRO-1 shard are stale (its 16-bit gather); gather them in fp32 first "
                "(ZeroOptimizer::gather_values), or write every value and call mark_values_complete()",
                versions_->values);
  ops::round_to_half(shadow_, padded_values_);
  versions_->shadow = versions_->values;
}

void FlatParams::mark_shadow_gathered() {
  LATTICE_CHECK(has_shadow(), "FlatParams: mark_shadow_gathered without a shadow (enable_shadow)");
  versions_->shadow = versions_->values;
  values_partial_ = true;
}

ShadowView FlatParams::shadow_view(const ParamEntry& e) const {
  return shadow_view(e.offset, e.local_shape, e.spec.name);
}

ShadowView FlatParams::shadow_view(int64_t offset, Shape shape, std::string what) const {
  LATTICE_CHECK(has_shadow(), "FlatParams: '{}' has no 16-bit view: the parameters have no shadow (enable_shadow)",
                what);
  return ShadowView(shadow_.view(offset, std::move(shape)), versions_, std::move(what));
}

}  // namespace lattice
