#include "tp/sharding.h"

#include <cstring>

namespace lattice::tp {

namespace {

void copy_elems(char* dst, int64_t di, const char* src, int64_t si, int64_t n, size_t es) {
  std::memcpy(dst + di * es, src + si * es, size_t(n) * es);
}

// Every placement keeps whole runs of the local last dim contiguous in the
// logical tensor (a row of a column/vocab split, a row's block of a row
// split), so 2-D and larger tensors move a local row per memcpy; 1-D tensors
// (a fused column bias is not contiguous) move element by element.
int64_t contiguous_run(const ParamSpec& spec, const Shape& local) {
  return spec.shape.size() >= 2 && !local.empty() ? local.back() : 1;
}

}  // namespace

Tensor master_weight(const FlatParams& params, const ParamEntry& e, comm::Group& tp) {
  return gather_logical(e, params.value(e), params.shard(), tp);
}

Tensor gather_logical(const ParamEntry& e, const Tensor& local, const TpShard& shard, comm::Group& tp) {
  LATTICE_CHECK(tp.size() == shard.size && tp.rank() == shard.rank,
                "tp::gather_logical: parameters sharded as rank {} of {}, but the group '{}' is rank {} of {}",
                shard.rank, shard.size, tp.name(), tp.rank(), tp.size());
  LATTICE_CHECK(local.numel() == e.numel, "tp::gather_logical: '{}' has {} local elements, got a view of {}",
                e.spec.name, e.numel, local.numel());
  const bool padded =
      e.spec.placement == Placement::vocab && shape_numel(e.local_shape) * shard.size != shape_numel(e.spec.shape);
  if (e.spec.placement == Placement::replicated || (shard.size == 1 && !padded))
    return local.on_host().clone().reshape(e.spec.shape);

  // Gather every rank's shard (equal sizes), then place each element at its logical index.
  Tensor all = Tensor::empty({shard.size * e.numel}, local.dtype(), local.device());
  if (shard.size > 1)
    tp.all_gather(all, local)->wait();
  else
    all.copy_from(local);
  Tensor host = all.on_host();
  Tensor out = Tensor::zeros(e.spec.shape, local.dtype());
  const size_t es = dtype_size(local.dtype());
  const char* src = static_cast<const char*>(host.raw());
  char* dst = static_cast<char*>(out.raw());
  const int64_t run = contiguous_run(e.spec, e.local_shape);
  for (int r = 0; r < shard.size; ++r) {
    const TpShard rs{r, shard.size, shard.vocab_multiple};
    for (int64_t i = 0; i < e.numel; i += run) {
      const int64_t logical = local_to_logical(e.spec, rs, i);
      if (logical >= 0) copy_elems(dst, logical, src, r * e.numel + i, run, es);
    }
  }
  return out;
}

Tensor shard_from_logical(const ParamSpec& spec, const TpShard& shard, const Tensor& logical, bool source_transposed) {
  const bool transposed = source_transposed && spec.shape.size() == 2;
  const Shape source_shape = transposed ? Shape{spec.shape[1], spec.shape[0]} : spec.shape;
  LATTICE_CHECK(logical.defined() && logical.shape() == source_shape,
                "tp::shard_from_logical: '{}' expects a source tensor {}{}, got {}", spec.name, shape_str(source_shape),
                transposed ? " (stored transposed, (C, OC))" : "",
                logical.defined() ? shape_str(logical.shape()) : "undefined");
  const Tensor host = logical.on_host();
  const Shape ls = local_shape(spec, shard);
  Tensor out = Tensor::zeros(ls, logical.dtype());
  const size_t es = dtype_size(logical.dtype());
  const char* src = static_cast<const char*>(host.raw());
  char* dst = static_cast<char*>(out.raw());
  const int64_t OC = spec.shape.empty() ? 1 : spec.shape[0];
  const int64_t C = OC ? shape_numel(spec.shape) / OC : 0;
  const int64_t run = transposed ? 1 : contiguous_run(spec, ls);
  for (int64_t i = 0; i < out.numel(); i += run) {
    int64_t l = local_to_logical(spec, shard, i);
    if (l < 0) continue;                       // vocabulary padding row
    if (transposed) l = (l % C) * OC + l / C;  // element (o, c) of (OC, C) sits at (c, o) of (C, OC)
    copy_elems(dst, i, src, l, run, es);
  }
  return out;
}

}  // namespace lattice::tp
