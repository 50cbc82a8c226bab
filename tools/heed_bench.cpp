// tools/heed_bench.cpp — heed-bench: the benchmark cases of ../shared/bench/torch_ref.py with
// the same flags and the same work, plus matmul, sgemm, op-overhead and attention-memory cases.
// Prints one JSON line per case in the reference's format (case, ms_per_step, tokens_per_s,
// peak_rss_mb) plus achieved GFLOP/s from the FLOP model below, and the machine it ran on: CPU
// model, OpenBLAS kernel set (blas_core), the code that runs float32 matmuls (sgemm: "openblas",
// "heed-avx512" or "heed-avx2", see heed/blas_info.h) and the measured sgemm ceiling at 1024^3
// through that code with the same threads (sgemm_ceiling_gflops), and the CPU's float32 FMA peak
// with those threads (fma_peak_gflops, heed::measure_fma_peak), so a figure is never quoted
// without what it is relative to.
// --profile FILE (lm, attn): after the timed steps, the same number of steps again under
// heed::profile::Profiler; writes the Chrome trace to FILE, the top-15 table to stderr, and
// adds the profiled time per step and the spans' coverage to the JSON line.
//
// FLOP model (multiply-add = 2 FLOPs; what PyTorch's composed path computes, so both sides
// are credited with the same work):
//  * lm: 6 * N * B * T for the weight matmuls (forward 2N per token, backward 4N), with
//    N = L * (3C^2 + C^2 + 2 * 4C^2) + C * V (QKV, output projection, MLP, head), plus
//    attention 6 * 2 * L * B * T^2 * C (QK^T and PV, full T x T, forward and backward).
//  * attn: forward 2 * 2 * B * H * T^2 * D, backward twice that (full T x T as PyTorch
//    computes it; heed's causal kernel skips the blocks above the diagonal).
//  * matmul: 2 * M * N * K.
#include <cblas.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <heed/heed.h>

#include <sys/resource.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

using namespace heed;

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

long peak_rss_kb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

// Current and peak resident set (kB) from /proc/self/status; the peak can be reset.
long status_kb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stol(line.substr(std::string(key).size()));
  return -1;
}
bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  return out.good();
}

struct Options {
  std::string kind;
  int64_t vocab = 256, d = 256, heads = 4, layers = 4, seq = 128, batch = 16, steps = 10, warmup = 3, threads = 2;
  int64_t m = 1024, n = 1024, k = 1024;
  std::string device = "cpu";               // lm and attn: cpu or cuda
  std::string profile_path;                 // lm and attn: Chrome trace of extra profiled steps
  bool memory = false;                      // lm and attn: print heed::memory_stats after the timed steps
  bool cold = false;                        // sgemm: evict the caches before every timed product
  bool recompute = false;                   // lm: checkpoint every block (TransformerLMOptions::recompute)
  std::string amp = "none";                 // lm: none, bf16 or fp16 (autocast; fp16 with a GradScaler)
  std::string activation = "gelu";          // lm: the feed-forward activation (gelu, gelu_tanh, relu)
  std::string gemm_epilogues = "cublaslt";  // lm on CUDA: Linear's epilogues in cuBLASLt or heed's fallback
};

// `, "tensor_peak_mb": ..., "peak_by_category_mb": {...}` (heed::memory_stats since the last
// reset); with --memory, the table on stderr as well.
std::string memory_fields(const Options& o) {
  const MemoryStats m = memory_stats();
  if (o.memory) std::fprintf(stderr, "%s", m.table().c_str());
  auto mb = [](size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); };
  std::string out = fmt::format(", \"tensor_peak_mb\": {:.1f}, \"peak_by_category_mb\": {{", mb(m.peak_total));
  for (int c = 0; c < MemoryStats::kCategories; ++c)
    out += fmt::format("{}\"{}\": {:.1f}", c ? ", " : "", memory_category_name(static_cast<MemoryCategory>(c)),
                       mb(m.at_peak[c]));
  return out + "}";
}

