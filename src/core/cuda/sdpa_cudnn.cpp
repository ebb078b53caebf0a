// cuDNN fused attention (sdpa_cudnn.h): the plan of sdpa_plan.h as cuDNN
// backend descriptors, built once per shape and run through variant packs.
#include "core/cuda/sdpa_cudnn.h"

#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "core/cuda/cuda_check.h"
#include "core/cuda/kernels.h"

namespace lattice::cuda {

namespace {

// A status other than success while building a graph: cuDNN refuses it.
struct Refused {
  std::string what;
};

void ok(cudnnStatus_t st, const char* what) {
  if (st == CUDNN_STATUS_SUCCESS) return;
  char detail[256] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));
  throw Refused{fmt::format("{}: {}{}{}", what, cudnnGetErrorString(st), detail[0] ? ": " : "", detail)};
}

// One backend descriptor, destroyed with its owner.
class Desc {
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) { ok(cudnnBackendCreateDescriptor(type, &d_), "create"); }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  Desc& operator=(Desc&&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  template <typename T>
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T* values, int64_t n,
            const char* what) {
    ok(cudnnBackendSetAttribute(d_, name, type, n, values), what);
    return *this;
  }
  template <typename T>
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, T value, const char* what) {
    return set(name, type, &value, 1, what);
  }
  Desc& set(cudnnBackendAttributeName_t name, const Desc& d, const char* what) {
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, d.get(), what);
  }
  void finalize(const char* what) { ok(cudnnBackendFinalize(d_), what); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

cudnnDataType_t data_type(SdpaElem e, SdpaDType io) {
  switch (e) {
    case SdpaElem::io:
      return io == SdpaDType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    case SdpaElem::f32:
      return CUDNN_DATA_FLOAT;
    case SdpaElem::i32:
      return CUDNN_DATA_INT32;
    case SdpaElem::boolean:
      return CUDNN_DATA_BOOLEAN;
  }
  return CUDNN_DATA_FLOAT;
}

size_t elem_bytes(SdpaElem e) { return e == SdpaElem::io ? 2 : e == SdpaElem::boolean ? 1 : 4; }

cudnnPointwiseMode_t pointwise_mode(SdpaPw m) {
  switch (m) {
    case SdpaPw::add:
      return CUDNN_POINTWISE_ADD;
    case SdpaPw::sub:
      return CUDNN_POINTWISE_SUB;
    case SdpaPw::mul:
      return CUDNN_POINTWISE_MUL;
    case SdpaPw::div:
      return CUDNN_POINTWISE_DIV;
    case SdpaPw::exp:
      return CUDNN_POINTWISE_EXP;
    case SdpaPw::log:
      return CUDNN_POINTWISE_LOG;
    case SdpaPw::cmp_ge:
      return CUDNN_POINTWISE_CMP_GE;
    case SdpaPw::binary_select:
      return CUDNN_POINTWISE_BINARY_SELECT;
    case SdpaPw::gen_index:
      return CUDNN_POINTWISE_GEN_INDEX;
    case SdpaPw::identity:
      return CUDNN_POINTWISE_IDENTITY;
  }
  return CUDNN_POINTWISE_ADD;
}

Desc tensor_desc(const SdpaTensor& t, SdpaDType io) {
  Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  // The alignment every such tensor is guaranteed, not its buffer's: io
  // tensors start at a multiple of 8 elements into a buffer aligned to
  // kSdpaIoTensorAlign at least (K and V sit C elements into each qkv row, C
  // a multiple of 8; sdpa_staging copies a less aligned buffer), so 16
  // bytes; the f32 tensors in memory at kSdpaStatsAlign (Stats) or more
  // (softmax_sum and dQ_accum at kSdpaIoAlign in scratch). Virtual and
  // by-value tensors say 16, as cudnn-frontend's do.
  static_assert(kSdpaIoTensorAlign == 16 && kSdpaStatsAlign == 16);
  const int64_t align = 16;
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, data_type(t.elem, io), "tensor data type")
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, t.dims.data(), 4, "tensor dims")
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, t.strides.data(), 4, "tensor strides")
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, t.uid, "tensor uid")
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, align, "tensor alignment")
      .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, t.is_virtual(), "tensor is_virtual")
      .set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, t.by_value(), "tensor is_by_value");
  d.finalize(t.name);
  return d;
}

