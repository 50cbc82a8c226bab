// tests/test_zero.cpp — dist::ZeroRedundancyOptimizer (ZeRO-1) against plain optimizers.
//
// Invariants: multi-rank cases run this binary as 2-3 child processes (tests/test_ranks.h:
// fork + exec, a file store, collective timeouts of 4 s, every wait bounded); the reference
// is one process with the plain optimizer on the whole batch; parameters are compared with
// the normwise relative difference max|a - b| / max|b| (1e-12 float64, 1e-5 float32, as the
// DDP test), ranks among themselves bit for bit. Built without Gloo, every case skips.
#include <doctest/doctest.h>

#include <heed/heed.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "test_ranks.h"
#include "test_skip.h"

using namespace heed;
using heed::test::max_relative_difference;
namespace fs = std::filesystem;

namespace {

constexpr const char* kScenarioVariable = "HEED_TEST_ZERO_SCENARIO";
constexpr const char* kChildCase = "zero child";

// 8 -> 32 -> 32 -> 4 with tanh: 1476 parameters in 6 tensors (the DDP test's model).
struct SmallNet : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2, fc3;
  SmallNet() : nn::Module("SmallNet") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(8, 32));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 32));
    fc3 = register_module("fc3", std::make_shared<nn::Linear>(32, 4));
  }
  Tensor forward(const Tensor& x) const { return (*fc3)(tanh((*fc2)(tanh((*fc1)(x))))); }
};

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

void write_values(const fs::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::ofstream out(path);
  out.precision(17);
  for (const auto& [name, t] : tensors) {
    out << name << " " << t.numel() << "\n";
    for (double v : t.detach().to(kFloat64).contiguous().to_vector<double>()) out << v << "\n";
  }
}

std::map<std::string, std::vector<double>> read_values(const fs::path& path) {
  std::ifstream in(path);
  std::map<std::string, std::vector<double>> out;
  std::string name;
  int64_t n = 0;
  while (in >> name >> n) {
    std::vector<double>& values = out[name];
    values.resize(static_cast<size_t>(n));
    for (double& v : values) in >> v;
  }
  return out;
}