// `, "cpu": ..., "blas_core": ..., "sgemm": ..., "sgemm_ceiling_gflops": ..., "fma_peak_gflops": ...` for
// the JSON line: the ceiling a GEMM reaches here, and the CPU's FMA peak that bounds it.
std::string machine_fields() {
  const BlasInfo info = blas_info();
  const double ceiling = measure_sgemm_gflops(1024, 3);
  const FmaPeak peak = measure_fma_peak(3);
  std::string cpu;
  for (const char c : info.cpu_model)
    if (c != '"' && c != '\\') cpu += c;
  char buffer[512];
  std::snprintf(buffer, sizeof buffer,
                ", \"cpu\": \"%s\", \"blas\": \"%s\", \"blas_core\": \"%s\", \"sgemm\": \"%s\", \"threads\": %d, "
                "\"sgemm_ceiling_gflops\": %.1f, \"fma_peak_gflops\": %.1f, \"fma_peak_vector_bits\": %d",
                cpu.c_str(), info.library.c_str(), info.core.c_str(), info.sgemm.c_str(), info.threads, ceiling,
                peak.gflops, peak.vector_bits);
  return buffer;
}

// Runs `steps` more steps under the profiler; writes the trace and the table; returns the JSON
// fields (profiled ms per step and coverage), or "" without --profile.
template <typename Step>
std::string profile_steps(const Options& o, Step&& step) {
  if (o.profile_path.empty()) return {};
  profile::Profiler profiler;
  for (int64_t i = 0; i < o.steps; ++i) step();
  profiler.stop();
  profiler.write_chrome_trace(o.profile_path);
  std::fprintf(stderr, "%s", profiler.table(15).c_str());
  std::fprintf(stderr, "heed-bench: Chrome trace of %lld profiled steps written to %s\n",
               static_cast<long long>(o.steps), o.profile_path.c_str());
  char buffer[160];
  std::snprintf(buffer, sizeof buffer, ", \"profiled_ms_per_step\": %.2f, \"profile_coverage\": %.3f",
                profiler.wall_ms() / static_cast<double>(o.steps), profiler.coverage());
  return buffer;
}

// Waits for queued device work, so that a timed region ends when its work does.
void wait_for(Device device) {
  if (device.is_cuda()) cuda::synchronize();
}

