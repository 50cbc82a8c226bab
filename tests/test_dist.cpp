// tests/test_dist.cpp — heed::dist collectives and DistributedDataParallel over Gloo on
// loopback, with 2-3 processes.
//
// Invariants: every rank is this test binary re-executed (fork + exec, so no OpenMP state is
// inherited) running the "dist child" case with HEED_TEST_DIST_SCENARIO set; the parent
// bounds every wait (a deadline, then SIGKILL of every child) and removes its store
// directory; collective timeouts are short (a few seconds) so a lost peer fails fast.
// Built without Gloo, every case skips (tests/test_skip.h).
#include <doctest/doctest.h>

#include <heed/heed.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <heed/dist_sampler.h>

#include "test_ranks.h"
#include "test_skip.h"

using namespace heed;
namespace fs = std::filesystem;

namespace {

constexpr const char* kScenarioVariable = "HEED_TEST_DIST_SCENARIO";

using test::exited_ok;
using test::fresh_directory;
using test::max_relative_difference;
using test::require_all_ok;

// Runs `world` ranks of `scenario` (the "dist child" case) with test_ranks.h's launcher.
std::vector<test::RankResult> run_ranks(const std::string& scenario, int world, double deadline_s,
                                        const std::vector<std::string>& extra_env = {}, const fs::path& out_dir = {}) {
  return test::run_ranks("dist child", kScenarioVariable, scenario, world, deadline_s, extra_env, out_dir);
}

// A TCP port that was free a moment ago (the kernel's choice for port 0).
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// ---- the scenarios, run inside the children -------------------------------------------------

// A small integer pattern, exact in every dtype (bool: a sparse 0/1 pattern).
double pattern(int rank, int64_t i, DType dtype) {
  if (dtype == kBool) return (i + rank) % 3 == 0 ? 1.0 : 0.0;
  return static_cast<double>((i * 7 + rank * 3) % 11) - 5.0;
}

Tensor pattern_tensor(int rank, int64_t n, DType dtype) {
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = pattern(rank, i, dtype);
  if (n == 0) return zeros({0}, dtype);
  return from_vector(values, {n}).to(dtype);
}

int scenario_collectives() {
  auto pg = dist::init_process_group_from_env();
  const int rank = pg->rank(), world = pg->world_size();
  const std::vector<DType> dtypes = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64, kBool};
  const std::vector<int64_t> sizes = {0, 1, 7, 1001};
  int64_t checks = 0;
  for (DType dtype : dtypes) {
    // 16-bit results are rounded once from float32; float32 avg rounds the quotient.
    const double tol = (dtype == kFloat16 || dtype == kBFloat16) ? 1e-2 : dtype == kFloat32 ? 1e-6 : 1e-12;
    for (int64_t n : sizes) {
      for (dist::ReduceOp op : {dist::ReduceOp::Sum, dist::ReduceOp::Avg, dist::ReduceOp::Max}) {
        if (op == dist::ReduceOp::Avg && !is_floating(dtype)) {
          Tensor t = pattern_tensor(rank, n, dtype);
          bool refused = false;
          try {
            pg->all_reduce(t, op);
          } catch (const Error&) {
            refused = true;
          }
          RANK_CHECK(refused, "avg of {} was not refused", dtype_name(dtype));
          continue;
        }
        Tensor t = pattern_tensor(rank, n, dtype);
        pg->all_reduce(t, op);
        RANK_CHECK(t.numel() == n && t.dtype() == dtype, "all_reduce changed shape/dtype");
        for (int64_t i = 0; i < n; ++i) {
          double expected = op == dist::ReduceOp::Max ? -1e300 : 0.0;
          for (int r = 0; r < world; ++r) {
            const double v = pattern(r, i, dtype);
            expected = op == dist::ReduceOp::Max ? std::max(expected, v) : expected + v;
          }
          if (dtype == kBool) expected = expected > 0 ? 1.0 : 0.0;
          if (op == dist::ReduceOp::Avg) expected /= world;
          const double got = t.to(kFloat64).at<double>({i});
          RANK_CHECK(std::abs(got - expected) <= tol * std::max(1.0, std::abs(expected)),
                     "all_reduce {} {} n={} i={}: got {} expected {}", dist::reduce_op_name(op), dtype_name(dtype), n,
                     i, got, expected);
          ++checks;
        }
        // reduce_scatter: this rank's chunk of the same reduction.
        Tensor chunk = pg->reduce_scatter(pattern_tensor(rank, n, dtype), op);
        const auto [begin, end] = dist::chunk_range(n, world, rank);
        RANK_CHECK(chunk.numel() == end - begin, "reduce_scatter n={} got {} elements, expected {}", n, chunk.numel(),
                   end - begin);
        for (int64_t i = begin; i < end; ++i)
          RANK_CHECK(chunk.to(kFloat64).at<double>({i - begin}) == t.to(kFloat64).at<double>({i}),
                     "reduce_scatter {} n={} i={}", dtype_name(dtype), n, i);
      }
      // broadcast from the last rank
      Tensor b = pattern_tensor(rank, n, dtype);
      pg->broadcast(b, world - 1);
      for (int64_t i = 0; i < n; ++i)
        RANK_CHECK(b.to(kFloat64).at<double>({i}) == pattern(world - 1, i, dtype), "broadcast {} n={} i={}",
                   dtype_name(dtype), n, i);
      // all_gather
      std::vector<Tensor> gathered;
      pg->all_gather(gathered, pattern_tensor(rank, n, dtype));
      RANK_CHECK(static_cast<int>(gathered.size()) == world, "all_gather size");
      for (int r = 0; r < world; ++r)
        for (int64_t i = 0; i < n; ++i)
          RANK_CHECK(gathered[r].to(kFloat64).at<double>({i}) == pattern(r, i, dtype), "all_gather {} n={} r={}",
                     dtype_name(dtype), n, r);
      checks += 3;
    }
  }
  pg->barrier();
  // found-inf agreement: only the last rank has an Inf.
  RANK_CHECK(dist::any_rank(*pg, rank == world - 1), "any_rank");
  RANK_CHECK(!dist::any_rank(*pg, false), "any_rank false");
  std::printf("collectives ok: %lld checks, %lld collectives, %lld bytes\n", static_cast<long long>(checks),
              static_cast<long long>(pg->counters().collectives), static_cast<long long>(pg->counters().bytes));
  return 0;
}