// One graph, finalized into an execution plan; the descriptors stay alive with it.
struct Built {
  std::deque<Desc> keep;  // a deque: references to its elements stay valid as it grows
  Desc* plan = nullptr;
  int64_t workspace = 0;
  SdpaGraph graph;
  SdpaDq dq = SdpaDq::direct;  // the backward's form (sdpa_plan.h)
  bool may_vary = false;       // a backward that may not be bitwise repeatable (sdpa_backward_may_vary)
  bool pinned = false;         // runs the engine sdpa_pinned_engine chose, not the heuristics'
  std::string pin_refused;     // why cuDNN did not take that engine ("" if none was asked for or it was taken)
};

cudnnBackendKnobType_t knob_type(SdpaKnob k) {
  return k == SdpaKnob::kernel_cfg ? CUDNN_KNOB_TYPE_KERNEL_CFG : CUDNN_KNOB_TYPE_STAGES;
}

// The execution plan of engine config `config`, kept in `b` with it; throws
// Refused when it does not finalize.
void finalize_plan(Built& b, cudnnHandle_t handle, Desc&& config) {
  Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, handle, "plan handle")
      .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config, "plan engine config")
      .finalize("execution plan");
  int64_t n = 0;
  ok(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                              &b.workspace),
     "plan workspace size");
  b.keep.push_back(std::move(config));
  b.plan = &b.keep.emplace_back(std::move(plan));
}