int lm_case(const Options& o) {
  manual_seed(0);
  nn::TransformerLMOptions mo;
  mo.vocab = o.vocab;
  mo.d_model = o.d;
  mo.heads = o.heads;
  mo.layers = o.layers;
  mo.context = o.seq;
  mo.layout = nn::ProjectionLayout::FusedQKV;
  mo.recompute = o.recompute;
  mo.activation = o.activation == "gelu_tanh" ? nn::Activation::GELUTanh
                  : o.activation == "relu"    ? nn::Activation::ReLU
                                              : nn::Activation::GELU;
  const Device device = parse_device(o.device);
  cuda::set_gemm_epilogues_cublaslt(o.gemm_epilogues == "cublaslt");
  const cuda::GemmEpilogueCounts epilogues_before = cuda::gemm_epilogue_counts();
  nn::TransformerLM model(mo);
  model.to(device);
  optim::AdamW opt(model.parameters(), {.lr = 3e-4});
  const Tensor x = randint(0, o.vocab, {o.batch, o.seq}).to(device),
               y = randint(0, o.vocab, {o.batch, o.seq}).to(device);
  // --amp: forward and loss under autocast (float32 master weights), as torch.autocast; fp16
  // with dynamic loss scaling.
  const std::optional<DType> amp_dtype = o.amp == "bf16"   ? std::optional<DType>(kBFloat16)
                                         : o.amp == "fp16" ? std::optional<DType>(kFloat16)
                                                           : std::nullopt;
  amp::GradScaler scaler({.enabled = amp_dtype == kFloat16});
  auto step = [&] {
    Tensor loss;
    {
      amp::Autocast autocast(amp_dtype);
      loss = F::cross_entropy(model.forward(x), y);
    }
    opt.zero_grad();
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    nn::clip_grad_norm_(model.parameters(), 1.0);
    scaler.step(opt);
    scaler.update();
    return loss.item<double>();
  };
  // With --memory: the process's peak resident set after each step (warm-up steps included),
  // to show whether it still grows after the first step.
  std::vector<long> peak_rss_mb_by_step;
  const auto note_rss = [&] {
    if (o.memory) peak_rss_mb_by_step.push_back(status_kb("VmHWM:") / 1024);
  };
  for (int64_t i = 0; i < o.warmup; ++i) {
    step();
    note_rss();
  }
  std::vector<double> times;
  for (int64_t i = 0; i < o.steps; ++i) {
    const double t0 = now_seconds();
    step();
    note_rss();
    times.push_back(now_seconds() - t0);
  }
  const double ms = median(times) * 1e3;
  std::string memory = memory_fields(o);
  if (o.memory) memory += fmt::format(", \"peak_rss_mb_by_step\": [{}]", fmt::join(peak_rss_mb_by_step, ", "));
  const std::string profiled = profile_steps(o, step);
  // On CUDA: how Linear's epilogues ran over every step (test_cuda checks both paths).
  std::string epilogues;
  if (device.is_cuda()) {
    const cuda::GemmEpilogueCounts e = cuda::gemm_epilogue_counts();
    epilogues = fmt::format(
        ", \"gemm_epilogues\": \"{}\", \"epilogue_counts\": {{\"cublaslt_bias\": {}, \"cublaslt_bias_grad\": {}, "
        "\"cublaslt_gelu\": {}, \"fallback_bias\": {}, \"fallback_bias_grad\": {}, \"fallback_gelu\": {}}}",
        o.gemm_epilogues, e.cublaslt_bias - epilogues_before.cublaslt_bias,
        e.cublaslt_bias_grad - epilogues_before.cublaslt_bias_grad, e.cublaslt_gelu - epilogues_before.cublaslt_gelu,
        e.fallback_bias - epilogues_before.fallback_bias, e.fallback_bias_grad - epilogues_before.fallback_bias_grad,
        e.fallback_gelu - epilogues_before.fallback_gelu);
  }
  const double C = static_cast<double>(o.d), L = static_cast<double>(o.layers), V = static_cast<double>(o.vocab),
               BT = static_cast<double>(o.batch * o.seq), T = static_cast<double>(o.seq);
  const double n_params = L * (12.0 * C * C) + C * V;
  const double flops = 6.0 * n_params * BT + 6.0 * 2.0 * L * BT * T * C;
  std::printf(
      "{\"case\": \"lm d%lld h%lld L%lld T%lld B%lld%s%s%s\", \"device\": \"%s\", \"ms_per_step\": %.2f, "
      "\"tokens_per_s\": %.0f, \"gflops\": %.1f, \"peak_rss_mb\": %ld%s%s%s%s}\n",
      static_cast<long long>(o.d), static_cast<long long>(o.heads), static_cast<long long>(o.layers),
      static_cast<long long>(o.seq), static_cast<long long>(o.batch), o.recompute ? " recompute" : "",
      amp_dtype ? (" amp " + o.amp).c_str() : "", o.activation == "gelu" ? "" : (" " + o.activation).c_str(),
      device.str().c_str(), ms, BT / ms * 1e3, flops / ms / 1e6, peak_rss_kb() / 1024, memory.c_str(), profiled.c_str(),
      epilogues.c_str(), machine_fields().c_str());
  return 0;
}

