// framework/src/core/tensor.cpp — Tensor metadata, element access, conversion, autograd entry
// points and in-place ops. Views live in ops/shape.cpp, math in ops/*.cpp.
#include "heed/tensor.h"

#include <cmath>
#include <limits>

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
    HEED_CHECK(device.index >= 0 && device.index < count, "to",
               "CUDA device {} is not available ({} device(s) found{}{})", device.index, count,
               reason.empty() ? "" : ": ", reason);
  }
  data_ = HEED_KERNEL(device, allocate)(nbytes);
  detail::storage_created(device_, nbytes_, category_);
}

Storage::~Storage() {
  detail::storage_freed(device_, nbytes_, category_);
  if (data_) kernels::kernel_table(device_.type).deallocate(data_, nbytes_);
}

Device parse_device(const std::string& text) {
  if (text == "cpu") return kCPU;
  if (text == "cuda") return kCUDA;
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5) {
    int index = 0;
    for (char c : text.substr(5)) {
      HEED_CHECK(c >= '0' && c <= '9', "parse_device", "bad device '{}' (expected cpu, cuda or cuda:N)", text);
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
  int64_t n = 1;
  for (int64_t s : shape) {
    HEED_CHECK(s >= 0, "empty", "negative size in shape {}", shape_str(shape));
    HEED_CHECK(!__builtin_mul_overflow(n, s, &n) && n <= std::numeric_limits<int64_t>::max() / 8, "empty",
               "shape {} has too many elements", shape_str(shape));
  }
  auto impl = std::make_shared<TensorImpl>();
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

void prepare_inplace(const Tensor& target, const char* op, std::initializer_list<const Tensor*> others) {
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
  // A broadcast (expanded) tensor has elements that share memory: writing them is ambiguous.
  for (int d = 0; d < target.dim(); ++d)
    HEED_CHECK(target.strides()[d] != 0 || target.shape()[d] <= 1, op,
               "cannot write in place into a tensor of shape {} and strides {}: several of its "
               "elements share one memory location (it was expanded); clone() it first",
               shape_str(target.shape()), shape_str(target.strides()));
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
      fail(op, "index {} at position {} is out of range for a dimension of size {} (expected 0..{})", p[i], i, extent,
           extent - 1);
    }
  }
  return index.device().is_cpu() ? idx : idx.to(index.device());
}

}  // namespace detail

// ---- metadata -------------------------------------------------------------------------------

int64_t Tensor::size(int64_t dim) const { return shape()[normalize_dim(dim, this->dim(), "size")]; }

