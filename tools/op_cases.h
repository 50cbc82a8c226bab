// tools/op_cases.h — the registry of gradient-check cases: one or more per differentiable op.
//
// A case is a name, a description, the specs of its inputs and a function of those inputs
// that returns one float64 tensor. `make_inputs` turns the specs into tensors from a seed
// (float64 values from a portable splitmix64 stream, so a seed gives the same inputs on every
// machine); heed-gradcheck and tests/test_gradcheck.cpp run heed::gradcheck on each case.
//
// Invariants:
//  * Case names are unique; the registry keeps registration order (groups in the order of
//    `register_builtin_cases`, cases in the order they were added).
//  * Float inputs honour their constraint (range, distance from kinks, distinct values), so
//    central differences never straddle a kink or a tie; index inputs are valid indices.
//  * A case function is deterministic: it may not depend on global state it does not set
//    itself (dropout reseeds the default generator inside the function).
//
// Adding cases: inside a group function (see op_cases.cpp) one `registry.add({...})` per case;
// a new group (e.g. the nn layers) is one function `void add_<group>_cases(OpCaseRegistry&)`
// listed in register_builtin_cases. Programs may also add cases at run time with
// `OpCaseRegistry::global().add(...)` before they read the list.
#pragma once

#include <heed/heed.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace heed::op_cases {

// How a float input is laid out in memory. Non-contiguous inputs are still leaves: a view
// of a private buffer, detached, so gradcheck perturbs the viewed elements in place.
enum class Layout {
  Contiguous,
  Transposed,  // the last two dims swapped in memory (needs >= 2 dims)
  Strided,     // every other element of a buffer twice as long in the last dim
};

struct InputSpec {
  enum class Kind {
    Uniform,   // float64, uniform in [low, high)
    Distinct,  // float64, a random permutation of low + (i + offset) * step: no ties
    Index,     // int64, uniform integers in [low, high), or the fixed `values`
    Mask,      // bool, true with probability `probability`
  };
  Kind kind = Kind::Uniform;
  Dims shape;
  double low = -1.0, high = 1.0;
  // Uniform: values closer than `margin` to any of `kinks` are moved away from it.
  std::vector<double> kinks;
  double margin = 0.0;
  // Distinct: spacing between neighbouring values and a fractional shift of the grid (two
  // inputs with offsets 0 and 0.5 never hold equal values).
  double step = 0.1, offset = 0.0;
  std::vector<int64_t> values;  // Index: fixed indices instead of random ones
  double probability = 0.5;     // Mask
  Layout layout = Layout::Contiguous;
  bool requires_grad = true;  // float inputs only

  // ---- builders ---------------------------------------------------------------------------
  static InputSpec uniform(Dims shape, double low = -1.0, double high = 1.0);
  // Strictly positive values (log, sqrt, rsqrt, a pow base).
  static InputSpec positive(Dims shape, double low = 0.5, double high = 2.0);
  // Uniform in [low, high) but at least `margin` away from every kink (relu, abs, clamp).
  static InputSpec away_from(Dims shape, std::vector<double> kinks, double margin = 0.05, double low = -1.0,
                             double high = 1.0);
  // Pairwise distinct values centred on zero (max/min, maximum/minimum: no ties).
  static InputSpec distinct(Dims shape, double offset = 0.0, double step = 0.1);
  static InputSpec indices(Dims shape, int64_t low, int64_t high);
  static InputSpec fixed_indices(Dims shape, std::vector<int64_t> values);
  static InputSpec mask(Dims shape, double probability = 0.5);
  InputSpec transposed() const;
  InputSpec strided() const;
  InputSpec no_grad() const;

  std::string describe() const;  // e.g. "f64[3, 4]^T", "i64[5]", "bool[2, 3]"
};

// The tolerance every case is held to unless it says otherwise: |analytic - numeric| <=
// atol + rtol * |numeric| in float64. The cases reach about 3e-9 at worst (heed-gradcheck
// --json lists each case's worst error), so this leaves a 30x margin while catching a backward
// that is wrong by 0.1% (PyTorch's defaults, atol 1e-5 / rtol 1e-3, would accept that).
inline constexpr GradcheckOptions kCaseTolerance{.eps = 1e-6, .atol = 1e-7, .rtol = 1e-5};

struct OpCase {
  std::string name;         // unique, e.g. "matmul_batched_broadcast"
  std::string description;  // one line
  std::vector<InputSpec> inputs;
  GradcheckFn fn;  // returns a float64 tensor
  GradcheckOptions options = kCaseTolerance;
  // Optional (layer cases): makes the inputs itself from a seed: the data inputs described by
  // `inputs`, followed by the parameters of a freshly built float64 module that `fn` runs.
  std::function<std::vector<Tensor>(uint64_t seed)> custom_inputs{};
  std::string custom_inputs_description{};  // for --list, e.g. "+ 6 parameters of Linear"
};

class OpCaseRegistry {
 public:
  // The registry with every built-in case (built on first use).
  static OpCaseRegistry& global();

  // Adds a case; throws heed::Error for an empty or duplicate name, no inputs or no function.
  void add(OpCase op_case);
  const std::vector<OpCase>& cases() const { return cases_; }
  const OpCase* find(std::string_view name) const;
  // Cases whose name equals `pattern`, or else those starting with it (in registry order).
  std::vector<const OpCase*> select(std::string_view pattern) const;

 private:
  std::vector<OpCase> cases_;
};

// Shorthands for OpCaseRegistry::global().
const std::vector<OpCase>& all_cases();
std::vector<const OpCase*> select_cases(std::string_view pattern);

// The inputs of a case for a seed; input i uses its own stream, so adding an input to a
// case does not change the others.
std::vector<Tensor> make_inputs(const OpCase& op_case, uint64_t seed);
// One input from a spec and a stream seed (also used by the forward tests for random,
// possibly non-contiguous operands).
Tensor make_input(const InputSpec& spec, uint64_t seed);

// Runs heed::gradcheck on a case (errors thrown by the case are caught and reported as a
// failure with the error text in `message`).
GradcheckResult run_case(const OpCase& op_case, uint64_t seed);

// Built-in case groups, registered in this order by OpCaseRegistry::global().
void add_elementwise_cases(OpCaseRegistry& registry);
void add_reduce_cases(OpCaseRegistry& registry);
void add_matmul_cases(OpCaseRegistry& registry);
void add_nn_function_cases(OpCaseRegistry& registry);
void add_shape_cases(OpCaseRegistry& registry);
// layer_cases.cpp: LayerNorm and the attention functions (composed, fused, packed, every mask
// kind), then every nn layer with its parameters (Linear ... TransformerLM, Transformer).
void add_attention_function_cases(OpCaseRegistry& registry);
void add_layer_cases(OpCaseRegistry& registry);

}  // namespace heed::op_cases
