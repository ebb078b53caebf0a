#include "tp_test_helpers.h"

#include "comm/mpi_communicator.h"
#include "optim/optimizer.h"

namespace lattice::test {

std::vector<comm::Group> tp_test_groups() {
  std::vector<comm::Group> groups;
  groups.emplace_back(comm::make_world_communicator(120.0));
  const int size = groups[0].size(), rank = groups[0].rank();
  if (size >= 4 && size % 2 == 0) groups.emplace_back(groups[0].comm().split(rank / (size / 2), rank, "tp_half"));
  return groups;
}

ParamSpec param_spec(std::string name, Shape shape, Placement placement, InitKind init, float init_std) {
  ParamSpec s;
  s.name = std::move(name);
  s.shape = std::move(shape);
  s.placement = placement;
  s.init = init;
  s.init_std = init_std;
  return s;
}

ParamSpec fused(ParamSpec s, int n_fused) {
  s.n_fused = n_fused;
  return s;
}

ParamSpec decayed(ParamSpec s) {
  s.weight_decay = true;
  return s;
}

TpShard shard_of(const comm::Group& tp, int64_t vocab_multiple) {
  return TpShard{tp.rank(), tp.size(), vocab_multiple};
}

Tensor slice_last_dim(const Tensor& full, int rank, int size, int n_parts) {
  Tensor f = to_f64(full);
  const int64_t K = full.dim(-1), rows = full.numel() / K, part = K / n_parts, block = part / size;
  Shape ls = full.shape();
  ls.back() = K / size;
  Tensor out = Tensor::empty(ls, DType::f64);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t p = 0; p < n_parts; ++p)
      for (int64_t j = 0; j < block; ++j)
        out.data<double>()[i * (K / size) + p * block + j] = f.data<double>()[i * K + p * part + rank * block + j];
  return full.dtype() == DType::f64 ? out : out.to(full.dtype());
}

namespace {

// Rows [begin, begin + count) of a (rows, inner) f64 tensor, appended to out;
// rows at or past `limit` are zeros (vocabulary padding).
void append_rows(std::vector<double>& out, const Tensor& f, int64_t inner, int64_t begin, int64_t count,
                 int64_t limit) {
  for (int64_t r = begin; r < begin + count; ++r)
    for (int64_t c = 0; c < inner; ++c) out.push_back(r < limit ? f.data<double>()[r * inner + c] : 0.0);
}

}  // namespace

Tensor expected_shard(const Tensor& logical, const ParamSpec& spec, const TpShard& s) {
  EXPECT_EQ(logical.shape(), spec.shape) << spec.name;
  if (spec.placement == Placement::replicated) return logical.clone();
  if (spec.placement == Placement::row) return slice_last_dim(logical, s.rank, s.size);
  Tensor f = to_f64(logical);
  const int64_t rows = spec.shape[0], inner = rows ? logical.numel() / rows : 0;
  std::vector<double> out;
  Shape ls = spec.shape;
  if (spec.placement == Placement::column) {
    const int64_t part = rows / spec.n_fused, local = part / s.size;
    for (int64_t p = 0; p < spec.n_fused; ++p) append_rows(out, f, inner, p * part + s.rank * local, local, rows);
    ls[0] = rows / s.size;
  } else {  // vocab: pad to a multiple of size * vocab_multiple, then split
    const int64_t m = s.size * s.vocab_multiple, padded = (rows + m - 1) / m * m, local = padded / s.size;
    append_rows(out, f, inner, s.rank * local, local, rows);
    ls[0] = local;
  }
  Tensor t = Tensor::from<double>(out, ls);
  return logical.dtype() == DType::f64 ? t : t.to(logical.dtype());
}

namespace {
void expect_entries(const FlatParams& full, const FlatParams& sharded, Tolerance tol, const char* what, bool grads) {
  for (const ParamEntry& e : sharded.entries()) {
    const ParamEntry& fe = full.entry(e.spec.name);
    Tensor expect = expected_shard(grads ? full.grad(fe) : full.value(fe), e.spec, sharded.shard());
    Tensor got = grads ? sharded.grad(e) : sharded.value(e);
    ASSERT_EQ(got.shape(), expect.shape()) << what << ": " << e.spec.name;
    EXPECT_TENSOR_NEAR(got, expect, tol) << what << ": " << (grads ? "gradient of " : "value of ") << e.spec.name
                                         << " on rank " << sharded.shard().rank << " of " << sharded.shard().size;
  }
}
}  // namespace

void expect_values_are_shards(const FlatParams& full, const FlatParams& sharded, Tolerance tol, const char* what) {
  expect_entries(full, sharded, tol, what, false);
}

void expect_grads_are_shards(const FlatParams& full, const FlatParams& sharded, Tolerance tol, const char* what) {
  expect_entries(full, sharded, tol, what, true);
}

void expect_adamw_step_matches(FlatParams& full, FlatParams& sharded, Tolerance tol, const char* what) {
  optim::OptimizerOptions o;  // adamw, weight decay 0.1 on the entries that ask for it
  auto opt_full = optim::make_optimizer(o, full);
  auto opt_sharded = optim::make_optimizer(o, sharded);
  opt_full->step(full, 1e-2, 1, 1.0f);
  opt_sharded->step(sharded, 1e-2, 1, 1.0f);
  expect_values_are_shards(full, sharded, tol, what);
}

}  // namespace lattice::test