// Two small MLPs side by side so several buckets form.
struct SmallNet : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2, fc3;
  SmallNet() : nn::Module("SmallNet") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(8, 32));
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(32, 32));
    fc3 = register_module("fc3", std::make_shared<nn::Linear>(32, 4));
  }
  Tensor forward(const Tensor& x) const { return (*fc3)(tanh((*fc2)(tanh((*fc1)(x))))); }
};

// 50 AdamW steps on a global batch of 2*B rows per step (fixed data per step), split over the
// ranks; with HEED_TEST_MICRO=4 each rank's share is taken as 4 micro-batches, the first 3
// inside no_sync. Writes the final parameters to $HEED_TEST_OUT/params.<world>.<rank>.
int scenario_ddp() {
  const int world = static_cast<int>(std::strtol(std::getenv("HEED_WORLD_SIZE"), nullptr, 10));
  std::shared_ptr<dist::ProcessGroup> pg = dist::init_process_group_from_env();
  const int rank = pg->rank();
  const DType dtype = std::string(std::getenv("HEED_TEST_DTYPE")) == "float64" ? kFloat64 : kFloat32;
  const int micro = static_cast<int>(std::strtol(std::getenv("HEED_TEST_MICRO"), nullptr, 10));
  constexpr int64_t kGlobalBatch = 16;
  constexpr int kSteps = 50;
  // Different initial weights per rank: DDP must broadcast rank 0's.
  manual_seed(1234);
  SmallNet model;
  if (rank != 0) {
    NoGradGuard ng;
    for (Tensor p : model.parameters()) p.mul_(0.0);
  }
  model.to(dtype);
  dist::DDPOptions options;
  options.first_bucket_bytes = 600;  // several buckets on this tiny model
  options.bucket_bytes = 5000;
  const char* overlap = std::getenv("HEED_TEST_OVERLAP");
  options.overlap = !(overlap && std::string(overlap) == "0");
  dist::DistributedDataParallel ddp(model, pg, options);
  optim::AdamW opt(model.parameters(), {.lr = 1e-2, .weight_decay = 0.01});
  const int64_t buckets = static_cast<int64_t>(ddp.bucket_layout().size());
  const int64_t per_rank = kGlobalBatch / world;
  for (int step = 0; step < kSteps; ++step) {
    manual_seed(100 + step);  // the same global batch on every rank
    Tensor x = randn({kGlobalBatch, 8}).to(dtype);
    Tensor y = randn({kGlobalBatch, 4}).to(dtype);
    Tensor xs = x.narrow(0, rank * per_rank, per_rank), ys = y.narrow(0, rank * per_rank, per_rank);
    opt.zero_grad();
    const int64_t micro_rows = per_rank / micro;
    for (int m = 0; m < micro; ++m) {
      Tensor xm = xs.narrow(0, m * micro_rows, micro_rows), ym = ys.narrow(0, m * micro_rows, micro_rows);
      Tensor diff = model.forward(xm) - ym;
      // The mean over this rank's share: the micro-batch losses are scaled by 1/micro.
      Tensor loss = mean(diff * diff) * (1.0 / micro);
      if (m + 1 < micro) {
        auto guard = ddp.no_sync();
        loss.backward();
      } else {
        loss.backward();
        // backward() itself ended the round: every bucket reduced, .grad averaged.
        RANK_CHECK(ddp.counters().syncs == step + 1, "syncs {} after backward of step {}", ddp.counters().syncs, step);
      }
    }
    ddp.finish_gradient_sync();  // a no-op here: the round ended with backward
    nn::clip_grad_norm_(model.parameters(), 10.0);
    opt.step();
  }
  const auto c = ddp.counters();
  std::printf(
      "ddp world=%d rank=%d overlap=%d buckets=%lld reductions=%lld syncs=%lld bytes=%lld reduce %.4f s, waited "
      "%.4f s\n",
      world, rank, options.overlap ? 1 : 0, static_cast<long long>(buckets), static_cast<long long>(c.reductions),
      static_cast<long long>(c.syncs), static_cast<long long>(c.bytes), c.seconds, c.wait_seconds);
  RANK_CHECK(c.syncs == kSteps, "syncs {} != steps {}", c.syncs, kSteps);
  RANK_CHECK(c.reductions == kSteps * buckets, "reductions {} != steps*buckets {}", c.reductions, kSteps * buckets);
  std::ofstream out(fs::path(std::getenv("HEED_TEST_OUT")) /
                    fmt::format("params.{}.{}.{}{}", world, micro, rank, options.overlap ? "" : ".serial"));
  out.precision(17);
  for (const Tensor& p : model.parameters())
    for (double v : p.to(kFloat64).contiguous().to_vector<double>()) out << v << "\n";
  return 0;
}

