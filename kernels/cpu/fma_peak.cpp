// kernels/cpu/fma_peak.cpp — the float32 fused-multiply-add peak of this CPU, measured: what no
// matmul can exceed, against which the sgemm ceiling and whole-step FLOP rates can be read.
//
// Why: the sgemm ceiling (a 1024^3 product) says what a GEMM reaches, not what the machine can
// do; where both heed and the BLAS it is compared with run their matmuls near that ceiling, the
// step's ratio is bounded by the matmuls' share of it, and only the FMA peak shows how far from
// the machine's limit those matmuls still are (the README's Performance section uses it).
//
// Invariants: every thread runs kChains independent FMA chains (enough to cover the FMA latency
// on every x86 CPU heed targets: 2 pipes x 4-5 cycles) on the widest vectors heed's kernels use
// here (zmm where the CPU has AVX-512F, ymm with AVX2), entirely in registers; the chains' sum
// over all threads feeds a sink so none is dropped; the FLOPs are counted for the threads that
// actually ran. Nothing is allocated; the threads are heed's (OpenMP) with the current count.
// A build without AVX2 (HEED_ARCH_FLAGS below x86-64-v3) measures scalar std::fma chains: the
// peak of that build's own code, not of the CPU (OpenBLAS may still run wider kernels there).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>

#include "cpu_common.h"  // max_threads
#include "cpu_kernels.h"
#include "vec_math.h"  // HEED_HAVE_AVX2 and <immintrin.h>

namespace heed::kernels::cpu {

namespace {

constexpr int kChains = 12;
// x <- x * kScale + kShift converges to kShift / (1 - kScale) = 1 from any start: no overflow,
// no denormals (which would slow some CPUs down), whatever the iteration count.
constexpr float kScale = 0.999f, kShift = 0.001f;
// The sum of every thread's chains is written here after each run, so no chain can be dropped as
// unused. (Concurrent callers may both write it: its value is never read.)
volatile float fma_peak_sink = 0.0f;

#if HEED_HAVE_AVX2
__attribute__((target("avx512f,fma"))) float chains_512(int64_t iterations) {
  __m512 x[kChains];
  for (int i = 0; i < kChains; ++i) x[i] = _mm512_set1_ps(static_cast<float>(i));
  const __m512 scale = _mm512_set1_ps(kScale), shift = _mm512_set1_ps(kShift);
  for (int64_t n = 0; n < iterations; ++n) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) x[i] = _mm512_fmadd_ps(x[i], scale, shift);
  }
  __m512 sum = x[0];
  for (int i = 1; i < kChains; ++i) sum = _mm512_add_ps(sum, x[i]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0.0f;
  for (const float v : lanes) total += v;
  return total;
}

float chains_256(int64_t iterations) {
  __m256 x[kChains];
  for (int i = 0; i < kChains; ++i) x[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 scale = _mm256_set1_ps(kScale), shift = _mm256_set1_ps(kShift);
  for (int64_t n = 0; n < iterations; ++n) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) x[i] = _mm256_fmadd_ps(x[i], scale, shift);
  }
  __m256 sum = x[0];
  for (int i = 1; i < kChains; ++i) sum = _mm256_add_ps(sum, x[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0.0f;
  for (const float v : lanes) total += v;
  return total;
}
#else
float chains_scalar(int64_t iterations) {
  float x[kChains];
  for (int i = 0; i < kChains; ++i) x[i] = static_cast<float>(i);
  for (int64_t n = 0; n < iterations; ++n) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) x[i] = std::fma(x[i], kScale, kShift);
  }
  float sum = 0.0f;
  for (const float v : x) sum += v;
  return sum;
}
#endif

int vector_bits_here() {
#if HEED_HAVE_AVX2
  // The CPU test itself, not vec_has_avx512f: HEED_VEC_WIDTH=8 narrows heed's element-wise loops,
  // not the CPU (heed's AVX-512 sgemm still runs on zmm).
  return heed_sgemm_supported(SgemmKernel::Avx512) ? 512 : 256;
#else
  return 32;
#endif
}

}  // namespace

FmaPeakRun measure_fma_peak_gflops(int64_t iterations, int repeats) {
  const int bits = vector_bits_here();
  FmaPeakRun best;
  best.vector_bits = bits;
  for (int r = 0; r < repeats; ++r) {
    int threads_ran = 1;
    float total = 0.0f;  // every thread's chains feed it: none can be dropped as unused
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(max_threads()) reduction(+ : total)
    {
#if HEED_HAVE_AVX2
      total += bits == 512 ? chains_512(iterations) : chains_256(iterations);
#else
      total += chains_scalar(iterations);
#endif
#pragma omp single nowait
      threads_ran = omp_get_num_threads();  // OpenMP may start fewer threads than asked for
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fma_peak_sink = total;
    const double flops = 2.0 * kChains * (bits / 32) * static_cast<double>(iterations) * threads_ran;
    const double gflops = flops / std::max(seconds, 1e-9) / 1e9;
    if (gflops > best.gflops) {
      best.gflops = gflops;
      best.threads = threads_ran;
    }
  }
  return best;
}

}  // namespace heed::kernels::cpu