int attn_case(const Options& o) {
  manual_seed(0);
  const int64_t B = o.batch, H = o.heads, T = o.seq, D = o.d / o.heads;
  const Device device = parse_device(o.device);
  Tensor q = randn({B, H, T, D}).to(device).requires_grad_(), k = randn({B, H, T, D}).to(device).requires_grad_(),
         v = randn({B, H, T, D}).to(device).requires_grad_();
  F::AttentionMask causal;
  causal.causal = true;
  auto step = [&] {
    Tensor out = F::scaled_dot_product_attention(q, k, v, causal);
    out.sum().backward();
    q.zero_grad();
    k.zero_grad();
    v.zero_grad();
    wait_for(device);
  };
  const long rss_before_kb = status_kb("VmRSS:");
  const bool peak_reset = reset_peak_rss();
  for (int64_t i = 0; i < o.warmup; ++i) step();
  std::vector<double> times;
  for (int64_t i = 0; i < o.steps; ++i) {
    const double t0 = now_seconds();
    step();
    times.push_back(now_seconds() - t0);
  }
  const long peak_kb = peak_reset ? status_kb("VmHWM:") : peak_rss_kb();
  const double ms = median(times) * 1e3;
  const std::string profiled = profile_steps(o, step);
  const double flops =
      3.0 * 4.0 * static_cast<double>(B * H) * static_cast<double>(T) * static_cast<double>(T) * static_cast<double>(D);
  std::printf(
      "{\"case\": \"attn B%lld H%lld T%lld D%lld causal fwd+bwd\", \"ms_per_step\": %.2f, \"gflops\": %.1f, "
      "\"peak_rss_mb\": %ld, \"added_rss_mb\": %.1f%s%s}\n",
      static_cast<long long>(B), static_cast<long long>(H), static_cast<long long>(T), static_cast<long long>(D), ms,
      flops / ms / 1e6, peak_rss_kb() / 1024, static_cast<double>(peak_kb - rss_before_kb) / 1024.0, profiled.c_str(),
      machine_fields().c_str());
  return 0;
}

int matmul_case(const Options& o) {
  manual_seed(0);
  const Tensor a = randn({o.m, o.k}), b = randn({o.k, o.n});
  Tensor c = zeros({o.m, o.n});
  const double flops = 2.0 * static_cast<double>(o.m) * static_cast<double>(o.n) * static_cast<double>(o.k);
  std::vector<double> ours, direct;
  // OpenBLAS with a kernel set this CPU cannot run (OPENBLAS_CORETYPE=SkylakeX without AVX-512)
  // would stop the program: then only heed's side is timed and openblas_* are null.
  const bool openblas_runs = blas_info().core_runs_here;
  for (int64_t i = 0; i < o.warmup + o.steps; ++i) {
    double t0 = now_seconds();
    Tensor r = matmul(a, b);
    const double t_ours = now_seconds() - t0;
    if (!openblas_runs) {
      if (i >= o.warmup) ours.push_back(t_ours);
      continue;
    }
    t0 = now_seconds();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<blasint>(o.m), static_cast<blasint>(o.n),
                static_cast<blasint>(o.k), 1.0f, a.data_ptr<float>(), static_cast<blasint>(o.k), b.data_ptr<float>(),
                static_cast<blasint>(o.n), 0.0f, c.data_ptr<float>(), static_cast<blasint>(o.n));
    const double t_direct = now_seconds() - t0;
    if (i >= o.warmup) {
      ours.push_back(t_ours);
      direct.push_back(t_direct);
    }
  }
  const std::string openblas_fields = openblas_runs
                                          ? fmt::format("\"openblas_ms\": {:.3f}, \"openblas_gflops\": {:.1f}",
                                                        median(direct) * 1e3, flops / median(direct) / 1e9)
                                          : std::string("\"openblas_ms\": null, \"openblas_gflops\": null");
  std::printf("{\"case\": \"matmul %lldx%lldx%lld\", \"ms_per_step\": %.3f, \"gflops\": %.1f, %s%s}\n",
              static_cast<long long>(o.m), static_cast<long long>(o.k), static_cast<long long>(o.n), median(ours) * 1e3,
              flops / median(ours) / 1e9, openblas_fields.c_str(), machine_fields().c_str());
  return 0;
}

