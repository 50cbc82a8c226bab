// framework/src/print.cpp — PyTorch-style printing of tensors.
//
// Invariants: large tensors (more than 1000 elements) show the first and last 3 entries of
// each dim with "..." between; one number format (fixed 4 decimals, scientific or integer)
// is chosen for the whole tensor and columns are aligned.
#include <cmath>
#include <sstream>

#include "heed/autograd.h"
#include "heed/ops.h"
#include "internal.h"

namespace heed {

namespace {

constexpr int64_t kSummarizeThreshold = 1000;
constexpr int64_t kEdgeItems = 3;

struct NumberFormat {
  enum Kind { Integer, Fixed, Scientific, Bool } kind = Fixed;
  int width = 0;
};

std::string format_number(double v, const NumberFormat& f) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  switch (f.kind) {
    case NumberFormat::Bool: return v != 0 ? "true" : "false";
    case NumberFormat::Integer: return fmt::format("{:.0f}", v);
    case NumberFormat::Scientific: return fmt::format("{:.4e}", v);
    case NumberFormat::Fixed: return fmt::format("{:.4f}", v);
  }
  return "";
}

// Indices of a dim that are shown: all, or the edges when summarizing.
std::vector<int64_t> shown(int64_t size, bool summarize) {
  std::vector<int64_t> idx;
  if (!summarize || size <= 2 * kEdgeItems) {
    for (int64_t i = 0; i < size; ++i) idx.push_back(i);
  } else {
    for (int64_t i = 0; i < kEdgeItems; ++i) idx.push_back(i);
    idx.push_back(-1);  // the ellipsis
    for (int64_t i = size - kEdgeItems; i < size; ++i) idx.push_back(i);
  }
  return idx;
}

void print_dim(std::ostringstream& os, const std::vector<double>& values, const Dims& shape, const Dims& strides,
               int dim, int64_t offset, const NumberFormat& f, bool summarize, int indent) {
  if (dim == shape.size()) {
    std::string s = format_number(values[offset], f);
    os << std::string(std::max<int>(0, f.width - static_cast<int>(s.size())), ' ') << s;
    return;
  }
  os << '[';
  const std::vector<int64_t> idx = shown(shape[dim], summarize);
  for (size_t k = 0; k < idx.size(); ++k) {
    if (k > 0) {
      os << ',';
      if (dim == shape.size() - 1) {
        os << ' ';
      } else {
        os << std::string(static_cast<size_t>(shape.size() - dim - 1), '\n') << std::string(indent + dim + 1, ' ');
      }
    }
    if (idx[k] < 0) {
      os << "...";
      continue;
    }
    print_dim(os, values, shape, strides, dim + 1, offset + idx[k] * strides[dim], f, summarize, indent);
  }
  os << ']';
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  const Tensor host = (device().is_cpu() ? *this : to(kCPU)).contiguous();
  const std::vector<double> values = host.to_vector<double>();
  const bool summarize = numel() > kSummarizeThreshold;

  NumberFormat f;
  if (dtype() == kBool) {
    f.kind = NumberFormat::Bool;
  } else if (is_integral(dtype())) {
    f.kind = NumberFormat::Integer;
  } else {
    double max_abs = 0, min_abs = std::numeric_limits<double>::infinity();
    bool all_integers = true;
    for (double v : values) {
      if (!std::isfinite(v)) continue;
      max_abs = std::max(max_abs, std::fabs(v));
      if (v != 0) min_abs = std::min(min_abs, std::fabs(v));
      all_integers = all_integers && v == std::floor(v);
    }
    if (max_abs >= 1e8 || (min_abs < 1e-4 && min_abs > 0) || (max_abs > 0 && max_abs / min_abs > 1e6 && !all_integers))
      f.kind = NumberFormat::Scientific;
    else
      f.kind = NumberFormat::Fixed;
  }
  for (double v : values) f.width = std::max<int>(f.width, static_cast<int>(format_number(v, f).size()));

  std::ostringstream os;
  os << "tensor(";
  if (dim() == 0) {
    os << format_number(values.empty() ? 0.0 : values[0], f);
  } else {
    print_dim(os, values, host.shape(), host.strides(), 0, 0, f, summarize, 7);
  }
  std::vector<std::string> extras;
  if (dtype() != kFloat32 && dtype() != kInt64 && dtype() != kBool) extras.push_back(fmt::format("dtype={}", dtype_name(dtype())));
  if (!device().is_cpu()) extras.push_back(fmt::format("device={}", device().str()));
  if (summarize || numel() == 0) extras.push_back(fmt::format("shape={}", shape_str(shape())));
  if (grad_fn()) extras.push_back(fmt::format("grad_fn=<{}>", grad_fn()->name()));
  else if (requires_grad()) extras.push_back("requires_grad=true");
  for (const std::string& e : extras) os << ", " << e;
  os << ')';
  return os.str();
}

}  // namespace heed