// 50 AdamW steps on a global batch of 12 rows per step, split over the ranks. MODE plain (one
// process, AdamW), ddp (DDP + ZeRO-1 over DDP's averaged gradients) or reduce (ZeRO-1 averaging
// raw gradients itself, no DDP). Each step: amp::GradScaler (scale 1024, exact in binary),
// clipping to 0.05 (clip_grad_norm_ after unscale_, or ZeroOptions::max_grad_norm), and at
// step 20 an Inf loss on the last rank only: every rank must skip that step. Writes the final
// parameters and the (consolidated) optimizer state to $HEED_TEST_OUT.
int scenario_train() {
  std::shared_ptr<dist::ProcessGroup> pg = dist::init_process_group_from_env();
  const int rank = pg->rank(), world = pg->world_size();
  const DType dtype = env("HEED_TEST_DTYPE") == "float64" ? kFloat64 : kFloat32;
  const std::string mode = env("HEED_TEST_MODE");
  constexpr int64_t kGlobalBatch = 12;
  constexpr int kSteps = 50, kInfStep = 20;
  constexpr double kMaxNorm = 0.05;
  manual_seed(1234);
  SmallNet model;
  model.to(dtype);
  const optim::AdamWOptions adamw{.lr = 1e-2, .weight_decay = 0.01};
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  std::unique_ptr<optim::Optimizer> opt;
  dist::ZeroRedundancyOptimizer* zero = nullptr;
  if (mode == "plain") {
    RANK_CHECK(world == 1, "plain runs on one rank");
    opt = std::make_unique<optim::AdamW>(model.parameters(), adamw);
  } else {
    if (mode == "ddp") ddp = std::make_unique<dist::DistributedDataParallel>(model, pg);
    RANK_CHECK(mode == "ddp" || mode == "reduce", "unknown mode {}", mode);
    dist::ZeroOptions zo;
    zo.reduce_gradients = mode == "reduce";
    zo.max_grad_norm = mode == "reduce" ? kMaxNorm : 0.0;
    auto z = std::make_unique<dist::ZeroRedundancyOptimizer>(model.parameters(), pg, adamw, zo);
    zero = z.get();
    opt = std::move(z);
  }
  amp::GradScalerOptions so;
  so.init_scale = 1024.0;
  so.growth_interval = 1000000;
  if (world > 1) so.found_inf_agreement = dist::found_inf_agreement(pg);
  amp::GradScaler scaler(so);
  const int64_t per_rank = kGlobalBatch / world;
  int skipped = 0, clipped = 0;
  for (int step = 0; step < kSteps; ++step) {
    manual_seed(100 + step);  // the same global batch on every rank
    Tensor x = randn({kGlobalBatch, 8}).to(dtype);
    Tensor y = randn({kGlobalBatch, 4}).to(dtype);
    Tensor xs = x.narrow(0, rank * per_rank, per_rank), ys = y.narrow(0, rank * per_rank, per_rank);
    opt->zero_grad();
    Tensor diff = model.forward(xs) - ys;
    Tensor loss = mean(diff * diff);
    if (step == kInfStep && rank == world - 1) loss = loss * INFINITY;
    scaler.scale(loss).backward();
    if (mode != "reduce") {
      scaler.unscale_(*opt);
      const double norm = nn::clip_grad_norm_(model.parameters(), kMaxNorm);
      clipped += std::isfinite(norm) && norm > kMaxNorm ? 1 : 0;
    }
    const bool stepped = scaler.step(*opt);
    if (mode == "reduce" && stepped) clipped += zero->last_grad_norm() > kMaxNorm ? 1 : 0;
    skipped += stepped ? 0 : 1;
    scaler.update();
  }
  RANK_CHECK(skipped == 1, "{} steps skipped, expected exactly 1 (step {})", skipped, kInfStep);
  RANK_CHECK(clipped > 0, "no step was clipped: the test would not test clipping");
  const fs::path out = env("HEED_TEST_OUT");
  const std::string tag = fmt::format("{}.{}.{}", mode, world, rank);
  std::vector<std::pair<std::string, Tensor>> params;
  for (auto& [name, p] : model.named_parameters()) params.emplace_back(name, p);
  write_values(out / ("params." + tag), params);
  int64_t state_bytes = 0;
  optim::OptimizerState state;
  if (zero) {
    state_bytes = zero->state_bytes();
    RANK_CHECK(state_bytes == zero->owned_numel() * 2 * static_cast<int64_t>(dtype_size(dtype)),
               "state bytes {} != 2 buffers x {} owned elements", state_bytes, zero->owned_numel());
    // The shard round-trips through load_state_dict.
    const optim::OptimizerState shard = zero->state_dict();
    zero->load_state_dict(shard);
    // Every rank gets the consolidated state in turn and loads it back (the slicing path):
    // the shard it then holds must equal the one before, bit for bit.
    optim::OptimizerState full;
    for (int to = 0; to < world; ++to) {
      optim::OptimizerState s = zero->consolidate_state_dict(to);
      RANK_CHECK((to == rank) == !s.tensors.empty(), "consolidate_state_dict({}) on rank {}", to, rank);
      if (to == rank) full = std::move(s);
    }
    zero->load_state_dict(full);
    const optim::OptimizerState again = zero->state_dict();
    RANK_CHECK(again.tensors.size() == shard.tensors.size() && again.scalars == shard.scalars,
               "the shard after loading the full state differs: {} vs {}", again.scalars.dump(), shard.scalars.dump());
    for (size_t i = 0; i < shard.tensors.size(); ++i)
      RANK_CHECK(again.tensors[i].first == shard.tensors[i].first &&
                     max(abs(again.tensors[i].second - shard.tensors[i].second)).item<double>() == 0.0,
                 "state tensor {} differs after loading the consolidated state", shard.tensors[i].first);
    state = std::move(full);
  } else {
    state = opt->state_dict();
    for (const auto& [name, t] : state.tensors) state_bytes += t.numel() * static_cast<int64_t>(t.element_size());
  }
  write_values(out / ("state." + tag), state.tensors);
  std::ofstream(out / ("bytes." + tag)) << state_bytes << "\n";
  std::printf("%s world=%d rank=%d: optimizer state %lld bytes, %d steps clipped, %d skipped\n", mode.c_str(), world,
              rank, static_cast<long long>(state_bytes), clipped, skipped);
  return 0;
}

