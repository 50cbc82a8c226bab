// tools/heed_gradcheck.cpp — heed-gradcheck: finite-difference gradient checks of every op.
//
// Runs heed::gradcheck (float64 central differences against backward) on the cases of
// tools/op_cases.h and prints a table, or one JSON document with --json.
// Exit status: 0 when every selected case passes, 1 when any fails, 2 on bad arguments (one
// line on stderr naming the problem, "(see --help)"). Written as a user program: heed::heed +
// <heed/heed.h>.
#include <heed/heed.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "op_cases.h"

namespace {

using heed::op_cases::OpCase;

constexpr int kExitPass = 0, kExitFail = 1, kExitUsage = 2;

constexpr const char* kUsage = R"(usage: heed-gradcheck [options]

Checks the backward of every differentiable heed op against central finite differences
in float64 and prints one line per case.

options:
  --op NAME    run only the case NAME, or every case whose name starts with NAME when no
               case is called exactly that (repeatable)
  --list       list the cases (name, inputs, description) without running them
  --json       print one JSON document instead of the table
  --kernels    print which backend (CPU, CUDA) implements each kernel of the kernel table
  --seed N     seed of the random inputs (unsigned integer, default 0)
  --help       show this help

exit status: 0 all selected cases pass, 1 a case fails, 2 bad arguments
)";

struct Options {
  std::vector<std::string> ops;
  bool list = false;
  bool json = false;
  bool kernels = false;
  uint64_t seed = 0;
};

// Thrown for bad command lines; main prints it with the usage and exits with 2.
struct UsageError {
  std::string message;
};

Options parse_args(int argc, char** argv, bool* show_help) {
  Options options;
  *show_help = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&](std::string_view flag) -> std::string_view {
      if (i + 1 >= argc) throw UsageError{fmt::format("{} needs a value", flag)};
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      *show_help = true;
    } else if (arg == "--list") {
      options.list = true;
    } else if (arg == "--json") {
      options.json = true;
    } else if (arg == "--kernels") {
      options.kernels = true;
    } else if (arg == "--op") {
      const std::string_view name = value(arg);
      if (name.empty()) throw UsageError{"--op needs a non-empty case name"};
      options.ops.emplace_back(name);
    } else if (arg == "--seed") {
      const std::string_view text = value(arg);
      uint64_t seed = 0;
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), seed);
      if (text.empty() || error != std::errc() || end != text.data() + text.size())
        throw UsageError{fmt::format("--seed expects an unsigned integer, got '{}'", text)};
      options.seed = seed;
    } else {
      throw UsageError{fmt::format("unknown argument '{}'", arg)};
    }
  }
  return options;
}

// The cases the --op patterns select, in registry order, each once.
std::vector<const OpCase*> selected_cases(const Options& options) {
  const auto& all = heed::op_cases::all_cases();
  std::vector<bool> chosen(all.size(), options.ops.empty());
  for (const std::string& pattern : options.ops) {
    const std::vector<const OpCase*> matches = heed::op_cases::select_cases(pattern);
    if (matches.empty()) throw UsageError{fmt::format("no case is named or starts with '{}' (see --list)", pattern)};
    for (const OpCase* c : matches) chosen[static_cast<size_t>(c - all.data())] = true;
  }
  std::vector<const OpCase*> cases;
  for (size_t i = 0; i < all.size(); ++i)
    if (chosen[i]) cases.push_back(&all[i]);
  return cases;
}

std::string input_shapes(const OpCase& c) {
  std::vector<std::string> parts;
  for (const auto& spec : c.inputs) parts.push_back(spec.describe());
  if (!c.custom_inputs_description.empty()) parts.push_back(c.custom_inputs_description);
  return fmt::format("{}", fmt::join(parts, " "));
}

