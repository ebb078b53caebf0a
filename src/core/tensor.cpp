#include "core/tensor.h"

#include <cstring>

#include "core/allocator.h"
#include "core/backend.h"

namespace lattice {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    LATTICE_CHECK(d >= 0, "negative dimension in shape {}", shape_str(s));
    n *= d;
  }
  return n;
}

std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

Storage::Storage(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  data_ = device_alloc(device, bytes);
}
Storage::~Storage() { device_free(device_, data_, bytes_); }

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  LATTICE_CHECK(shape.size() <= 8, "tensors have at most 8 dims, got {}", shape_str(shape));
  Tensor t;
  t.numel_ = shape_numel(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(t.nbytes(), device);
  return t;
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, device);
  t.zero_();
  return t;
}

template <typename T>
Tensor Tensor::from(const std::vector<T>& values, Shape shape) {
  Tensor t = empty(std::move(shape), dtype_of<T>());
  LATTICE_CHECK(size_t(t.numel()) == values.size(), "Tensor::from: {} values for shape {}", values.size(),
                shape_str(t.shape()));
  std::memcpy(t.raw(), values.data(), t.nbytes());
  return t;
}
template Tensor Tensor::from<double>(const std::vector<double>&, Shape);
template Tensor Tensor::from<float>(const std::vector<float>&, Shape);
template Tensor Tensor::from<int32_t>(const std::vector<int32_t>&, Shape);
template Tensor Tensor::from<uint16_t>(const std::vector<uint16_t>&, Shape);

int64_t Tensor::dim(int i) const {
  int n = ndim();
  if (i < 0) i += n;
  LATTICE_CHECK(i >= 0 && i < n, "dim {} out of range for shape {}", i, shape_str(shape_));
  return shape_[size_t(i)];
}

Tensor Tensor::view(int64_t elem_offset, Shape shape) const {
  int64_t n = shape_numel(shape);
  LATTICE_CHECK(elem_offset >= 0 && elem_offset + n <= numel_, "view [{}, {}) outside a tensor of {} elements",
                elem_offset, elem_offset + n, numel_);
  Tensor t = *this;
  t.byte_offset_ = byte_offset_ + size_t(elem_offset) * dtype_size(dtype_);
  t.shape_ = std::move(shape);
  t.numel_ = n;
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  LATTICE_CHECK(shape_numel(shape) == numel_, "cannot reshape {} to {}", shape_str(shape_), shape_str(shape));
  return view(0, std::move(shape));
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  LATTICE_CHECK(ndim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "slice_rows [{}, {}) of {}", begin,
                end, shape_str(shape_));
  int64_t row = shape_[0] ? numel_ / shape_[0] : 0;
  Shape s = shape_;
  s[0] = end - begin;
  return view(begin * row, s);
}

Tensor Tensor::to(Device device) const {
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::on_host() const { return device().is_cpu() ? *this : to(Device::cpu()); }

Tensor Tensor::clone() const { return to(device()); }

Tensor Tensor::to(DType dtype) const {
  LATTICE_CHECK(device().is_cpu(), "dtype conversion of a tensor on {}", device().str());
  Tensor out = empty(shape_, dtype);
  auto load = [&](int64_t i) -> double {
    switch (dtype_) {
      case DType::f64: return static_cast<const double*>(raw())[i];
      case DType::f32: return static_cast<const float*>(raw())[i];
      case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(raw())[i]);
      case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(raw())[i]);
      case DType::i32: return static_cast<const int32_t*>(raw())[i];
      case DType::u16: return static_cast<const uint16_t*>(raw())[i];
    }
    return 0;
  };
  for (int64_t i = 0; i < numel_; ++i) {
    double v = load(i);
    switch (dtype) {
      case DType::f64: static_cast<double*>(out.raw())[i] = v; break;
      case DType::f32: static_cast<float*>(out.raw())[i] = float(v); break;
      case DType::bf16: static_cast<uint16_t*>(out.raw())[i] = f32_to_bf16(float(v)); break;
      case DType::f16: static_cast<uint16_t*>(out.raw())[i] = f32_to_f16(float(v)); break;
      case DType::i32: static_cast<int32_t*>(out.raw())[i] = int32_t(v); break;
      case DType::u16: static_cast<uint16_t*>(out.raw())[i] = uint16_t(v); break;
    }
  }
  return out;
}

void Tensor::zero_() {
  if (numel_ == 0) return;
  if (device().is_cpu())
    std::memset(raw(), 0, nbytes());
  else
    cuda_backend().memset_zero(raw(), nbytes(), device().index);
}

void Tensor::copy_from(const Tensor& src) {
  LATTICE_CHECK(src.dtype_ == dtype_ && src.numel_ == numel_, "copy_from: {} {} into {} {}",
                dtype_name(src.dtype_), shape_str(src.shape_), dtype_name(dtype_), shape_str(shape_));
  if (numel_ == 0 || raw() == src.raw()) return;
  if (device().is_cpu() && src.device().is_cpu()) {
    std::memmove(raw(), src.raw(), nbytes());
    return;
  }
  cuda_backend().copy(raw(), device(), src.raw(), src.device(), nbytes());
}

}  // namespace lattice