// Rank 1 kills itself (SIGKILL) while rank 0 waits in an all_reduce.
int scenario_kill() {
  auto pg = dist::init_process_group_from_env();
  pg->barrier();
  if (pg->rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    raise(SIGKILL);
  }
  Tensor t = ones({100000});
  try {
    pg->all_reduce(t);
    pg->all_reduce(t);
  } catch (const Error& e) {
    std::fprintf(stderr, "caught: %s\n", e.what());
    return 3;
  }
  std::fprintf(stderr, "no error although rank 1 died\n");
  return 0;
}

// Rank 1 dies before its backward: rank 0's backward must throw the reduction's error (raised
// on the communication thread, rethrown by backward) instead of hanging.
int scenario_ddp_kill() {
  auto pg = dist::init_process_group_from_env();
  manual_seed(5);
  SmallNet model;
  dist::DistributedDataParallel ddp(model, pg);
  pg->barrier();
  if (pg->rank() == 1) raise(SIGKILL);
  Tensor x = randn({4, 8});
  try {
    mean(model.forward(x)).backward();
  } catch (const Error& e) {
    std::fprintf(stderr, "caught: %s\n", e.what());
    return 3;
  }
  std::fprintf(stderr, "no error although rank 1 died\n");
  return 0;
}

// CUDA tensors through a group (HEED_DIST_BACKEND gloo: staged through the host; nccl: NCCL):
// sum/avg/max all_reduce in float32, float16 and int64, broadcast from the last rank and
// all_gather, against the values computed here on the CPU.
int scenario_cuda_collectives() {
  auto pg = dist::init_process_group_from_env();
  const int rank = pg->rank(), world = pg->world_size();
  int64_t checks = 0;
  auto rank_values = [&](int r, DType dtype) {  // (7,): r*10 + i, with a sign that varies
    std::vector<double> v;
    for (int i = 0; i < 7; ++i) v.push_back((r * 10 + i) * (i % 2 ? -1.0 : 1.0));
    return from_vector(v, {7}).to(dtype);
  };
  for (DType dtype : {kFloat32, kFloat16, kInt64}) {
    for (dist::ReduceOp op : {dist::ReduceOp::Sum, dist::ReduceOp::Avg, dist::ReduceOp::Max}) {
      if (op == dist::ReduceOp::Avg && dtype == kInt64) continue;
      Tensor expected = rank_values(0, kFloat64);
      for (int r = 1; r < world; ++r)
        expected = op == dist::ReduceOp::Max ? maximum(expected, rank_values(r, kFloat64))
                                             : expected + rank_values(r, kFloat64);
      if (op == dist::ReduceOp::Avg) expected = expected * (1.0 / world);
      Tensor t = rank_values(rank, dtype).to(kCUDA);
      pg->all_reduce(t, op);
      RANK_CHECK(t.device() == kCUDA && t.dtype() == dtype, "all_reduce changed the tensor's device or dtype");
      const double err = max(abs(t.to(kCPU).to(kFloat64) - expected.to(dtype).to(kFloat64))).item<double>();
      RANK_CHECK(err == 0.0, "all_reduce {} {}: max error {}", dist::reduce_op_name(op), dtype_name(dtype), err);
      ++checks;
    }
  }
  Tensor b = rank_values(rank, kFloat32).to(kCUDA);
  pg->broadcast(b, world - 1);
  RANK_CHECK(max(abs(b.to(kCPU) - rank_values(world - 1, kFloat32))).item<double>() == 0.0, "broadcast");
  std::vector<Tensor> gathered;
  pg->all_gather(gathered, rank_values(rank, kFloat32).to(kCUDA));
  RANK_CHECK(static_cast<int>(gathered.size()) == world, "all_gather size");
  for (int r = 0; r < world; ++r) {
    RANK_CHECK(gathered[r].device() == kCUDA, "all_gather output on the host");
    RANK_CHECK(max(abs(gathered[r].to(kCPU) - rank_values(r, kFloat32))).item<double>() == 0.0, "all_gather {}", r);
  }
  // DDP with CUDA parameters (CUDA buckets, reduced in the hooks): the same averaged
  // gradients as DDP on the CPU copy of the model, each rank on its own rows.
  manual_seed(7);
  SmallNet cpu_model, cuda_model;
  {
    NoGradGuard no_grad;
    auto cpu_params = cpu_model.parameters(), cuda_params = cuda_model.parameters();
    for (size_t i = 0; i < cpu_params.size(); ++i) cuda_params[i].copy_(cpu_params[i]);
  }
  cuda_model.to(kCUDA);
  dist::DistributedDataParallel cpu_ddp(cpu_model, pg), cuda_ddp(cuda_model, pg);
  manual_seed(100 + rank);
  Tensor x = randn({4, 8});
  mean(cpu_model.forward(x)).backward();
  mean(cuda_model.forward(x.to(kCUDA))).backward();
  RANK_CHECK(cuda_ddp.counters().syncs == 1 && cuda_ddp.counters().reductions >= 1, "CUDA DDP did not reduce");
  auto cpu_params = cpu_model.parameters(), cuda_params = cuda_model.parameters();
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    const Tensor g = cuda_params[i].grad();
    RANK_CHECK(g.defined() && g.device() == kCUDA, "CUDA DDP: parameter {} has no CUDA gradient", i);
    const double scale = std::max(1e-30, max(abs(cpu_params[i].grad())).item<double>());
    const double err = max(abs(g.to(kCPU) - cpu_params[i].grad())).item<double>() / scale;
    RANK_CHECK(err < 1e-5, "CUDA DDP: parameter {} gradient differs from the CPU DDP's by {} (relative)", i, err);
  }
  std::printf("cuda collectives ok: %lld all_reduce checks, DDP on CUDA parameters\n",
              static_cast<long long>(checks + 2));
  return 0;
}

