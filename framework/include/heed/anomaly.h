// heed/anomaly.h — anomaly detection: find the op that first produced a NaN or an infinity.
//
// While detection is on (DetectAnomalyGuard, or set_detect_anomaly(true)) on a thread:
//  * forward: every op recorded on the autograd tape (an op with an input that requires grad)
//    is logged with its name, the current tag (AnomalyTagGuard) and its input/output shapes,
//    and its output is checked. A NaN in an output is always an error; an infinity is an error
//    when the op made it from finite inputs (log(0), x/0, overflow), except for masked_fill and
//    where, which place user-given values such as -inf attention masks; a non-finite value in
//    a one-element output (a loss) is always an error, so a NaN or infinite loss never passes.
//  * backward: every gradient a node's backward produces is checked; the first node (in the
//    engine's order) whose backward produced a NaN or an infinity raises heed::Error.
// Errors read "heed::anomaly: ..." and name the op, its tag and sequence number, and give the
// shapes and statistics (min/max/mean of the finite values, count of NaN/+Inf/-Inf) of the
// op's inputs and outputs (for backward: the incoming gradient, the produced gradients and the
// forward record). Ops run with no input requiring grad are not on the tape and not checked.
//
// Invariants: the state is per thread (like NoGradGuard); when detection is off, recording
// an op does one thread-local read and nothing else (no statistics, no strings).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "heed/tensor.h"

namespace heed {

// Statistics of a tensor's values, computed in float64 on the host.
struct TensorStats {
  Dims shape;
  DType dtype = kFloat32;
  int64_t numel = 0;
  int64_t nan_count = 0;
  int64_t posinf_count = 0;
  int64_t neginf_count = 0;
  // Over the finite elements; NaN when there are none (or for non-floating tensors: over all).
  double min = 0.0, max = 0.0, mean = 0.0;
  bool all_finite() const { return nan_count == 0 && posinf_count == 0 && neginf_count == 0; }
  // "[2, 3] float32: min -1 max 2 mean 0.25, 0 NaN, 0 +Inf, 0 -Inf"
  std::string str() const;
};
TensorStats tensor_stats(const Tensor& t);

// Whether anomaly detection is on for the calling thread.
bool anomaly_detection_enabled();
// The global switch for the calling thread (torch.autograd.set_detect_anomaly).
void set_detect_anomaly(bool enabled);

// Turns anomaly detection on (or off) for its lifetime on the calling thread.
class DetectAnomalyGuard {
 public:
  explicit DetectAnomalyGuard(bool enabled = true);
  ~DetectAnomalyGuard();
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool previous_;
};

// Tags the ops recorded on the calling thread while it lives; nested tags join with '/':
//   AnomalyTagGuard block("block.0"); { AnomalyTagGuard part("attn"); ... }  // "block.0/attn"
class AnomalyTagGuard {
 public:
  explicit AnomalyTagGuard(const std::string& tag);
  ~AnomalyTagGuard();
  AnomalyTagGuard(const AnomalyTagGuard&) = delete;
  AnomalyTagGuard& operator=(const AnomalyTagGuard&) = delete;

 private:
  size_t previous_size_;
};
// The tag in effect on the calling thread ("" when none).
const std::string& current_anomaly_tag();

// One op recorded in forward while detection was on.
struct AnomalyRecord {
  uint64_t sequence_nr = 0;  // the Node's sequence number
  std::string op;
  std::string tag;
  std::vector<Dims> input_shapes;  // undefined inputs are left out
  Dims output_shape;
};
// The most recent forward records of the calling thread (at most kAnomalyLogCapacity).
inline constexpr size_t kAnomalyLogCapacity = 4096;
std::vector<AnomalyRecord> anomaly_forward_log();
void clear_anomaly_forward_log();

class Node;
namespace detail {
// Called by the autograd engine only while anomaly_detection_enabled().
// Checks a freshly computed op output, logs the op and fills node.context; throws on NaN/Inf.
void anomaly_check_forward(Node& node, const std::vector<const Tensor*>& inputs, const Tensor& output);
// Checks the gradients a node's backward produced; throws naming the node.
void anomaly_check_backward(const Node& node, const Tensor& grad_output, const std::vector<Tensor>& grad_inputs);
// Checks the seed gradients given to backward()/grad().
void anomaly_check_seed(const Tensor& seed, size_t index, const char* op);
}  // namespace detail

}  // namespace heed
