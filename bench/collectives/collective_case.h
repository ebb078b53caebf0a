// What bench_collectives (MPI) and bench/gpu/nccl_busbw (NCCL) share: the
// nccl-tests conventions for sizes and bandwidths, and exact small-integer
// data, so both report the same rows and count wrong elements the same way.
//
// size is the bytes of the largest buffer, as nccl-tests counts it
// (all_gather: the gathered output; reduce_scatter: the input). algbw =
// size / time; busbw = algbw * factor: all_reduce 2(n-1)/n, all_gather and
// reduce_scatter (n-1)/n, broadcast and sendrecv 1 (nccl-tests
// doc/PERFORMANCE.md). Rank r contributes (r + 1) * pattern(i), pattern(i) =
// i % 7 + 1, so every expected value is a small integer, exact in f32.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"

namespace lattice::bench {

enum class Collective { all_reduce, all_gather, reduce_scatter, broadcast, sendrecv };
inline constexpr Collective kCollectives[] = {Collective::all_reduce, Collective::all_gather,
                                              Collective::reduce_scatter, Collective::broadcast, Collective::sendrecv};

inline const char* collective_name(Collective c) {
  constexpr const char* names[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv"};
  return names[int(c)];
}

// The collectives named in a comma-separated list ("all_reduce,all_gather");
// nullopt when a name is unknown.
inline std::optional<std::vector<Collective>> parse_collectives(std::string_view list) {
  std::vector<Collective> out;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view name = list.substr(0, comma);
    bool found = false;
    for (Collective c : kCollectives)
      if (name == collective_name(c)) out.push_back(c), found = true;
    if (!found) return std::nullopt;
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
  }
  return out;
}

// busbw / algbw for n ranks (nccl-tests): the fraction of the data each rank's
// link carries, so busbw is comparable across rank counts and with the
// hardware's link bandwidth (the reductions and gathers give 0 on one rank).
inline double busbw_factor(Collective c, int n) {
  if (c == Collective::all_reduce) return 2.0 * (n - 1) / n;
  if (c == Collective::all_gather || c == Collective::reduce_scatter) return double(n - 1) / n;
  return 1.0;
}

struct Bandwidth {
  double algbw = 0, busbw = 0;  // GB/s (1e9 bytes)
};

inline Bandwidth bandwidth(Collective c, int n, int64_t bytes, double seconds) {
  const double algbw = double(bytes) / seconds / 1e9;
  return {algbw, algbw * busbw_factor(c, n)};
}

// The element counts of one case of `bytes` over n ranks, for 4-byte elements:
// total is the size buffer (rounded down to a multiple of n where it is split),
// block what each rank contributes (all_gather) or receives (reduce_scatter).
struct CaseShape {
  int64_t total = 0, block = 0, in = 0, out = 0;
  int64_t bytes() const { return total * 4; }  // the size column
};

inline CaseShape case_shape(Collective c, int64_t bytes, int n) {
  const bool split = c == Collective::all_gather || c == Collective::reduce_scatter;
  CaseShape s;
  s.total = split ? bytes / 4 / n * n : bytes / 4;
  s.block = split ? s.total / n : s.total;
  s.in = c == Collective::all_gather ? s.block : s.total;
  s.out = c == Collective::reduce_scatter ? s.block : s.total;
  return s;
}

inline float pattern(int64_t i) { return float(i % 7 + 1); }

// Element i of rank `rank`'s input (broadcast: rank 0 holds the data).
inline float input_value(Collective c, int rank, int64_t i) {
  if (c == Collective::broadcast) return rank == 0 ? pattern(i) : 0.f;
  return float(rank + 1) * pattern(i);
}

// Element i of rank `rank`'s output after the collective over n ranks
// (sendrecv: from the previous rank of the ring).
inline float expected_value(Collective c, int rank, int n, int64_t block, int64_t i) {
  const float tri = float(n * (n + 1) / 2);
  switch (c) {
    case Collective::all_reduce:
      return tri * pattern(i);
    case Collective::all_gather:
      return float(i / block + 1) * pattern(i % block);
    case Collective::reduce_scatter:
      return tri * pattern(rank * block + i);
    case Collective::broadcast:
      return pattern(i);
    case Collective::sendrecv:
      return float((rank + n - 1) % n + 1) * pattern(i);
  }
  return 0;
}

// "8", "64K", "1M", "1G" (binary multiples) -> bytes; nullopt when malformed.
inline std::optional<int64_t> parse_bytes(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || v < 0) return std::nullopt;
  const std::string_view unit(end);
  if (unit == "K" || unit == "k")
    v *= 1024;
  else if (unit == "M" || unit == "m")
    v *= 1024.0 * 1024;
  else if (unit == "G" || unit == "g")
    v *= 1024.0 * 1024 * 1024;
  else if (!unit.empty())
    return std::nullopt;
  return int64_t(v);
}