// sgemm: the float32 matmuls of the lm step (d 256, B16 T128: forward, input gradient, its three
// weight-gradient shapes), a 1024^3 square and six of charlm's small products through every CPU
// gemm code this CPU has (heed::CpuGemm), with the current threads, alternately in one process; one
// JSON line per shape. With --cold every timed product starts with its operands out of the caches
// (64 MiB written first, outside the timing), as a step finds its weight gradients' inputs.
int sgemm_case(const Options& o) {
  struct Shape {
    int64_t m, n, k;
    bool trans_a, trans_b;
    const char* form;
  };
  // The d256 lm step's products, then charlm's (the nanoGPT CPU recipe: 768 tokens, widths 128 and 512),
  // whose small sizes make packing a larger share of the work.
  const Shape shapes[] = {{2048, 768, 256, false, true, "A B^T"},  {2048, 256, 1024, false, false, "A B"},
                          {256, 1024, 2048, true, false, "A^T B"}, {1024, 256, 2048, true, false, "A^T B"},
                          {768, 256, 2048, true, false, "A^T B"},  {1024, 1024, 1024, false, false, "A B"},
                          {768, 128, 512, false, true, "A B^T"},   {768, 512, 128, false, true, "A B^T"},
                          {768, 128, 512, false, false, "A B"},    {128, 512, 768, true, false, "A^T B"},
                          {512, 128, 768, true, false, "A^T B"},   {384, 128, 768, true, false, "A^T B"}};
  std::vector<CpuGemm> codes = {CpuGemm::Openblas, CpuGemm::HeedAvx2, CpuGemm::HeedAvx512};
  const CpuGemm saved = cpu_gemm();
  std::vector<CpuGemm> here;
  for (CpuGemm code : codes) {
    try {
      set_cpu_gemm(code);
      here.push_back(code);
    } catch (const Error&) {  // a kernel this CPU or build lacks
    }
  }
  manual_seed(0);
  std::vector<float> evict(o.cold ? (64 << 20) / sizeof(float) : 0);
  for (const Shape& s : shapes) {
    const Tensor a = s.trans_a ? randn({s.k, s.m}).t() : randn({s.m, s.k});
    const Tensor b = s.trans_b ? randn({s.n, s.k}).t() : randn({s.k, s.n});
    std::vector<std::vector<double>> seconds(here.size());
    for (int64_t i = 0; i < o.warmup + o.steps; ++i)
      for (size_t c = 0; c < here.size(); ++c) {  // the codes alternately
        set_cpu_gemm(here[c]);
        for (size_t q = 0; q < evict.size(); q += 16) evict[q] += 1.0f;  // one write per 64-byte line
        asm volatile("" : : "r"(evict.data()) : "memory");               // the writes stay
        const double t0 = now_seconds();
        const Tensor r = matmul(a, b);
        if (i >= o.warmup) seconds[c].push_back(now_seconds() - t0);
      }
    const double flops = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
    std::string rates;
    for (size_t c = 0; c < here.size(); ++c) {
      set_cpu_gemm(here[c]);
      rates += fmt::format("{}\"{}\": {:.1f}", c ? ", " : "", blas_info().sgemm, flops / median(seconds[c]) / 1e9);
    }
    set_cpu_gemm(saved);
    std::printf("{\"case\": \"sgemm %lldx%lldx%lld %s%s\", \"gflops_by_code\": {%s}%s}\n", static_cast<long long>(s.m),
                static_cast<long long>(s.n), static_cast<long long>(s.k), s.form, o.cold ? " cold" : "", rates.c_str(),
                machine_fields().c_str());
  }
  return 0;
}

