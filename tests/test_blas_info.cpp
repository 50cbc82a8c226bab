// tests/test_blas_info.cpp — heed::blas_info reports the BLAS heed links and the kernel set it
// runs; the OPENBLAS_CORETYPE advice is a pure function, checked on every case that matters
// (the machine running the tests has one CPU, so the table covers the others); the sgemm
// ceiling and the FMA peak are positive rates (never timed against a threshold).
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <cmath>
#include <set>

using namespace heed;

TEST_CASE("blas_info: names the library, its kernel set and heed's threads") {
  const BlasInfo info = blas_info();
  CHECK(info.library.rfind("OpenBLAS", 0) == 0);
  CHECK(info.config.find(info.library) == 0);
  CHECK_FALSE(info.core.empty());
  CHECK(std::set<std::string>{"OpenMP", "pthreads", "sequential"}.count(info.threading) == 1);
  CHECK(info.threads == get_num_threads());
  if (info.generic_kernels) CHECK_FALSE(info.coretype_hint.empty());
  if (info.cpu_avx512) CHECK(info.cpu_avx2);
  MESSAGE("BLAS: ", info.config, "; core ", info.core, "; CPU ", info.cpu_model);
}

TEST_CASE("openblas_coretype_hint: generic kernels on an AVX2/AVX-512 CPU get the fast set's name") {
  // A Xeon with AVX-512 on which Debian 12's OpenBLAS falls back to Prescott (issue 14).
  CHECK(openblas_coretype_hint("Prescott", true, true, false) == "SkylakeX");
  CHECK(openblas_coretype_hint("Nehalem", true, false, false) == "Haswell");
  CHECK(openblas_coretype_hint("Core2", true, false, true) == "Zen");
  CHECK(openblas_coretype_hint("Sandybridge", true, false, false) == "Haswell");  // AVX without FMA
  // The AVX-512 sets (any case) and CPUs without AVX2 get no advice; the AVX2 sets get none on
  // an AVX2 CPU.
  for (const char* widest : {"SkylakeX", "COOPERLAKE", "sapphirerapids"})
    CHECK(openblas_coretype_hint(widest, true, true, false).empty());
  CHECK(openblas_coretype_hint("Prescott", false, false, false).empty());
  CHECK(openblas_coretype_hint("Haswell", true, false, false).empty());
  CHECK(openblas_coretype_hint("zen", true, false, true).empty());
}

TEST_CASE("openblas_coretype_hint: an AVX2 kernel set on an AVX-512 CPU gets SkylakeX") {
  // Debian 12's OpenBLAS 0.3.21 runs its Haswell kernels on AMD's Zen 5 (family 26), where the
  // SkylakeX kernels measured 449 against 228 GFLOP/s (1024^3 sgemm, 2 threads, 2026-12-01).
  CHECK(openblas_coretype_hint("Haswell", true, true, true) == "SkylakeX");
  CHECK(openblas_coretype_hint("Zen", true, true, true) == "SkylakeX");
  CHECK(openblas_coretype_hint("HASWELL", true, true, false) == "SkylakeX");
}

TEST_CASE("openblas_core_runs_on: a kernel set wider than the CPU is refused, and the hint names one that runs") {
  // OPENBLAS_CORETYPE=SkylakeX on an AVX2-only Zen 3 EPYC loads the SkylakeX set, whose first
  // sgemm stopped the program with SIGILL (2026-12-02).
  CHECK_FALSE(openblas_core_runs_on("SkylakeX", true, false));
  CHECK_FALSE(openblas_core_runs_on("cooperlake", false, false));
  CHECK_FALSE(openblas_core_runs_on("Haswell", false, false));
  CHECK(openblas_core_runs_on("SkylakeX", true, true));
  CHECK(openblas_core_runs_on("Zen", true, false));
  CHECK(openblas_core_runs_on("Haswell", true, true));
  for (const char* generic : {"Prescott", "Nehalem", "Core2"}) CHECK(openblas_core_runs_on(generic, false, false));
  CHECK(openblas_coretype_hint("SkylakeX", true, false, true) == "Zen");
  CHECK(openblas_coretype_hint("SapphireRapids", true, false, false) == "Haswell");
  CHECK(openblas_coretype_hint("Haswell", false, false, false).empty());  // no set of the list runs faster
}

TEST_CASE("blas_info: core_runs_here agrees with the CPU; where it is false, OpenBLAS is an Error, not a crash") {
  const BlasInfo info = blas_info();
  CHECK(info.core_runs_here == openblas_core_runs_on(info.core, info.cpu_avx2, info.cpu_avx512));
  if (info.core_runs_here) return;  // the usual case: tests never set OPENBLAS_CORETYPE
  MESSAGE("OpenBLAS's '", info.core, "' set cannot run on this CPU (OPENBLAS_CORETYPE in the environment)");
  CHECK_THROWS_WITH_AS(set_cpu_gemm(CpuGemm::Openblas), doctest::Contains("illegal instruction"), Error);
  const Tensor a = ones({4, 4}, kFloat64);
  CHECK_THROWS_WITH_AS(matmul(a, a), doctest::Contains("gemm"), Error);
  if (info.sgemm == "openblas") {  // a build without heed's AVX2 kernel: float32 has nowhere to go either
    CHECK_THROWS_AS(matmul(ones({4, 4}), ones({4, 4})), Error);
    return;
  }
  const Tensor product = matmul(ones({4, 4}), ones({4, 4}));  // float32: heed's own kernel
  CHECK(product.data_ptr<float>()[0] == 4.0f);
}

TEST_CASE("measure_fma_peak: a positive rate on the widest vectors heed uses here, and bad repeats are refused") {
  const FmaPeak peak = measure_fma_peak(1);
  CHECK(std::isfinite(peak.gflops));
  CHECK(peak.gflops > 0.0);
  CHECK(peak.threads >= 1);
  CHECK(peak.threads <= get_num_threads());
  CHECK((peak.vector_bits == 32 || peak.vector_bits == 256 || peak.vector_bits == 512));
  const BlasInfo info = blas_info();
  if (peak.vector_bits == 512) CHECK(info.cpu_avx512);
  if (peak.vector_bits == 256) CHECK(info.cpu_avx2);
  CHECK_THROWS_WITH_AS(measure_fma_peak(0), doctest::Contains("measure_fma_peak"), Error);
  CHECK_THROWS_AS(measure_fma_peak(1001), Error);
}

TEST_CASE("measure_sgemm_gflops: a positive rate, and bad sizes are refused") {
  CHECK(measure_sgemm_gflops(64, 1) > 0.0);
  CHECK_THROWS_WITH_AS(measure_sgemm_gflops(0, 1), doctest::Contains("measure_sgemm_gflops"), Error);
  CHECK_THROWS_AS(measure_sgemm_gflops(64, 0), Error);
}