// The engine config of `pin` over `graph` (as cudnn-frontend's
// create_execution_plan: the engine by global index, then its knob
// choices), finalized into b's plan; throws Refused.
void build_pinned(Built& b, cudnnHandle_t handle, const Desc& graph, const SdpaEngine& pin) {
  int64_t engines = 0, n = 0;
  ok(cudnnBackendGetAttribute(graph.get(), CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &n,
                              &engines),
     "graph engine count");
  if (pin.engine >= engines)
    throw Refused{fmt::format("engine {} does not exist (the graph has {})", pin.engine, engines)};
  std::deque<Desc> parts;  // engine and knob choices, kept with the plan once it finalizes
  Desc& engine = parts.emplace_back(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  engine.set(CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph, "engine graph")
      .set(CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, pin.engine, "engine index")
      .finalize("engine");
  std::vector<cudnnBackendDescriptor_t> choices;
  for (const auto& [knob, value] : pin.knobs) {
    Desc& c = parts.emplace_back(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
    c.set(CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, knob_type(knob), "knob type")
        .set(CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, value, "knob value")
        .finalize("knob choice");
    choices.push_back(c.get());
  }
  Desc config(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  config.set(CUDNN_ATTR_ENGINECFG_ENGINE, engine, "engine config engine")
      .set(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, choices.data(), int64_t(choices.size()),
           "engine config knobs")
      .finalize("engine config");
  finalize_plan(b, handle, std::move(config));
  for (Desc& d : parts) b.keep.push_back(std::move(d));
  b.pinned = true;
}

// Appends the descriptors of op `o` to `keep`; `tensors` indexed by uid - 1.
void op_desc(std::deque<Desc>& keep, std::vector<cudnnBackendDescriptor_t>& ops, int64_t version, const SdpaOp& o,
             const std::vector<Desc>& tensors) {
  auto t = [&](int64_t uid) -> const Desc& { return tensors.at(size_t(uid - 1)); };
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  switch (o.kind) {
    case SdpaOpKind::matmul: {
      Desc& mm = keep.emplace_back(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
      const double padding = 0.0;  // cudnn-frontend sets it on every matmul
      mm.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, f32, "matmul compute type")
          .set(CUDNN_ATTR_MATMUL_PADDING_VALUE, CUDNN_TYPE_DOUBLE, padding, "matmul padding value")
          .finalize("matmul");
      Desc& op = keep.emplace_back(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
      op.set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, t(o.x), "matmul A")
          .set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, t(o.b), "matmul B")
          .set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, t(o.y), "matmul C")
          .set(CUDNN_ATTR_OPERATION_MATMUL_DESC, mm, "matmul desc")
          .finalize("matmul op");
      ops.push_back(op.get());
      return;
    }
    case SdpaOpKind::pointwise: {
      Desc& pw = keep.emplace_back(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
      LATTICE_CHECK(o.math != SdpaElem::io, "cuda attention: a pointwise op computes in f32 or boolean");
      pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, pointwise_mode(o.pw), "pointwise mode")
          .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, data_type(o.math, SdpaDType::bf16),
               "pointwise precision");
      if (o.pw == SdpaPw::gen_index) pw.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, o.axis, "gen_index axis");
      pw.finalize("pointwise");
      Desc& op = keep.emplace_back(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
      const float one = 1.0f;  // cudnn-frontend sets both scales on every pointwise op
      op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, "pointwise desc")
          .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, t(o.x), "pointwise x")
          .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, one, "pointwise alpha1")
          .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, one, "pointwise alpha2");
      if (o.b) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, t(o.b), "pointwise b");
      if (o.t) op.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t(o.t), "pointwise t");
      op.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, t(o.y), "pointwise y").finalize("pointwise op");
      ops.push_back(op.get());
      return;
    }
    case SdpaOpKind::reduction: {
      Desc& red = keep.emplace_back(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
      const cudnnReduceTensorOp_t mode =
          o.reduce == SdpaReduce::max ? CUDNN_REDUCE_TENSOR_MAX : CUDNN_REDUCE_TENSOR_ADD;
      red.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, mode, "reduction mode")
          .set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, f32, "reduction compute type");
      if (version >= 91100) {  // as cudnn-frontend: said from 9.11 on, never before
        const bool deterministic = false;
        red.set(CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, CUDNN_TYPE_BOOLEAN, deterministic, "reduction determinism");
      }
      red.finalize("reduction");
      Desc& op = keep.emplace_back(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
      op.set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, t(o.x), "reduction x")
          .set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, t(o.y), "reduction y")
          .set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, red, "reduction desc")
          .finalize("reduction op");
      ops.push_back(op.get());
      return;
    }
    case SdpaOpKind::reshape: {
      Desc& op = keep.emplace_back(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
      op.set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, t(o.x), "reshape x")
          .set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, t(o.y), "reshape y")
          .finalize("reshape op");
      ops.push_back(op.get());
      return;
    }
  }
}

// The operation graph of `g` and its execution plan: on engine `pin` when
// one is asked for and cuDNN takes it, else the first engine config of
// heuristics mode A that finalizes. Throws Refused.
// `version`: cudnnGetVersion() of the library the process runs with.
std::unique_ptr<Built> build(cudnnHandle_t handle, int64_t version, const SdpaGraph& g, SdpaDType io,
                             const SdpaEngine& pin = {}) {
  auto b = std::make_unique<Built>();
  b->graph = g;
  std::vector<Desc> tensors;
  tensors.reserve(g.tensors.size());
  for (const SdpaTensor& t : g.tensors) tensors.push_back(tensor_desc(t, io));
  std::vector<cudnnBackendDescriptor_t> ops;
  for (const SdpaOp& o : g.ops) op_desc(b->keep, ops, version, o, tensors);
  Desc& graph = b->keep.emplace_back(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, handle, "graph handle")
      .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, ops.data(), int64_t(ops.size()), "graph ops")
      .finalize("operation graph");
  // The ops refer to the tensor descriptors, and cuDNN does not say whether it
  // copies them: they live as long as the plan (as cudnn-frontend keeps its).
  for (Desc& t : tensors) b->keep.push_back(std::move(t));
  if (pin.engine >= 0) {
    try {
      build_pinned(*b, handle, graph, pin);
      return b;
    } catch (const Refused& r) {
      b->pin_refused = r.what;
    }
  }
  Desc& heur = b->keep.emplace_back(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "heuristics graph")
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, CUDNN_HEUR_MODE_A, "heuristics mode")
      .finalize("heuristics");
  int64_t count = 0;
  ok(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                              nullptr),
     "heuristics result count");
  // What a refusal says of the pinned engine, when one was asked for.
  const std::string pin_note = b->pin_refused.empty() ? "" : "; pinned engine: " + b->pin_refused;
  if (count <= 0) throw Refused{"heuristics offer no engine config" + pin_note};
  std::vector<Desc> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) raw.push_back(configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR).get());
  ok(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count,
                              raw.data()),
     "heuristics results");
  std::string last;
  for (int64_t i = 0; i < count; ++i) {
    try {
      finalize_plan(*b, handle, std::move(configs[size_t(i)]));
      return b;
    } catch (const Refused& r) {
      last = r.what;
    }
  }
  throw Refused{fmt::format("none of {} engine configs finalizes ({}){}", count, last, pin_note)};
}

}  // namespace

