#include "core/dtype.h"

#include <fmt/format.h>

#include "core/error.h"

namespace lattice {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: return 8;
    case DType::f32: return 4;
    case DType::i32: return 4;
    case DType::bf16:
    case DType::f16:
    case DType::u16: return 2;
  }
  return 0;
}

DType dtype_from_name(std::string_view name) {
  for (DType t : {DType::f64, DType::f32, DType::bf16, DType::f16, DType::i32, DType::u16})
    if (dtype_name(t) == name) return t;
  LATTICE_FAIL("unknown dtype '{}' (expected f64, f32, bf16, f16, i32 or u16)", name);
}

std::string Device::str() const { return is_cpu() ? "cpu" : fmt::format("cuda:{}", index); }

}  // namespace lattice