// World 3, one parameter of 2 elements, SGD with momentum through the generic factory and
// reduce_gradients: rank 2 owns nothing (no state, no inner optimizer) and still ends with the
// same parameter as a local plain SGD on the averaged gradient.
int scenario_tiny() {
  auto pg = dist::init_process_group_from_env();
  const int rank = pg->rank(), world = pg->world_size();
  const optim::SGDOptions sgd{.lr = 0.5, .momentum = 0.9};
  Tensor w = from_vector(std::vector<double>{1.0, -2.0}, {2}).requires_grad_(true);
  Tensor ref = w.detach().clone().requires_grad_(true);
  dist::ZeroOptions zo;
  zo.reduce_gradients = true;
  dist::ZeroRedundancyOptimizer zero(
      {optim::ParamGroup{.params = {w}}}, pg,
      [sgd](std::vector<optim::ParamGroup> g) { return std::make_unique<optim::SGD>(std::move(g), sgd); }, zo);
  optim::SGD plain({ref}, sgd);
  RANK_CHECK((zero.shard_optimizer() == nullptr) == (rank >= 2), "rank {} owns {} elements", rank, zero.owned_numel());
  for (int step = 0; step < 3; ++step) {
    // Rank r's gradient is (r + 1) * (step + 1) * [1, -1]; the average over 3 ranks is 2 * that.
    const double s = static_cast<double>(step + 1);
    w.set_grad(from_vector(std::vector<double>{(rank + 1) * s, -(rank + 1) * s}, {2}));
    ref.set_grad(from_vector(std::vector<double>{2.0 * s, -2.0 * s}, {2}));
    zero.step();
    plain.step();
  }
  RANK_CHECK(max(abs(w - ref)).item<double>() == 0.0, "rank {}: {} vs {}", rank, w.at<double>({0}),
             ref.at<double>({0}));
  RANK_CHECK(zero.state_bytes() == (rank < 2 ? 8 : 0), "rank {} holds {} state bytes", rank, zero.state_bytes());
  // A step without any gradient changes nothing (as the plain optimizer).
  w.zero_grad();
  const Tensor before = w.detach().clone();
  zero.step();
  RANK_CHECK(max(abs(w - before)).item<double>() == 0.0, "a step without gradients changed the parameter");
  // The consolidated momentum equals the plain optimizer's.
  const optim::OptimizerState full = zero.consolidate_state_dict(0);
  if (rank == 0) {
    RANK_CHECK(full.tensors.size() == 1 && full.tensors[0].first == "state.0.0.momentum_buffer", "tensors {}",
               full.tensors.size());
    RANK_CHECK(max(abs(full.tensors[0].second - plain.state(0, 0).buffers.at("momentum_buffer"))).item<double>() == 0,
               "consolidated momentum differs");
    RANK_CHECK(full.scalars["state"][0][0]["step"] == 3, "step {}", full.scalars.dump());
  }
  // A shard saved by another rank is refused with a clear message.
  optim::OptimizerState shard = zero.state_dict();
  shard.scalars["rank"] = (rank + 1) % world;
  bool refused = false;
  try {
    zero.load_state_dict(shard);
  } catch (const Error& e) {
    refused = std::string(e.what()).find("was saved by rank") != std::string::npos;
  }
  RANK_CHECK(refused, "a shard of another rank was accepted");
  std::printf("tiny rank %d ok\n", rank);
  return 0;
}

}  // namespace

TEST_CASE("zero child: runs one rank of a scenario (only as a child process of the zero tests)") {
  heed::test::run_child_scenario(kScenarioVariable, [](const std::string& name) {
    if (name == "train") return scenario_train();
    if (name == "tiny") return scenario_tiny();
    return 126;
  });
}