struct CudnnSdpa::Impl {
  struct Graphs {
    std::unique_ptr<Built> fwd, bwd;  // both null: refused
  };

  std::mutex mu;
  std::vector<cudnnHandle_t> handles;  // by device; never destroyed (as the cuBLAS handles)
  std::vector<cudaStream_t> streams;   // by device: the stream its handle was last set to
  std::map<SdpaKey, Graphs> cache;
  SdpaRefusals refusals;
  const int64_t version = int64_t(cudnnGetVersion());  // of the library the process runs with
  std::vector<std::unique_ptr<Built>> retired;         // plans of shapes refused after they ran (refuse)
  bool said_may_vary = false;                          // a backward that may not be bitwise repeatable was announced

  cudnnHandle_t handle(int dev) {
    if (size_t(dev) >= handles.size()) {
      handles.resize(size_t(dev) + 1, nullptr);
      streams.resize(size_t(dev) + 1, nullptr);
    }
    if (!handles[size_t(dev)]) {
      CUDNN_CHECK(cudnnCreate(&handles[size_t(dev)]));
      CUDNN_CHECK(cudnnSetStream(handles[size_t(dev)], nullptr));
      streams[size_t(dev)] = nullptr;
    }
    return handles[size_t(dev)];
  }

  // The handle of `dev`, set to enqueue on `stream` (cudnnSetStream when the
  // stream differs from the last call's).
  cudnnHandle_t handle_on(int dev, cudaStream_t stream) {
    cudnnHandle_t h = handle(dev);
    if (streams[size_t(dev)] != stream) {
      CUDNN_CHECK(cudnnSetStream(h, stream));
      streams[size_t(dev)] = stream;
    }
    return h;
  }

