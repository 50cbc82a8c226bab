// tests/test_dist_golden.cpp — heed's DistributedDataParallel (and ZeRO-1) on 2 ranks against
// PyTorch's DDP (tools/make_torch_ddp_golden.py wrote tests/golden/ddp_mlp.safetensors).
//
// Invariants: each of the 2 ranks (child processes, tests/test_ranks.h) builds the golden's
// MLP (fc1 (8, 4) -> tanh -> fc2 (3, 8), float64) from its initial weights, trains on its own
// rank's batches with DDP + AdamW (or DDP + ZeroRedundancyOptimizer wrapping AdamW) and
// compares the parameters after every step with torch's: per tensor, max|heed - torch| /
// max|torch| <= 1e-12 (float64; the same measure as the DDP test). Every rank checks, and
// prints its worst error. CI never runs torch; it only reads the committed file.
#include <doctest/doctest.h>

#include <heed/heed.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "test_ranks.h"
#include "test_skip.h"

using namespace heed;

namespace {

constexpr const char* kScenarioVariable = "HEED_TEST_DIST_GOLDEN_SCENARIO";
constexpr const char* kChildCase = "dist golden child";
constexpr double kTolerance = 1e-12;

std::string golden_path() {
  return (std::filesystem::path(HEED_SOURCE_DIR) / "tests" / "golden" / "ddp_mlp.safetensors").string();
}

struct MLP : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  MLP(int64_t in, int64_t hidden, int64_t out) : nn::Module("MLP") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(in, hidden));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(hidden, out));
  }
  Tensor forward(const Tensor& x) const { return (*fc2)(tanh((*fc1)(x))); }  // (B,in) -> (B,out)
};

int scenario_train(bool zero) {
  auto pg = dist::init_process_group_from_env();
  const int rank = pg->rank();
  const io::SafetensorsFile file = io::load_safetensors(golden_path());
  const nlohmann::json config = nlohmann::json::parse(file.metadata.at("config"));
  RANK_CHECK(config.at("world").get<int>() == pg->world_size(), "the golden is for {} ranks", config.dump());
  const int steps = config.at("steps").get<int>();
  MLP model(config.at("in_features").get<int64_t>(), config.at("hidden").get<int64_t>(),
            config.at("out_features").get<int64_t>());
  model.to(kFloat64);
  nn::NamedTensors init;
  for (const auto& [name, p] : model.named_parameters()) init.emplace_back(name, file.get("init." + name));
  model.load_state_dict(init, /*strict=*/true);
  dist::DistributedDataParallel ddp(model, pg);
  const optim::AdamWOptions adamw{.lr = config.at("lr").get<double>(),
                                  .betas = {config.at("betas")[0].get<double>(), config.at("betas")[1].get<double>()},
                                  .eps = config.at("eps").get<double>(),
                                  .weight_decay = config.at("weight_decay").get<double>()};
  std::unique_ptr<optim::Optimizer> opt;
  if (zero)
    opt = std::make_unique<dist::ZeroRedundancyOptimizer>(model.parameters(), pg, adamw);
  else
    opt = std::make_unique<optim::AdamW>(model.parameters(), adamw);
  const Tensor x = file.get(fmt::format("x.rank{}", rank)), y = file.get(fmt::format("y.rank{}", rank));
  double worst = 0.0;
  for (int s = 0; s < steps; ++s) {
    opt->zero_grad();
    Tensor diff = model.forward(x.select(0, s)) - y.select(0, s);  // (B,out)
    mean(diff * diff).backward();
    opt->step();
    for (const auto& [name, p] : model.named_parameters()) {
      const Tensor expected = file.get(fmt::format("step{}.{}", s + 1, name));
      RANK_CHECK(expected.shape() == p.shape(), "{}: shape {} vs torch {}", name, shape_str(p.shape()),
                 shape_str(expected.shape()));
      const double error =
          max(abs(p.detach() - expected)).item<double>() / std::max(max(abs(expected)).item<double>(), 1e-30);
      worst = std::max(worst, error);
      RANK_CHECK(error <= kTolerance, "rank {} step {} {}: max|heed - torch| / max|torch| = {} > {}", rank, s + 1, name,
                 error, kTolerance);
    }
  }
  std::printf("rank %d (%s): %d steps, worst max|heed - torch| / max|torch| = %.3g\n", rank,
              zero ? "DDP + ZeRO-1" : "DDP + AdamW", steps, worst);
  return 0;
}

}  // namespace

TEST_CASE("dist golden child: runs one rank (only as a child process of the DDP golden test)") {
  heed::test::run_child_scenario(kScenarioVariable, [](const std::string& name) {
    return name == "adamw" ? scenario_train(false) : name == "zero" ? scenario_train(true) : 126;
  });
}

TEST_CASE("dist golden: 2 heed ranks with DDP + AdamW (and + ZeRO-1) follow PyTorch's DDP step by step") {
  if (!dist::is_available()) return heed::test::skip("heed was built without Gloo (HEED_DIST=OFF)");
  REQUIRE(std::filesystem::exists(golden_path()));
  const auto out = heed::test::fresh_directory("heed_dist_golden");
  for (const std::string scenario : {"adamw", "zero"}) {
    CAPTURE(scenario);
    const auto results = heed::test::run_ranks(kChildCase, kScenarioVariable, scenario, 2, 30.0, {}, out);
    heed::test::require_all_ok(results);
    for (const auto& r : results) {
      CHECK(r.output.find("worst max|heed - torch|") != std::string::npos);
      MESSAGE(r.output);
    }
  }
  std::filesystem::remove_all(out);
}