TEST_CASE(
    "zero: DDP + ZeRO-1 and ZeRO-1 with its own gradient averaging on 2 and 3 ranks equal 1 rank with plain AdamW "
    "over 50 steps (GradScaler, clipping; 3 ranks in float64 only); state per rank ~ 1/world; the consolidated state "
    "equals AdamW's") {
  if (!dist::is_available()) return heed::test::skip("heed was built without Gloo (HEED_DIST=OFF)");
  const fs::path out = heed::test::fresh_directory("heed_zero");
  for (const std::string dtype : {"float64", "float32"}) {
    CAPTURE(dtype);
    const std::string dtype_env = "HEED_TEST_DTYPE=" + dtype;
    const double tolerance = dtype == "float64" ? 1e-12 : 1e-5;
    heed::test::require_all_ok(heed::test::run_ranks(kChildCase, kScenarioVariable, "train", 1, 40.0,
                                                     {dtype_env, "HEED_TEST_MODE=plain"}, out));
    const auto reference = read_values(out / "params.plain.1.0");
    const auto reference_state = read_values(out / "state.plain.1.0");
    REQUIRE(reference.size() == 6);
    REQUIRE(reference_state.size() == 12);  // exp_avg and exp_avg_sq of 6 parameters
    int64_t full_bytes = 0;
    std::ifstream(out / "bytes.plain.1.0") >> full_bytes;
    CHECK(full_bytes == 1476 * 2 * (dtype == "float64" ? 8 : 4));
    for (const std::string mode : {"ddp", "reduce"}) {
      for (int world : {2, 3}) {
        if (world == 3 && dtype == "float32") continue;  // 3 ranks: float64 only (CI time)
        CAPTURE(mode);
        CAPTURE(world);
        const auto results = heed::test::run_ranks(kChildCase, kScenarioVariable, "train", world, 40.0,
                                                   {dtype_env, "HEED_TEST_MODE=" + mode}, out);
        heed::test::require_all_ok(results);
        const std::string tag = fmt::format("{}.{}", mode, world);
        const auto rank0 = read_values(out / ("params." + tag + ".0"));
        double worst = 0.0;
        for (int r = 0; r < world; ++r) {
          const auto mine = read_values(out / fmt::format("params.{}.{}", tag, r));
          CHECK(mine == rank0);  // identical on every rank, bit for bit
          int64_t bytes = 0;
          std::ifstream(out / fmt::format("bytes.{}.{}", tag, r)) >> bytes;
          // 1476 elements over `world` ranks: the per-rank share is floor or ceil of 1476/world.
          const int64_t esize = dtype == "float64" ? 8 : 4;
          const auto [b, e] = dist::chunk_range(1476, world, r);
          CHECK(bytes == (e - b) * 2 * esize);
          CHECK(bytes * world <= full_bytes + world * 2 * esize);
          MESSAGE(dtype, " ", mode, " world ", world, " rank ", r, ": optimizer state ", bytes,
                  " bytes (AdamW on 1 "
                  "process: ",
                  full_bytes, ")");
        }
        REQUIRE(rank0.size() == reference.size());
        for (const auto& [name, values] : reference) {
          CAPTURE(name);
          REQUIRE(rank0.count(name) == 1);
          worst = std::max(worst, max_relative_difference(rank0.at(name), values));
        }
        const auto state = read_values(out / ("state." + tag + ".0"));
        double worst_state = 0.0;
        REQUIRE(state.size() == reference_state.size());
        for (const auto& [name, values] : reference_state) {
          CAPTURE(name);
          REQUIRE(state.count(name) == 1);
          worst_state = std::max(worst_state, max_relative_difference(state.at(name), values));
        }
        MESSAGE(dtype, " ", mode, " world ", world, ": max|ZeRO - AdamW| / max|AdamW| = ", worst, " (parameters), ",
                worst_state, " (consolidated state)");
        CHECK(worst <= tolerance);
        CHECK(worst_state <= tolerance);
      }
    }
  }
  fs::remove_all(out);
}

TEST_CASE("zero: 3 ranks for 2 elements (a rank owns nothing), SGD through the factory, shard checks") {
  if (!dist::is_available()) return heed::test::skip("heed was built without Gloo (HEED_DIST=OFF)");
  const fs::path out = heed::test::fresh_directory("heed_zero_tiny");
  const auto results = heed::test::run_ranks(kChildCase, kScenarioVariable, "tiny", 3, 30.0, {}, out);
  heed::test::require_all_ok(results);
  CHECK(results[2].output.find("tiny rank 2 ok") != std::string::npos);
  fs::remove_all(out);
}

