// framework/src/core/print.cpp — PyTorch-style printing of tensors.
//
// Invariants (the rules of torch/_tensor_str.py with its default options):
//  * Tensors with more than 1000 elements are summarized: every dim longer than 6 shows its
//    first and last 3 entries with "..." between, and the printout ends with shape=[...].
//  * One number format is chosen from the shown nonzero finite values of a float tensor:
//    integer mode ("3.") when all are integers, else fixed ("0.1235"), with scientific
//    ("1.2346e-05") when max/min > 1000, max > 1e8 or (fixed only) min < 1e-4.
//  * Entries are right-aligned to the widest shown nonzero finite value; 1-D runs wrap at
//    80 columns; nan/inf print as nan, inf, -inf.
//  * Suffixes: dtype (unless float32, int64 or bool), device (unless CPU), shape (when
//    summarized or empty), then grad_fn or requires_grad.
#include <cmath>
#include <sstream>

#include "heed/autograd.h"
#include "heed/ops.h"
#include "internal.h"

namespace heed {

namespace {

constexpr int64_t kSummarizeThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr int kLineWidth = 80;

struct NumberFormat {
  enum Kind { Integer, FloatInteger, Fixed, Scientific, Bool } kind = Fixed;
  int width = 1;
};

std::string format_number(double v, const NumberFormat& f) {
  if (f.kind == NumberFormat::Bool) return v != 0 ? "true" : "false";
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  switch (f.kind) {
    case NumberFormat::Integer:
      return fmt::format("{:.0f}", v);
    case NumberFormat::FloatInteger:
      return fmt::format("{:.0f}.", v);
    case NumberFormat::Scientific:
      return fmt::format("{:.4e}", v);
    case NumberFormat::Fixed:
      return fmt::format("{:.4f}", v);
    case NumberFormat::Bool:
      break;
  }
  return "";
}

std::string padded(double v, const NumberFormat& f) {
  std::string s;
  const std::string number = format_number(v, f);
  for (int i = static_cast<int>(number.size()); i < f.width; ++i) s += ' ';
  s += number;
  return s;
}

// Indices of a dim that are shown: all, or the edges (with -1 for the ellipsis).
std::vector<int64_t> shown(int64_t size, bool summarize) {
  std::vector<int64_t> idx;
  if (!summarize || size <= 2 * kEdgeItems) {
    for (int64_t i = 0; i < size; ++i) idx.push_back(i);
  } else {
    for (int64_t i = 0; i < kEdgeItems; ++i) idx.push_back(i);
    idx.push_back(-1);
    for (int64_t i = size - kEdgeItems; i < size; ++i) idx.push_back(i);
  }
  return idx;
}

// Collects the values that will be printed (row-major `values` of a contiguous `shape`).
void collect_shown(const std::vector<double>& values, const Dims& shape, const Dims& strides, int dim, int64_t offset,
                   bool summarize, std::vector<double>& out) {
  if (dim == shape.size()) {
    out.push_back(values[static_cast<size_t>(offset)]);
    return;
  }
  for (int64_t i : shown(shape[dim], summarize))
    if (i >= 0) collect_shown(values, shape, strides, dim + 1, offset + i * strides[dim], summarize, out);
}

NumberFormat choose_format(DType dtype, const std::vector<double>& shown_values) {
  NumberFormat f;
  if (dtype == kBool) {
    f.kind = NumberFormat::Bool;
    f.width = 5;  // "false"
    return f;
  }
  if (is_integral(dtype)) {
    f.kind = NumberFormat::Integer;
    for (double v : shown_values) f.width = std::max<int>(f.width, static_cast<int>(format_number(v, f).size()));
    return f;
  }
  double max_abs = 0, min_abs = std::numeric_limits<double>::infinity();
  bool all_integers = true, any = false;
  for (double v : shown_values) {
    if (!std::isfinite(v) || v == 0) continue;
    any = true;
    max_abs = std::max(max_abs, std::fabs(v));
    min_abs = std::min(min_abs, std::fabs(v));
    all_integers = all_integers && v == std::ceil(v);
  }
  if (!any) {
    f.kind = NumberFormat::FloatInteger;  // zeros (and nan/inf) print as "0.", as in PyTorch
    return f;
  }
  if (all_integers) {
    f.kind = (max_abs / min_abs > 1000.0 || max_abs > 1e8) ? NumberFormat::Scientific : NumberFormat::FloatInteger;
  } else {
    f.kind = (max_abs / min_abs > 1000.0 || max_abs > 1e8 || min_abs < 1e-4) ? NumberFormat::Scientific
                                                                             : NumberFormat::Fixed;
  }
  for (double v : shown_values)
    if (std::isfinite(v) && v != 0) f.width = std::max<int>(f.width, static_cast<int>(format_number(v, f).size()));
  return f;
}

// One dim of the printout; `indent` is the column of the opening bracket.
void print_dim(std::ostringstream& os, const std::vector<double>& values, const Dims& shape, const Dims& strides,
               int dim, int64_t offset, const NumberFormat& f, bool summarize, int indent) {
  const std::vector<int64_t> idx = shown(shape[dim], summarize);
  os << '[';
  if (dim == shape.size() - 1) {
    const int per_line = std::max(1, (kLineWidth - indent) / (f.width + 2));
    for (size_t k = 0; k < idx.size(); ++k) {
      if (k > 0) {
        os << ',';
        if (k % static_cast<size_t>(per_line) == 0) {
          os << '\n';
          for (int i = 0; i <= indent; ++i) os << ' ';
        } else {
          os << ' ';
        }
      }
      if (idx[k] < 0)
        os << " ...";
      else
        os << padded(values[static_cast<size_t>(offset + idx[k] * strides[dim])], f);
    }
  } else {
    const int blank_lines = shape.size() - dim - 1;
    for (size_t k = 0; k < idx.size(); ++k) {
      if (k > 0) {
        os << ',';
        for (int i = 0; i < blank_lines; ++i) os << '\n';
        for (int i = 0; i <= indent; ++i) os << ' ';
      }
      if (idx[k] < 0)
        os << "...";
      else
        print_dim(os, values, shape, strides, dim + 1, offset + idx[k] * strides[dim], f, summarize, indent + 1);
    }
  }
  os << ']';
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  NoGradGuard no_grad;  // printing records nothing
  const Tensor host = (device().is_cpu() ? *this : to(kCPU)).contiguous();
  const std::vector<double> values = host.to_vector<double>();
  const bool summarize = numel() > kSummarizeThreshold;

  std::vector<double> shown_values;
  if (dim() == 0)
    shown_values = values;
  else if (numel() > 0)
    collect_shown(values, host.shape(), host.strides(), 0, 0, summarize, shown_values);
  const NumberFormat f = choose_format(dtype(), shown_values);

  std::ostringstream os;
  os << "tensor(";
  if (dim() == 0) {
    os << format_number(values[0], f);
  } else if (numel() == 0) {
    os << "[]";
  } else {
    print_dim(os, values, host.shape(), host.strides(), 0, 0, f, summarize, 7);
  }
  std::vector<std::string> extras;
  if (dtype() != kFloat32 && dtype() != kInt64 && dtype() != kBool)
    extras.push_back(fmt::format("dtype={}", dtype_name(dtype())));
  if (!device().is_cpu()) extras.push_back(fmt::format("device={}", device().str()));
  if (summarize || (numel() == 0 && dim() != 1)) extras.push_back(fmt::format("shape={}", shape_str(shape())));
  if (grad_fn())
    extras.push_back(fmt::format("grad_fn=<{}>", grad_fn()->name()));
  else if (requires_grad())
    extras.push_back("requires_grad=true");
  for (const std::string& e : extras) os << ", " << e;
  os << ')';
  return os.str();
}

}  // namespace heed