// Rank 1 never joins an all_reduce (it sleeps past the timeout): rank 0 must time out.
int scenario_silent_peer() {
  auto pg = dist::init_process_group_from_env();
  if (pg->rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(6));
    return 0;
  }
  Tensor t = ones({10});
  try {
    pg->all_reduce(t);
  } catch (const Error& e) {
    std::fprintf(stderr, "caught: %s\n", e.what());
    return 3;
  }
  return 0;
}

std::vector<double> read_values(const fs::path& path) {
  std::ifstream in(path);
  std::vector<double> values;
  double v;
  while (in >> v) values.push_back(v);
  return values;
}

}  // namespace

TEST_CASE("dist child: runs one rank of a scenario (only as a child process of the dist tests)") {
  test::run_child_scenario(kScenarioVariable, [](const std::string& name) {
    if (name == "collectives") return scenario_collectives();
    if (name == "ddp") return scenario_ddp();
    if (name == "kill") return scenario_kill();
    if (name == "ddp_kill") return scenario_ddp_kill();
    if (name == "cuda_collectives") return scenario_cuda_collectives();
    if (name == "silent") return scenario_silent_peer();
    return 126;
  });
}

TEST_CASE("dist: a 1-rank group needs no store and its collectives are identities") {
  if (!dist::is_available()) return heed::test::skip("heed was built without Gloo (HEED_DIST=OFF)");
  dist::InitOptions options;
  auto pg = dist::init_process_group(options);
  CHECK(pg->rank() == 0);
  CHECK(pg->world_size() == 1);
  Tensor t = from_vector(std::vector<double>{1.5, -2.0, 3.0}, {3});
  pg->all_reduce(t, dist::ReduceOp::Avg);
  CHECK(t.at<double>({1}) == -2.0);
  std::vector<Tensor> gathered;
  pg->all_gather(gathered, t);
  REQUIRE(gathered.size() == 1);
  CHECK(gathered[0].at<double>({2}) == 3.0);
  CHECK(pg->reduce_scatter(t).numel() == 3);
  pg->barrier();
  CHECK(dist::chunk_range(7, 3, 0) == std::pair<int64_t, int64_t>{0, 3});
  CHECK(dist::chunk_range(7, 3, 2) == std::pair<int64_t, int64_t>{5, 7});
  CHECK(dist::chunk_range(0, 4, 3) == std::pair<int64_t, int64_t>{0, 0});
  // Rank 0 of 2 without a store path serves a TCP store and waits for rank 1: bounded.
  options.world_size = 2;
  options.master_port = free_port();
  options.timeout = std::chrono::milliseconds(300);
  CHECK_THROWS_WITH_AS(dist::init_process_group(options), doctest::Contains("could not connect within 300 ms"), Error);
  options.backend = "nccl2";
  CHECK_THROWS_WITH_AS(dist::init_process_group(options), doctest::Contains("unknown backend 'nccl2'"), Error);
}

