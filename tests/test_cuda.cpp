// tests/test_cuda.cpp — every op and layer on the CUDA backend against the CPU backend.
//
// Each case builds its inputs once on the CPU (seeded), copies them to the CUDA device, runs
// the same computation on both devices and compares the outputs and, via backward(), the
// gradients of every floating input, within a tolerance per dtype (float32 results may differ
// from the CPU's by the summation order only; float16/bfloat16 results by about one rounding
// of the output). Random draws (randn, dropout masks) use the same Philox stream on every
// device, so a seed gives bit-identical numbers on both.
//
// Invariants: without a CUDA device (no GPU, a build without CUDA, or the emulator told
// HEED_CUDA_EMULATION_DEVICES=0) every case records a skip and returns at once; the file prints
// one message saying why and ctest reports it as skipped (exit code 77), never as passed. With the CPU emulator of
// kernels/cuda/emulation the file runs in well under three minutes on one core, so sizes are small but never multiples
// of the kernels' block sizes.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <cmath>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "test_skip.h"

using namespace heed;

namespace {

// True when a CUDA device answers; otherwise the running case is recorded as skipped (see
// tests/test_skip.h): every case starts with `if (!cuda_ready()) return;`, so without a device
// the whole file reports itself to ctest as skipped, not passed.
bool cuda_ready() {
  static const bool available = cuda::is_available();
  if (!available)
    heed::test::skip("test_cuda: no CUDA device (" + cuda::unavailable_reason() + "): every CUDA-vs-CPU case skipped");
  return available;
}

struct Tol {
  double rtol, atol;
};

// Output tolerance of a dtype: float32/float64 differ from the CPU by the summation order only;
// 16-bit results by about one rounding of a float32 result.
Tol tol_for(DType dtype) {
  switch (dtype) {
    case DType::Float64:
      return {1e-10, 1e-12};
    case DType::Float32:
      return {2e-5, 2e-6};
    case DType::Float16:
      return {2e-3, 1e-3};
    case DType::BFloat16:
      return {1.6e-2, 8e-3};
    default:
      return {0.0, 0.0};  // integers and bools are exact
  }
}

std::vector<double> host_values(const Tensor& t) {
  return t.detach().to(kCPU).to(kFloat64).contiguous().to_vector<double>();
}

// Checks that `gpu` (on CUDA) matches `cpu` element by element: same shape and dtype, and
// |cpu - gpu| <= atol + rtol * |cpu| everywhere (equal infinities and NaN in both count as
// equal).
void check_close(const Tensor& cpu, const Tensor& gpu, Tol tol, const std::string& what) {
  INFO(what);
  REQUIRE(cpu.defined());
  REQUIRE(gpu.defined());
  CHECK(cpu.device() == kCPU);
  CHECK(gpu.device() == kCUDA);
  REQUIRE(cpu.shape() == gpu.shape());
  CHECK(cpu.dtype() == gpu.dtype());
  const std::vector<double> a = host_values(cpu), b = host_values(gpu);
  double worst = 0.0;
  int64_t worst_at = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    double ratio;
    if (std::isnan(a[i]) || std::isnan(b[i])) {
      ratio = (std::isnan(a[i]) && std::isnan(b[i])) ? 0.0 : INFINITY;
    } else if (std::isinf(a[i]) || std::isinf(b[i])) {
      ratio = a[i] == b[i] ? 0.0 : INFINITY;
    } else {
      const double diff = std::abs(a[i] - b[i]);
      const double bound = tol.atol + tol.rtol * std::abs(a[i]);
      ratio = diff == 0.0 ? 0.0 : (bound == 0.0 ? INFINITY : diff / bound);
    }
    if (ratio > worst) {
      worst = ratio;
      worst_at = static_cast<int64_t>(i);
    }
  }
  std::ostringstream detail;
  if (worst_at >= 0)
    detail << "worst element " << worst_at << ": cpu " << a[worst_at] << " cuda " << b[worst_at] << " (" << worst
           << " x the tolerance)";
  INFO(detail.str());
  CHECK(worst <= 1.0);
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Runs fn on the CPU inputs and on their CUDA copies (the same seed before each run), compares
// the outputs and, when `grads`, backpropagates the same random upstream gradient on both and
// compares the gradient of every floating input. Returns the CUDA output.
Tensor check_op(const std::string& name, const Fn& fn, const std::vector<Tensor>& cpu_inputs, Tol out_tol,
                bool grads = true, Tol grad_tol = {-1, -1}) {
  INFO("op: " << name);
  if (grad_tol.rtol < 0) grad_tol = out_tol;
  std::vector<Tensor> a, b;
  for (const Tensor& x : cpu_inputs) {
    Tensor on_cpu = x.detach().clone();
    Tensor on_gpu = x.detach().to(kCUDA);
    REQUIRE(on_gpu.device() == kCUDA);
    if (grads && is_floating(x.dtype())) {
      on_cpu.requires_grad_();
      on_gpu.requires_grad_();
    }
    a.push_back(on_cpu);
    b.push_back(on_gpu);
  }
  manual_seed(1234);
  const Tensor out_cpu = fn(a);
  manual_seed(1234);
  const Tensor out_gpu = fn(b);
  check_close(out_cpu, out_gpu, out_tol, name + " output");
  if (!grads || !out_cpu.requires_grad()) return out_gpu;
  REQUIRE(out_gpu.requires_grad());
  manual_seed(99);
  const Tensor upstream = randn(out_cpu.shape(), kFloat64).to(out_cpu.dtype());
  out_cpu.backward(upstream);
  out_gpu.backward(upstream.to(kCUDA));
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].requires_grad()) continue;
    INFO("gradient of input " << i);
    REQUIRE(a[i].grad().defined());
    REQUIRE(b[i].grad().defined());
    check_close(a[i].grad(), b[i].grad(), grad_tol, name + " gradient");
  }
  return out_gpu;
}

Tensor rnd(const Dims& shape, DType dtype = kFloat32) { return randn(shape, kFloat64).to(dtype); }
Tensor positive(const Dims& shape, DType dtype = kFloat32) { return add_scalar(rand(shape, kFloat64), 0.25).to(dtype); }

const DType kFloatingTypes[] = {kFloat32, kFloat64, kFloat16, kBFloat16};

}  // namespace

