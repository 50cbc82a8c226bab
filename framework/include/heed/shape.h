// heed/shape.h — Dims (a small inline vector for shapes and strides) and shape arithmetic.
//
// Invariants: at most kMaxDims dimensions (an Error beyond); sizes are >= 0;
// strides are in elements, not bytes; a 0-dim tensor has empty Dims and numel 1.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "heed/config.h"
#include "heed/error.h"

namespace heed {

class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<int64_t> values) { assign(values.begin(), values.end()); }
  explicit Dims(const std::vector<int64_t>& values) { assign(values.begin(), values.end()); }
  template <typename It>
  Dims(It first, It last) {
    assign(first, last);
  }
  static Dims filled(int n, int64_t value) {
    Dims d;
    for (int i = 0; i < n; ++i) d.push_back(value);
    return d;
  }

  int size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t& operator[](int i) { return data_[i]; }
  int64_t operator[](int i) const { return data_[i]; }
  int64_t back() const { return data_[size_ - 1]; }
  int64_t* begin() { return data_.data(); }
  int64_t* end() { return data_.data() + size_; }
  const int64_t* begin() const { return data_.data(); }
  const int64_t* end() const { return data_.data() + size_; }
  const int64_t* data() const { return data_.data(); }

  void push_back(int64_t v) {
    HEED_CHECK(size_ < kMaxDims, "shape", "tensors have at most {} dimensions", kMaxDims);
    data_[size_++] = v;
  }
  void insert(int pos, int64_t v) {
    HEED_CHECK(size_ < kMaxDims, "shape", "tensors have at most {} dimensions", kMaxDims);
    for (int i = size_; i > pos; --i) data_[i] = data_[i - 1];
    data_[pos] = v;
    ++size_;
  }
  void erase(int pos) {
    for (int i = pos; i + 1 < size_; ++i) data_[i] = data_[i + 1];
    --size_;
  }
  void resize(int n, int64_t fill = 0) {
    HEED_CHECK(n <= kMaxDims, "shape", "tensors have at most {} dimensions", kMaxDims);
    for (int i = size_; i < n; ++i) data_[i] = fill;
    size_ = n;
  }
  std::vector<int64_t> vec() const { return {begin(), end()}; }

  bool operator==(const Dims& o) const { return size_ == o.size_ && std::equal(begin(), end(), o.begin()); }
  bool operator!=(const Dims& o) const { return !(*this == o); }

 private:
  template <typename It>
  void assign(It first, It last) {
    size_ = 0;
    for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
  }
  std::array<int64_t, kMaxDims> data_{};
  int size_ = 0;
};

inline int64_t shape_numel(const Dims& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

// Row-major strides of a contiguous tensor with this shape.
inline Dims contiguous_strides(const Dims& shape) {
  Dims strides = Dims::filled(shape.size(), 1);
  int64_t running = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    strides[i] = running;
    running *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

inline std::string shape_str(const Dims& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// Wraps a possibly negative dim into [0, ndim); throws naming the op otherwise.
inline int normalize_dim(int64_t dim, int ndim, const char* op) {
  const int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  HEED_CHECK(dim >= lo && dim <= hi, op, "dim {} is out of range for a tensor with {} dims (expected {}..{})", dim,
             ndim, lo, hi);
  return static_cast<int>(dim < 0 ? dim + std::max(ndim, 1) : dim);
}

// NumPy broadcasting of two shapes; throws naming the op when they are incompatible.
inline Dims broadcast_shapes(const Dims& a, const Dims& b, const char* op) {
  const int n = std::max(a.size(), b.size());
  Dims out = Dims::filled(n, 1);
  for (int i = 0; i < n; ++i) {
    const int ia = a.size() - n + i, ib = b.size() - n + i;
    const int64_t sa = ia >= 0 ? a[ia] : 1, sb = ib >= 0 ? b[ib] : 1;
    HEED_CHECK(sa == sb || sa == 1 || sb == 1, op,
               "shapes {} and {} cannot be broadcast together (dim {} has sizes {} and {})", shape_str(a), shape_str(b),
               i - n, sa, sb);
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

}  // namespace heed

template <>
struct fmt::formatter<heed::Dims> : fmt::formatter<std::string> {
  template <typename Ctx>
  auto format(const heed::Dims& d, Ctx& ctx) const {
    return fmt::formatter<std::string>::format(heed::shape_str(d), ctx);
  }
};