TEST_CASE(
    "dist: every collective, op and dtype against a local computation (2 ranks with a file store, 3 with the TCP "
    "store; sizes 0, 1, 7, 1001)") {
  if (!dist::is_available()) return heed::test::skip("heed was built without Gloo (HEED_DIST=OFF)");
  for (int world : {2, 3}) {
    CAPTURE(world);
    // 2 ranks meet through the file store, 3 through the TCP store served by rank 0.
    const std::vector<std::string> env =
        world == 2 ? std::vector<std::string>{}
                   : std::vector<std::string>{"HEED_STORE_PATH=", fmt::format("HEED_MASTER_PORT={}", free_port())};
    const auto results = run_ranks("collectives", world, 40.0, env);
    require_all_ok(results);
    CHECK(results[0].output.find("collectives ok") != std::string::npos);
  }
}

TEST_CASE(
    "dist: DDP on 2 ranks with batch B equals 1 rank with batch 2B over 50 AdamW steps; no_sync reduces once per "
    "step") {
  if (!dist::is_available()) return heed::test::skip("heed was built without Gloo (HEED_DIST=OFF)");
  const fs::path out = fresh_directory("heed_dist_ddp");
  for (const std::string dtype : {"float64", "float32"}) {
    CAPTURE(dtype);
    const std::string dtype_env = "HEED_TEST_DTYPE=" + dtype;
    for (const std::string micro : {"1", "4"}) {
      const std::string micro_env = "HEED_TEST_MICRO=" + micro;
      require_all_ok(run_ranks("ddp", 1, 40.0, {dtype_env, micro_env}, out));
      const auto results = run_ranks("ddp", 2, 40.0, {dtype_env, micro_env}, out);
      require_all_ok(results);
      MESSAGE(results[0].output);
      const auto single = read_values(out / fmt::format("params.1.{}.0", micro));
      const auto rank0 = read_values(out / fmt::format("params.2.{}.0", micro));
      const auto rank1 = read_values(out / fmt::format("params.2.{}.1", micro));
      REQUIRE(single.size() > 1000);
      REQUIRE(rank0.size() == single.size());
      REQUIRE(rank1.size() == single.size());
      CHECK(rank0 == rank1);  // identical on every rank, bit for bit
      const double tolerance = dtype == "float64" ? 1e-12 : 1e-5;
      const double worst = max_relative_difference(rank0, single);
      MESSAGE(dtype, ", ", micro, " micro-batch(es): max|2 ranks - 1 rank| / max|1 rank| = ", worst);
      CAPTURE(micro);
      CAPTURE(worst);
      CHECK(worst <= tolerance);
    }
  }
  // Overlap off (buckets reduced in the hook, on the backward thread): the same bits as the
  // float32 run above (the last to write params.2.1.*).
  require_all_ok(
      run_ranks("ddp", 2, 40.0, {"HEED_TEST_DTYPE=float32", "HEED_TEST_MICRO=1", "HEED_TEST_OVERLAP=0"}, out));
  CHECK(read_values(out / "params.2.1.0.serial") == read_values(out / "params.2.1.0"));
  CHECK(read_values(out / "params.2.1.1.serial") == read_values(out / "params.2.1.1"));
  fs::remove_all(out);
}