  // The built graphs of a usable shape; the caller holds mu.
  Graphs& graphs(int dev, const SdpaShape& s) {
    const SdpaKey key = sdpa_key(dev, s);
    auto [it, fresh] = cache.try_emplace(key);
    if (!fresh) return it->second;
    try {
      const std::string too_old = sdpa_version_refusal(version, s);
      if (!too_old.empty()) throw Refused{too_old};
      cudnnHandle_t h = handle(dev);
      int cc_major = 0;
      CUDA_CHECK(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev));
      it->second.fwd = build(h, version, sdpa_graph(s, SdpaPass::forward), s.dtype);
      it->second.bwd = build_backward(h, key, s, cc_major);
    } catch (const Refused& r) {
      refuse(it->second, key, r.what);
    } catch (const Error& e) {  // cudnnCreate failed: the library cannot run here
      refuse(it->second, key, e.message());
    }
    return it->second;
  }

  // The backward in its deterministic form (dQ written directly, on the
  // engine sdpa_pinned_engine names where it names one), else in the
  // accumulating one. A backward that may not be bitwise repeatable is said
  // once per process on stderr, with the reason.
  std::unique_ptr<Built> build_backward(cudnnHandle_t h, const SdpaKey& key, const SdpaShape& s, int cc_major) {
    std::string direct_refused;
    std::unique_ptr<Built> b;
    try {
      b = build(h, version, sdpa_graph(s, SdpaPass::backward, SdpaDq::direct), s.dtype,
                sdpa_pinned_engine(version, cc_major, SdpaPass::backward, SdpaDq::direct));
      b->dq = SdpaDq::direct;
    } catch (const Refused& r) {
      direct_refused = r.what;
    }
    if (!b) {
      try {
        b = build(h, version, sdpa_graph(s, SdpaPass::backward, SdpaDq::accumulated), s.dtype);
        b->dq = SdpaDq::accumulated;
      } catch (const Refused& r) {
        throw Refused{fmt::format("backward, deterministic form: {}; accumulating form: {}", direct_refused, r.what)};
      }
    }
    b->may_vary = sdpa_backward_may_vary(cc_major, b->dq, b->pinned);
    if (b->may_vary && !said_may_vary) {
      said_may_vary = true;
      std::string why;
      if (b->dq == SdpaDq::accumulated)
        why = fmt::format(
            "cuDNN has no deterministic fused backward for this shape ({}); it runs the accumulating "
            "one, whose dQ is summed with atomics",
            direct_refused);
      else if (!b->pin_refused.empty())
        why = fmt::format(
            "cuDNN did not take the engine cudnn-frontend pins for the deterministic backward on "
            "compute capability 10.x ({}), so the heuristics chose",
            b->pin_refused);
      else
        why = fmt::format(
            "cuDNN {} is older than 9.18, the first with the deterministic backward engine "
            "cudnn-frontend pins on compute capability 10.x, so the heuristics chose",
            cudnn_version_name(version));
      std::fprintf(stderr,
                   "lattice: cuda attention: the fused backward (B %lld T %lld NH %lld HS %lld) may not be bitwise "
                   "repeatable from run to run: %s\n",
                   (long long)key.B, (long long)key.T, (long long)key.NH, (long long)key.HS, why.c_str());
    }
    return b;
  }

  void refuse(Graphs& g, const SdpaKey& key, const std::string& what) {
    // Launches of these plans may still be in flight on the stream: they are kept, never destroyed.
    if (g.fwd) retired.push_back(std::move(g.fwd));
    if (g.bwd) retired.push_back(std::move(g.bwd));
    g = Graphs{};
    const std::string line = refusals.record(key, what);
    if (!line.empty()) std::fprintf(stderr, "%s\n", line.c_str());  // once per process
  }

  // Where a pass's buffers are (null: not in this pass).
  struct Pointers {
    const void* qkv = nullptr;
    char* out = nullptr;
    const void* dout = nullptr;
    void* dqkv = nullptr;
    char* stats = nullptr;
    char* softmax_sum = nullptr;
    char* dq_accum = nullptr;
    void* workspace = nullptr;
  };

  // Runs a built graph; returns "" or, when cuDNN fails to execute it (the
  // variant pack or cudnnBackendExecute), its error.
  std::string run(int dev, cudaStream_t stream, const Built& b, const SdpaShape& s, const Pointers& p) {
    const float scale = 1.0f / std::sqrt(float(s.HS)), one = 1.0f;
    const float mask_value = sdpa_mask_value(version);
    std::vector<int64_t> uids;
    std::vector<void*> ptrs;
    auto value = [](const float& v) { return reinterpret_cast<char*>(const_cast<float*>(&v)); };
    for (const SdpaTensor& t : b.graph.tensors) {
      if (t.is_virtual()) continue;
      char* base = nullptr;
      switch (t.buffer) {
        case SdpaBuffer::qkv:
          base = static_cast<char*>(const_cast<void*>(p.qkv));  // read only: an input of both graphs
          break;
        case SdpaBuffer::out:
          base = p.out;
          break;
        case SdpaBuffer::dout:
          base = static_cast<char*>(const_cast<void*>(p.dout));  // read only
          break;
        case SdpaBuffer::dqkv:
          base = static_cast<char*>(p.dqkv);
          break;
        case SdpaBuffer::stats:
          base = p.stats;
          break;
        case SdpaBuffer::softmax_sum:
          base = p.softmax_sum;
          break;
        case SdpaBuffer::dq_accum:
          base = p.dq_accum;
          break;
        case SdpaBuffer::scale:
          base = value(scale);
          break;
        case SdpaBuffer::mask_value:
          base = value(mask_value);
          break;
        case SdpaBuffer::one:
          base = value(one);
          break;
        case SdpaBuffer::none:
          break;
      }
      LATTICE_CHECK(base != nullptr, "cuda attention: tensor {} of the fused graph has no buffer", t.name);
      uids.push_back(t.uid);
      ptrs.push_back(base + t.offset * int64_t(elem_bytes(t.elem)));
    }
    cudnnBackendDescriptor_t pack = nullptr;
    auto execute = [&] {
      CUDNN_CHECK(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
      CUDNN_CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                           int64_t(uids.size()), uids.data()));
      CUDNN_CHECK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                           int64_t(ptrs.size()), ptrs.data()));
      void* workspace = p.workspace;
      CUDNN_CHECK(
          cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace));
      CUDNN_CHECK(cudnnBackendFinalize(pack));
      CUDNN_CHECK(cudnnBackendExecute(handle_on(dev, stream), b.plan->get(), pack));
    };
    std::string failed;
    try {
      execute();
    } catch (const Error& e) {
      failed = e.message();
      cudaGetLastError();  // a launch error cuDNN left behind must not fail the plain path's finish()
    }
    if (pack) cudnnBackendDestroyDescriptor(pack);
    return failed;
  }

  // A built graph cuDNN then failed to execute: the shape is refused from now
  // on (one stderr line per process, as a refused build) and takes the plain path.
  void refuse_after_run(int dev, const SdpaShape& s, const char* pass, const std::string& failed) {
    const SdpaKey key = sdpa_key(dev, s);
    refuse(cache[key], key, fmt::format("executing its {} graph failed: {}", pass, failed));
  }
};