int64_t Tensor::stride(int64_t dim) const { return strides()[normalize_dim(dim, this->dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  const TensorImpl& t = impl();
  // An empty tensor is contiguous whatever its strides (as in PyTorch): contiguous_strides
  // gives (3, 0) the strides (1, 1), which the loop below would call non-contiguous.
  if (shape_numel(t.shape) == 0) return true;
  int64_t expected = 1;
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
    case kFloat32:
      return *static_cast<const float*>(p);
    case kFloat64:
      return *static_cast<const double*>(p);
    case kFloat16:
      return half_bits_to_float(*static_cast<const uint16_t*>(p));
    case kBFloat16:
      return bfloat16_bits_to_float(*static_cast<const uint16_t*>(p));
    case kInt32:
      return *static_cast<const int32_t*>(p);
    case kInt64:
      return static_cast<double>(*static_cast<const int64_t*>(p));
    case kBool:
      return *static_cast<const bool*>(p) ? 1.0 : 0.0;
  }
  return 0.0;
}
// One element of dtype `t` as T, with the conversion rules of the copy kernel and no
// undefined behaviour: float -> integer truncates toward zero, NaN gives 0 and values out of
// range saturate; int64 -> int32 wraps (as a dtype conversion does); anything -> bool is != 0.
template <typename T>
T convert_from(const void* p, DType t) {
  if constexpr (std::is_same_v<T, bool>) {
    return load_as_double(p, t) != 0.0;  // NaN != 0 is true, as in PyTorch
  } else if constexpr (std::is_integral_v<T>) {
    if (t == kInt64) return static_cast<T>(*static_cast<const int64_t*>(p));
    if (t == kInt32) return static_cast<T>(*static_cast<const int32_t*>(p));
    if (t == kBool) return static_cast<T>(*static_cast<const bool*>(p) ? 1 : 0);
    const double v = load_as_double(p, t);
    if (std::isnan(v)) return 0;
    // 2^63 and 2^31 are exact doubles; anything at or beyond the limits saturates.
    if (v <= static_cast<double>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
    if (v >= -static_cast<double>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  } else {
    return static_cast<T>(load_as_double(p, t));
  }
}
}  // namespace

template <typename T>
T Tensor::item() const {
  detail::check_defined(*this, "item", "tensor");
  HEED_CHECK(numel() == 1, "item", "expected a tensor with one element, got shape {}", shape_str(shape()));
  Tensor host = device().is_cpu() ? *this : to(kCPU);
  return convert_from<T>(host.raw_data(), host.dtype());
}

template <typename T>
T Tensor::at(const Dims& index) const {
  detail::check_defined(*this, "at", "tensor");
  HEED_CHECK(index.size() == dim(), "at", "expected {} indices for shape {}, got {}", dim(), shape_str(shape()),
             index.size());
  int64_t offset_elems = 0;
  for (int i = 0; i < dim(); ++i) {
    int64_t k = index[i] < 0 ? index[i] + shape()[i] : index[i];
    HEED_CHECK(k >= 0 && k < shape()[i], "at", "index {} is out of range for dim {} of shape {}", index[i], i,
               shape_str(shape()));
    offset_elems += k * strides()[i];
  }
  Tensor element = detail::make_alias(*this, {}, {}, offset() + offset_elems);
  return element.item<T>();
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  detail::check_defined(*this, "to_vector", "tensor");
  NoGradGuard no_grad;  // reading values records nothing
  Tensor host = (device().is_cpu() ? *this : to(kCPU)).contiguous();
  std::vector<T> out(static_cast<size_t>(host.numel()));
  const size_t esize = host.element_size();
  const char* base = static_cast<const char*>(host.raw_data());
  for (size_t i = 0; i < out.size(); ++i) out[i] = convert_from<T>(base + i * esize, host.dtype());
  return out;
}

#define HEED_INSTANTIATE_ACCESS(T)             \
  template T Tensor::item<T>() const;          \
  template T Tensor::at<T>(const Dims&) const; \
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
  const Device transfer_device = device.is_cpu() ? src.device() : device;  // the non-CPU end
  const auto copy_host_kernel = HEED_KERNEL(transfer_device, copy_host);
  copy_host_kernel(out.raw_data(), staged.raw_data(), static_cast<size_t>(out.numel()) * dtype_size(dtype),
                   device.is_cpu());
  return out;
}
}  // namespace

Tensor Tensor::to(DType dtype) const {
  HEED_PROFILE_OP("to_dtype", this);
  detail::check_defined(*this, "to", "tensor");
  if (dtype == this->dtype()) return *this;
  Tensor out = copy_to(*this, dtype, device());
  // As in PyTorch, a conversion to an integer or bool dtype ends the history (no gradient
  // flows through it); a float -> float conversion is differentiable.
  if (is_floating(dtype) && any_requires_grad({this})) {
    const DType from = this->dtype();
    detail::record("to_dtype", {this}, out, [from](const Tensor& g) -> std::vector<Tensor> { return {g.to(from)}; });
  }
  return out;
}

Tensor Tensor::to(Device device) const {
  HEED_PROFILE_OP("to_device", this);
  detail::check_defined(*this, "to", "tensor");
  if (device == this->device()) return *this;
  Tensor out = copy_to(*this, dtype(), device);
  if (any_requires_grad({this})) {
    const Device from = this->device();
    detail::record("to_device", {this}, out, [from](const Tensor& g) -> std::vector<Tensor> { return {g.to(from)}; });
  }
  return out;
}

Tensor Tensor::contiguous() const {
  HEED_PROFILE_OP("contiguous", this);
  detail::check_defined(*this, "contiguous", "tensor");
  if (is_contiguous()) return *this;
  Tensor out = copy_to(*this, dtype(), device());
  if (any_requires_grad({this}))
    detail::record("contiguous", {this}, out, [](const Tensor& g) -> std::vector<Tensor> { return {g}; });
  return out;
}

Tensor contiguous(const Tensor& x) { return x.contiguous(); }

Tensor Tensor::clone() const {
  HEED_PROFILE_OP("clone", this);
  detail::check_defined(*this, "clone", "tensor");
  Tensor out = copy_to(*this, dtype(), device());
  if (any_requires_grad({this}))
    detail::record("clone", {this}, out, [](const Tensor& g) -> std::vector<Tensor> { return {g}; });
  return out;
}

Tensor Tensor::detach() const {
  detail::check_defined(*this, "detach", "tensor");
  return detail::make_alias(*this, shape(), strides(), offset());
}

// ---- autograd -------------------------------------------------------------------------------

