#include "core/param.h"

#include "core/rng.h"

namespace lattice {

std::string_view placement_name(Placement p) {
  switch (p) {
    case Placement::replicated: return "replicated";
    case Placement::column: return "column";
    case Placement::row: return "row";
    case Placement::vocab: return "vocab";
  }
  return "?";
}

FlatParams::FlatParams(const std::vector<ParamSpec>& specs, DType dtype, Device device) {
  int64_t offset = 0;
  for (const ParamSpec& s : specs) {
    LATTICE_CHECK(!has(s.name), "parameter '{}' listed twice", s.name);
    ParamEntry e{s, s.shape, offset, shape_numel(s.shape)};
    offset += e.numel;
    entries_.push_back(std::move(e));
  }
  values_ = Tensor::zeros({offset}, dtype, device);
  grads_ = Tensor::zeros({offset}, dtype, device);
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

template <typename T>
void init_entry(T* p, const ParamEntry& e, uint64_t seed) {
  switch (e.spec.init) {
    case InitKind::zeros:
      for (int64_t i = 0; i < e.numel; ++i) p[i] = T(0);
      return;
    case InitKind::ones:
      for (int64_t i = 0; i < e.numel; ++i) p[i] = T(1);
      return;
    case InitKind::normal: {
      RngKey key = init_key(seed, e.spec.name);
      float std = e.spec.init_std;
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < e.numel; ++i) p[i] = T(rng_normal(key, 0, uint64_t(i)) * std);
      return;
    }
  }
}

}  // namespace

void FlatParams::init(uint64_t seed) {
  Tensor host = values_.device().is_cpu() ? values_ : Tensor::empty(values_.shape(), values_.dtype());
  for (const ParamEntry& e : entries_) {
    LATTICE_CHECK(e.local_shape == e.spec.shape, "init of sharded parameter '{}' needs its logical coordinates",
                  e.spec.name);
    if (host.dtype() == DType::f64)
      init_entry(host.data<double>() + e.offset, e, seed);
    else
      init_entry(host.data<float>() + e.offset, e, seed);
  }
  if (!values_.device().is_cpu()) values_.copy_from(host);
}

}  // namespace lattice