TEST_CASE("zero: 1 rank equals AdamW bit for bit with two groups and two dtypes; bad uses give heed::Error") {
  if (!dist::is_available()) return heed::test::skip("heed was built without Gloo (HEED_DIST=OFF)");
  auto pg = dist::init_process_group(dist::InitOptions{});
  manual_seed(5);
  auto make = [] {
    manual_seed(5);
    return std::vector<Tensor>{randn({3, 4}).to(kFloat64).requires_grad_(true),
                               randn({5}).to(kFloat32).requires_grad_(true),
                               randn({2, 2}).to(kFloat32).requires_grad_(true)};
  };
  std::vector<Tensor> a = make(), b = make();
  const optim::AdamWOptions adamw{.lr = 0.1, .weight_decay = 0.1};
  dist::ZeroRedundancyOptimizer zero(
      std::vector<optim::ParamGroup>{{.params = {a[0], a[1]}}, {.params = {a[2]}, .lr = 0.05, .weight_decay = 0.0}}, pg,
      adamw);
  optim::AdamW plain(
      std::vector<optim::ParamGroup>{{.params = {b[0], b[1]}}, {.params = {b[2]}, .lr = 0.05, .weight_decay = 0.0}},
      adamw);
  CHECK(zero.owned_numel() == 21);
  CHECK(zero.total_numel() == 21);
  for (int step = 0; step < 5; ++step) {
    for (size_t i = 0; i < a.size(); ++i) {
      Tensor g = tanh(a[i].detach() * (step + 1.0));
      a[i].set_grad(g);
      b[i].set_grad(g.clone());
    }
    if (step == 2) a[1].zero_grad(), b[1].zero_grad();                          // skipped by both
    zero.param_groups()[0].lr = plain.param_groups()[0].lr = 0.1 / (step + 1);  // a scheduler
    zero.step();
    plain.step();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(max(abs(a[i] - b[i])).item<double>() == 0.0);
  }
  CHECK(zero.state_bytes() == (12 * 8 + 5 * 4 + 4 * 4) * 2);
  // The consolidated state loads into a plain AdamW and equals its state.
  const optim::OptimizerState full = zero.consolidate_state_dict();
  const optim::OptimizerState expected = plain.state_dict();
  REQUIRE(full.tensors.size() == expected.tensors.size());
  for (size_t i = 0; i < full.tensors.size(); ++i) {
    CHECK(full.tensors[i].first == expected.tensors[i].first);
    CHECK(max(abs(full.tensors[i].second - expected.tensors[i].second)).item<double>() == 0.0);
  }
  CHECK(full.scalars == expected.scalars);
  CHECK_NOTHROW(plain.load_state_dict(full));

  // Bad uses.
  CHECK_THROWS_WITH_AS(zero.load_state_dict(optim::SGD({randn({2})}).state_dict()),
                       doctest::Contains("belongs to optimizer 'SGD'"), Error);
  Tensor t = randn({4, 3}).t().requires_grad_(true);  // a non-contiguous leaf
  CHECK_THROWS_WITH_AS(dist::ZeroRedundancyOptimizer({t}, pg), doctest::Contains("contiguous CPU tensor"), Error);
  dist::ZeroOptions clip;
  clip.max_grad_norm = 1.0;
  CHECK_THROWS_WITH_AS(dist::ZeroRedundancyOptimizer({randn({2}).requires_grad_(true)}, pg, {}, clip),
                       doctest::Contains("needs reduce_gradients"), Error);
  CHECK_THROWS_WITH_AS(dist::ZeroRedundancyOptimizer({randn({2}).to(kInt32)}, pg), doctest::Contains("dtype"), Error);
  zero.add_param_group({.params = {randn({2}).requires_grad_(true)}});
  CHECK_THROWS_WITH_AS(zero.step(), doctest::Contains("fixed at construction"), Error);
}