// JSON has no infinity or NaN: those become null.
nlohmann::ordered_json number_or_null(double v) {
  return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

// --kernels: the kernel table with the backends that implement each kernel.
int list_kernels(bool json) {
  const std::vector<heed::cuda::KernelImplementations> table = heed::cuda::kernel_implementations();
  if (json) {
    nlohmann::ordered_json doc = nlohmann::ordered_json::array();
    for (const auto& k : table) doc.push_back({{"kernel", k.name}, {"cpu", k.cpu}, {"cuda", k.cuda}});
    std::cout << nlohmann::ordered_json{{"cuda_compiled", heed::cuda::compiled_with_cuda()}, {"kernels", doc}}.dump(2)
              << "\n";
    return kExitPass;
  }
  std::cout << fmt::format("{:<26} {:<4} {}\n", "kernel", "CPU", "CUDA");
  for (const auto& k : table)
    std::cout << fmt::format("{:<26} {:<4} {}\n", k.name, k.cpu ? "yes" : "-", k.cuda ? "yes" : "-");
  std::cout << fmt::format("{} kernels; CUDA backend {}\n", table.size(),
                           heed::cuda::compiled_with_cuda() ? "compiled" : "not compiled");
  return kExitPass;
}

int list_cases(const std::vector<const OpCase*>& cases, bool json) {
  if (json) {
    nlohmann::ordered_json doc = nlohmann::ordered_json::array();
    for (const OpCase* c : cases) {
      nlohmann::ordered_json inputs = nlohmann::ordered_json::array();
      for (const auto& spec : c->inputs) inputs.push_back(spec.describe());
      if (!c->custom_inputs_description.empty()) inputs.push_back(c->custom_inputs_description);
      doc.push_back({{"name", c->name}, {"description", c->description}, {"inputs", inputs}});
    }
    std::cout << nlohmann::ordered_json{{"cases", doc}}.dump(2) << "\n";
    return kExitPass;
  }
  size_t width = 4;
  for (const OpCase* c : cases) width = std::max(width, c->name.size());
  for (const OpCase* c : cases) fmt::print("{:<{}}  {:<28}  {}\n", c->name, width, input_shapes(*c), c->description);
  fmt::print("{} cases\n", cases.size());
  return kExitPass;
}

int run_cases(const std::vector<const OpCase*>& cases, const Options& options) {
  size_t width = 4;
  for (const OpCase* c : cases) width = std::max(width, c->name.size());
  if (!options.json)
    fmt::print("{:<{}}  {:<28}  {:>10}  {:>10}  {}\n", "case", width, "inputs", "max |err|", "max rel", "result");
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  int failed = 0;
  for (const OpCase* c : cases) {
    const heed::GradcheckResult r = heed::op_cases::run_case(*c, options.seed);
    if (!r.passed) ++failed;
    if (options.json) {
      nlohmann::ordered_json entry = {{"name", c->name},
                                      {"inputs", nlohmann::ordered_json::array()},
                                      {"max_abs_error", number_or_null(r.max_abs_error)},
                                      {"max_rel_error", number_or_null(r.max_rel_error)},
                                      {"atol", c->options.atol},
                                      {"rtol", c->options.rtol},
                                      {"passed", r.passed}};
      for (const auto& spec : c->inputs) entry["inputs"].push_back(spec.describe());
      if (!c->custom_inputs_description.empty()) entry["inputs"].push_back(c->custom_inputs_description);
      if (!r.passed) entry["message"] = r.message;
      {  // the worst Jacobian entry of every case, passed or not
        entry["worst"] = {{"input", r.worst_input},
                          {"input_element", r.worst_input_element},
                          {"output_element", r.worst_output_element},
                          {"analytic", number_or_null(r.worst_analytic)},
                          {"numeric", number_or_null(r.worst_numeric)}};
      }
      results.push_back(std::move(entry));
      continue;
    }
    fmt::print("{:<{}}  {:<28}  {:>10.2e}  {:>10.2e}  {}\n", c->name, width, input_shapes(*c), r.max_abs_error,
               r.max_rel_error, r.passed ? "PASS" : "FAIL");
    if (!r.passed) fmt::print("    {}\n", r.message);
    std::fflush(stdout);
  }
  const int total = static_cast<int>(cases.size());
  if (options.json) {
    nlohmann::ordered_json doc = {
        {"seed", options.seed}, {"total", total}, {"passed", total - failed}, {"failed", failed}, {"cases", results}};
    std::cout << doc.dump(2) << "\n";
  } else {
    fmt::print("{} cases: {} passed, {} failed (seed {})\n", total, total - failed, failed, options.seed);
  }
  return failed == 0 ? kExitPass : kExitFail;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    bool show_help = false;
    const Options options = parse_args(argc, argv, &show_help);
    if (show_help) {
      std::cout << kUsage;
      return kExitPass;
    }
    if (options.kernels) return list_kernels(options.json);
    const std::vector<const OpCase*> cases = selected_cases(options);
    return options.list ? list_cases(cases, options.json) : run_cases(cases, options);
  } catch (const UsageError& e) {
    std::cerr << "heed-gradcheck: " << e.message << " (see --help)\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "heed-gradcheck: " << e.what() << "\n";
    return kExitFail;
  }
}
