// CPU kernels for LLaMA-style attention inputs: rotary position embeddings
// (HF rotate-half convention) and the repeat of grouped k/v heads.
//
// RoPE: row (b, t) of a (B, T, W) tensor holds heads of HS columns; head h of
// heads [0, n_rot) is x = [x1 | x2] (HS/2 each), rotated by the angles
// a_i = p * theta^(-2i / HS), i < HS/2, at position p = pos0 + t:
//   out1 = x1 cos a - x2 sin a,   out2 = x2 cos a + x1 sin a.
// Columns after n_rot * HS (v) are copied. Backward rotates by -a (the
// rotation's transpose). In place (out == inp) is allowed; gradients OVERWRITE.
//
// repeat_kv: inp rows [q | k | v] with NH query and KV k/v heads become
// [q | k' | v'] with NH heads each, head h of k' being k head h / (NH / KV);
// backward sums each group back into its k/v head.
//
// T is the activation storage type: float, double, or Bf16 / F16 with float
// math (core/kernels/storage.h): the rotation runs in double as for float and
// is rounded to float, then to T; the k/v group sums run in float.
#pragma once

#include <cstdint>

namespace lattice::cpu {

struct RopeDims {
  int64_t B, T, W;  // rows (B, T) of W columns
  int64_t n_rot;    // heads rotated from column 0
  int64_t HS;       // head size (even)
  double theta;
  int64_t pos0 = 0;  // position of row t = 0 (a key/value cache holds the earlier ones)
};

template <typename T>
void rope_forward(T* out,        // (B, T, W)
                  const T* inp,  // (B, T, W)
                  const RopeDims& d);

template <typename T>
void rope_backward(T* dinp,        // (B, T, W) overwrite
                   const T* dout,  // (B, T, W)
                   const RopeDims& d);

template <typename T>
void repeat_kv_forward(T* out,        // (N, 3 NH HS)
                       const T* inp,  // (N, (NH + 2 KV) HS)
                       int64_t N, int64_t NH, int64_t KV, int64_t HS);

template <typename T>
void repeat_kv_backward(T* dinp,        // (N, (NH + 2 KV) HS) overwrite
                        const T* dout,  // (N, 3 NH HS)
                        int64_t N, int64_t NH, int64_t KV, int64_t HS);

}  // namespace lattice::cpu
