// framework/src/core/blas_info.cpp — heed::blas_info over the CPU backend's BLAS queries
// (kernels/cpu/blas.cpp) and /proc/cpuinfo.
#include "heed/blas_info.h"

#include <fstream>

#include "heed/error.h"
#include "heed/parallel.h"
#include "kernels/cpu/cpu_kernels.h"

namespace heed {

namespace {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) return {};
    const size_t start = line.find_first_not_of(' ', colon + 1);
    return start == std::string::npos ? std::string() : line.substr(start);
  }
  return {};
}

// "OpenBLAS 0.3.21" from "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64".
std::string library_name(const std::string& config) {
  const size_t first = config.find(' ');
  if (first == std::string::npos) return config;
  const size_t second = config.find(' ', first + 1);
  return config.substr(0, second);
}

}  // namespace

BlasInfo blas_info() {
  const kernels::cpu::BlasLibrary lib = kernels::cpu::blas_library();
  BlasInfo info;
  info.config = lib.config ? lib.config : "";
  info.library = library_name(info.config);
  info.core = lib.core ? lib.core : "";
  info.threading = lib.parallel == 2 ? "OpenMP" : lib.parallel == 1 ? "pthreads" : "sequential";
  info.threads = get_num_threads();
  info.cpu_model = cpu_model_name();
  __builtin_cpu_init();
  info.cpu_avx2 = __builtin_cpu_supports("avx2");
  info.cpu_avx512 = __builtin_cpu_supports("avx512f");
  info.coretype_hint = openblas_coretype_hint(info.core, info.cpu_avx2, info.cpu_avx512, __builtin_cpu_is("amd"));
  info.core_runs_here = kernels::cpu::openblas_runs_here();
  info.generic_kernels = !info.coretype_hint.empty() && kernels::cpu::is_generic_core(info.core.c_str());
  info.sgemm = kernels::cpu::gemm_code_name(kernels::cpu::gemm_code());
  return info;
}

// CpuGemm and the kernel layer's GemmCode name the same choices with the same values.
static_assert(static_cast<int>(CpuGemm::Auto) == static_cast<int>(kernels::cpu::GemmCode::Auto) &&
              static_cast<int>(CpuGemm::Openblas) == static_cast<int>(kernels::cpu::GemmCode::Openblas) &&
              static_cast<int>(CpuGemm::HeedAvx2) == static_cast<int>(kernels::cpu::GemmCode::HeedAvx2) &&
              static_cast<int>(CpuGemm::HeedAvx512) == static_cast<int>(kernels::cpu::GemmCode::HeedAvx512));

void set_cpu_gemm(CpuGemm choice) { kernels::cpu::set_gemm_code(static_cast<kernels::cpu::GemmCode>(choice)); }

CpuGemm cpu_gemm() { return static_cast<CpuGemm>(kernels::cpu::gemm_code()); }

double measure_sgemm_gflops(int64_t d, int repeats) {
  HEED_CHECK(d >= 1 && d <= 16384 && repeats >= 1, "measure_sgemm_gflops",
             "expects 1 <= d <= 16384 and repeats >= 1, got d {} and repeats {}", d, repeats);
  kernels::cpu::measure_sgemm_gflops(d, 1);  // warm-up: packing buffers, thread pool
  return kernels::cpu::measure_sgemm_gflops(d, repeats);
}

FmaPeak measure_fma_peak(int repeats) {
  HEED_CHECK(repeats >= 1 && repeats <= 1000, "measure_fma_peak", "expects 1 <= repeats <= 1000, got {}", repeats);
  // 2^24 rounds of 12 chains: 0.03-0.06 s per run on the AVX2 / AVX-512 CPUs measured so far.
  constexpr int64_t kIterations = int64_t{1} << 24;
  kernels::cpu::measure_fma_peak_gflops(kIterations / 8, 1);  // warm-up: threads, clocks
  const kernels::cpu::FmaPeakRun run = kernels::cpu::measure_fma_peak_gflops(kIterations, repeats);
  FmaPeak peak;
  peak.gflops = run.gflops;
  peak.vector_bits = run.vector_bits;
  peak.threads = run.threads;
  return peak;
}

std::string openblas_coretype_hint(const std::string& core, bool cpu_avx2, bool cpu_avx512, bool cpu_amd) {
  return kernels::cpu::openblas_coretype_hint(core.c_str(), cpu_avx2, cpu_avx512, cpu_amd);
}

bool openblas_core_runs_on(const std::string& core, bool cpu_avx2, bool cpu_avx512) {
  return kernels::cpu::openblas_core_runs_on(core.c_str(), cpu_avx2, cpu_avx512);
}

}  // namespace heed