TEST_CASE("dist: a peer lost during DDP's backward makes backward throw, naming the lost rank") {
  if (!dist::is_available()) return heed::test::skip("heed was built without Gloo (HEED_DIST=OFF)");
  const auto results = run_ranks("ddp_kill", 2, 20.0);
  REQUIRE_FALSE(results[0].timed_out);
  CHECK(WIFSIGNALED(results[1].status));
  REQUIRE(WIFEXITED(results[0].status));
  CHECK(WEXITSTATUS(results[0].status) == 3);
  CHECK(results[0].seconds < 10.0);
  CHECK(results[0].output.find("all_reduce") != std::string::npos);
  CHECK(results[0].output.find("rank 1 (pid") != std::string::npos);
  MESSAGE(results[0].output);
}

TEST_CASE("dist: a rank killed with SIGKILL mid-collective makes the other fail fast, naming the lost rank") {
  if (!dist::is_available()) return heed::test::skip("heed was built without Gloo (HEED_DIST=OFF)");
  const auto results = run_ranks("kill", 2, 20.0);
  REQUIRE_FALSE(results[0].timed_out);
  CHECK(WIFSIGNALED(results[1].status));
  REQUIRE(WIFEXITED(results[0].status));
  CHECK(WEXITSTATUS(results[0].status) == 3);
  CHECK(results[0].seconds < 10.0);
  CHECK(results[0].output.find("all_reduce") != std::string::npos);
  CHECK(results[0].output.find("rank 0 of 2") != std::string::npos);
  CHECK(results[0].output.find("rank 1 (pid") != std::string::npos);
  MESSAGE(results[0].output);
}

TEST_CASE("dist: CUDA tensors staged through the host over Gloo, 2 ranks") {
  if (!dist::is_available()) return heed::test::skip("heed was built without Gloo (HEED_DIST=OFF)");
  if (!cuda::is_available()) return heed::test::skip("no CUDA device: " + cuda::unavailable_reason());
  const auto results = run_ranks("cuda_collectives", 2, 60.0);
  require_all_ok(results);
  CHECK(results[0].output.find("cuda collectives ok") != std::string::npos);
}

