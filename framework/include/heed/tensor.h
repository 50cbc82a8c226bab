// heed/tensor.h — Tensor: a handle to shared storage plus shape, strides, dtype, device and
// autograd metadata.
//
// Invariants:
//  * A Tensor is a cheap handle (one shared_ptr); copies alias the same TensorImpl.
//  * Views (view/reshape/permute/slice/expand/...) share storage and the storage's version
//    counter; in-place ops bump it; ops that save a tensor for backward check it.
//  * `offset` and `strides` are in elements; the element (i0, i1, ...) lives at
//    storage.data + (offset + sum_k i_k * strides[k]) * dtype_size.
//  * requires_grad is only set on floating tensors. A non-leaf (grad_fn != null) gets its
//    gradient through its grad_fn; leaves accumulate into grad().
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "heed/device.h"
#include "heed/dtype.h"
#include "heed/error.h"
#include "heed/shape.h"
#include "heed/storage.h"

namespace heed {

class Tensor;
class Node;

// A gradient hook gets the incoming gradient and returns a replacement, or an undefined
// Tensor to keep it as it is.
using TensorHook = std::function<Tensor(const Tensor& grad)>;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Dims shape;
  Dims strides;
  int64_t offset = 0;
  DType dtype = kFloat32;

  // autograd
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;  // leaves (and retain_grad non-leaves)
  std::shared_ptr<Node> grad_fn;     // the op that produced this tensor, null for leaves
  std::vector<TensorHook> hooks;     // leaf hooks; non-leaf hooks live on grad_fn
  std::string name;                  // optional tag shown by anomaly reports
};

// Construction options, libtorch style: TensorOptions().dtype(kF64).requires_grad(true).
// Implicit from a DType or a Device so `zeros({2, 3}, kF64)` works.
class TensorOptions {
 public:
  TensorOptions() = default;
  TensorOptions(DType dtype) : dtype_(dtype) {}      // NOLINT(google-explicit-constructor)
  TensorOptions(Device device) : device_(device) {}  // NOLINT(google-explicit-constructor)
  TensorOptions dtype(DType d) const {
    auto o = *this;
    o.dtype_ = d;
    return o;
  }
  TensorOptions device(Device d) const {
    auto o = *this;
    o.device_ = d;
    return o;
  }
  TensorOptions requires_grad(bool r) const {
    auto o = *this;
    o.requires_grad_ = r;
    return o;
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool requires_grad() const { return requires_grad_; }

 private:
  DType dtype_ = kFloat32;
  Device device_ = kCPU;
  bool requires_grad_ = false;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata ---------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Dims& shape() const { return impl().shape; }
  const Dims& sizes() const { return impl().shape; }
  int64_t size(int64_t dim) const;
  const Dims& strides() const { return impl().strides; }
  int64_t stride(int64_t dim) const;
  int64_t offset() const { return impl().offset; }
  int dim() const { return impl().shape.size(); }
  int64_t numel() const { return shape_numel(impl().shape); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  TensorOptions options() const { return TensorOptions(dtype()).device(device()); }
  bool is_contiguous() const;
  size_t element_size() const { return dtype_size(dtype()); }
  const std::shared_ptr<Storage>& storage() const { return impl().storage; }
  // Address of element 0 (storage + offset). T must match the dtype.
  template <typename T>
  T* data_ptr() const {
    check_dtype_for_access(dtype_of<T>, "data_ptr");
    return static_cast<T*>(raw_data());
  }
  void* raw_data() const { return static_cast<char*>(impl().storage->data()) + impl().offset * element_size(); }
  TensorImpl& impl() const {
    HEED_CHECK(impl_, "tensor", "use of an undefined (default-constructed) Tensor");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- element access (copies to the host when needed) -------------------------------------
  template <typename T>
  T item() const;
  template <typename T = double>
  T at(const Dims& index) const;
  template <typename T>
  std::vector<T> to_vector() const;
  std::string str() const;  // PyTorch-style printout, truncated for large tensors

  // ---- conversion -------------------------------------------------------------------------
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor detach() const;  // shares storage, no autograd history

  // ---- autograd ---------------------------------------------------------------------------
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& requires_grad_(bool value = true);
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  Tensor grad() const { return impl().grad ? Tensor(impl().grad) : Tensor(); }
  void set_grad(const Tensor& grad);
  void zero_grad();  // drops the gradient (set to undefined, as set_to_none=True)
  const std::shared_ptr<Node>& grad_fn() const { return impl().grad_fn; }
  // Backpropagates from this tensor. Without `grad` the tensor must hold one element.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  void register_hook(TensorHook hook) const;
  void retain_grad() const;
  Tensor& set_name(std::string name);
  const std::string& name() const { return impl().name; }

  // ---- views (share storage) --------------------------------------------------------------
  Tensor view(const Dims& shape) const;
  Tensor reshape(const Dims& shape) const;
  Tensor permute(const Dims& order) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // 2-D transpose
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Dims& shape) const;
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor unflatten(int64_t dim, const Dims& sizes) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split(const std::vector<int64_t>& sizes, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;

  // ---- math (see ops.h for the free-function forms) ----------------------------------------
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor abs() const;
  Tensor neg() const;
  Tensor relu() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor pow(double exponent) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor sum() const;
  Tensor sum(const Dims& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const Dims& dims, bool keepdim = false) const;
  Tensor var(const Dims& dims, bool keepdim = false, double correction = 1.0) const;
  Tensor max() const;
  Tensor min() const;
  Tensor argmax() const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor matmul(const Tensor& other) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor masked_fill(const Tensor& mask, double value) const;

  // ---- in-place (bump the version counter; refused on leaves that require grad) ------------
  Tensor& fill_(double value);
  Tensor& zero_();
  Tensor& copy_(const Tensor& src);
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& add_(double value);
  Tensor& sub_(const Tensor& other);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);
  Tensor& div_(double value);
  Tensor& masked_fill_(const Tensor& mask, double value);

 private:
  void check_dtype_for_access(DType expected, const char* what) const;
  std::shared_ptr<TensorImpl> impl_;
};

// ---- operators (differentiable) ------------------------------------------------------------
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);
Tensor operator-(const Tensor& a);
// Comparisons give bool tensors (not differentiable).
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, double b);
Tensor operator>(const Tensor& a, double b);
Tensor operator<=(const Tensor& a, double b);
Tensor operator>=(const Tensor& a, double b);
Tensor operator==(const Tensor& a, double b);
Tensor operator!=(const Tensor& a, double b);
Tensor operator!(const Tensor& a);                   // logical not of a bool tensor
Tensor operator&(const Tensor& a, const Tensor& b);  // logical and of bool tensors
Tensor operator|(const Tensor& a, const Tensor& b);  // logical or of bool tensors

}  // namespace heed

#include <ostream>

namespace heed {
inline std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }
}  // namespace heed

template <>
struct fmt::formatter<heed::Tensor> : fmt::formatter<std::string> {
  template <typename Ctx>
  auto format(const heed::Tensor& t, Ctx& ctx) const {
    return fmt::formatter<std::string>::format(t.str(), ctx);
  }
};
