#include "optim/optimizer.h"

#include "core/ops.h"

namespace lattice::optim {

namespace {

class AdamW final : public Optimizer {
 public:
  AdamW(const OptimizerOptions& o, const FlatParams& p)
      : o_(o), m_(Tensor::zeros({p.numel()}, p.dtype(), p.values().device())),
        v_(Tensor::zeros({p.numel()}, p.dtype(), p.values().device())) {}

  void step(FlatParams& params, double lr, int64_t step, float grad_scale) override {
    for (const ParamEntry& e : params.entries()) {
      Tensor value = params.value(e), grad = params.grad(e);
      Tensor m = m_.view(e.offset, e.local_shape), v = v_.view(e.offset, e.local_shape);
      ops::AdamWStep s{float(lr), float(o_.beta1), float(o_.beta2), float(o_.eps),
                       e.spec.weight_decay ? float(o_.weight_decay) : 0.0f, step, grad_scale};
      ops::adamw_update(value, grad, m, v, s);
    }
    params.mark_written();
  }
  std::vector<std::pair<std::string, Tensor*>> state() override { return {{"exp_avg", &m_}, {"exp_avg_sq", &v_}}; }

 private:
  OptimizerOptions o_;
  Tensor m_, v_;
};

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerOptions& o, const FlatParams& p)
      : o_(o), buf_(Tensor::zeros({p.numel()}, p.dtype(), p.values().device())) {}

  void step(FlatParams& params, double lr, int64_t, float grad_scale) override {
    for (const ParamEntry& e : params.entries()) {
      Tensor value = params.value(e), grad = params.grad(e);
      Tensor buf = buf_.view(e.offset, e.local_shape);
      ops::sgd_update(value, grad, buf, float(lr), float(o_.momentum),
                      e.spec.weight_decay ? float(o_.weight_decay) : 0.0f, grad_scale);
    }
    params.mark_written();
  }
  std::vector<std::pair<std::string, Tensor*>> state() override { return {{"momentum_buffer", &buf_}}; }

 private:
  OptimizerOptions o_;
  Tensor buf_;
};

}  // namespace

std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& opts, const FlatParams& params) {
  if (opts.name == "adamw") return std::make_unique<AdamW>(opts, params);
  if (opts.name == "sgd") return std::make_unique<Sgd>(opts, params);
  LATTICE_FAIL("optimizer.name: unknown optimizer '{}' (expected adamw or sgd)", opts.name);
}

}  // namespace lattice::optim
