// Element types and devices.
//
// f64 exists on the CPU for gradient checks; f32 is the training type; bf16
// and f16 are storage types (conversions below are round-to-nearest-even and
// shared by both backends); i32 holds token ids and targets; u16 is the token
// type of llm.c-format shards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "core/hd.h"

namespace lattice {

enum class DType : uint8_t { f64, f32, bf16, f16, i32, u16 };

size_t dtype_size(DType t);
// Inline, so the CUDA backend (which does not link lattice_core) names dtypes too.
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f64:
      return "f64";
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::i32:
      return "i32";
    case DType::u16:
      return "u16";
  }
  return "?";
}
DType dtype_from_name(std::string_view name);  // throws lattice::Error on unknown names

// The dtype of the tensors kept beside activations of dtype `activation`
// (parameters, their gradients, saved statistics, losses): f64 beside f64,
// otherwise f32 (bf16/f16 activations have fp32 masters).
constexpr DType master_dtype(DType activation) { return activation == DType::f64 ? DType::f64 : DType::f32; }
// bf16 or f16: the 16-bit storage types.
constexpr bool is_16bit(DType t) { return t == DType::bf16 || t == DType::f16; }

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;
  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int i = 0) { return {DeviceType::cuda, i}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool operator==(const Device&) const = default;
  std::string str() const;
};

// ---- bf16 / f16 bit conversions (round to nearest even, NaN preserved) ----

LATTICE_HD uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
LATTICE_HD float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

LATTICE_HD uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
LATTICE_HD float bf16_to_f32(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }

LATTICE_HD uint16_t f32_to_f16(float f) {
  uint32_t x = f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mag = x & 0x7fffffffu;
  if (mag > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (mag >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow -> inf (incl. inf)
  if (mag < 0x38800000u) {                                  // subnormal or zero in f16
    if (mag < 0x33000000u) return uint16_t(sign);           // underflow to zero
    uint32_t e = mag >> 23;
    uint32_t m = (mag & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // f16 subnormal unit is 2^-24; value = m * 2^(e - 150)
    uint32_t h = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) h++;
    return uint16_t(sign | h);
  }
  uint32_t h = ((mag - 0x38000000u) >> 13);
  uint32_t rem = mag & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
  return uint16_t(sign | h);
}
LATTICE_HD float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return f32_from_bits(sign);
    // subnormal: value = man * 2^-24
    float v = float(man) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (man << 13));
  return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

}  // namespace lattice
