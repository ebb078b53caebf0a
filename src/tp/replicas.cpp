#include "tp/replicas.h"

namespace lattice::tp {

void sum_over_replicas(Tensor& grad_local, int replicas, comm::Group& tp) {
  if (replicas <= 1) return;
  LATTICE_CHECK(tp.size() % replicas == 0, "tp::sum_over_replicas: {} replicas do not divide the tp group '{}' of {}",
                replicas, tp.name(), tp.size());
  const int64_t n = grad_local.numel(), blocks = tp.size() / replicas;
  Tensor all = Tensor::zeros({blocks * n}, grad_local.dtype(), grad_local.device());  // (S * n)
  Tensor mine = all.view((tp.rank() / replicas) * n, {n});
  mine.copy_from(grad_local.view(0, {n}));
  tp.all_reduce(all)->wait_on_device();
  Tensor out = grad_local.view(0, {n});
  out.copy_from(mine);
}

}  // namespace lattice::tp