Tensor& Tensor::requires_grad_(bool value) {
  detail::check_defined(*this, "requires_grad_", "tensor");
  HEED_CHECK(!value || is_floating(dtype()), "requires_grad_", "only floating-point tensors can require grad (got {})",
             dtype_name(dtype()));
  HEED_CHECK(value || is_leaf(), "requires_grad_",
             "requires_grad can only be turned off on leaf tensors; use detach()");
  impl().requires_grad = value;
  return *this;
}

void Tensor::set_grad(const Tensor& grad) {
  detail::check_defined(*this, "set_grad", "tensor");
  if (grad.defined()) {
    HEED_CHECK(grad.shape() == shape(), "set_grad", "gradient of shape {} for a tensor of shape {}",
               shape_str(grad.shape()), shape_str(shape()));
    HEED_CHECK(grad.dtype() == dtype(), "set_grad", "gradient of dtype {} for a tensor of dtype {} (shape {})",
               dtype_name(grad.dtype()), dtype_name(dtype()), shape_str(shape()));
    detail::check_same_device(grad, *this, "set_grad");
  }
  impl().grad = grad.defined() ? grad.impl_ptr() : nullptr;
}

void Tensor::zero_grad() {
  detail::check_defined(*this, "zero_grad", "tensor");
  impl().grad = nullptr;
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const { run_backward({*this}, {grad}, retain_graph); }

void Tensor::register_hook(TensorHook hook) const {
  detail::check_defined(*this, "register_hook", "tensor");
  HEED_CHECK(hook != nullptr, "register_hook", "the hook is empty");
  HEED_CHECK(requires_grad(), "register_hook", "cannot register a hook on a tensor that does not require grad");
  if (grad_fn())
    grad_fn()->add_output_hook(std::move(hook));
  else
    impl().hooks.push_back(std::move(hook));
}

void Tensor::retain_grad() const {
  detail::check_defined(*this, "retain_grad", "tensor");
  HEED_CHECK(requires_grad(), "retain_grad", "the tensor of shape {} does not require grad", shape_str(shape()));
  if (is_leaf()) return;
  // The engine stores the gradient after every hook of the node ran (calling this twice
  // changes nothing); heed::grad() leaves it alone.
  grad_fn()->set_retained_output(impl_ptr());
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
  const auto copy_kernel = HEED_KERNEL(target.device(), copy);
  copy_kernel(detail::view_of(target), detail::view_of(value.to(target.device())));
}
}  // namespace

namespace {
Tensor& fill_named(Tensor& target, double value, const char* op) {
  HEED_PROFILE_OP(op, &target);
  detail::prepare_inplace(target, op);
  if (target.numel() > 0) HEED_KERNEL(target.device(), fill)(detail::view_of(target), value);
  return target;
}
}  // namespace

Tensor& Tensor::fill_(double value) { return fill_named(*this, value, "fill_"); }
Tensor& Tensor::zero_() { return fill_named(*this, 0.0, "zero_"); }

Tensor& Tensor::copy_(const Tensor& src) {
  HEED_PROFILE_OP("copy_", this, &src);
  detail::check_defined(*this, "copy_", "tensor");
  detail::check_defined(src, "copy_", "source");
  HEED_CHECK(src.dim() <= dim() && broadcast_shapes(src.shape(), shape(), "copy_") == shape(), "copy_",
             "cannot copy a tensor of shape {} into one of shape {} (the source must "
             "broadcast to the destination)",
             shape_str(src.shape()), shape_str(shape()));
  detail::prepare_inplace(*this, "copy_", {&src});
  if (numel() == 0) return *this;
  Tensor source = src.device() == device() ? src : src.to(device());
  kernels::StridedView from = detail::broadcast_view(source, shape());
  HEED_KERNEL(device(), copy)(detail::view_of(*this), from);
  return *this;
}