TEST_CASE("cuda: availability, transfers, factories and random streams") {
  if (!cuda_ready()) return;
  CHECK(cuda::compiled_with_cuda());
  CHECK(cuda::device_count() >= 1);
  CHECK(cuda::unavailable_reason().empty());
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kBool}) {
    CAPTURE(dtype_name(dtype));
    manual_seed(3);
    const Tensor x = mul_scalar(randn({5, 7}, kFloat64), 3.0).to(dtype);
    const Tensor round_trip = x.to(kCUDA).to(kCPU);
    CHECK(host_values(round_trip) == host_values(x));
    // A strided view copied to the device and made contiguous there (the copy kernel).
    check_close(x.t().contiguous(), x.to(kCUDA).t().contiguous(), {0, 0}, "transpose().contiguous()");
    check_close(x.slice(1, 1, 7, 2), x.to(kCUDA).slice(1, 1, 7, 2), {0, 0}, "slice with step");
    // Conversions on the device.
    for (DType to : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt64, kBool})
      check_close(x.to(to), x.to(kCUDA).to(to), {0, 0}, std::string("to ") + std::string(dtype_name(to)));
  }
  check_close(zeros({3, 5}), zeros({3, 5}, kCUDA), {0, 0}, "zeros");
  check_close(full({3, 5}, -2.5, kFloat16), full({3, 5}, -2.5, TensorOptions(kFloat16).device(kCUDA)), {0, 0}, "full");
  check_close(eye(5), eye(5, kCUDA), {0, 0}, "eye");
  check_close(arange(2.0, 9.5, 0.5, kFloat32), arange(2.0, 9.5, 0.5, TensorOptions(kFloat32).device(kCUDA)), {0, 0},
              "arange");
  Tensor filled = zeros({4, 6}, kCUDA);
  filled.slice(1, 1, 5).fill_(7.0);
  Tensor filled_cpu = zeros({4, 6});
  filled_cpu.slice(1, 1, 5).fill_(7.0);
  check_close(filled_cpu, filled, {0, 0}, "fill_ of a strided view");
  // The same seed gives the same numbers on every device.
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(dtype));
    manual_seed(42);
    const Tensor n_cpu = randn({1001}, dtype);
    const Tensor u_cpu = uniform({333}, -2.0, 3.0, dtype);
    manual_seed(42);
    const Tensor n_gpu = randn({1001}, TensorOptions(dtype).device(kCUDA));
    const Tensor u_gpu = uniform({333}, -2.0, 3.0, TensorOptions(dtype).device(kCUDA));
    check_close(n_cpu, n_gpu, {1e-6, 1e-6}, "randn stream");
    check_close(u_cpu, u_gpu, {1e-6, 1e-6}, "uniform stream");
  }
  manual_seed(8);
  const Tensor i_cpu = randint(-5, 17, {257});
  manual_seed(8);
  const Tensor i_gpu = randint(-5, 17, {257}, TensorOptions(kInt64).device(kCUDA));
  check_close(i_cpu, i_gpu, {0, 0}, "randint stream");
  cuda::synchronize();
}

TEST_CASE("cuda: unary element-wise ops, every floating dtype, forward and backward") {
  if (!cuda_ready()) return;
  struct Unary {
    const char* name;
    bool positive_only;
    std::function<Tensor(const Tensor&)> fn;
  };
  const std::vector<Unary> ops = {
      {"neg", false, [](const Tensor& x) { return neg(x); }},
      {"exp", false, [](const Tensor& x) { return exp(x); }},
      {"log", true, [](const Tensor& x) { return log(x); }},
      {"sqrt", true, [](const Tensor& x) { return sqrt(x); }},
      {"rsqrt", true, [](const Tensor& x) { return rsqrt(x); }},
      {"abs", false, [](const Tensor& x) { return abs(x); }},
      {"relu", false, [](const Tensor& x) { return relu(x); }},
      {"gelu", false, [](const Tensor& x) { return gelu(x); }},
      {"gelu tanh", false, [](const Tensor& x) { return gelu(x, GeluApproximation::Tanh); }},
      {"tanh", false, [](const Tensor& x) { return tanh(x); }},
      {"sigmoid", false, [](const Tensor& x) { return sigmoid(x); }},
      {"silu", false, [](const Tensor& x) { return silu(x); }},
      {"softplus", false, [](const Tensor& x) { return softplus(x); }},
      {"sign", false, [](const Tensor& x) { return sign(x); }},
      {"add_scalar", false, [](const Tensor& x) { return add_scalar(x, 1.5); }},
      {"mul_scalar", false, [](const Tensor& x) { return mul_scalar(x, -0.75); }},
      {"pow 3", false, [](const Tensor& x) { return pow(x, 3.0); }},
      {"pow 0.5", true, [](const Tensor& x) { return pow(x, 0.5); }},
      {"rsub_scalar", false, [](const Tensor& x) { return rsub_scalar(x, 2.0); }},
      {"rdiv_scalar", true, [](const Tensor& x) { return rdiv_scalar(x, 2.0); }},
      {"square", false, [](const Tensor& x) { return square(x); }},
  };
  for (DType dtype : kFloatingTypes) {
    CAPTURE(dtype_name(dtype));
    for (const Unary& op : ops) {
      CAPTURE(op.name);
      manual_seed(17);
      // 1031 elements: not a multiple of any block size; a transposed input is made contiguous
      // first.
      const Tensor x = op.positive_only ? positive({1031}, dtype) : rnd({1031}, dtype);
      check_op(
          op.name, [&](const std::vector<Tensor>& in) { return op.fn(in[0]); }, {x}, tol_for(dtype));
      const Tensor m = op.positive_only ? positive({13, 9}, dtype) : rnd({13, 9}, dtype);
      check_op(
          std::string(op.name) + " (transposed input)", [&](const std::vector<Tensor>& in) { return op.fn(in[0].t()); },
          {m}, tol_for(dtype));
    }
  }
  const Tensor flags = gt(rnd({50}), zeros({50}));
  check_op(
      "logical_not", [](const std::vector<Tensor>& in) { return logical_not(in[0]); }, {flags}, {0, 0}, false);
}

// Separate from the other unary ops: its backward built comparison scalars on the CPU.
TEST_CASE("cuda: clamp forward and backward") {
  if (!cuda_ready()) return;
  for (DType dtype : kFloatingTypes) {
    CAPTURE(dtype_name(dtype));
    manual_seed(19);
    check_op(
        "clamp", [](const std::vector<Tensor>& in) { return clamp(in[0], -0.5, 0.7); }, {rnd({1031}, dtype)},
        tol_for(dtype));
    check_op(
        "clamp (transposed input)", [](const std::vector<Tensor>& in) { return clamp(in[0].t(), -0.5, 0.7); },
        {rnd({13, 9}, dtype)}, tol_for(dtype));
  }
}

