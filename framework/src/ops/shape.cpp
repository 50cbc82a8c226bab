// framework/src/ops/shape.cpp — views (share storage), joining, splitting and indexing,
// each forward beside its backward.
//
// Invariants: views never copy; reshape copies only when no strides can express the new
// shape (then it behaves like contiguous().view()); index ops validate every index.
#include <numeric>
#include <optional>

#include "heed/autograd.h"
#include "heed/ops.h"
#include "internal.h"

namespace heed {

using detail::make_alias;

namespace {

// Strides that let `new_shape` view a tensor of (shape, strides), or nullopt (PyTorch's rule:
// each run of dims that is contiguous in memory may be regrouped).
std::optional<Dims> view_strides(const Dims& shape, const Dims& strides, const Dims& new_shape) {
  if (shape.empty() || shape_numel(shape) == 0) return contiguous_strides(new_shape);
  Dims new_strides = Dims::filled(new_shape.size(), 1);
  int view_d = new_shape.size() - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int tensor_d = shape.size() - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= shape[tensor_d];
    if (tensor_d == 0 || (shape[tensor_d - 1] != 1 && strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        new_strides[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

// Resolves one -1 entry and checks the element count.
Dims infer_shape(const Dims& requested, int64_t numel, const char* op, const Dims& from) {
  Dims shape = requested;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      HEED_CHECK(infer < 0, op, "only one dimension can be -1, got {}", shape_str(requested));
      infer = i;
    } else {
      HEED_CHECK(shape[i] >= 0, op, "invalid size {} in shape {}", shape[i], shape_str(requested));
      HEED_CHECK(!__builtin_mul_overflow(known, shape[i], &known), op, "shape {} has too many elements",
                 shape_str(requested));
    }
  }
  if (infer >= 0) {
    HEED_CHECK(known != 0 && numel % known == 0, op, "shape {} is invalid for input of shape {} ({} elements)",
               shape_str(requested), shape_str(from), numel);
    shape[infer] = numel / known;
  }
  HEED_CHECK(shape_numel(shape) == numel, op, "shape {} is invalid for input of shape {} ({} elements)",
             shape_str(requested), shape_str(from), numel);
  return shape;
}

// Gradient of a strided sub-view: zeros of the input's shape with g written into the view.
Tensor embed_gradient(const Tensor& g, const Dims& input_shape, int dim, int64_t start, int64_t step, bool keep_dim) {
  Tensor full_grad = zeros(input_shape, g.options());
  Dims shape = input_shape;
  Dims strides = full_grad.strides();
  int64_t offset = start * strides[dim];
  if (keep_dim) {
    shape[dim] = g.shape()[dim];
    strides[dim] *= step;
  } else {
    shape.erase(dim);
    strides.erase(dim);
  }
  make_alias(full_grad, shape, strides, offset).copy_(g);
  return full_grad;
}

}  // namespace

// ---- views ----------------------------------------------------------------------------------

Tensor Tensor::view(const Dims& requested) const {
  detail::check_defined(*this, "view", "tensor");
  const Dims new_shape = infer_shape(requested, numel(), "view", shape());
  auto new_strides = view_strides(shape(), strides(), new_shape);
  HEED_CHECK(new_strides.has_value(), "view",
             "cannot view a tensor of shape {} and strides {} as {} without copying; use reshape()", shape_str(shape()),
             shape_str(strides()), shape_str(new_shape));
  Tensor out = make_alias(*this, new_shape, *new_strides, offset());
  if (any_requires_grad({this})) {
    const Dims in_shape = shape();
    detail::record("view", {this}, out,
                   [in_shape](const Tensor& g) -> std::vector<Tensor> { return {g.reshape(in_shape)}; });
  }
  return out;
}

Tensor Tensor::reshape(const Dims& requested) const {
  detail::check_defined(*this, "reshape", "tensor");
  const Dims new_shape = infer_shape(requested, numel(), "reshape", shape());
  if (view_strides(shape(), strides(), new_shape)) return view(new_shape);
  return contiguous().view(new_shape);
}

Tensor Tensor::permute(const Dims& order) const {
  detail::check_defined(*this, "permute", "tensor");
  const int n = dim();
  HEED_CHECK(order.size() == n, "permute", "expected {} dims in the order for shape {}, got {}", n, shape_str(shape()),
             shape_str(order));
  Dims new_shape = Dims::filled(n, 0), new_strides = Dims::filled(n, 0), inverse = Dims::filled(n, 0);
  std::vector<bool> used(n, false);
  for (int i = 0; i < n; ++i) {
    const int d = normalize_dim(order[i], n, "permute");
    HEED_CHECK(!used[d], "permute", "dim {} appears twice in the order {}", d, shape_str(order));
    used[d] = true;
    new_shape[i] = shape()[d];
    new_strides[i] = strides()[d];
    inverse[d] = i;
  }
  Tensor out = make_alias(*this, new_shape, new_strides, offset());
  if (any_requires_grad({this})) {
    detail::record("permute", {this}, out,
                   [inverse](const Tensor& g) -> std::vector<Tensor> { return {g.permute(inverse)}; });
  }
  return out;
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  detail::check_defined(*this, "transpose", "tensor");
  const int n = dim();
  const int a = normalize_dim(dim0, n, "transpose"), b = normalize_dim(dim1, n, "transpose");
  Dims order = Dims::filled(n, 0);
  std::iota(order.begin(), order.end(), 0);
  if (n == 0) return *this;  // dims 0 and -1 of a scalar name the scalar itself
  std::swap(order[a], order[b]);
  return permute(order);
}

Tensor Tensor::t() const {
  detail::check_defined(*this, "t", "tensor");
  HEED_CHECK(dim() <= 2, "t", "expects a tensor with at most 2 dims, got shape {}", shape_str(shape()));
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::slice(int64_t dim_, int64_t start, int64_t end, int64_t step) const {
  detail::check_defined(*this, "slice", "tensor");
  HEED_CHECK(dim() > 0, "slice", "cannot slice a 0-dim tensor");
  const int d = normalize_dim(dim_, dim(), "slice");
  HEED_CHECK(step > 0, "slice", "step must be positive, got {}", step);
  const int64_t size_d = shape()[d];
  if (start < 0) start += size_d;
  if (end < 0) end += size_d;
  start = std::clamp<int64_t>(start, 0, size_d);
  end = std::clamp<int64_t>(end, start, size_d);
  Dims new_shape = shape(), new_strides = strides();
  new_shape[d] = end == start ? 0 : (end - start - 1) / step + 1;  // no overflow for huge steps
  new_strides[d] *= step;
  Tensor out = make_alias(*this, new_shape, new_strides, offset() + start * strides()[d]);
  if (any_requires_grad({this})) {
    const Dims in_shape = shape();
    detail::record("slice", {this}, out, [in_shape, d, start, step](const Tensor& g) -> std::vector<Tensor> {
      return {embed_gradient(g, in_shape, d, start, step, true)};
    });
  }
  return out;
}

Tensor Tensor::narrow(int64_t dim_, int64_t start, int64_t length) const {
  detail::check_defined(*this, "narrow", "tensor");
  HEED_CHECK(dim() > 0, "narrow", "cannot narrow a 0-dim tensor");
  const int d = normalize_dim(dim_, dim(), "narrow");
  const int64_t size_d = shape()[d];
  if (start < 0) start += size_d;
  HEED_CHECK(start >= 0 && length >= 0 && length <= size_d - start, "narrow",
             "start {} and length {} do not fit dim {} of size {} (shape {})", start, length, d, size_d,
             shape_str(shape()));
  return slice(d, start, start + length, 1);
}

Tensor Tensor::select(int64_t dim_, int64_t index) const {
  detail::check_defined(*this, "select", "tensor");
  HEED_CHECK(dim() > 0, "select", "cannot select from a 0-dim tensor");
  const int d = normalize_dim(dim_, dim(), "select");
  const int64_t size_d = shape()[d];
  HEED_CHECK(index >= -size_d && index < size_d, "select", "index {} is out of range for dim {} of size {} (shape {})",
             index, d, size_d, shape_str(shape()));
  if (index < 0) index += size_d;
  Dims new_shape = shape(), new_strides = strides();
  new_shape.erase(d);
  new_strides.erase(d);
  Tensor out = make_alias(*this, new_shape, new_strides, offset() + index * strides()[d]);
  if (any_requires_grad({this})) {
    const Dims in_shape = shape();
    detail::record("select", {this}, out, [in_shape, d, index](const Tensor& g) -> std::vector<Tensor> {
      return {embed_gradient(g, in_shape, d, index, 1, false)};
    });
  }
  return out;
}

Tensor Tensor::expand(const Dims& requested) const {
  detail::check_defined(*this, "expand", "tensor");
  const int n = requested.size();
  HEED_CHECK(n >= dim(), "expand", "cannot expand shape {} to fewer dims {}", shape_str(shape()), shape_str(requested));
  Dims new_shape = Dims::filled(n, 0), new_strides = Dims::filled(n, 0);
  const int shift = n - dim();
  for (int i = 0; i < n; ++i) {
    const int j = i - shift;
    const int64_t want = requested[i];
    if (j < 0) {
      HEED_CHECK(want >= 0, "expand", "size -1 is not allowed for a new leading dim in {}", shape_str(requested));
      new_shape[i] = want;
      new_strides[i] = 0;
      continue;
    }
    const int64_t have = shape()[j];
    HEED_CHECK(want >= -1, "expand", "invalid size {} in {} (sizes are >= 0, or -1 to keep a dim)", want,
               shape_str(requested));
    if (want == -1 || want == have) {
      new_shape[i] = have;
      new_strides[i] = strides()[j];
    } else {
      HEED_CHECK(have == 1, "expand", "cannot expand shape {} to {}: dim {} has size {} (only size-1 dims expand)",
                 shape_str(shape()), shape_str(requested), j, have);
      new_shape[i] = want;
      new_strides[i] = 0;
    }
  }
  int64_t expanded_numel = 1;
  for (int64_t size : new_shape)
    HEED_CHECK(!__builtin_mul_overflow(expanded_numel, size, &expanded_numel), "expand",
               "shape {} has too many elements", shape_str(requested));
  Tensor out = make_alias(*this, new_shape, new_strides, offset());
  if (any_requires_grad({this})) {
    const Dims in_shape = shape();
    detail::record("expand", {this}, out,
                   [in_shape](const Tensor& g) -> std::vector<Tensor> { return {sum_to(g, in_shape)}; });
  }
  return out;
}

Tensor Tensor::squeeze() const {
  detail::check_defined(*this, "squeeze", "tensor");
  Dims new_shape;
  for (int64_t s : shape())
    if (s != 1) new_shape.push_back(s);
  return new_shape == shape() ? *this : reshape(new_shape);
}

Tensor Tensor::squeeze(int64_t dim_) const {
  detail::check_defined(*this, "squeeze", "tensor");
  if (dim() == 0) return *this;
  const int d = normalize_dim(dim_, dim(), "squeeze");
  if (shape()[d] != 1) return *this;
  Dims new_shape = shape();
  new_shape.erase(d);
  return view(new_shape);
}

Tensor Tensor::unsqueeze(int64_t dim_) const {
  detail::check_defined(*this, "unsqueeze", "tensor");
  HEED_CHECK(dim() < kMaxDims, "unsqueeze", "a tensor of shape {} already has the maximum of {} dims",
             shape_str(shape()), kMaxDims);
  const int d = normalize_dim(dim_, dim() + 1, "unsqueeze");
  Dims new_shape = shape();
  new_shape.insert(d, 1);
  return view(new_shape);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  detail::check_defined(*this, "flatten", "tensor");
  if (dim() == 0) return reshape({1});
  const int s = normalize_dim(start_dim, dim(), "flatten"), e = normalize_dim(end_dim, dim(), "flatten");
  HEED_CHECK(s <= e, "flatten", "start_dim {} comes after end_dim {}", s, e);
  Dims new_shape;
  for (int i = 0; i < s; ++i) new_shape.push_back(shape()[i]);
  new_shape.push_back(detail::prod(shape(), s, e + 1));
  for (int i = e + 1; i < dim(); ++i) new_shape.push_back(shape()[i]);
  return reshape(new_shape);
}

Tensor Tensor::unflatten(int64_t dim_, const Dims& sizes) const {
  detail::check_defined(*this, "unflatten", "tensor");
  HEED_CHECK(dim() > 0, "unflatten", "cannot unflatten a 0-dim tensor");
  const int d = normalize_dim(dim_, dim(), "unflatten");
  HEED_CHECK(!sizes.empty(), "unflatten", "sizes must be non-empty (shape {})", shape_str(shape()));
  HEED_CHECK(dim() - 1 + sizes.size() <= kMaxDims, "unflatten",
             "unflattening dim {} of shape {} into {} gives more than {} dims", d, shape_str(shape()), shape_str(sizes),
             kMaxDims);
  const Dims inner = infer_shape(sizes, shape()[d], "unflatten", shape());
  Dims new_shape;
  for (int i = 0; i < d; ++i) new_shape.push_back(shape()[i]);
  for (int64_t s : inner) new_shape.push_back(s);
  for (int i = d + 1; i < dim(); ++i) new_shape.push_back(shape()[i]);
  return view(new_shape);
}

// ---- joining and splitting ------------------------------------------------------------------

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim_) {
  HEED_PROFILE_OP("cat");
  HEED_CHECK(!tensors.empty(), "cat", "expected a non-empty list of tensors");
  const Tensor& first = tensors[0];
  detail::check_defined(first, "cat");
  const int n = first.dim();
  HEED_CHECK(n > 0, "cat", "zero-dimensional tensors cannot be concatenated");
  const int d = normalize_dim(dim_, n, "cat");
  DType dtype = first.dtype();
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    detail::check_defined(t, "cat");
    detail::check_same_device(first, t, "cat");
    HEED_CHECK(t.dim() == n, "cat", "tensor {} has shape {} but tensor 0 has shape {} (same rank needed)", i,
               shape_str(t.shape()), shape_str(first.shape()));
    for (int k = 0; k < n; ++k)
      HEED_CHECK(k == d || t.shape()[k] == first.shape()[k], "cat",
                 "tensor {} has shape {} but tensor 0 has shape {}: sizes must match except in dim {}", i,
                 shape_str(t.shape()), shape_str(first.shape()), d);
    dtype = promote_types(dtype, t.dtype());
    total += t.shape()[d];
  }
  Dims out_shape = first.shape();
  out_shape[d] = total;
  Tensor out = detail::make_empty(out_shape, dtype, first.device());
  int64_t at = 0;
  std::vector<int64_t> sizes;
  for (const Tensor& t : tensors) {
    if (t.numel() > 0) {
      Dims shape = out_shape;
      shape[d] = t.shape()[d];
      Tensor dst = make_alias(out, shape, out.strides(), at * out.strides()[d]);
      HEED_KERNEL(out.device(), copy)(detail::view_of(dst), detail::view_of(t));
    }
    sizes.push_back(t.shape()[d]);
    at += t.shape()[d];
  }
  if (any_requires_grad(tensors)) {
    std::vector<const Tensor*> inputs;
    std::vector<DType> dtypes;
    for (const Tensor& t : tensors) {
      inputs.push_back(&t);
      dtypes.push_back(t.dtype());
    }
    detail::record("cat", inputs, out, [sizes, d, dtypes](const Tensor& g) -> std::vector<Tensor> {
      std::vector<Tensor> grads;
      int64_t start = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        grads.push_back(g.narrow(d, start, sizes[i]).to(dtypes[i]));
        start += sizes[i];
      }
      return grads;
    });
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim_) {
  HEED_PROFILE_OP("stack");
  HEED_CHECK(!tensors.empty(), "stack", "expected a non-empty list of tensors");
  detail::check_defined(tensors[0], "stack");
  HEED_CHECK(tensors[0].dim() < kMaxDims, "stack", "stacking tensors of shape {} would give more than {} dims",
             shape_str(tensors[0].shape()), kMaxDims);
  const int d = normalize_dim(dim_, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> expanded;
  for (size_t i = 0; i < tensors.size(); ++i) {
    detail::check_defined(tensors[i], "stack");
    HEED_CHECK(tensors[i].shape() == tensors[0].shape(), "stack",
               "tensor {} has shape {} but tensor 0 has shape {} (all must match)", i, shape_str(tensors[i].shape()),
               shape_str(tensors[0].shape()));
    expanded.push_back(tensors[i].unsqueeze(d));
  }
  return cat(expanded, d);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim_) {
  detail::check_defined(x, "split");
  const int d = normalize_dim(dim_, x.dim(), "split");
  HEED_CHECK(split_size > 0, "split", "split_size must be positive, got {}", split_size);
  std::vector<Tensor> parts;
  const int64_t size_d = x.shape()[d];
  for (int64_t start = 0; start < size_d; start += split_size)
    parts.push_back(x.narrow(d, start, std::min(split_size, size_d - start)));
  if (parts.empty()) parts.push_back(x);
  return parts;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim_) {
  detail::check_defined(x, "split");
  const int d = normalize_dim(dim_, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    HEED_CHECK(s >= 0, "split", "negative split size {}", s);
    total += s;
  }
  HEED_CHECK(total == x.shape()[d], "split", "sizes {} sum to {}, but dim {} of shape {} has size {}",
             fmt::join(sizes, ","), total, d, shape_str(x.shape()), x.shape()[d]);
  std::vector<Tensor> parts;
  int64_t start = 0;
  for (int64_t s : sizes) {
    parts.push_back(x.narrow(d, start, s));
    start += s;
  }
  return parts;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim_) {
  detail::check_defined(x, "chunk");
  HEED_CHECK(chunks > 0, "chunk", "chunks must be positive, got {}", chunks);
  const int d = normalize_dim(dim_, x.dim(), "chunk");
  const int64_t size_d = x.shape()[d];
  const int64_t per = size_d == 0 ? 1 : (size_d - 1) / chunks + 1;  // ceil, without overflow
  return split(x, per, d);
}

// ---- indexing -------------------------------------------------------------------------------

Tensor index_select(const Tensor& x, int64_t dim_, const Tensor& index) {
  HEED_PROFILE_OP("index_select", &x, &index);
  detail::check_defined(x, "index_select");
  detail::check_defined(index, "index_select", "index");
  detail::check_same_device(x, index, "index_select");
  HEED_CHECK(index.dim() <= 1, "index_select", "index must be 0-D or 1-D, got shape {}", shape_str(index.shape()));
  HEED_CHECK(x.dim() > 0, "index_select", "cannot index a 0-dim tensor");
  const int d = normalize_dim(dim_, x.dim(), "index_select");
  const int64_t extent = x.shape()[d];
  Tensor idx = detail::checked_indices(index, extent, "index_select");
  Tensor src = x.contiguous();
  const int64_t outer = detail::prod(x.shape(), 0, d), inner = detail::prod(x.shape(), d + 1, x.dim());
  Dims out_shape = x.shape();
  out_shape[d] = idx.numel();
  Tensor out = detail::make_empty(out_shape, x.dtype(), x.device());
  if (out.numel() > 0) {
    const auto index_select_kernel = HEED_KERNEL(x.device(), index_select);
    index_select_kernel(x.dtype(), src.raw_data(), outer, extent, inner, idx.data_ptr<int64_t>(), idx.numel(),
                        out.raw_data());
  }
  if (any_requires_grad({&x})) {
    const Dims in_shape = x.shape();
    SavedTensor saved_idx(idx, "index_select");
    detail::record("index_select", {&x}, out,
                   [in_shape, outer, extent, inner, saved_idx](const Tensor& g) -> std::vector<Tensor> {
                     Tensor idx = saved_idx.get();
                     Tensor grad = zeros(in_shape, g.options());
                     Tensor gc = g.contiguous();
                     if (gc.numel() > 0) {
                       const auto index_add_kernel = HEED_KERNEL(g.device(), index_add);
                       index_add_kernel(g.dtype(), grad.raw_data(), outer, extent, inner, idx.data_ptr<int64_t>(),
                                        idx.numel(), gc.raw_data());
                     }
                     return {grad};
                   });
  }
  return out;
}

Tensor gather(const Tensor& x, int64_t dim_, const Tensor& index) {
  HEED_PROFILE_OP("gather", &x, &index);
  detail::check_defined(x, "gather");
  detail::check_defined(index, "gather", "index");
  detail::check_same_device(x, index, "gather");
  HEED_CHECK(x.dim() > 0 && index.dim() == x.dim(), "gather",
             "index must have as many dims as the input: input {} vs index {}", shape_str(x.shape()),
             shape_str(index.shape()));
  const int d = normalize_dim(dim_, x.dim(), "gather");
  for (int k = 0; k < x.dim(); ++k)
    HEED_CHECK(k == d || index.shape()[k] == x.shape()[k], "gather",
               "index shape {} must match input shape {} in every dim but {}", shape_str(index.shape()),
               shape_str(x.shape()), d);
  const int64_t extent = x.shape()[d];
  Tensor idx = detail::checked_indices(index, extent, "gather");
  Tensor src = x.contiguous();
  const int64_t outer = detail::prod(x.shape(), 0, d), inner = detail::prod(x.shape(), d + 1, x.dim());
  const int64_t index_extent = index.shape()[d];
  Tensor out = detail::make_empty(index.shape(), x.dtype(), x.device());
  if (out.numel() > 0) {
    const auto gather_kernel = HEED_KERNEL(x.device(), gather);
    gather_kernel(x.dtype(), src.raw_data(), outer, extent, inner, idx.data_ptr<int64_t>(), index_extent,
                  out.raw_data());
  }
  if (any_requires_grad({&x})) {
    const Dims in_shape = x.shape();
    SavedTensor saved_idx(idx, "gather");
    detail::record("gather", {&x}, out,
                   [in_shape, outer, extent, inner, index_extent, saved_idx](const Tensor& g) -> std::vector<Tensor> {
                     Tensor idx = saved_idx.get();
                     Tensor grad = zeros(in_shape, g.options());
                     Tensor gc = g.contiguous();
                     if (gc.numel() > 0) {
                       const auto scatter_add_kernel = HEED_KERNEL(g.device(), scatter_add);
                       scatter_add_kernel(g.dtype(), grad.raw_data(), outer, extent, inner, idx.data_ptr<int64_t>(),
                                          index_extent, gc.raw_data());
                     }
                     return {grad};
                   });
  }
  return out;
}

}  // namespace heed
