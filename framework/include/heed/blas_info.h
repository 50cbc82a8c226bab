// heed/blas_info.h — which BLAS heed runs on, which of its kernel sets this CPU gets, and the
// sgemm ceiling and FMA peak every performance figure should be quoted against.
//
// Invariant: heed never changes the BLAS's choice itself (OPENBLAS_CORETYPE is read by
// OpenBLAS when the library loads, before heed runs); it reports the choice, runs its own
// float32 kernels instead on AVX-512 CPUs and where that choice is generic (CpuGemm::Auto), and when
// float32 matmuls are nevertheless forced onto a generic OpenBLAS kernel set it warns once on
// stderr (at the first CPU matmul) with the measured sgemm rate and the variable to set.
#pragma once

#include <cstdint>
#include <string>

namespace heed {

struct BlasInfo {
  std::string library;    // "OpenBLAS 0.3.21"
  std::string config;     // the library's build line (openblas_get_config)
  std::string core;       // the kernel set in use (openblas_get_corename): "Zen", "SkylakeX", "Prescott", ...
  std::string threading;  // how the library was built: "OpenMP", "pthreads" or "sequential"
  int threads = 1;        // heed's thread count (each BLAS call runs on one of them, see blas.cpp)
  std::string cpu_model;  // /proc/cpuinfo "model name" ("" where unknown)
  bool cpu_avx2 = false, cpu_avx512 = false;
  // coretype_hint is the OPENBLAS_CORETYPE value that selects faster kernels ("SkylakeX",
  // "Haswell" or "Zen"), or "" when the core already uses the CPU's widest vector units. It is
  // set when the core is a generic (pre-AVX2) set on an AVX2/AVX-512 CPU (generic_kernels is
  // then true), or an AVX2 set (Haswell, Zen) on an AVX-512 CPU: Debian 12's OpenBLAS runs
  // Haswell kernels on AMD's Zen 5, where SkylakeX's reach 2x the sgemm rate (on a Zen 4 it picks
  // its AVX-512 Cooperlake set itself).
  // Where the core needs instructions the CPU lacks (core_runs_here false), it names the CPU's
  // own set ("Zen" / "Haswell").
  bool generic_kernels = false;
  std::string coretype_hint;
  // false when OpenBLAS loaded a kernel set this CPU cannot run (OPENBLAS_CORETYPE=SkylakeX on a
  // CPU without AVX-512): every call that would reach OpenBLAS (float64 matmuls,
  // set_cpu_gemm(CpuGemm::Openblas)) is then an Error instead of an illegal instruction, and
  // Auto computes float32 matmuls on heed's AVX2 kernel; coretype_hint names the set that runs.
  bool core_runs_here = true;
  // The code that computes float32 CPU matmuls: "openblas", or heed's own packed kernels
  // "heed-avx512" / "heed-avx2" (see CpuGemm below). float64 matmuls always run on OpenBLAS.
  std::string sgemm;
};

BlasInfo blas_info();

// Which code computes float32 CPU matmuls. Auto (the default) picks heed's own AVX-512 kernel on
// every CPU with AVX-512F and its AVX2 kernel on every other CPU with AVX2, whatever kernel set
// OpenBLAS runs (heed's are the faster there, its AVX2 kernel against OpenBLAS's AVX2 sets too;
// the README's "Which BLAS kernels run" has the figures), OpenBLAS in builds without heed's
// kernels (no AVX2 at build time). The environment variable HEED_CPU_GEMM=auto|openblas|avx2|
// avx512 sets it at start-up; set_cpu_gemm changes it at any time (a kernel the CPU lacks is an
// Error, and so is Openblas where core_runs_here is false: Auto then picks heed's AVX2 kernel). Every choice is
// deterministic and independent of the thread count.
enum class CpuGemm { Auto, Openblas, HeedAvx2, HeedAvx512 };
void set_cpu_gemm(CpuGemm choice);
CpuGemm cpu_gemm();  // the choice in effect, Auto resolved

// sgemm GFLOP/s of a d x d x d float32 product through heed's CPU gemm with the current thread
// count (the best of `repeats` runs after one warm-up): the ceiling for whole-step FLOP rates.
double measure_sgemm_gflops(int64_t d = 1024, int repeats = 3);

// The CPU's float32 fused-multiply-add peak with the current thread count: GFLOP/s of
// independent FMA chains held in registers, on the widest vectors heed's kernels use on this CPU
// (vector_bits: 512 where it has AVX-512F, 256 with AVX2; 32 in a build without AVX2, where it
// measures scalar code only), the best of `repeats` runs of a few hundredths of a second each;
// threads: how many ran it. In an AVX2 build no float32 matmul exceeds it: read against it, the
// sgemm ceiling says how far from the machine's limit the GEMMs are (the README's Performance
// section). Bad repeats (outside 1..1000) is an Error.
struct FmaPeak {
  double gflops = 0;
  int vector_bits = 0;
  int threads = 1;
};
FmaPeak measure_fma_peak(int repeats = 3);

// The OPENBLAS_CORETYPE value that would replace OpenBLAS kernel set `core` on a CPU with these
// features, or "" when `core` already uses the widest of AVX2/AVX-512 the CPU has (or it has
// neither).
std::string openblas_coretype_hint(const std::string& core, bool cpu_avx2, bool cpu_avx512, bool cpu_amd);
// Whether OpenBLAS's kernel set `core` runs on a CPU with these features (an AVX-512 set needs
// AVX-512F, an AVX2 set AVX2; generic sets run anywhere). Pure, like the hint.
bool openblas_core_runs_on(const std::string& core, bool cpu_avx2, bool cpu_avx512);

}  // namespace heed
