// CPU inverted dropout with counter-based masks (core/rng.h).
//
// Element s of row b is kept when rng_keep(key, sample0 + b, s, p) and then
// scaled by 1 / (1 - p). The mask is a pure function of (key, sample, element),
// so backward regenerates it (nothing is stored) and any split of the rows or
// heads over ranks or threads draws the same mask. Backward is the same map
// applied to dout, so one kernel serves both.
//
// Templated on the storage type: float, double, Bf16 or F16 (float math,
// core/kernels/storage.h).
//
// Shapes: B rows (samples) of S elements.
#pragma once

#include <cstdint>

#include "core/rng.h"

namespace lattice::cpu {

// out (n)[i] = keep(e0 + i) ? inp[i] / (1 - p) : 0, for logical elements
// e0 .. e0 + n - 1 of `sample`. out may alias inp. Requires 0 <= p < 1.
template <typename T>
void dropout_row(T* out, const T* inp, const RngKey& key, uint64_t sample, uint64_t e0, int64_t n, float p);

template <typename T>
void dropout_forward(T* out,        // (B, S); for backward: dinp
                     const T* inp,  // (B, S); for backward: dout
                     const RngKey& key, int64_t sample0, float p, int64_t B, int64_t S);

}  // namespace lattice::cpu
