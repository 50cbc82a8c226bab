// framework/src/core/anomaly.cpp — anomaly detection (see heed/anomaly.h).
//
// Invariants: all state is thread-local; statistics are computed with grad mode off on a
// float64 host copy, and a re-entrancy flag keeps the checks from checking themselves.
// Records are kept in a ring of kAnomalyLogCapacity entries.
#include "heed/anomaly.h"

#include <cmath>
#include <limits>
#include <string_view>

#include "heed/autograd.h"
#include "heed/ops.h"

namespace heed {

namespace {

thread_local bool g_anomaly_enabled = false;
thread_local bool g_anomaly_busy = false;  // inside a check: ops run here are not checked
thread_local std::vector<std::string> g_tag_stack;
thread_local std::string g_current_tag;
thread_local std::vector<AnomalyRecord> g_log;
thread_local size_t g_log_next = 0;  // ring position once g_log is full

const std::string kEmptyTag;

void rebuild_tag() {
  g_current_tag.clear();
  for (const std::string& part : g_tag_stack) {
    if (!g_current_tag.empty()) g_current_tag += '/';
    g_current_tag += part;
  }
}

class BusyScope {
 public:
  BusyScope() : previous_(g_anomaly_busy) { g_anomaly_busy = true; }
  ~BusyScope() { g_anomaly_busy = previous_; }
  BusyScope(const BusyScope&) = delete;
  BusyScope& operator=(const BusyScope&) = delete;

 private:
  bool previous_;
};

// Ops whose outputs hold values the user placed there (e.g. -inf attention masks).
bool places_user_values(std::string_view op) { return op == "masked_fill" || op == "where"; }

std::string describe_tensor(const Tensor& t, const TensorStats& stats) {
  return t.name().empty() ? stats.str() : fmt::format("'{}' {}", t.name(), stats.str());
}

std::string op_label(const Node& node, const std::string& tag) {
  std::string label = fmt::format("'{}' (op #{}", node.name(), node.sequence_nr());
  if (!tag.empty()) label += fmt::format(", tag '{}'", tag);
  return label + ")";
}

std::string nonfinite_counts(const TensorStats& s) {
  return fmt::format("{} NaN, {} +Inf, {} -Inf", s.nan_count, s.posinf_count, s.neginf_count);
}

}  // namespace

// ---- statistics -----------------------------------------------------------------------------

std::string TensorStats::str() const {
  return fmt::format("{} {}: min {:.6g} max {:.6g} mean {:.6g}, {} NaN, {} +Inf, {} -Inf", shape_str(shape),
                     dtype_name(dtype), min, max, mean, nan_count, posinf_count, neginf_count);
}

TensorStats tensor_stats(const Tensor& t) {
  TensorStats s;
  if (!t.defined()) return s;
  s.shape = t.shape();
  s.dtype = t.dtype();
  s.numel = t.numel();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  s.min = s.max = s.mean = nan;
  if (s.numel == 0) return s;
  NoGradGuard no_grad;
  Tensor host = t.detach();
  if (!host.device().is_cpu()) host = host.to(kCPU);
  host = host.to(kFloat64).contiguous();
  const double* values = host.data_ptr<double>();
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, total = 0.0;
  int64_t finite = 0;
  for (int64_t i = 0; i < s.numel; ++i) {
    const double v = values[i];
    if (std::isnan(v)) {
      ++s.nan_count;
    } else if (std::isinf(v)) {
      ++(v > 0 ? s.posinf_count : s.neginf_count);
    } else {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      total += v;
      ++finite;
    }
  }
  if (finite > 0) {
    s.min = lo;
    s.max = hi;
    s.mean = total / static_cast<double>(finite);
  }
  return s;
}

// ---- switches and tags ----------------------------------------------------------------------

bool anomaly_detection_enabled() { return g_anomaly_enabled; }
void set_detect_anomaly(bool enabled) { g_anomaly_enabled = enabled; }

DetectAnomalyGuard::DetectAnomalyGuard(bool enabled) : previous_(g_anomaly_enabled) { g_anomaly_enabled = enabled; }
DetectAnomalyGuard::~DetectAnomalyGuard() { g_anomaly_enabled = previous_; }

AnomalyTagGuard::AnomalyTagGuard(const std::string& tag) : previous_size_(g_tag_stack.size()) {
  g_tag_stack.push_back(tag);
  rebuild_tag();
}
AnomalyTagGuard::~AnomalyTagGuard() {
  g_tag_stack.resize(previous_size_);
  rebuild_tag();
}

const std::string& current_anomaly_tag() { return g_tag_stack.empty() ? kEmptyTag : g_current_tag; }

std::vector<AnomalyRecord> anomaly_forward_log() {
  if (g_log.size() < kAnomalyLogCapacity) return g_log;
  std::vector<AnomalyRecord> ordered;  // oldest first
  ordered.reserve(g_log.size());
  for (size_t i = 0; i < g_log.size(); ++i) ordered.push_back(g_log[(g_log_next + i) % g_log.size()]);
  return ordered;
}

void clear_anomaly_forward_log() {
  g_log.clear();
  g_log_next = 0;
}

// ---- checks ---------------------------------------------------------------------------------

namespace detail {

void anomaly_check_forward(Node& node, const std::vector<const Tensor*>& inputs, const Tensor& output) {
  if (g_anomaly_busy) return;
  BusyScope busy;
  const std::string& tag = current_anomaly_tag();

  AnomalyRecord record;
  record.sequence_nr = node.sequence_nr();
  record.op = node.name();
  record.tag = tag;
  record.output_shape = output.shape();
  std::vector<std::string> input_text;
  bool inputs_finite = true, inputs_have_nan = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor* in = inputs[i];
    if (!in || !in->defined()) continue;
    record.input_shapes.push_back(in->shape());
    const TensorStats s = tensor_stats(*in);
    inputs_finite = inputs_finite && s.all_finite();
    inputs_have_nan = inputs_have_nan || s.nan_count > 0;
    input_text.push_back(fmt::format("input {}: {}", i, describe_tensor(*in, s)));
  }
  const TensorStats out = tensor_stats(output);
  node.context = fmt::format("forward of {}:\n    {}\n    output: {}", op_label(node, tag),
                             fmt::join(input_text, "\n    "), out.str());
  if (g_log.size() < kAnomalyLogCapacity) {
    g_log.push_back(std::move(record));
  } else {
    g_log[g_log_next] = std::move(record);
    g_log_next = (g_log_next + 1) % kAnomalyLogCapacity;
  }