int overhead_case(const Options& o) {
  const Tensor a = ones({1}), b = ones({1});
  const int64_t reps = 200000;
  std::vector<double> per_op;
  for (int64_t round = 0; round < o.warmup + o.steps; ++round) {
    const double t0 = now_seconds();
    for (int64_t i = 0; i < reps; ++i) {
      Tensor c = a + b;
      (void)c;
    }
    if (round >= o.warmup) per_op.push_back((now_seconds() - t0) / static_cast<double>(reps));
  }
  Tensor ga = ones({1}, TensorOptions().requires_grad(true));
  std::vector<double> per_op_grad;
  for (int64_t round = 0; round < o.warmup + o.steps; ++round) {
    const double t0 = now_seconds();
    for (int64_t i = 0; i < reps; ++i) {
      Tensor c = ga + b;
      (void)c;
    }
    if (round >= o.warmup) per_op_grad.push_back((now_seconds() - t0) / static_cast<double>(reps));
  }
  std::printf("{\"case\": \"op-overhead add 1 element\", \"ns_per_op\": %.0f, \"ns_per_op_recording_grad\": %.0f%s}\n",
              median(per_op) * 1e9, median(per_op_grad) * 1e9, machine_fields().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  cli::ArgParser args("heed-bench",
                      "Benchmarks heed: `lm` (Transformer LM training step), `attn` (causal attention forward + "
                      "backward), `matmul` (sgemm through heed vs OpenBLAS), `sgemm` (the lm step's and charlm's "
                      "matmuls through every CPU gemm code), `op-overhead`. Flags and work match "
                      "../shared/bench/torch_ref.py.");
  args.add_positional("CASE", &o.kind, "lm | attn | matmul | sgemm | op-overhead");
  args.add_int("vocab", &o.vocab, "vocabulary (lm)", 2, 1 << 24);
  args.add_int("d", &o.d, "model width (lm), heads * head dim (attn)", 1, 1 << 20);
  args.add_int("heads", &o.heads, "attention heads", 1, 4096);
  args.add_int("layers", &o.layers, "layers (lm)", 1, 1024);
  args.add_int("seq", &o.seq, "sequence length", 1, 1 << 22);
  args.add_int("batch", &o.batch, "batch size", 1, 1 << 20);
  args.add_int("steps", &o.steps, "timed steps (the median is reported)", 1, 1000000);
  args.add_int("warmup", &o.warmup, "untimed warm-up steps", 0, 1000000);
  args.add_int("threads", &o.threads, "threads", 1, 1024);
  args.add_string("device", &o.device, "cpu or cuda (lm, attn)");
  args.add_flag("memory", &o.memory, "print heed::memory_stats (live and peak bytes by category) on stderr (lm)");
  args.add_flag("cold", &o.cold,
                "sgemm: write 64 MiB before every timed product, so its operands come from memory as in a training "
                "step");
  args.add_string("amp", &o.amp, "lm: mixed precision (autocast; fp16 with a GradScaler), as torch.autocast",
                  {"none", "bf16", "fp16"});
  args.add_string("activation", &o.activation, "lm: the feed-forward activation (gelu is the erf form)",
                  {"gelu", "gelu_tanh", "relu"});
  args.add_string("gemm-epilogues", &o.gemm_epilogues,
                  "lm on CUDA: Linear's bias, bias-gradient and GELU epilogues in cuBLASLt, or in heed's fallback "
                  "kernels around plain cuBLAS (for a side-by-side figure)",
                  {"cublaslt", "fallback"});
  args.add_flag("recompute", &o.recompute,
                "lm: checkpoint every block (backward recomputes its forward instead of keeping its activations)");
  args.add_string("profile", &o.profile_path,
                  "FILE: profile --steps more steps (lm, attn), write a Chrome trace to FILE, print the top ops");
  args.add_int("m", &o.m, "rows of A (matmul)", 1, 1 << 20);
  args.add_int("n", &o.n, "columns of B (matmul)", 1, 1 << 20);
  args.add_int("k", &o.k, "inner dimension (matmul)", 1, 1 << 20);
  switch (args.parse(argc, argv)) {
    case cli::ArgParser::Outcome::Help:
      std::printf("%s", args.usage().c_str());
      return 0;
    case cli::ArgParser::Outcome::Error:
      std::fprintf(stderr, "heed-bench: %s (see --help)\n", args.error().c_str());
      return 2;
    case cli::ArgParser::Outcome::Ok:
      break;
  }
  if (o.kind != "lm" && o.kind != "attn" && o.kind != "matmul" && o.kind != "sgemm" && o.kind != "op-overhead") {
    std::fprintf(stderr, "heed-bench: unknown case '%s' (see --help)\n", o.kind.c_str());
    return 2;
  }
  if (o.d % o.heads != 0) {
    std::fprintf(stderr, "heed-bench: --d %lld is not divisible by --heads %lld\n", static_cast<long long>(o.d),
                 static_cast<long long>(o.heads));
    return 2;
  }
  return cli::run_guarded("heed-bench", [&] {
    set_num_threads(static_cast<int>(o.threads));
    if (o.kind == "lm") return lm_case(o);
    if (o.kind == "attn") return attn_case(o);
    if (o.kind == "matmul") return matmul_case(o);
    if (o.kind == "sgemm") return sgemm_case(o);
    return overhead_case(o);
  });
}
