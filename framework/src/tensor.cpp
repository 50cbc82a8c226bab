// framework/src/tensor.cpp — Tensor metadata, element access, conversion, autograd entry
// points and in-place ops. Views live in ops_shape.cpp, math in ops_*.cpp.
#include "heed/tensor.h"

#include <cmath>

#include "heed/autograd.h"
#include "heed/functional.h"
#include "heed/ops.h"
#include "internal.h"
#include "kernels/cuda/cuda_backend.h"

namespace heed {

// ---- Storage --------------------------------------------------------------------------------

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  if (device.is_cuda()) {
    static std::string reason;
    static const int count = kernels::cuda::device_count(&reason);
    HEED_CHECK(device.index < count, "to",
               "CUDA device {} is not available ({} device(s) found{}{})", device.index, count,
               reason.empty() ? "" : ": ", reason);
  }
  data_ = HEED_KERNEL(device, allocate)(nbytes);
}

Storage::~Storage() {
  if (data_) kernels::kernel_table(device_.type).deallocate(data_, nbytes_);
}

Device parse_device(const std::string& text) {
  if (text == "cpu") return kCPU;
  if (text == "cuda") return kCUDA;
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5) {
    int index = 0;
    for (char c : text.substr(5)) {
      HEED_CHECK(c >= '0' && c <= '9', "parse_device", "bad device '{}' (expected cpu, cuda or cuda:N)",
                 text);
      index = index * 10 + (c - '0');
      HEED_CHECK(index < 1024, "parse_device", "device index in '{}' is too large", text);
    }
    return Device(DeviceType::CUDA, index);
  }
  fail("parse_device", "bad device '{}' (expected cpu, cuda or cuda:N)", text);
}

// ---- helpers ----------------------------------------------------------------------------------

