// Tensor: a typed, contiguous, shaped view into reference-counted storage on
// one device.
//
// Invariants: always contiguous (row-major); a view shares its parent's
// storage and keeps it alive; `data<T>()` checks that T matches the dtype and
// the device is the CPU. Shapes are logical element counts, up to 8 dims.
// Parameters are views into one flat buffer (core/param.h), so creating a view
// never copies.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace lattice {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);

class Storage {
 public:
  Storage(size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
};

template <typename T>
constexpr DType dtype_of();
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::u16; }

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(Shape shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(Shape shape, DType dtype, Device device = Device::cpu());
  // A CPU tensor holding a copy of `values` (f32/f64/i32 by T).
  template <typename T>
  static Tensor from(const std::vector<T>& values, Shape shape);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return int(shape_.size()); }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return size_t(numel_) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }

  void* raw() const { return static_cast<char*>(storage_->data()) + byte_offset_; }
  template <typename T>
  T* data() const {
    LATTICE_CHECK(dtype_ == dtype_of<T>(), "tensor has dtype {}, accessed as {}", dtype_name(dtype_),
                  dtype_name(dtype_of<T>()));
    LATTICE_CHECK(device().is_cpu(), "host access to a tensor on {}", device().str());
    return static_cast<T*>(raw());
  }

  // A contiguous sub-range [elem_offset, elem_offset + numel(shape)) with a new shape.
  Tensor view(int64_t elem_offset, Shape shape) const;
  Tensor reshape(Shape shape) const;  // same elements, new shape
  // Rows [begin, end) along dim 0.
  Tensor slice_rows(int64_t begin, int64_t end) const;

  Tensor to(Device device) const;  // copy (a new storage) on `device`
  Tensor to(DType dtype) const;    // converted copy, CPU only
  Tensor clone() const;
  // This tensor when it is in host memory, else a copy there (to(Device::cpu())):
  // host code reads device tensors through it without copying host ones.
  Tensor on_host() const;

  void zero_();
  void copy_from(const Tensor& src);  // same dtype and numel; any devices
  bool same_storage(const Tensor& other) const { return storage_ == other.storage_; }

 private:
  std::shared_ptr<Storage> storage_;
  size_t byte_offset_ = 0;
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::f32;
};

}  // namespace lattice