TEST_CASE("cuda: binary element-wise ops with broadcasting and non-contiguous inputs") {
  if (!cuda_ready()) return;
  struct Binary {
    const char* name;
    bool positive_base;
    std::function<Tensor(const Tensor&, const Tensor&)> fn;
  };
  const std::vector<Binary> ops = {
      {"add", false, [](const Tensor& a, const Tensor& b) { return add(a, b, 0.5); }},
      {"sub", false, [](const Tensor& a, const Tensor& b) { return sub(a, b); }},
      {"mul", false, [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"div", true, [](const Tensor& a, const Tensor& b) { return div(a, b); }},
      {"pow", true, [](const Tensor& a, const Tensor& b) { return pow(a, b); }},
      {"maximum", false, [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
      {"minimum", false, [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
  };
  // (4, 1, 5) with (3, 1): broadcast to (4, 3, 5); and a permuted (non-contiguous) operand.
  for (DType dtype : kFloatingTypes) {
    CAPTURE(dtype_name(dtype));
    for (const Binary& op : ops) {
      CAPTURE(op.name);
      manual_seed(23);
      const Tensor a = op.positive_base ? positive({4, 1, 5}, dtype) : rnd({4, 1, 5}, dtype);
      const Tensor b = op.positive_base ? positive({3, 1}, dtype) : rnd({3, 1}, dtype);
      check_op(
          op.name, [&](const std::vector<Tensor>& in) { return op.fn(in[0], in[1]); }, {a, b}, tol_for(dtype));
      const Tensor p = op.positive_base ? positive({5, 3, 4}, dtype) : rnd({5, 3, 4}, dtype);
      const Tensor q = op.positive_base ? positive({4, 3, 5}, dtype) : rnd({4, 3, 5}, dtype);
      check_op(
          std::string(op.name) + " (permuted operands)",
          [&](const std::vector<Tensor>& in) {
            return op.fn(in[0].permute({2, 1, 0}), in[1]);
          },
          {p, q}, tol_for(dtype));
      const Tensor wide = op.positive_base ? positive({6, 11}, dtype) : rnd({6, 11}, dtype);
      const Tensor row = op.positive_base ? positive({11}, dtype) : rnd({11}, dtype);
      check_op(
          std::string(op.name) + " (sliced with a step, broadcast row)",
          [&](const std::vector<Tensor>& in) { return op.fn(in[0].slice(0, 1, 6, 2), in[1]); }, {wide, row},
          tol_for(dtype));
    }
  }
  // Comparisons and logical ops give bools: exact.
  manual_seed(5);
  const Tensor a = mul_scalar(rnd({4, 1, 6}), 2.0), b = rnd({3, 6});
  const Tensor a_rounded = a.to(kInt64).to(kFloat32), b_rounded = mul_scalar(b, 2.0).to(kInt64).to(kFloat32);
  using Cmp = Tensor (*)(const Tensor&, const Tensor&);
  const std::pair<const char*, Cmp> comparisons[] = {{"eq", eq}, {"ne", ne}, {"lt", lt},
                                                     {"le", le}, {"gt", gt}, {"ge", ge}};
  for (const auto& [name, fn] : comparisons)
    check_op(
        name, [fn = fn](const std::vector<Tensor>& in) { return fn(in[0], in[1]); }, {a_rounded, b_rounded}, {0, 0},
        false);
  const Tensor fa = gt(a, zeros({1})), fb = gt(b, zeros({1}));
  check_op(
      "logical_and", [](const std::vector<Tensor>& in) { return logical_and(in[0], in[1]); }, {fa, fb}, {0, 0}, false);
  check_op(
      "logical_or", [](const std::vector<Tensor>& in) { return logical_or(in[0], in[1].t().t()); }, {fa, fb}, {0, 0},
      false);
  for (DType dtype : kFloatingTypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor x = rnd({3, 6}, dtype), y = rnd({4, 1, 6}, dtype);
    check_op(
        "where", [](const std::vector<Tensor>& in) { return where(in[0], in[1], in[2]); }, {fb, x, y}, tol_for(dtype));
    check_op(
        "masked_fill", [](const std::vector<Tensor>& in) { return masked_fill(in[0], in[1], -3.0); },
        {rnd({4, 3, 6}, dtype), fb}, tol_for(dtype));
  }
  // In-place updates on a CUDA view.
  Tensor target_cpu = rnd({5, 8}), source = rnd({8, 5});
  Tensor target_gpu = target_cpu.to(kCUDA);
  target_cpu.slice(1, 2, 7).add_(source.t().slice(1, 0, 5), 2.0);
  target_gpu.slice(1, 2, 7).add_(source.to(kCUDA).t().slice(1, 0, 5), 2.0);
  check_close(target_cpu, target_gpu, tol_for(kFloat32), "add_ into a view");
}

TEST_CASE("cuda: reductions (sum, mean, max, min, var, argmax, argmin)") {
  if (!cuda_ready()) return;
  for (DType dtype : kFloatingTypes) {
    CAPTURE(dtype_name(dtype));
    manual_seed(31);
    const Tensor x = rnd({5, 37, 6}, dtype);
    // Sums of 16-bit inputs accumulate in float32 on both devices but in different orders.
    const Tol t = tol_for(dtype);
    using Reduce = std::function<Tensor(const Tensor&)>;
    const std::pair<const char*, Reduce> cases[] = {
        {"sum all", [](const Tensor& v) { return sum(v); }},
        {"sum dim 1", [](const Tensor& v) { return sum(v, {1}); }},
        {"sum dims 0,2 keepdim",
         [](const Tensor& v) {
           return sum(v, {0, 2}, true);
         }},
        {"sum last of a transposed view", [](const Tensor& v) { return sum(v.transpose(1, 2), {-1}); }},
        {"mean all", [](const Tensor& v) { return mean(v); }},
        {"mean dim 2", [](const Tensor& v) { return mean(v, {2}); }},
        {"var dim 1", [](const Tensor& v) { return var(v, {1}); }},
        {"var dims 0,1 biased keepdim",
         [](const Tensor& v) {
           return var(v, {0, 1}, true, 0.0);
         }},
        {"max all", [](const Tensor& v) { return max(v); }},
        {"min all", [](const Tensor& v) { return min(v); }},
        {"max dim 1 values", [](const Tensor& v) { return max(v, 1).values; }},
        {"min dim 0 values", [](const Tensor& v) { return min(v, 0, true).values; }},
    };
    for (const auto& [name, fn] : cases)
      check_op(
          name, [fn = fn](const std::vector<Tensor>& in) { return fn(in[0]); }, {x}, t);
    // Index results are exact (random floats: no ties, also after rounding to 16 bits is
    // not guaranteed, so compare indices for float32/float64 only).
    if (dtype == kFloat32 || dtype == kFloat64) {
      check_op(
          "argmax all", [](const std::vector<Tensor>& in) { return argmax(in[0]); }, {x}, {0, 0}, false);
      check_op(
          "argmax dim 1", [](const std::vector<Tensor>& in) { return argmax(in[0], 1); }, {x}, {0, 0}, false);
      check_op(
          "argmin dim 2 keepdim", [](const std::vector<Tensor>& in) { return argmin(in[0], 2, true); }, {x}, {0, 0},
          false);
      check_op(
          "max dim 1 indices", [](const std::vector<Tensor>& in) { return max(in[0], 1).indices; }, {x}, {0, 0}, false);
      check_op(
          "min dim 0 indices", [](const std::vector<Tensor>& in) { return min(in[0], 0).indices; }, {x}, {0, 0}, false);
    }
  }
  // A long row (several blocks of a block reduction) and NaN propagation of max.
  const Tensor long_row = rnd({3, 5000});
  check_op(
      "sum of long rows", [](const std::vector<Tensor>& in) { return sum(in[0], {1}); }, {long_row}, tol_for(kFloat32));
  check_op(
      "max of long rows", [](const std::vector<Tensor>& in) { return max(in[0], 1).values; }, {long_row},
      tol_for(kFloat32));
  Tensor with_nan = rnd({4, 9});
  with_nan.select(0, 2).select(0, 5).fill_(std::numeric_limits<double>::quiet_NaN());
  check_op(
      "max with a NaN", [](const std::vector<Tensor>& in) { return max(in[0]); }, {with_nan}, tol_for(kFloat32), false);
}

TEST_CASE("cuda: matmul (2-D, batched (B,H,T,D), broadcast batch, transposed operands, 16-bit)") {
  if (!cuda_ready()) return;
  // tf32 stays off: float32 results match the CPU's to the summation order.
  REQUIRE_FALSE(cuda::allow_tf32());
  for (DType dtype : kFloatingTypes) {
    CAPTURE(dtype_name(dtype));
    manual_seed(41);
    // Inner products of length k grow the rounding error; 16-bit outputs round once.
    const Tol t = dtype == kFloat32 ? Tol{1e-4, 1e-5} : tol_for(dtype);
    const Tol grad_t = dtype == kFloat32 ? Tol{1e-4, 1e-5} : Tol{tol_for(dtype).rtol * 2, tol_for(dtype).atol * 4};
    check_op(
        "2-D", [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
        {rnd({7, 13}, dtype), rnd({13, 5}, dtype)}, t, true, grad_t);
    check_op(
        "both transposed", [](const std::vector<Tensor>& in) { return matmul(in[0].t(), in[1].t()); },
        {rnd({13, 7}, dtype), rnd({5, 13}, dtype)}, t, true, grad_t);
    check_op(
        "batched q k^T (B,H,T,D)", [](const std::vector<Tensor>& in) { return matmul(in[0], in[1].transpose(-2, -1)); },
        {rnd({2, 3, 9, 8}, dtype), rnd({2, 3, 11, 8}, dtype)}, t, true, grad_t);
    check_op(
        "batched with a broadcast weight", [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
        {rnd({2, 3, 9, 8}, dtype), rnd({8, 6}, dtype)}, t, true, grad_t);
    check_op(
        "broadcast batch dims", [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
        {rnd({2, 1, 4, 6}, dtype), rnd({3, 6, 5}, dtype)}, t, true, grad_t);
    check_op(
        "permuted (B,T,H,D) operand",
        [](const std::vector<Tensor>& in) {
          return matmul(in[0].permute({0, 2, 1, 3}), in[1]);
        },
        {rnd({2, 9, 3, 8}, dtype), rnd({2, 3, 8, 4}, dtype)}, t, true, grad_t);
    check_op(
        "matrix-vector", [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); },
        {rnd({6, 10}, dtype), rnd({10}, dtype)}, t, true, grad_t);
    check_op(
        "linear", [](const std::vector<Tensor>& in) { return F::linear(in[0], in[1], in[2]); },
        {rnd({3, 5, 12}, dtype), rnd({7, 12}, dtype), rnd({7}, dtype)}, t, true, grad_t);
  }
  // TF32 products: about 1e-3 relative error, float32 accumulation.
  cuda::set_allow_tf32(true);
  manual_seed(43);
  check_op(
      "tf32", [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }, {rnd({17, 33}), rnd({33, 9})},
      {5e-3, 5e-3}, false);
  cuda::set_allow_tf32(false);
}

TEST_CASE("cuda: Linear's bias and GELU epilogues (cuBLASLt and heed's fallback) and 16-bit gemms kept in 16 bits") {
  if (!cuda_ready()) return;
  REQUIRE(cuda::gemm_epilogues_cublaslt());
  for (bool use_cublaslt : {true, false}) {
    CAPTURE(use_cublaslt);
    cuda::set_gemm_epilogues_cublaslt(use_cublaslt);
    for (DType dtype : kFloatingTypes) {
      CAPTURE(dtype_name(dtype));
      manual_seed(45);
      const Tol t = dtype == kFloat32 ? Tol{1e-4, 1e-5} : tol_for(dtype);
      const Tol grad_t = dtype == kFloat32 ? Tol{1e-4, 1e-5} : Tol{tol_for(dtype).rtol * 2, tol_for(dtype).atol * 4};
      const cuda::GemmEpilogueCounts before = cuda::gemm_epilogue_counts();
      // 3-D input (one gemm over the flattened rows), 2-D input: forward bias epilogue, and the
      // bias gradient from the weight gradient's gemm. Sizes are no multiple of any tile.
      check_op(
          "linear (3-D input)", [](const std::vector<Tensor>& in) { return F::linear(in[0], in[1], in[2]); },
          {rnd({3, 5, 12}, dtype), rnd({7, 12}, dtype), rnd({7}, dtype)}, t, true, grad_t);
      check_op(
          "linear (2-D input)", [](const std::vector<Tensor>& in) { return F::linear(in[0], in[1], in[2]); },
          {rnd({9, 33}, dtype), rnd({17, 33}, dtype), rnd({17}, dtype)}, t, true, grad_t);
      const cuda::GemmEpilogueCounts after = cuda::gemm_epilogue_counts();
      const int64_t lt_bias = after.cublaslt_bias - before.cublaslt_bias;
      const int64_t lt_grad = after.cublaslt_bias_grad - before.cublaslt_bias_grad;
      const int64_t fallback_bias = after.fallback_bias - before.fallback_bias;
      const int64_t fallback_grad = after.fallback_bias_grad - before.fallback_bias_grad;
      // Two forwards and two weight-gradient gemms, each with its epilogue, one way or the other.
      CHECK(lt_bias + fallback_bias == 2);
      CHECK(lt_grad + fallback_grad == 2);
      if (!use_cublaslt) CHECK(lt_bias + lt_grad == 0);
      // The emulator's cuBLASLt has an algorithm for every case; a GPU may decline some (float64,
      // odd leading dimensions), but not all of them in the types cuBLASLt is for.
      if (use_cublaslt && cuda::is_emulated()) CHECK(fallback_bias + fallback_grad == 0);
      if (use_cublaslt && dtype != kFloat64) CHECK(lt_bias + lt_grad > 0);

      // F::linear_gelu: the tanh GELU in cuBLASLt's GELU_AUX_BIAS epilogue (16 output features:
      // a leading dimension divisible by 8); the erf GELU, and 13 features, after the gemm.
      const cuda::GemmEpilogueCounts gelu_before = cuda::gemm_epilogue_counts();
      check_op(
          "linear_gelu tanh (16 features)",
          [](const std::vector<Tensor>& in) { return F::linear_gelu(in[0], in[1], in[2], GeluApproximation::Tanh); },
          {rnd({3, 5, 12}, dtype), rnd({16, 12}, dtype), rnd({16}, dtype)}, t, true, grad_t);
      check_op(
          "linear_gelu tanh (13 features, no bias)",
          [](const std::vector<Tensor>& in) { return F::linear_gelu(in[0], in[1], Tensor(), GeluApproximation::Tanh); },
          {rnd({7, 12}, dtype), rnd({13, 12}, dtype)}, t, true, grad_t);
      check_op(
          "linear_gelu erf", [](const std::vector<Tensor>& in) { return F::linear_gelu(in[0], in[1], in[2]); },
          {rnd({3, 5, 12}, dtype), rnd({16, 12}, dtype), rnd({16}, dtype)}, t, true, grad_t);
      const cuda::GemmEpilogueCounts gelu_after = cuda::gemm_epilogue_counts();
      const int64_t lt_gelu = gelu_after.cublaslt_gelu - gelu_before.cublaslt_gelu;
      const int64_t separate_gelu = gelu_after.fallback_gelu - gelu_before.fallback_gelu;
      CHECK(lt_gelu + separate_gelu == 3);
      if (!use_cublaslt) CHECK(lt_gelu == 0);
      if (use_cublaslt && cuda::is_emulated()) CHECK(lt_gelu == 1);
    }
  }
  cuda::set_gemm_epilogues_cublaslt(true);

  // 16-bit operands reach the gemm as they are (float32 accumulation inside), also under
  // autocast, where Linear's bias rides along in the epilogue.
  manual_seed(46);
  for (DType half : {kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(half));
    const Tensor a = rnd({6, 20}, half).to(kCUDA), b = rnd({20, 9}, half).to(kCUDA);
    const Tensor x = rnd({2, 6, 20}).to(kCUDA), w = rnd({9, 20}).to(kCUDA), bias = rnd({9}).to(kCUDA);
    profile::Profiler profiler;
    const Tensor product = matmul(a, b);
    Tensor linear_out;
    {
      amp::Autocast autocast(half);
      linear_out = F::linear(x, w, bias);
    }
    profiler.stop();
    CHECK(product.dtype() == half);
    CHECK(linear_out.dtype() == half);
    std::vector<std::string> gemms;
    std::string listed;
    for (const profile::Event& e : profiler.events())
      if (e.kind == profile::Kind::Kernel && e.name == "gemm") {
        gemms.push_back(e.dtype + " " + e.shapes);
        listed += "[" + gemms.back() + "] ";
      }
    INFO("gemm kernels: " << listed);
    REQUIRE(gemms.size() == 2);
    CHECK(gemms[0].rfind(dtype_name(half), 0) == 0);
    CHECK(gemms[1].rfind(dtype_name(half), 0) == 0);
    CHECK(gemms[1].find("+bias") != std::string::npos);
    check_close(matmul(a.to(kCPU), b.to(kCPU)), product, tol_for(half), "16-bit matmul");
  }
}

TEST_CASE("cuda: cuBLASLt's algorithm cache stays within its capacity, results unchanged when answers are dropped") {
  if (!cuda_ready()) return;
  REQUIRE(cuda::gemm_epilogues_cublaslt());
  CHECK_THROWS_WITH_AS(cuda::set_gemm_algorithm_cache_capacity(0), doctest::Contains("at least 1 entry"), Error);
  // (Which entry goes first is kernels/lru_cache.h's, tested in test_lru_cache.)
  struct RestoreCapacity {
    ~RestoreCapacity() { cuda::set_gemm_algorithm_cache_capacity(1024); }
  } restore;
  cuda::set_gemm_algorithm_cache_capacity(3);
  CHECK(cuda::gemm_algorithm_cache_size() <= 3);  // trimmed at once
  manual_seed(47);
  const Tensor w = rnd({8, 16}).to(kCUDA), bias = rnd({8}).to(kCUDA);
  const Tensor w_cpu = w.to(kCPU), bias_cpu = bias.to(kCPU);
  const cuda::GemmEpilogueCounts before = cuda::gemm_epilogue_counts();
  // Six row counts: six problems for a three-entry cache; each one again afterwards (its answer
  // asked for anew once dropped), every result still the CPU's.
  int64_t calls = 0;
  for (int round = 0; round < 2; ++round)
    for (int64_t rows = 1; rows <= 6; ++rows) {
      CAPTURE(rows);
      const Tensor x = rnd({rows, 16});
      check_close(F::linear(x, w_cpu, bias_cpu), F::linear(x.to(kCUDA), w, bias), Tol{1e-5, 1e-6}, "linear");
      ++calls;
      CHECK(cuda::gemm_algorithm_cache_size() <= 3);
    }
  const cuda::GemmEpilogueCounts after = cuda::gemm_epilogue_counts();
  if (cuda::is_emulated()) CHECK(after.cublaslt_bias - before.cublaslt_bias == calls);  // none fell back
  CHECK(after.cublaslt_bias + after.fallback_bias - before.cublaslt_bias - before.fallback_bias == calls);
  CHECK(cuda::gemm_algorithm_cache_size() == 3);
}

TEST_CASE("cuda: softmax, log_softmax and cross-entropy") {
  if (!cuda_ready()) return;
  for (DType dtype : kFloatingTypes) {
    CAPTURE(dtype_name(dtype));
    manual_seed(51);
    const Tol t = tol_for(dtype);
    const Tensor x = mul_scalar(rnd({3, 5, 37}, dtype), 3.0);
    check_op(
        "softmax last", [](const std::vector<Tensor>& in) { return F::softmax(in[0], -1); }, {x}, t);
    check_op(
        "log_softmax last", [](const std::vector<Tensor>& in) { return F::log_softmax(in[0], -1); }, {x}, t);
    check_op(
        "softmax dim 1", [](const std::vector<Tensor>& in) { return F::softmax(in[0], 1); }, {x}, t);
    check_op(
        "log_softmax of a transposed view",
        [](const std::vector<Tensor>& in) { return F::log_softmax(in[0].transpose(1, 2), -1); }, {x}, t);
    // Rows with -inf entries, and one row that is -inf everywhere (zeros, never NaN).
    Tensor masked = rnd({4, 7}, dtype);
    masked.slice(1, 0, 3).select(0, 1).fill_(-INFINITY);
    masked.select(0, 3).fill_(-INFINITY);
    check_op(
        "softmax with -inf", [](const std::vector<Tensor>& in) { return F::softmax(in[0], -1); }, {masked}, t, false);
    check_op(
        "log_softmax with -inf", [](const std::vector<Tensor>& in) { return F::log_softmax(in[0], -1); }, {masked}, t,
        false);

    // Cross-entropy: (N, C) and (B, T, C), ignore_index, label smoothing.
    const Tensor logits = mul_scalar(rnd({11, 37}, dtype), 2.0);
    Tensor targets = randint(0, 37, {11});
    targets.select(0, 4).fill_(-100);
    targets.select(0, 7).fill_(-100);
    const Tol loss_t = dtype == kFloat32 ? Tol{1e-5, 1e-6} : t;
    for (double smoothing : {0.0, 0.1}) {
      CAPTURE(smoothing);
      F::CrossEntropyOptions o;
      o.label_smoothing = smoothing;
      check_op(
          "cross_entropy (N, C)", [o](const std::vector<Tensor>& in) { return F::cross_entropy(in[0], in[1], o); },
          {logits, targets}, loss_t);
      const Tensor logits3 = rnd({2, 9, 13}, dtype);
      Tensor targets3 = randint(0, 13, {2, 9});
      targets3.select(0, 1).slice(0, 6, 9).fill_(3);
      F::CrossEntropyOptions o3 = o;
      o3.ignore_index = 3;
      check_op(
          "cross_entropy (B, T, C) ignore_index 3",
          [o3](const std::vector<Tensor>& in) { return F::cross_entropy(in[0], in[1], o3); }, {logits3, targets3},
          loss_t);
    }
    // Every target ignored: loss 0 and zero gradient on both devices.
    check_op(
        "cross_entropy all ignored", [](const std::vector<Tensor>& in) { return F::cross_entropy(in[0], in[1]); },
        {rnd({3, 5}, dtype), full({3}, -100, kInt64)}, t);
  }
}

TEST_CASE("cuda: embedding, index_select, gather and dropout") {
  if (!cuda_ready()) return;
  for (DType dtype : kFloatingTypes) {
    CAPTURE(dtype_name(dtype));
    manual_seed(61);
    const Tensor weight = rnd({19, 10}, dtype);
    // Repeated indices: the backward accumulates several rows into one.
    const Tensor idx = tensor({{3, 0, 18, 3}, {7, 3, 3, 11}}, kInt64);
    // 16-bit gradients of repeated rows round once per accumulation.
    const Tol grad_t =
        dtype == kFloat32 || dtype == kFloat64 ? tol_for(dtype) : Tol{tol_for(dtype).rtol * 3, tol_for(dtype).atol * 3};
    check_op(
        "embedding", [](const std::vector<Tensor>& in) { return F::embedding(in[0], in[1]); }, {weight, idx},
        tol_for(dtype), true, grad_t);
    check_op(
        "index_select dim 1", [](const std::vector<Tensor>& in) { return index_select(in[0], 1, in[1]); },
        {rnd({4, 9, 3}, dtype), tensor({8, 0, 0, 5, 2}, kInt64)}, tol_for(dtype), true, grad_t);
    const Tensor gidx = randint(0, 9, {4, 6, 3});
    check_op(
        "gather dim 1", [](const std::vector<Tensor>& in) { return gather(in[0], 1, in[1]); },
        {rnd({4, 9, 3}, dtype), gidx}, tol_for(dtype), true, grad_t);
  }
  // Dropout: the mask comes from the Philox stream, the same on both devices for a seed.
  for (DType dtype : kFloatingTypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor x = rnd({7, 301}, dtype);
    const Tensor y = check_op(
        "dropout 0.3", [](const std::vector<Tensor>& in) { return F::dropout(in[0], 0.3); }, {x}, tol_for(dtype));
    const std::vector<double> kept = host_values(ne(y, zeros({1}, kCUDA)));
    double fraction = 0;
    for (double k : kept) fraction += k;
    fraction /= static_cast<double>(kept.size());
    CHECK(fraction == doctest::Approx(0.7).epsilon(0.05));
    // Reproducible: the same seed again gives the same mask on the device.
    manual_seed(1234);
    CHECK(host_values(y) == host_values(F::dropout(x.to(kCUDA), 0.3)));
    check_op("dropout eval", [](const std::vector<Tensor>& in) { return F::dropout(in[0], 0.3, false); }, {x}, {0, 0});
  }
}

TEST_CASE("cuda: layer_norm forward and backward") {
  if (!cuda_ready()) return;
  for (DType dtype : kFloatingTypes) {
    CAPTURE(dtype_name(dtype));
    manual_seed(71);
    const Tol t = tol_for(dtype);
    // Parameter gradients sum over rows: looser for 16-bit outputs of a float32 sum.
    const Tol grad_t = dtype == kFloat32 ? Tol{1e-4, 1e-5} : (dtype == kFloat64 ? t : Tol{t.rtol * 4, t.atol * 4});
    for (int64_t cols : {1, 37, 300}) {
      CAPTURE(cols);
      const Tensor x = add_scalar(mul_scalar(rnd({2, 5, cols}, dtype), 2.0), 1.0);
      check_op(
          "layer_norm affine", [](const std::vector<Tensor>& in) { return F::layer_norm(in[0], in[1], in[2], 1e-5); },
          {x, rnd({cols}, dtype), rnd({cols}, dtype)}, t, true, grad_t);
      check_op(
          "layer_norm without affine", [](const std::vector<Tensor>& in) { return F::layer_norm(in[0]); }, {x}, t, true,
          grad_t);
      check_op(
          "layer_norm of a transposed view",
          [](const std::vector<Tensor>& in) { return F::layer_norm(in[0].transpose(0, 1), in[1], Tensor()); },
          {rnd({5, 2, cols}, dtype), rnd({cols}, dtype)}, t, true, grad_t);
    }
  }
}

TEST_CASE("cuda: Adam/AdamW fused steps and gradient clipping") {
  if (!cuda_ready()) return;
  for (DType dtype : {kFloat32, kFloat64}) {
    CAPTURE(dtype_name(dtype));
    for (int variant = 0; variant < 3; ++variant) {
      CAPTURE(variant);  // 0: AdamW, 1: AdamW amsgrad, 2: Adam with L2
      manual_seed(81);
      std::vector<Tensor> p_cpu = {rnd({37}, dtype), rnd({5, 11}, dtype)};
      std::vector<Tensor> p_gpu;
      for (Tensor& p : p_cpu) {
        p.requires_grad_();
        p_gpu.push_back(p.detach().to(kCUDA).requires_grad_());
      }
      auto make = [&](std::vector<Tensor> params) -> std::unique_ptr<optim::Optimizer> {
        if (variant == 2) {
          optim::AdamOptions o;
          o.lr = 0.05;
          o.weight_decay = 0.1;
          return std::make_unique<optim::Adam>(params, o);
        }
        optim::AdamWOptions o;
        o.lr = 0.05;
        o.weight_decay = 0.1;
        o.amsgrad = variant == 1;
        return std::make_unique<optim::AdamW>(params, o);
      };
      auto opt_cpu = make(p_cpu), opt_gpu = make(p_gpu);
      for (int step = 0; step < 3; ++step) {
        for (size_t i = 0; i < p_cpu.size(); ++i) {
          const Tensor g = rnd(p_cpu[i].shape(), dtype);
          p_cpu[i].set_grad(g);
          p_gpu[i].set_grad(g.to(kCUDA));
        }
        opt_cpu->step();
        opt_gpu->step();
      }
      for (size_t i = 0; i < p_cpu.size(); ++i)
        check_close(p_cpu[i].detach(), p_gpu[i].detach(), dtype == kFloat32 ? Tol{1e-5, 1e-6} : tol_for(dtype),
                    "parameter after 3 steps");
    }
  }
  // clip_grad_norm_: the global norm over several tensors and the clipped gradients.
  for (double norm_type : {2.0, 1.0, static_cast<double>(INFINITY)}) {
    CAPTURE(norm_type);
    for (DType dtype : kFloatingTypes) {
      CAPTURE(dtype_name(dtype));
      manual_seed(91);
      std::vector<Tensor> p_cpu, p_gpu;
      for (const Dims& shape : std::vector<Dims>{{1000}, {7, 3}, {1}}) {
        Tensor p = zeros(shape, dtype).requires_grad_();
        const Tensor g = rnd(shape, dtype);
        p.set_grad(g);
        Tensor q = zeros(shape, TensorOptions(dtype).device(kCUDA)).requires_grad_();
        q.set_grad(g.to(kCUDA));
        p_cpu.push_back(p);
        p_gpu.push_back(q);
      }
      const double n_cpu = nn::clip_grad_norm_(p_cpu, 0.5, norm_type);
      const double n_gpu = nn::clip_grad_norm_(p_gpu, 0.5, norm_type);
      CHECK(n_gpu == doctest::Approx(n_cpu).epsilon(1e-5));
      for (size_t i = 0; i < p_cpu.size(); ++i)
        check_close(p_cpu[i].grad(), p_gpu[i].grad(), tol_for(dtype), "clipped gradient");
    }
  }
}

TEST_CASE("cuda: flash attention forward and backward, every mask kind, odd sizes, 16-bit inputs") {
  if (!cuda_ready()) return;
  struct Case {
    const char* name;
    int64_t B, H, T, S, D, Dv;
    int mask;  // 0 none, 1 causal, 2 key_lengths, 3 key_padding, 4 keep, 5 additive, 6
               // window+causal, 7 all
    double dropout;
  };
  const Case cases[] = {
      {"no mask", 2, 2, 19, 33, 16, 16, 0, 0.0},
      {"causal T < S", 1, 2, 21, 37, 8, 12, 1, 0.0},
      {"causal square", 2, 1, 70, 70, 16, 16, 1, 0.0},
      {"key lengths (one row fully masked)", 2, 2, 9, 23, 8, 8, 2, 0.0},
      {"key padding", 2, 1, 11, 20, 8, 8, 3, 0.0},
      {"boolean keep mask", 2, 2, 13, 17, 8, 8, 4, 0.0},
      {"additive mask", 2, 2, 13, 17, 8, 8, 5, 0.0},
      {"window + causal", 1, 1, 40, 40, 8, 8, 6, 0.0},
      {"everything + dropout", 2, 2, 15, 29, 8, 8, 7, 0.2},
      {"dropout", 1, 2, 17, 17, 8, 8, 0, 0.3},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    for (DType dtype : kFloatingTypes) {
      CAPTURE(dtype_name(dtype));
      if ((dtype == kFloat16 || dtype == kBFloat16) && c.mask != 0 && c.mask != 7) continue;
      manual_seed(101);
      const Tensor q = rnd({c.B, c.H, c.T, c.D}, dtype), k = rnd({c.B, c.H, c.S, c.D}, dtype),
                   v = rnd({c.B, c.H, c.S, c.Dv}, dtype);
      const Tensor lengths = tensor({0.0, static_cast<double>(c.S - 5)}, kInt64).slice(0, 0, c.B);
      Tensor padding = gt(rand({c.B, c.S}), full({1}, 0.7));
      Tensor keep = gt(rand({c.B, 1, c.T, c.S}), full({1}, 0.3));
      const Tensor additive = mul_scalar(rnd({c.H, c.T, c.S}), 0.5).to(dtype == kFloat64 ? kFloat64 : kFloat32);
      // Fixed-shape tensors (masks) are captured and copied to each run's device.
      const Fn fn = [&](const std::vector<Tensor>& in) {
        const Device device = in[0].device();
        F::AttentionMask m;
        if (c.mask == 1 || c.mask == 6 || c.mask == 7) m.causal = true;
        if (c.mask == 6) m.window = 5;
        if (c.mask == 2 || c.mask == 7) m.key_lengths = lengths.to(device);
        if (c.mask == 3) m.key_padding = padding.to(device);
        if (c.mask == 4 || c.mask == 7) m.keep = keep.to(device);
        if (c.mask == 5 || c.mask == 7) m.additive = additive.to(device);
        return F::flash_attention(in[0], in[1], in[2], m, c.dropout);
      };
      // Scores sum D products and the output S weighted values.
      const Tol t = dtype == kFloat32 ? Tol{1e-4, 1e-5} : tol_for(dtype);
      const Tol grad_t = dtype == kFloat32 ? Tol{2e-4, 2e-5} : (dtype == kFloat64 ? t : Tol{t.rtol * 3, t.atol * 3});
      check_op(c.name, fn, {q, k, v}, t, true, grad_t);
    }
  }
  // The CUDA path of scaled_dot_product_attention (fused) against the CPU's, with is_causal,
  // and heads given as a transposed (B, T, H, D) view as MultiHeadAttention produces them.
  manual_seed(103);
  check_op("scaled_dot_product_attention transposed views",
           [](const std::vector<Tensor>& in) {
             return F::scaled_dot_product_attention(in[0].transpose(1, 2), in[1].transpose(1, 2), in[2].transpose(1, 2),
                                                    {}, 0.0, std::nullopt, true);
           },
           {rnd({2, 23, 3, 8}), rnd({2, 23, 3, 8}), rnd({2, 23, 3, 8})}, {1e-4, 1e-5}, true, {2e-4, 2e-5});
  check_op("flash_attention_packed",
           [](const std::vector<Tensor>& in) {
             F::AttentionMask m;
             m.causal = true;
             return F::flash_attention_packed(in[0], 2, m);
           },
           {rnd({2, 13, 3 * 16})}, {1e-4, 1e-5}, true, {2e-4, 2e-5});
}

TEST_CASE("cuda: tensor-core flash attention (float16, bfloat16; D 64 and 128) against the CPU") {
  if (!cuda_ready()) return;
  REQUIRE(cuda::flash_attention_tensor_cores(64, 64));
  REQUIRE(cuda::flash_attention_tensor_cores(128, 128));
  CHECK_FALSE(cuda::flash_attention_tensor_cores(32, 32));
  CHECK_FALSE(cuda::flash_attention_tensor_cores(64, 128));
  struct Case {
    const char* name;
    int64_t B, H, T, S, D;
    int mask;  // 0 none, 1 causal, 2 key lengths + keep + additive + causal, 3 window + causal
    double dropout;
  };
  // Sizes never multiples of the 64-row tiles; the causal square runs 8 query tiles.
  const Case cases[] = {
      {"no mask, T < S", 1, 2, 37, 83, 64, 0, 0.0},
      {"causal square T 512", 1, 1, 509, 509, 64, 1, 0.0},
      {"causal D 128, T > S", 1, 1, 131, 70, 128, 1, 0.0},
      {"every mask + dropout", 2, 1, 45, 77, 64, 2, 0.2},
      {"window + causal, D 128", 1, 1, 100, 100, 128, 3, 0.0},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    for (DType dtype : {kFloat16, kBFloat16}) {
      CAPTURE(dtype_name(dtype));
      manual_seed(107);
      const Tensor q = rnd({c.B, c.H, c.T, c.D}, dtype), k = rnd({c.B, c.H, c.S, c.D}, dtype),
                   v = rnd({c.B, c.H, c.S, c.D}, dtype);
      const Tensor lengths = tensor({static_cast<double>(c.S - 9), 0.0}, kInt64).slice(0, 0, c.B);
      const Tensor keep = gt(rand({c.B, 1, c.T, c.S}), full({1}, 0.2));
      const Tensor additive = mul_scalar(rnd({c.H, c.T, c.S}), 0.5);
      const Fn fn = [&](const std::vector<Tensor>& in) {
        const Device device = in[0].device();
        F::AttentionMask m;
        m.causal = c.mask != 0;
        if (c.mask == 2) {
          m.key_lengths = lengths.to(device);
          m.keep = keep.to(device);
          m.additive = additive.to(device);
        }
        if (c.mask == 3) m.window = 17;
        return F::flash_attention(in[0], in[1], in[2], m, c.dropout);
      };
      // The CPU computes in float32 and rounds the output once; the tensor cores also round P
      // to the operand type before P V: one more rounding of the same size.
      const Tol t = tol_for(dtype);
      check_op(c.name, fn, {q, k, v}, t, true, Tol{t.rtol * 3, t.atol * 3});
    }
  }
  // The packed projections of MultiHeadAttention (B, T, 3 * H * 64), causal, in bfloat16.
  manual_seed(109);
  check_op(
      "flash_attention_packed bfloat16 D 64",
      [](const std::vector<Tensor>& in) {
        F::AttentionMask m;
        m.causal = true;
        return F::flash_attention_packed(in[0], 2, m);
      },
      {rnd({2, 70, 3 * 128}, kBFloat16)}, tol_for(kBFloat16), true,
      Tol{tol_for(kBFloat16).rtol * 3, tol_for(kBFloat16).atol * 3});
}

TEST_CASE("cuda: MultiHeadAttention forward and backward") {
  if (!cuda_ready()) return;
  const nn::ProjectionLayout layouts[] = {nn::ProjectionLayout::Separate, nn::ProjectionLayout::FusedQKV};
  for (nn::ProjectionLayout layout : layouts) {
    CAPTURE(nn::projection_layout_name(layout));
    nn::MultiHeadAttentionOptions o;
    o.d_model = 24;
    o.heads = 3;
    o.layout = layout;
    manual_seed(111);
    nn::MultiHeadAttention on_cpu(o);
    manual_seed(111);
    nn::MultiHeadAttention on_gpu(o);
    on_gpu.to(kCUDA);
    const Tensor x = rnd({2, 11, 24});
    Tensor padding = zeros({2, 11}, kBool);
    padding.select(0, 1).slice(0, 8, 11).fill_(1.0);
    const Tensor x_cpu = x.clone().requires_grad_(), x_gpu = x.to(kCUDA).requires_grad_();
    F::AttentionMask m_cpu, m_gpu;
    m_cpu.causal = m_gpu.causal = true;
    m_cpu.key_padding = padding;
    m_gpu.key_padding = padding.to(kCUDA);
    const Tensor y_cpu = on_cpu.forward(x_cpu, m_cpu).output, y_gpu = on_gpu.forward(x_gpu, m_gpu).output;
    check_close(y_cpu, y_gpu, {1e-4, 1e-5}, "MultiHeadAttention output");
    const Tensor upstream = rnd(y_cpu.shape());
    y_cpu.backward(upstream);
    y_gpu.backward(upstream.to(kCUDA));
    check_close(x_cpu.grad(), x_gpu.grad(), {2e-4, 2e-5}, "input gradient");
    const auto named_cpu = on_cpu.named_parameters(), named_gpu = on_gpu.named_parameters();
    REQUIRE(named_cpu.size() == named_gpu.size());
    for (size_t i = 0; i < named_cpu.size(); ++i) {
      CAPTURE(named_cpu[i].first);
      check_close(named_cpu[i].second.grad(), named_gpu[i].second.grad(), {2e-4, 2e-5}, "parameter gradient");
    }
  }
}

TEST_CASE("cuda: TransformerLM, one training step (forward, loss, backward, clip, AdamW)") {
  if (!cuda_ready()) return;
  nn::TransformerLMOptions o;
  o.vocab = 29;
  o.d_model = 32;
  o.heads = 4;
  o.layers = 2;
  o.context = 16;
  o.dropout = 0.1;
  manual_seed(121);
  nn::TransformerLM lm_cpu(o);
  manual_seed(121);
  nn::TransformerLM lm_gpu(o);
  lm_gpu.to(kCUDA);
  const Tensor idx = randint(0, 29, {2, 13}), targets = randint(0, 29, {2, 13});
  optim::AdamWOptions ao;
  ao.lr = 3e-3;
  // The key bias of every attention layer has an exactly zero gradient in exact arithmetic
  // (softmax ignores a constant added to all scores), so both devices hold rounding noise
  // there, and with eps = 1e-8 Adam's first step would turn that noise into +-lr updates of
  // arbitrary sign. eps = 1e-4 keeps such updates below 1e-7 and real ones near lr.
  ao.eps = 1e-4;
  optim::AdamW opt_cpu(lm_cpu.parameters(), ao), opt_gpu(lm_gpu.parameters(), ao);
  // The same seed gives the same dropout masks on both devices.
  manual_seed(7);
  const Tensor loss_cpu = F::cross_entropy(lm_cpu(idx), targets);
  manual_seed(7);
  const Tensor loss_gpu = F::cross_entropy(lm_gpu(idx.to(kCUDA)), targets.to(kCUDA));
  check_close(loss_cpu, loss_gpu, {1e-5, 1e-6}, "loss");
  loss_cpu.backward();
  loss_gpu.backward();
  const auto named_cpu = lm_cpu.named_parameters(), named_gpu = lm_gpu.named_parameters();
  REQUIRE(named_cpu.size() == named_gpu.size());
  for (size_t i = 0; i < named_cpu.size(); ++i) {
    CAPTURE(named_cpu[i].first);
    check_close(named_cpu[i].second.grad(), named_gpu[i].second.grad(), {5e-4, 5e-6}, "parameter gradient");
  }
  const double norm_cpu = nn::clip_grad_norm_(lm_cpu.parameters(), 0.1);
  const double norm_gpu = nn::clip_grad_norm_(lm_gpu.parameters(), 0.1);
  CHECK(norm_gpu == doctest::Approx(norm_cpu).epsilon(1e-4));
  opt_cpu.step();
  opt_gpu.step();
  for (size_t i = 0; i < named_cpu.size(); ++i) {
    CAPTURE(named_cpu[i].first);
    // One AdamW step moves each weight by about lr; a gradient off by 5e-4 relative moves it less.
    check_close(named_cpu[i].second.detach(), named_gpu[i].second.detach(), {1e-4, 1e-5}, "parameter after a step");
  }
  // The second forward after the step agrees too.
  lm_cpu.eval();
  lm_gpu.eval();
  check_close(lm_cpu(idx), lm_gpu(idx.to(kCUDA)), {2e-4, 2e-5}, "logits after one step");
}

namespace {

// Trains a TransformerLM whose heads are 64 wide (the tensor-core attention path) for `steps`
// AdamW steps on `device`, under amp::Autocast(dtype) with a GradScaler enabled for float16,
// on the same seeded batches; returns the losses and the scaler's scale after each step.
struct AmpRun {
  std::vector<double> losses, scales;
};
AmpRun train_amp_lm(Device device, DType dtype, int steps) {
  nn::TransformerLMOptions o;
  o.vocab = 16;
  o.d_model = 128;
  o.heads = 2;
  o.layers = 1;
  o.context = 16;
  manual_seed(131);
  nn::TransformerLM model(o);
  model.to(device);
  optim::AdamW optimizer(model.parameters(), {.lr = 3e-3, .eps = 1e-4, .weight_decay = 0.01});
  amp::GradScaler scaler({.enabled = dtype == kFloat16});
  AmpRun run;
  manual_seed(133);
  for (int it = 0; it < steps; ++it) {
    const Tensor x = randint(0, 16, {4, 16});
    std::vector<int64_t> shifted = x.to_vector<int64_t>();
    for (int64_t& token : shifted) token = (token + 3) % 16;  // the next token: this one + 3
    const Tensor y = from_vector(shifted, {4, 16});
    Tensor loss;
    {
      amp::Autocast autocast(dtype);
      const Tensor logits = model.forward(x.to(device));
      CHECK(logits.dtype() == dtype);
      loss = F::cross_entropy(logits, y.to(device));
    }
    optimizer.zero_grad();
    scaler.scale(loss).backward();
    scaler.unscale_(optimizer);
    nn::clip_grad_norm_(model.parameters(), 1.0);
    scaler.step(optimizer);
    scaler.update();
    run.losses.push_back(loss.item<double>());
    run.scales.push_back(scaler.get_scale());
  }
  for (const Tensor& p : model.parameters()) CHECK(p.dtype() == kFloat32);
  return run;
}

}  // namespace

TEST_CASE("cuda: mixed precision training (bf16 autocast; fp16 with GradScaler) tracks the CPU run") {
  if (!cuda_ready()) return;
  REQUIRE(cuda::flash_attention_tensor_cores(64, 64));
  for (DType dtype : {kBFloat16, kFloat16}) {
    CAPTURE(dtype_name(dtype));
    const int steps = 8;
    const AmpRun cpu = train_amp_lm(kCPU, dtype, steps), gpu = train_amp_lm(kCUDA, dtype, steps);
    // Both learn the shift pattern, and the curves stay close (the emulator measured at most
    // 3.8e-4 relative in bfloat16 and 3.7e-5 in float16 over the 8 steps).
    CHECK(gpu.losses.back() < 0.2 * gpu.losses.front());
    const double tolerance = dtype == kBFloat16 ? 2e-3 : 2e-4;
    for (int i = 0; i < steps; ++i) {
      CAPTURE(i);
      CHECK(gpu.losses[i] == doctest::Approx(cpu.losses[i]).epsilon(tolerance));
      CHECK(gpu.scales[i] == cpu.scales[i]);
    }
  }
  // GradScaler with CUDA gradients: an overflowing gradient skips the step and halves the scale.
  Tensor p = zeros({3}, kCUDA).requires_grad_();
  optim::SGD optimizer({p}, {.lr = 0.5});
  amp::GradScaler scaler({.init_scale = 1024.0});
  scaler.scale(p.sum()).backward();  // gradient 1024 everywhere
  Tensor grad = p.grad();
  NoGradGuard no_grad;
  grad.slice(0, 1, 2).fill_(INFINITY);
  scaler.step(optimizer);
  scaler.update();
  CHECK(host_values(p) == std::vector<double>{0.0, 0.0, 0.0});
  CHECK(scaler.get_scale() == 512.0);
}