CudnnSdpa::CudnnSdpa() : impl_(std::make_unique<Impl>()) {}
CudnnSdpa::~CudnnSdpa() = default;

bool CudnnSdpa::usable(int dev, const SdpaShape& s) {
  if (!sdpa_supported(s, nullptr)) return false;
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->graphs(dev, s).fwd != nullptr;
}

std::string CudnnSdpa::refusal(int dev, const SdpaShape& s) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->refusals.reason(sdpa_key(dev, s));
}

bool CudnnSdpa::backward_may_vary(int dev, const SdpaShape& s) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const Impl::Graphs& g = impl_->graphs(dev, s);
  LATTICE_CHECK(g.bwd != nullptr, "cuda attention: the fused path was asked for a shape cuDNN refused");
  return g.bwd->may_vary;
}

size_t CudnnSdpa::scratch_bytes(int dev, const SdpaShape& s, SdpaPass pass, const SdpaStaging& staged) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const Impl::Graphs& g = impl_->graphs(dev, s);
  LATTICE_CHECK(g.fwd != nullptr, "cuda attention: the fused path was asked for a shape cuDNN refused");
  const Built& b = pass == SdpaPass::forward ? *g.fwd : *g.bwd;
  return sdpa_scratch_layout(s, pass, b.dq, staged, b.workspace).end;
}

namespace {

// Copies n elements between an activation buffer and an io-typed one: under
// act16 a same-type copy; else into_io rounds f32 to the io type, and the
// other way widens it.
void stage(cudaStream_t stream, const SdpaShape& s, void* dst, const void* src, int64_t n, bool into_io) {
  if (s.act16) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(n) * 2, cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const bool bf16 = s.dtype == SdpaDType::bf16;
  if (into_io)
    (bf16 ? launch_to_bf16 : launch_to_f16)(stream, static_cast<uint16_t*>(dst), static_cast<const float*>(src), n);
  else
    (bf16 ? launch_from_bf16 : launch_from_f16)(stream, static_cast<float*>(dst), static_cast<const uint16_t*>(src), n);
}

// The io-typed view of an input: itself, or staged into scratch at `at`.
const void* io_input(cudaStream_t stream, const SdpaShape& s, bool staged, char* at, const void* x, int64_t n) {
  if (!staged) return x;
  stage(stream, s, at, x, n, true);
  return at;
}

}  // namespace