namespace {
// Runs an in-place update: checks that `target` may be written, computes the out-of-place
// result without recording it, checks that it keeps the shape, bumps the version, writes back.
template <typename Compute>
Tensor& inplace_update(Tensor& target, const char* op, std::initializer_list<const Tensor*> others, Compute&& compute) {
  HEED_PROFILE_OP(op, &target);
  detail::check_defined(target, op, "tensor");
  for (const Tensor* o : others) detail::check_defined(*o, op, "operand");
  Tensor result;
  try {
    NoGradGuard no_grad;
    result = compute();
  } catch (const Error& e) {
    // Name the in-place op the user called ("heed::add_: ..."), not its out-of-place core.
    const std::string message = e.what();
    const size_t colon = message.find(": ");
    fail(op, "{}", colon == std::string::npos ? message : message.substr(colon + 2));
  }
  HEED_CHECK(is_floating(target.dtype()) || !is_floating(result.dtype()), op,
             "cannot write a {} result into the {} tensor of shape {} in place (PyTorch refuses this "
             "cast too); convert the tensor to a floating dtype first",
             dtype_name(result.dtype()), dtype_name(target.dtype()), shape_str(target.shape()));
  HEED_CHECK(result.shape() == target.shape(), op,
             "the result of shape {} does not fit the tensor of shape {} (the operand must "
             "broadcast to the tensor's shape)",
             shape_str(result.shape()), shape_str(target.shape()));
  detail::prepare_inplace(target, op, others);
  write_back(target, result.dtype() == target.dtype() ? result : result.to(target.dtype()));
  return target;
}
}  // namespace

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  return inplace_update(*this, "add_", {&other}, [&] { return heed::add(*this, other, alpha); });
}
namespace {
// An integer tensor cannot hold the result of an update by a fractional (or non-finite)
// scalar; PyTorch refuses it too ("result type Float can't be cast to Long").
void check_integral_scalar(const Tensor& target, double value, const char* op) {
  detail::check_defined(target, op, "tensor");
  HEED_CHECK(is_floating(target.dtype()) || (std::isfinite(value) && value == std::trunc(value)), op,
             "cannot update a {} tensor of shape {} in place with the non-integer scalar {}; convert it "
             "to a floating dtype first",
             dtype_name(target.dtype()), shape_str(target.shape()), value);
}

// A floating, contiguous tensor updated by a scalar: the element-wise kernel reads and writes
// its own storage (in == out is safe element by element), with no temporary of its size. The
// same kernel and scalar as the out-of-place op, so the same values. False: not applicable.
bool scalar_update_in_storage(Tensor& target, kernels::UnaryOp op, double value, const char* name) {
  if (!target.defined() || !is_floating(target.dtype()) || !target.is_contiguous()) return false;
  HEED_PROFILE_OP(name, &target);
  detail::prepare_inplace(target, name);
  if (target.numel() > 0) HEED_KERNEL(target.device(), unary)
  (op, target.dtype(), target.raw_data(), target.raw_data(), target.numel(), value);
  return true;
}
}  // namespace
Tensor& Tensor::add_(double value) {
  check_integral_scalar(*this, value, "add_");
  if (scalar_update_in_storage(*this, kernels::UnaryOp::AddScalar, value, "add_")) return *this;
  return inplace_update(*this, "add_", {}, [&] { return heed::add_scalar(*this, value); });
}
Tensor& Tensor::sub_(const Tensor& other) {
  return inplace_update(*this, "sub_", {&other}, [&] { return heed::sub(*this, other); });
}
Tensor& Tensor::mul_(const Tensor& other) {
  return inplace_update(*this, "mul_", {&other}, [&] { return heed::mul(*this, other); });
}
Tensor& Tensor::mul_(double value) {
  check_integral_scalar(*this, value, "mul_");
  if (scalar_update_in_storage(*this, kernels::UnaryOp::MulScalar, value, "mul_")) return *this;
  return inplace_update(*this, "mul_", {}, [&] { return heed::mul_scalar(*this, value); });
}
Tensor& Tensor::div_(double value) {
  detail::check_defined(*this, "div_", "tensor");
  HEED_CHECK(is_floating(dtype()), "div_",
             "in-place division of a {} tensor of shape {} would truncate; convert it to a floating "
             "dtype first",
             dtype_name(dtype()), shape_str(shape()));
  // A true division (x / 3 is not x * (1/3) in floating point), computed in float32 at least.
  const DType scalar_dtype = is_half(dtype()) ? kFloat32 : dtype();
  return inplace_update(*this, "div_", {}, [&] {
    return heed::div(*this, scalar_tensor(value, TensorOptions(scalar_dtype).device(device())));
  });
}
Tensor& Tensor::masked_fill_(const Tensor& mask, double value) {
  return inplace_update(*this, "masked_fill_", {&mask}, [&] { return heed::masked_fill(*this, mask, value); });
}

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
Tensor Tensor::masked_fill(const Tensor& mask, double value) const { return heed::masked_fill(*this, mask, value); }
std::vector<Tensor> Tensor::split(int64_t split_size, int64_t dim) const { return heed::split(*this, split_size, dim); }
std::vector<Tensor> Tensor::split(const std::vector<int64_t>& sizes, int64_t dim) const {
  return heed::split(*this, sizes, dim);
}
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim) const { return heed::chunk(*this, chunks, dim); }

}  // namespace heed