// min, min*factor, ... up to max, and max itself when the steps miss it.
inline std::vector<int64_t> size_sweep(int64_t min_bytes, int64_t max_bytes, int64_t factor) {
  std::vector<int64_t> sizes;
  if (min_bytes <= 0 || factor < 2) return sizes;
  for (int64_t b = min_bytes; b <= max_bytes; b *= factor) sizes.push_back(b);
  if (max_bytes >= min_bytes && sizes.back() != max_bytes) sizes.push_back(max_bytes);
  return sizes;
}

// The command line both benches take:
//   [--min-bytes B] [--max-bytes B] [--step F] [--ops a,b,...] [--iters N]
// B takes K, M, G suffixes; F >= 2 multiplies the size; iters 0 = the bench's
// own choice per size.
struct SweepOptions {
  int64_t min_bytes = 8, max_bytes = 64 << 20, factor = 4;
  std::vector<Collective> ops{std::begin(kCollectives), std::end(kCollectives)};
  int iters = 0;
};

// Fills `o` from argv[1..argc); returns the error line for a bad argument.
inline std::optional<std::string> parse_sweep_options(int argc, const char* const* argv, SweepOptions& o) {
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return a + " needs a value";
    const std::string v = argv[i + 1];
    if (a == "--min-bytes" || a == "--max-bytes") {
      const std::optional<int64_t> bytes = parse_bytes(v);
      if (!bytes || *bytes <= 0) return a + " expects a positive size such as 1M or 1G, got '" + v + "'";
      (a == "--min-bytes" ? o.min_bytes : o.max_bytes) = *bytes;
    } else if (a == "--step" || a == "--iters") {
      const int64_t least = a == "--step" ? 2 : 1;
      char* end = nullptr;
      const long long x = std::strtoll(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != 0 || x < least)
        return a + " expects an integer >= " + std::to_string(least) + ", got '" + v + "'";
      if (a == "--step")
        o.factor = x;
      else
        o.iters = int(x);
    } else if (a == "--ops") {
      std::optional<std::vector<Collective>> ops = parse_collectives(v);
      if (!ops || ops->empty())
        return "--ops expects a list of all_reduce,all_gather,reduce_scatter,broadcast,sendrecv, got '" + v + "'";
      o.ops = *ops;
    } else {
      return "unknown argument '" + a + "'";
    }
  }
  if (o.min_bytes > o.max_bytes) return "--min-bytes is above --max-bytes";
  return std::nullopt;
}

// The buffers of one collective at one size on this rank, on `device`. The
// data is written and checked on the host and copied across.
struct CollectiveCase {
  Collective op;
  int rank, n;
  CaseShape shape;
  Tensor in, out;  // out aliases in for the in-place all_reduce and broadcast

  CollectiveCase(Collective c, int64_t bytes, int rank_, int n_, Device device = Device::cpu())
      : op(c), rank(rank_), n(n_), shape(case_shape(c, bytes, n_)) {
    in = Tensor::zeros({shape.in}, DType::f32, device);
    const bool in_place = c == Collective::all_reduce || c == Collective::broadcast;
    out = in_place ? in : Tensor::zeros({shape.out}, DType::f32, device);
  }
  bool empty() const { return shape.block == 0; }

  void init() {
    Tensor host = Tensor::zeros({shape.in}, DType::f32);
    float* p = host.data<float>();
    for (int64_t i = 0; i < shape.in; ++i) p[i] = input_value(op, rank, i);
    in.copy_from(host);
  }

  int64_t wrong() const {
    const Tensor host = out.on_host();
    const float* o = host.data<float>();
    int64_t bad = 0;
    for (int64_t i = 0; i < shape.out; ++i) bad += o[i] != expected_value(op, rank, n, shape.block, i);
    return bad;
  }

  // Starts the collective on a lattice communicator; the caller waits.
  comm::WorkPtr start(comm::Communicator& comm) {
    switch (op) {
      case Collective::all_reduce:
        return comm.all_reduce(in, {});
      case Collective::all_gather:
        return comm.all_gather(out, in, {});
      case Collective::reduce_scatter:
        return comm.reduce_scatter(out, in, {});
      case Collective::broadcast:
        return comm.broadcast(in, 0, {});
      case Collective::sendrecv:
        break;
    }
    using comm::P2POp;
    return comm.batch_send_recv({{P2POp::Kind::recv, out, (rank + n - 1) % n}, {P2POp::Kind::send, in, (rank + 1) % n}},
                                0);
  }
};

}  // namespace lattice::bench