  if (out.all_finite()) return;
  const bool exempt = places_user_values(node.name());
  const bool has_inf = out.posinf_count + out.neginf_count > 0;
  const bool anomalous = out.nan_count > 0 || (has_inf && !exempt && (inputs_finite || out.numel == 1));
  if (!anomalous) return;
  std::string cause;
  if (out.nan_count > 0 && inputs_have_nan)
    cause = "; an input already held NaN (it came from a leaf, the data or an op not on the tape)";
  else if (inputs_finite)
    cause = "; every input was finite, so this op made them";
  fail("anomaly", "forward of {} produced non-finite values ({}){}\n  {}", op_label(node, tag), nonfinite_counts(out),
       cause, node.context);
}

void anomaly_check_backward(const Node& node, const Tensor& grad_output, const std::vector<Tensor>& grad_inputs) {
  if (g_anomaly_busy) return;
  BusyScope busy;
  std::vector<TensorStats> stats(grad_inputs.size());
  int first_bad = -1;
  for (size_t i = 0; i < grad_inputs.size(); ++i) {
    if (!grad_inputs[i].defined() || !is_floating(grad_inputs[i].dtype())) continue;
    stats[i] = tensor_stats(grad_inputs[i]);
    if (!stats[i].all_finite() && first_bad < 0) first_bad = static_cast<int>(i);
  }
  if (first_bad < 0) return;
  const TensorStats incoming = tensor_stats(grad_output);
  std::string lines = fmt::format("  incoming gradient (of the output): {}", incoming.str());
  for (size_t i = 0; i < grad_inputs.size(); ++i) {
    if (grad_inputs[i].defined()) lines += fmt::format("\n  gradient for input {}: {}", i, stats[i].str());
  }
  const std::string forward = node.context.empty()
                                  ? std::string("(no forward record: the op was recorded while detection was off)")
                                  : node.context;
  fail("anomaly", "backward of '{}' (op #{}) produced non-finite values ({}) in the gradient for input {}{}\n{}\n  {}",
       node.name(), node.sequence_nr(), nonfinite_counts(stats[static_cast<size_t>(first_bad)]), first_bad,
       incoming.all_finite() ? ""
                             : "; its incoming gradient was already non-finite (the seed given to backward or a hook)",
       lines, forward);
}

void anomaly_check_seed(const Tensor& seed, size_t index, const char* op) {
  if (g_anomaly_busy || !seed.defined() || !is_floating(seed.dtype())) return;
  BusyScope busy;
  const TensorStats s = tensor_stats(seed);
  HEED_CHECK(s.all_finite(), "anomaly", "the gradient given to {} for tensor {} is not finite: {}", op, index, s.str());
}

}  // namespace detail

}  // namespace heed