bool CudnnSdpa::forward(int dev, cudaStream_t stream, void* out, void* att, const void* qkv, const SdpaShape& s,
                        const SdpaStaging& staged, void* scratch) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const Impl::Graphs& g = impl_->graphs(dev, s);
  LATTICE_CHECK(g.fwd != nullptr, "cuda attention: the fused path was asked for a shape cuDNN refused");
  const SdpaScratchLayout l = sdpa_scratch_layout(s, SdpaPass::forward, SdpaDq::direct, staged, g.fwd->workspace);
  const SdpaSavedLayout saved = sdpa_saved_layout(s, reinterpret_cast<uintptr_t>(att));
  char* base = static_cast<char*>(scratch);
  char* att_bytes = static_cast<char*>(att);
  Impl::Pointers p;
  p.qkv = io_input(stream, s, staged.qkv, base + l.qkv, qkv, sdpa_qkv_elems(s));
  p.out = att_bytes + saved.out;
  p.stats = att_bytes + saved.stats;
  p.workspace = base + l.workspace;
  const std::string failed = impl_->run(dev, stream, *g.fwd, s, p);
  if (!failed.empty()) {
    impl_->refuse_after_run(dev, s, "forward", failed);
    return false;
  }
  stage(stream, s, out, att_bytes + saved.out, sdpa_out_elems(s), false);
  return true;
}

bool CudnnSdpa::backward(int dev, cudaStream_t stream, void* dqkv, const void* dout, const void* qkv, const void* att,
                         const SdpaShape& s, const SdpaStaging& staged, void* scratch) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  const Impl::Graphs& g = impl_->graphs(dev, s);
  LATTICE_CHECK(g.bwd != nullptr, "cuda attention: the fused path was asked for a shape cuDNN refused");
  const SdpaScratchLayout l = sdpa_scratch_layout(s, SdpaPass::backward, g.bwd->dq, staged, g.bwd->workspace);
  const SdpaSavedLayout saved = sdpa_saved_layout(s, reinterpret_cast<uintptr_t>(att));
  char* base = static_cast<char*>(scratch);
  char* att_bytes = const_cast<char*>(static_cast<const char*>(att));  // read only: O and Stats are inputs
  Impl::Pointers p;
  p.qkv = io_input(stream, s, staged.qkv, base + l.qkv, qkv, sdpa_qkv_elems(s));
  p.dout = io_input(stream, s, staged.dout, base + l.dout, dout, sdpa_out_elems(s));
  void* dq = staged.dqkv ? base + l.dqkv : dqkv;
  p.dqkv = dq;
  p.out = att_bytes + saved.out;
  p.stats = att_bytes + saved.stats;
  p.softmax_sum = base + l.softmax_sum;
  p.workspace = base + l.workspace;
  if (g.bwd->dq == SdpaDq::accumulated) {
    p.dq_accum = base + l.dq_accum;
    // cudnn-frontend zeroes dQ_accum only below cuDNN 9.6 (later engines clear it themselves); zeroing it always
    // costs one memset and holds whichever engine runs.
    CUDA_CHECK(cudaMemsetAsync(p.dq_accum, 0, sdpa_dq_accum_bytes(s), stream));
  }
  const std::string failed = impl_->run(dev, stream, *g.bwd, s, p);
  if (!failed.empty()) {
    impl_->refuse_after_run(dev, s, "backward", failed);
    return false;
  }
  if (staged.dqkv) stage(stream, s, dqkv, dq, sdpa_qkv_elems(s), false);
  return true;
}

}  // namespace lattice::cuda
