// Counter-based random numbers (Philox4x32-10), keyed by logical coordinates.
//
// Every random number in Lattice is a pure function of where it is used, not
// of how many numbers were drawn before it:
//   key     = (seed, purpose, step, layer, site)         -> RngKey
//   counter = (sample, element)                          -> the two indices below
// where `sample` is the global sample index within the step's global batch and
// `element` the logical element index within that sample (for weights: the
// parameter's name hash plays the role of the layer/site and `element` is the
// index into the logical, unsharded tensor). So a mask or an initial weight is
// the same on any (tp, pp, dp) layout and on CPU or GPU: this header is shared
// by both backends.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "core/hd.h"

namespace lattice {

enum class RngPurpose : uint32_t { init = 1, dropout = 2, data = 3, mask_lm = 4, sample = 5 };  // 4 bits (rng_bits)

struct RngKey {
  uint64_t seed = 0;
  RngPurpose purpose = RngPurpose::dropout;
  uint32_t step = 0;
  uint32_t layer = 0;
  uint32_t site = 0;  // which use inside the layer (e.g. 0 = attention probs, 1 = residual)
};

struct Philox4 {
  uint32_t v[4];
};

LATTICE_HD uint32_t mulhilo32(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t p = uint64_t(a) * uint64_t(b);
  *hi = uint32_t(p >> 32);
  return uint32_t(p);
}

// Philox4x32 with 10 rounds (Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3", SC'11); constants from the paper.
LATTICE_HD Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, hi1;
    uint32_t lo0 = mulhilo32(0xD2511F53u, c0, &hi0);
    uint32_t lo1 = mulhilo32(0xCD9E8D57u, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return Philox4{{c0, c1, c2, c3}};
}

// 24 random bits -> [0, 1).
LATTICE_HD float uint_to_unit(uint32_t x) { return float(x >> 8) * (1.0f / 16777216.0f); }

// The 64-bit Philox key for (seed, purpose, step, layer, site): the seed fills
// the key, the rest goes into the two high counter words (see rng_bits).
LATTICE_HD Philox4 rng_bits(const RngKey& k, uint64_t sample, uint64_t element) {
  // Four consecutive elements share one Philox call (one lane each).
  uint64_t block = element >> 2;
  uint32_t c0 = uint32_t(block);
  uint32_t c1 = uint32_t(block >> 32) ^ (uint32_t(sample) << 8) ^ uint32_t(sample >> 24);
  uint32_t c2 = k.step ^ (uint32_t(k.purpose) << 28);
  uint32_t c3 = (k.layer << 12) ^ k.site ^ (uint32_t(sample) * 0x9E3779B1u);
  return philox4x32_10(c0, c1, c2, c3, uint32_t(k.seed), uint32_t(k.seed >> 32));
}

// Uniform in [0, 1) for one logical element.
LATTICE_HD float rng_uniform(const RngKey& k, uint64_t sample, uint64_t element) {
  Philox4 r = rng_bits(k, sample, element);
  return uint_to_unit(r.v[element & 3]);
}

// Standard normal for one logical element (Box-Muller on a dedicated call so
// each element has its own pair of uniforms).
LATTICE_HD float rng_normal(const RngKey& k, uint64_t sample, uint64_t element) {
  Philox4 r = rng_bits(k, sample, element * 4);                   // lanes 0..3 of this element's own block
  float u1 = (float(r.v[0] >> 8) + 1.0f) * (1.0f / 16777217.0f);  // (0, 1]
  float u2 = uint_to_unit(r.v[1]);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}

// Keep an element with probability 1 - p (dropout masks).
LATTICE_HD bool rng_keep(const RngKey& k, uint64_t sample, uint64_t element, float p) {
  return rng_uniform(k, sample, element) >= p;
}
// rng_keep for an element whose block of four, rng_bits(k, sample, element),
// is already drawn: kernels draw once per four consecutive elements.
LATTICE_HD bool rng_keep_lane(const Philox4& bits, uint64_t element, float p) {
  return uint_to_unit(bits.v[element & 3]) >= p;
}

// FNV-1a, for keying initial weights by parameter name.
constexpr uint64_t name_hash(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (char ch : s) h = (h ^ uint8_t(ch)) * 1099511628211ull;
  return h;
}

// Key for the initial values of the parameter called `name`: element e of the
// logical tensor is rng_normal(init_key(seed, name), 0, e).
inline RngKey init_key(uint64_t seed, std::string_view name) {
  uint64_t h = name_hash(name);
  RngKey k;
  k.seed = seed ^ (h * 0x9E3779B97F4A7C15ull);
  k.purpose = RngPurpose::init;
  k.layer = uint32_t(h);
  k.site = uint32_t(h >> 32);
  return k;
}

}  // namespace lattice