TEST_CASE("dist: backend 'nccl' where it cannot run is refused with a clear error") {
  if (!dist::is_available()) return heed::test::skip("heed was built without Gloo (HEED_DIST=OFF)");
  if (dist::is_nccl_available() && cuda::is_available())
    return heed::test::skip("NCCL and a CUDA device are present: the next case runs the backend");
  dist::InitOptions options;
  options.backend = "nccl";
  CHECK_THROWS_WITH_AS(
      dist::init_process_group(options),
      doctest::Contains(dist::is_nccl_available() ? "needs a CUDA device" : "not available in this build"), Error);
  options.backend = "mpi";
  CHECK_THROWS_WITH_AS(dist::init_process_group(options), doctest::Contains("unknown backend 'mpi'"), Error);
}

TEST_CASE("dist: backend 'nccl' on a GPU: a 1-rank group") {
  if (!dist::is_available()) return heed::test::skip("heed was built without Gloo (HEED_DIST=OFF)");
  if (!dist::is_nccl_available()) return heed::test::skip("heed was built without NCCL");
  if (!cuda::is_available()) return heed::test::skip("no CUDA device: " + cuda::unavailable_reason());
  // One rank only: heed's CUDA backend uses device 0, and NCCL refuses two ranks on one GPU.
  require_all_ok(run_ranks("cuda_collectives", 1, 120.0, {"HEED_DIST_BACKEND=nccl"}));
}

TEST_CASE("dist: a silent peer makes a collective time out (no hang)") {
  if (!dist::is_available()) return heed::test::skip("heed was built without Gloo (HEED_DIST=OFF)");
  const auto results = run_ranks("silent", 2, 20.0);
  REQUIRE_FALSE(results[0].timed_out);
  REQUIRE(WIFEXITED(results[0].status));
  CHECK(WEXITSTATUS(results[0].status) == 3);
  CHECK(results[0].output.find("all_reduce") != std::string::npos);
  CHECK(results[0].seconds < 12.0);
  MESSAGE(results[0].output);
}

TEST_CASE("dist: DistributedSampler gives disjoint per-rank slices covering the data, reshuffled per epoch") {
  for (int64_t n : {0, 1, 10, 11}) {
    for (int world : {1, 2, 3}) {
      CAPTURE(n);
      CAPTURE(world);
      std::vector<int64_t> all;
      for (int r = 0; r < world; ++r) {
        dist::DistributedSampler sampler(n, r, world, 7);
        sampler.set_epoch(3);
        const auto mine = sampler.indices();
        CHECK(static_cast<int64_t>(mine.size()) == (n + world - 1) / world);
        all.insert(all.end(), mine.begin(), mine.end());
      }
      std::sort(all.begin(), all.end());
      const auto last = std::unique(all.begin(), all.end());
      CHECK(last - all.begin() == n);  // every index, the padding only repeats
      for (auto it = all.begin(); it != last; ++it) CHECK((*it >= 0 && *it < n));
    }
  }
  dist::DistributedSampler a(100, 0, 2, 7), b(100, 0, 2, 7);
  CHECK(a.indices() == b.indices());
  b.set_epoch(1);
  CHECK(a.indices() != b.indices());
  dist::DistributedSampler dropped(11, 2, 3, 7, true, true);
  CHECK(dropped.indices().size() == 3);
}

namespace {
// fc1 -> fc2, plus a parameter the forward never uses.
struct NetWithUnused : nn::Module {
  std::shared_ptr<nn::Linear> fc1, fc2;
  Tensor unused;
  NetWithUnused() : nn::Module("NetWithUnused") {
    fc1 = register_module("fc1", std::make_shared<nn::Linear>(4, 64));  // 256 + 64 floats
    fc2 = register_module("fc2", std::make_shared<nn::Linear>(64, 2));  // 128 + 2 floats
    unused = register_parameter("unused", ones({3}));
  }
  Tensor forward(const Tensor& x) const { return (*fc2)(tanh((*fc1)(x))); }
};
}  // namespace

