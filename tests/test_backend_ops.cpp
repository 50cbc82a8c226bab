// tests/test_backend_ops.cpp — one op harness for every backend (ggml's test-backend-ops): every
// case of the gradient-check registry (tools/op_cases.h) that takes plain inputs runs on the CPU
// and on every other device (CUDA, real or emulated), in float64 and float32; the device's output
// and the gradient of every floating input must match the CPU's.
//
// The comparison: float64 on the device against the CPU's float64 result (the reference the
// gradient checks validated); float32 on the device against the CPU's float32 result from the
// same rounded inputs (only the summation order may differ, so the tolerance stays tight). The
// gradients come from backward() of sum(output * w) with fixed weights w, so every output
// element's gradient matters.
//
// Invariants: without a CUDA device every case records a skip (ctest reports the file as
// skipped, exit code 77); a new op gets its CUDA comparison from its gradient-check case alone.
// Layer cases (module parameters as inputs) are not per-op and stay in test_cuda.cpp.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "op_cases.h"
#include "test_skip.h"

using namespace heed;
using op_cases::OpCase;

namespace {

struct Tolerance {
  double rtol, atol;
};

std::vector<double> host_values(const Tensor& t) {
  return t.detach().to(kCPU).to(kFloat64).contiguous().to_vector<double>();
}

// Worst |a - b| - (atol + rtol |a|) over the elements (<= 0: within tolerance); equal
// infinities and NaN in both count as equal.
bool close(const Tensor& reference, const Tensor& device, Tolerance tol, std::string& why) {
  if (reference.shape() != device.shape()) {
    why = "shape " + shape_str(device.shape()) + " instead of " + shape_str(reference.shape());
    return false;
  }
  const std::vector<double> a = host_values(reference), b = host_values(device);
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (a[i] == b[i]) continue;
    if (!(std::fabs(a[i] - b[i]) <= tol.atol + tol.rtol * std::fabs(a[i]))) {
      why = fmt::format("element {}: {} (device) vs {} (CPU)", i, b[i], a[i]);
      return false;
    }
  }
  return true;
}

struct Run {
  Tensor output;
  std::vector<Tensor> grads;  // one per input; undefined where the input takes no gradient
};

// Runs a case on `device` with its floating inputs converted to `dtype`: the output and the
// gradients of backward(sum(output * weights)).
Run run_case_on(const OpCase& c, const std::vector<Tensor>& inputs, Device device, DType dtype) {
  std::vector<Tensor> leaves;
  for (const Tensor& input : inputs) {
    Tensor leaf = input.detach();
    if (is_floating(leaf.dtype())) leaf = leaf.to(dtype);
    leaf = leaf.to(device).detach();
    if (input.requires_grad()) leaf.requires_grad_(true);
    leaves.push_back(leaf);
  }
  Run run;
  run.output = c.fn(leaves);
  if (run.output.requires_grad()) {
    const Tensor weights = op_cases::make_input(op_cases::InputSpec::uniform(run.output.shape(), 0.5, 1.5), 7)
                               .to(run.output.dtype())
                               .to(device);
    sum(run.output * weights).backward();
  }
  for (const Tensor& leaf : leaves) run.grads.push_back(leaf.requires_grad() ? leaf.grad() : Tensor());
  return run;
}

}  // namespace

TEST_CASE("backend ops: every op case matches the CPU on CUDA, float64 and float32, output and gradients") {
  if (!cuda::is_available()) {
    test::skip("test_backend_ops: no CUDA device (" + cuda::unavailable_reason() + "): every op case skipped");
    return;
  }
  struct Precision {
    DType dtype;
    Tolerance tol;
  };
  // float64: the CPU and the device differ in summation order only; float32 likewise, from the
  // same rounded inputs (a few ulps of float32 for the longer chains of the attention cases).
  const Precision precisions[] = {{kFloat64, {1e-10, 1e-12}}, {kFloat32, {5e-5, 5e-6}}};
  // Cases that build float64 constants themselves and cannot run in float32 (none today).
  const std::string kFloat64Only[] = {std::string()};
  int compared = 0, layer_cases = 0;
  std::vector<std::string> cpu_float32_unsupported;
  for (const OpCase& c : op_cases::all_cases()) {
    if (c.custom_inputs) {
      ++layer_cases;
      continue;
    }
    const std::vector<Tensor> inputs = op_cases::make_inputs(c, 11);
    for (const Precision& p : precisions) {
      INFO(c.name << " in " << dtype_name(p.dtype));
      Run reference;
      try {
        reference = run_case_on(c, inputs, kCPU, p.dtype);
      } catch (const Error& e) {
        // Every case runs in float64; a case may opt out of float32 only by being listed in
        // kFloat64Only (none is today), so a float32 failure on the CPU is a failure here.
        const bool listed =
            std::find(std::begin(kFloat64Only), std::end(kFloat64Only), c.name) != std::end(kFloat64Only);
        REQUIRE_MESSAGE((p.dtype != kFloat64 && listed), "the CPU run failed: " << std::string(e.what()));
        cpu_float32_unsupported.push_back(c.name);
        continue;
      }
      Run device;
      try {
        device = run_case_on(c, inputs, kCUDA, p.dtype);
      } catch (const Error& e) {
        FAIL_CHECK("the CUDA run failed where the CPU's succeeded: " << std::string(e.what()));
        continue;
      }
      std::string why;
      CHECK(device.output.device() == kCUDA);
      CHECK(device.output.dtype() == reference.output.dtype());
      for (size_t i = 0; i < inputs.size(); ++i)
        if (device.grads[i].defined() && reference.grads[i].defined()) {
          CHECK(device.grads[i].device() == kCUDA);
          CHECK(device.grads[i].dtype() == reference.grads[i].dtype());
        }
      CHECK_MESSAGE(close(reference.output, device.output, p.tol, why), "output: " << why);
      for (size_t i = 0; i < inputs.size(); ++i) {
        INFO("gradient of input " << i);
        CHECK(reference.grads[i].defined() == device.grads[i].defined());
        if (reference.grads[i].defined() && device.grads[i].defined())
          CHECK_MESSAGE(close(reference.grads[i], device.grads[i], p.tol, why), why);
      }
      ++compared;
    }
  }
  MESSAGE(compared, " case x dtype runs compared on CUDA; ", layer_cases, " layer cases left to test_cuda; ",
          cpu_float32_unsupported.size(),
          " cases float64-only: ", fmt::format("{}", fmt::join(cpu_float32_unsupported, ", ")));
  CHECK(compared > 0);
}