namespace detail {

Tensor make_empty(const Dims& shape, DType dtype, Device device) {
  for (int64_t s : shape)
    HEED_CHECK(s >= 0, "empty", "negative size in shape {}", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  const int64_t n = shape_numel(shape);
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(n) * dtype_size(dtype), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor make_alias(const Tensor& base, const Dims& shape, const Dims& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

kernels::StridedView view_of(const Tensor& t) {
  kernels::StridedView v;
  v.data = t.raw_data();
  v.dtype = t.dtype();
  v.ndim = t.dim();
  for (int i = 0; i < v.ndim; ++i) {
    v.shape[i] = t.shape()[i];
    v.strides[i] = t.strides()[i];
  }
  return v;
}

kernels::StridedView broadcast_view(const Tensor& t, const Dims& out_shape) {
  kernels::StridedView v;
  v.data = t.raw_data();
  v.dtype = t.dtype();
  v.ndim = out_shape.size();
  const int shift = out_shape.size() - t.dim();
  HEED_INTERNAL_ASSERT(shift >= 0);
  for (int i = 0; i < v.ndim; ++i) {
    v.shape[i] = out_shape[i];
    const int j = i - shift;
    v.strides[i] = (j < 0 || t.shape()[j] == 1) ? 0 : t.strides()[j];
  }
  return v;
}

void prepare_inplace(const Tensor& target, const char* op,
                     std::initializer_list<const Tensor*> others) {
  check_defined(target, op, "tensor");
  if (grad_mode_enabled()) {
    HEED_CHECK(!(target.requires_grad() && target.is_leaf()), op,
               "a leaf tensor of shape {} that requires grad is used in an in-place operation; "
               "wrap the update in NoGradGuard or use the out-of-place op",
               shape_str(target.shape()));
    HEED_CHECK(!target.requires_grad(), op,
               "in-place operations on tensors that require grad are not recorded by autograd "
               "(shape {}); use the out-of-place op",
               shape_str(target.shape()));
    for (const Tensor* o : others)
      HEED_CHECK(!(o && o->defined() && o->requires_grad()), op,
                 "in-place operations do not record gradients, but an operand of shape {} "
                 "requires grad; use the out-of-place op",
                 shape_str(o->shape()));
  }
  target.storage()->bump_version();
}

Tensor checked_indices(const Tensor& index, int64_t extent, const char* op) {
  check_index_dtype(index, op);
  Tensor idx = index.device().is_cpu() ? index : index.to(kCPU);
  idx = idx.dtype() == kInt64 ? idx.contiguous() : idx.to(kInt64);
  const int64_t* p = idx.data_ptr<int64_t>();
  const int64_t n = idx.numel();
  for (int64_t i = 0; i < n; ++i) {
    if (p[i] < 0 || p[i] >= extent) [[unlikely]] {
      fail(op, "index {} at position {} is out of range for a dimension of size {} (expected 0..{})",
           p[i], i, extent, extent - 1);
    }
  }
  return index.device().is_cpu() ? idx : idx.to(index.device());
}

}  // namespace detail

// ---- metadata -------------------------------------------------------------------------------

int64_t Tensor::size(int64_t dim) const {
  return shape()[normalize_dim(dim, this->dim(), "size")];
}

int64_t Tensor::stride(int64_t dim) const {
  return strides()[normalize_dim(dim, this->dim(), "stride")];
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  const TensorImpl& t = impl();
  for (int i = t.shape.size() - 1; i >= 0; --i) {
    if (t.shape[i] == 1) continue;
    if (t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

void Tensor::check_dtype_for_access(DType expected, const char* what) const {
  HEED_CHECK(dtype() == expected, what, "tensor has dtype {}, but {} was requested", dtype_name(dtype()),
             dtype_name(expected));
}

// ---- element access -------------------------------------------------------------------------

namespace {
double load_as_double(const void* p, DType t) {
  switch (t) {
    case kFloat32: return *static_cast<const float*>(p);
    case kFloat64: return *static_cast<const double*>(p);
    case kFloat16: return half_bits_to_float(*static_cast<const uint16_t*>(p));
    case kBFloat16: return bfloat16_bits_to_float(*static_cast<const uint16_t*>(p));
    case kInt32: return *static_cast<const int32_t*>(p);
    case kInt64: return static_cast<double>(*static_cast<const int64_t*>(p));
    case kBool: return *static_cast<const bool*>(p) ? 1.0 : 0.0;
  }
  return 0.0;
}
template <typename T>
T convert_from(const void* p, DType t) {
  if constexpr (std::is_same_v<T, int64_t>) {
    if (t == kInt64) return *static_cast<const int64_t*>(p);
  }
  return static_cast<T>(load_as_double(p, t));
}
}  // namespace

template <typename T>
T Tensor::item() const {
  HEED_CHECK(numel() == 1, "item", "expected a tensor with one element, got shape {}",
             shape_str(shape()));
  Tensor host = device().is_cpu() ? *this : to(kCPU);
  return convert_from<T>(host.raw_data(), host.dtype());
}

template <typename T>
T Tensor::at(const Dims& index) const {
  HEED_CHECK(index.size() == dim(), "at", "expected {} indices for shape {}, got {}", dim(),
             shape_str(shape()), index.size());
  int64_t offset_elems = 0;
  for (int i = 0; i < dim(); ++i) {
    int64_t k = index[i] < 0 ? index[i] + shape()[i] : index[i];
    HEED_CHECK(k >= 0 && k < shape()[i], "at", "index {} is out of range for dim {} of shape {}",
               index[i], i, shape_str(shape()));
    offset_elems += k * strides()[i];
  }
  Tensor element = detail::make_alias(*this, {}, {}, offset() + offset_elems);
  return element.item<T>();
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor host = (device().is_cpu() ? *this : to(kCPU)).contiguous();
  std::vector<T> out(static_cast<size_t>(host.numel()));
  const size_t esize = host.element_size();
  const char* base = static_cast<const char*>(host.raw_data());
  for (size_t i = 0; i < out.size(); ++i) out[i] = convert_from<T>(base + i * esize, host.dtype());
  return out;
}

#define HEED_INSTANTIATE_ACCESS(T)                   \
  template T Tensor::item<T>() const;                \
  template T Tensor::at<T>(const Dims&) const;       \
  template std::vector<T> Tensor::to_vector<T>() const;
HEED_INSTANTIATE_ACCESS(float)
HEED_INSTANTIATE_ACCESS(double)
HEED_INSTANTIATE_ACCESS(int32_t)
HEED_INSTANTIATE_ACCESS(int64_t)
HEED_INSTANTIATE_ACCESS(bool)
#undef HEED_INSTANTIATE_ACCESS

// ---- conversion (differentiable) ------------------------------------------------------------

namespace {
// Copies `src` into a new contiguous tensor of `dtype` on `device`.
Tensor copy_to(const Tensor& src, DType dtype, Device device) {
  Tensor out = detail::make_empty(src.shape(), dtype, device);
  if (src.numel() == 0) return out;
  if (src.device() == device) {
    HEED_KERNEL(device, copy)(detail::view_of(out), detail::view_of(src));
    return out;
  }
  // Cross-device: make the source contiguous in the target dtype on its own device, then
  // move the bytes through the host.
  Tensor staged = (src.is_contiguous() && src.dtype() == dtype) ? src : copy_to(src, dtype, src.device());
  if (device.is_cpu()) {
    HEED_KERNEL(src.device(), copy_host)(out.raw_data(), staged.raw_data(),
                                        static_cast<size_t>(out.numel()) * dtype_size(dtype), true);
  } else {
    HEED_KERNEL(device, copy_host)(out.raw_data(), staged.raw_data(),
                                   static_cast<size_t>(out.numel()) * dtype_size(dtype), false);
  }
  return out;
}
}  // namespace

Tensor Tensor::to(DType dtype) const {
  if (dtype == this->dtype()) return *this;
  Tensor out = copy_to(*this, dtype, device());
  if (any_requires_grad({this})) {
    HEED_CHECK(is_floating(dtype), "to",
               "cannot convert a tensor that requires grad to {} (gradients need floats)",
               dtype_name(dtype));
    const DType from = this->dtype();
    record_op("to_dtype", {this}, out, [from](const Tensor& g) -> std::vector<Tensor> {
      return {g.to(from)};
    });
  }
  return out;
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  Tensor out = copy_to(*this, dtype(), device);
  if (any_requires_grad({this})) {
    const Device from = this->device();
    record_op("to_device", {this}, out, [from](const Tensor& g) -> std::vector<Tensor> {
      return {g.to(from)};
    });
  }
  return out;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  Tensor out = copy_to(*this, dtype(), device());
  if (any_requires_grad({this}))
    record_op("contiguous", {this}, out, [](const Tensor& g) -> std::vector<Tensor> { return {g}; });
  return out;
}

Tensor contiguous(const Tensor& x) { return x.contiguous(); }

Tensor Tensor::clone() const {
  Tensor out = copy_to(*this, dtype(), device());
  if (any_requires_grad({this}))
    record_op("clone", {this}, out, [](const Tensor& g) -> std::vector<Tensor> { return {g}; });
  return out;
}

Tensor Tensor::detach() const {
  return detail::make_alias(*this, shape(), strides(), offset());
}

// ---- autograd -------------------------------------------------------------------------------

Tensor& Tensor::requires_grad_(bool value) {
  HEED_CHECK(!value || is_floating(dtype()), "requires_grad_",
             "only floating-point tensors can require grad (got {})", dtype_name(dtype()));
  HEED_CHECK(value || is_leaf(), "requires_grad_",
             "requires_grad can only be turned off on leaf tensors; use detach()");
  impl().requires_grad = value;
  return *this;
}

void Tensor::set_grad(const Tensor& grad) {
  if (grad.defined()) {
    HEED_CHECK(grad.shape() == shape(), "set_grad", "gradient of shape {} for a tensor of shape {}",
               shape_str(grad.shape()), shape_str(shape()));
    detail::check_same_device(grad, *this, "set_grad");
  }
  impl().grad = grad.defined() ? grad.impl_ptr() : nullptr;
}

void Tensor::zero_grad() { impl().grad = nullptr; }

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  run_backward({*this}, {grad}, retain_graph);
}

void Tensor::register_hook(TensorHook hook) const {
  HEED_CHECK(requires_grad(), "register_hook",
             "cannot register a hook on a tensor that does not require grad");
  if (grad_fn())
    grad_fn()->add_output_hook(std::move(hook));
  else
    impl().hooks.push_back(std::move(hook));
}

void Tensor::retain_grad() const {
  HEED_CHECK(requires_grad(), "retain_grad", "the tensor does not require grad");
  if (is_leaf()) return;
  std::weak_ptr<TensorImpl> weak = impl_ptr();
  grad_fn()->add_output_hook([weak](const Tensor& g) -> Tensor {
    if (auto self = weak.lock()) {
      if (!self->grad) {
        self->grad = g.clone().impl_ptr();
      } else {
        Tensor(self->grad).add_(g);
      }
    }
    return Tensor();
  });
}

Tensor& Tensor::set_name(std::string name) {
  impl().name = std::move(name);
  return *this;
}

// ---- in-place -------------------------------------------------------------------------------

namespace {
// Writes `value` (already the result, same shape) into `target`.
void write_back(Tensor& target, const Tensor& value) {
  if (value.numel() == 0) return;
  HEED_KERNEL(target.device(), copy)(detail::view_of(target), detail::view_of(value.to(target.device())));
}
}  // namespace

Tensor& Tensor::fill_(double value) {
  detail::prepare_inplace(*this, "fill_");
  if (numel() > 0) HEED_KERNEL(device(), fill)(detail::view_of(*this), value);
  return *this;
}

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::copy_(const Tensor& src) {
  detail::check_defined(src, "copy_", "source");
  detail::prepare_inplace(*this, "copy_", {&src});
  HEED_CHECK(src.shape() == shape() || broadcast_shapes(src.shape(), shape(), "copy_") == shape(),
             "copy_", "cannot copy a tensor of shape {} into one of shape {}", shape_str(src.shape()),
             shape_str(shape()));
  if (numel() == 0) return *this;
  Tensor source = src.device() == device() ? src : src.to(device());
  kernels::StridedView from = detail::broadcast_view(source, shape());
  HEED_KERNEL(device(), copy)(detail::view_of(*this), from);
  return *this;
}

#define HEED_INPLACE_BINARY(method, expr, ...)                                  \
  Tensor& Tensor::method {                                                      \
    detail::prepare_inplace(*this, #method, {__VA_ARGS__});                     \
    Tensor result;                                                              \
    {                                                                           \
      NoGradGuard no_grad;                                                      \
      result = (expr);                                                          \
    }                                                                           \
    HEED_CHECK(result.shape() == shape(), #method,                              \
               "the result of shape {} does not fit the tensor of shape {}",    \
               shape_str(result.shape()), shape_str(shape()));                  \
    write_back(*this, result.dtype() == dtype() ? result : result.to(dtype())); \
    return *this;                                                               \
  }

HEED_INPLACE_BINARY(add_(const Tensor& other, double alpha), heed::add(*this, other, alpha), &other)
HEED_INPLACE_BINARY(add_(double value), heed::add_scalar(*this, value))
HEED_INPLACE_BINARY(sub_(const Tensor& other), sub(*this, other), &other)
HEED_INPLACE_BINARY(mul_(const Tensor& other), mul(*this, other), &other)
HEED_INPLACE_BINARY(mul_(double value), mul_scalar(*this, value))
HEED_INPLACE_BINARY(div_(double value), mul_scalar(*this, 1.0 / value))
HEED_INPLACE_BINARY(masked_fill_(const Tensor& mask, double value), heed::masked_fill(*this, mask, value),
                    &mask)
#undef HEED_INPLACE_BINARY

// ---- method forms of free ops ---------------------------------------------------------------

Tensor Tensor::exp() const { return heed::exp(*this); }
Tensor Tensor::log() const { return heed::log(*this); }
Tensor Tensor::sqrt() const { return heed::sqrt(*this); }
Tensor Tensor::rsqrt() const { return heed::rsqrt(*this); }
Tensor Tensor::abs() const { return heed::abs(*this); }
Tensor Tensor::neg() const { return heed::neg(*this); }
Tensor Tensor::relu() const { return heed::relu(*this); }
Tensor Tensor::tanh() const { return heed::tanh(*this); }
Tensor Tensor::sigmoid() const { return heed::sigmoid(*this); }
Tensor Tensor::pow(double exponent) const { return heed::pow(*this, exponent); }
Tensor Tensor::pow(const Tensor& exponent) const { return heed::pow(*this, exponent); }
Tensor Tensor::sum() const { return heed::sum(*this); }
Tensor Tensor::sum(const Dims& dims, bool keepdim) const { return heed::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return heed::mean(*this); }
Tensor Tensor::mean(const Dims& dims, bool keepdim) const { return heed::mean(*this, dims, keepdim); }
Tensor Tensor::var(const Dims& dims, bool keepdim, double correction) const {
  return heed::var(*this, dims, keepdim, correction);
}
Tensor Tensor::max() const { return heed::max(*this); }
Tensor Tensor::min() const { return heed::min(*this); }
Tensor Tensor::argmax() const { return heed::argmax(*this); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return heed::argmax(*this, dim, keepdim); }
Tensor Tensor::matmul(const Tensor& other) const { return heed::matmul(*this, other); }
Tensor Tensor::softmax(int64_t dim) const { return F::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return F::log_softmax(*this, dim); }
Tensor Tensor::masked_fill(const Tensor& mask, double value) const {
  return heed::masked_fill(*this, mask, value);
}
std::vector<Tensor> Tensor::split(int64_t split_size, int64_t dim) const {
  return heed::split(*this, split_size, dim);
}
std::vector<Tensor> Tensor::split(const std::vector<int64_t>& sizes, int64_t dim) const {
  return heed::split(*this, sizes, dim);
}
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim) const {
  return heed::chunk(*this, chunks, dim);
}

}  // namespace heed