TEST_CASE("dist: DDP on 1 rank: reverse-order bucket layout, unused parameters, no_sync, heed::grad refused") {
  if (!dist::is_available()) return heed::test::skip("heed was built without Gloo (HEED_DIST=OFF)");
  auto pg = dist::init_process_group(dist::InitOptions{});
  manual_seed(3);
  NetWithUnused model;
  dist::DDPOptions options;
  options.first_bucket_bytes = 600;  // fits fc2 (130 floats = 520 bytes), not more
  options.bucket_bytes = 1100;       // fc1.bias + fc1.weight (1280 bytes) do not fit together
  dist::DistributedDataParallel ddp(model, pg, options);
  // parameters() lists the module's own parameters first: unused 0, fc1.weight 1, fc1.bias 2,
  // fc2.weight 3, fc2.bias 4. Buckets from the end: [fc2.bias, fc2.weight] (8 + 512 bytes;
  // fc1.bias would pass 600), [fc1.bias] (256; with fc1.weight 1280 > 1100), [fc1.weight,
  // unused] (1024 + 12).
  const auto layout = ddp.bucket_layout();
  REQUIRE(layout.size() == 3);
  CHECK((layout[0] == std::vector<size_t>{4, 3}));
  CHECK((layout[1] == std::vector<size_t>{2}));
  CHECK((layout[2] == std::vector<size_t>{1, 0}));
  Tensor x = randn({5, 4});
  // The unused parameter never gets a gradient: its bucket (the last) is completed with zeros
  // when backward ends; the two complete ones before it were launched during backward.
  mean(model.forward(x)).backward();
  CHECK(ddp.counters().syncs == 1);
  CHECK(ddp.counters().reductions == 3);
  REQUIRE(model.unused.grad().defined());
  CHECK(model.unused.grad().sum().item<double>() == 0.0);
  ddp.finish_gradient_sync();  // nothing pending: a no-op
  CHECK(ddp.counters().reductions == 3);
  CHECK(ddp.counters().syncs == 1);
  // heed::grad through the wrapped parameters is refused (it would return local gradients).
  CHECK_THROWS_WITH_AS(heed::grad({mean(model.forward(x))}, {model.fc1->weight}), doctest::Contains("use backward()"),
                       Error);
  // no_sync: local accumulation only; the next synchronised backward reduces once.
  ddp.reset_counters();
  model.zero_grad();
  {
    auto guard = ddp.no_sync();
    mean(model.forward(x)).backward();
  }
  CHECK(ddp.counters().reductions == 0);
  const Tensor once = model.fc1->weight.grad().clone();
  mean(model.forward(x)).backward();
  CHECK(ddp.counters().syncs == 1);
  CHECK(ddp.counters().reductions == 3);
  // Accumulated like without DDP: twice the single gradient (world 1: the average is itself).
  CHECK(max(abs(model.fc1->weight.grad() - once * 2.0)).item<double>() < 1e-6);

  // With anomaly detection on, an Inf made in backward between fc2 and fc1 (sqrt's gradient at
  // 0) throws after fc2's bucket was launched: that round is abandoned, and the next clean
  // backward reduces normally.
  ddp.reset_counters();
  model.zero_grad();
  {
    DetectAnomalyGuard anomaly;
    Tensor h = tanh((*model.fc1)(x));
    Tensor poisoned = (*model.fc2)(h + sqrt(h * 0.0));
    CHECK_THROWS_AS(mean(poisoned).backward(), Error);
    CHECK(ddp.counters().syncs == 0);
    CHECK(ddp.counters().reductions >= 1);  // fc2's bucket went out before the throw
    model.zero_grad();
    mean(model.forward(x)).backward();
  }
  CHECK(ddp.counters().syncs == 1);
  CHECK(max(abs(model.fc1->weight.grad() - once)).item<double>() < 1e-6);
}

TEST_CASE("dist: GradScalerOptions::found_inf_agreement decides whether the step is skipped") {
  Tensor w = ones({2}).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1});
  int calls = 0;
  amp::GradScalerOptions options;
  options.init_scale = 4.0;
  options.found_inf_agreement = [&calls](bool) {
    ++calls;
    return true;  // another rank found an Inf
  };
  amp::GradScaler scaler(options);
  scaler.scale(sum(w * 3.0)).backward();
  CHECK_FALSE(scaler.step(opt));  // skipped although this rank's gradients are finite
  scaler.update();
  CHECK(calls == 1);
  CHECK(scaler.get_scale() == 2.0);
  CHECK(w.at<double>({0}) == 1.0);
}
