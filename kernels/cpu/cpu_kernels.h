// kernels/cpu/cpu_kernels.h — the CPU backend's kernels, declared from the kernel table
// (HEED_FOR_EACH_KERNEL in kernels/kernels.h), so a new kernel needs no line here.
#pragma once

#include "kernels/kernels.h"

namespace heed::kernels::cpu {

const KernelTable& kernel_table();

// Memory from the system for the caching allocator and the gemm's packing buffers, 64-byte
// aligned, given back with system_free(p, the same bytes). With huge pages enabled, `bytes` >=
// kHugePageBytes is mapped on its own (mmap, never the malloc heap, so the advice below cannot
// outlive the block) from a 2 MiB boundary, and advised onto transparent huge pages (madvise
// MADV_HUGEPAGE). Enabled unless HEED_HUGE_PAGES=0 was in the environment at the first call, or
// the build runs under AddressSanitizer (whose allocator must see every block to check it).
// Null when the system has no memory.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;
bool huge_pages_enabled();
void* system_allocate(size_t bytes);
void system_free(void* p, size_t bytes);
// Sets heed's OpenMP threads (OpenBLAS stays single-threaded, see blas.cpp).
void set_threads(int n);

// What the BLAS library says about itself (OpenBLAS's openblas_get_* functions).
struct BlasLibrary {
  const char* config = "";  // e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64"
  const char* core = "";    // the kernel set it chose for this CPU, e.g. "Zen", "SkylakeX", "Prescott"
  int parallel = 0;         // 0 sequential, 1 pthreads, 2 OpenMP
};
BlasLibrary blas_library();
// The OPENBLAS_CORETYPE value that selects faster kernels when `core` is one of OpenBLAS's
// kernel sets without AVX2 on a CPU that has AVX2 or AVX-512, or an AVX2 set on a CPU with
// AVX-512 ("" when nothing is lost), or the CPU's own set ("Zen" / "Haswell" on an AVX2 CPU)
// when `core` needs instructions the CPU lacks (see openblas_core_runs_on). A pure function of its inputs (tests call
// it with any combination).
const char* openblas_coretype_hint(const char* core, bool cpu_avx2, bool cpu_avx512, bool cpu_amd);
// Whether `core` is one of OpenBLAS's AVX2 kernel sets (Haswell, Zen) or AVX-512 sets
// (SkylakeX, Cooperlake, SapphireRapids), any case; every other set is a generic one.
bool is_avx2_core(const char* core);
bool is_avx512_core(const char* core);
// Neither: one of OpenBLAS's generic (pre-AVX2) kernel sets.
bool is_generic_core(const char* core);
// Whether `core` runs on a CPU with these features: an AVX-512 set needs AVX-512F, an AVX2 set
// AVX2 (OPENBLAS_CORETYPE=SkylakeX on an AVX2-only CPU loads a set whose first sgemm stops the
// program with an illegal instruction). A pure function of its inputs. Only the AVX2 and
// AVX-512 sets are told apart: forcing some other set with instructions the CPU lacks (AMD's
// FMA4 Bulldozer set on an Intel CPU, say) is not caught.
bool openblas_core_runs_on(const char* core, bool cpu_avx2, bool cpu_avx512);
// The same for this CPU and the set OpenBLAS loaded (checked once). Where it is false, Auto
// computes float32 matmuls on heed's AVX2 kernel and every call that would reach OpenBLAS
// (float64 matmuls, HEED_CPU_GEMM=openblas) is an Error instead of a crash.
bool openblas_runs_here();
// Throws an Error naming `op` when !openblas_runs_here(): called before every OpenBLAS call
// (a kernel set the CPU cannot run stops the program with SIGILL inside its first call).
void check_openblas_runs_here(const char* op);

// How flash attention computes the float32 products inside its tiles: Auto (the default)
// uses heed's register kernel (tile_gemm.h; AVX-512 where the CPU has it) in every build with
// AVX2 and BLAS otherwise; Registers (the widest kernel), RegistersAvx2 and Blas force one (for
// tests and measurements).
enum class TileProducts { Auto, Registers, RegistersAvx2, Blas };
void set_flash_attention_tile_products(TileProducts choice);
// The choice in effect (Auto resolved).
TileProducts flash_attention_tile_products();
// heed's own single-threaded float32 gemm (sgemm.cpp), C (m,n) = alpha op(A) op(B) + beta C,
// row-major, for one block of C: the register kernel is AVX-512 (14 x 32 tiles) or AVX2 (6 x 16).
enum class SgemmKernel { Avx2, Avx512 };
// Whether the kernel runs here (built for AVX2 + FMA; AVX-512F on this CPU for Avx512).
bool heed_sgemm_supported(SgemmKernel kernel);
// The L2 size in bytes that heed_sgemm fits its MC blocks to: one core's L2 (sysconf), or 0 for
// the fixed blocks (unknown, or HEED_GEMM_L2_BLOCKS=0 at start-up); the setter is for tests.
// No element's bits depend on it.
int64_t heed_sgemm_l2_bytes();
void set_heed_sgemm_l2_bytes(int64_t bytes);
// The MR-row panels of op(A) per MC block beside a packed B slice of packed_b_floats floats,
// nc columns and kc deep: 12 unless the slice fits in 3/4 of the L2, then the most (4 to 12)
// with which MC x (nc + 2 kc) floats fit beside it.
int64_t heed_sgemm_mc_panels(int64_t mr, int64_t packed_b_floats, int64_t nc, int64_t kc);
// With a_row_sums (op(A) = A^T only), a_row_sums[i] += op(A)[i, p] for every p in increasing
// order, in double, while op(A) is packed (the weight gradient's bias gradient without a pass
// of its own over A). With bias (n values, beta 0 only), C = alpha op(A) op(B) + bias[j] with the
// bias added in the first KC slice's store: the bits of filling C with it and running beta = 1.
void heed_sgemm(SgemmKernel kernel, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                double* a_row_sums = nullptr, const float* bias = nullptr);
// Work on a finished block of C (rows [r0, r0 + rows), columns [c0, c0 + cols)): called once for
// every element of C, after its last KC slice, by the thread that computed the block.
struct SgemmEpilogue {
  void (*run)(void* context, int64_t r0, int64_t rows, int64_t c0, int64_t cols) = nullptr;
  void* context = nullptr;
};
// Whether heed_sgemm on an m x n block reads full slivers of op(B) = B or full panels of
// op(A) = A^T in place instead of packing them (the AVX-512 kernel does for some shapes; the AVX2
// kernel packs everything). heed_sgemm_team packs every operand.
bool heed_sgemm_reads_in_place(SgemmKernel kernel, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t lda,
                               int64_t ldb);
// heed_sgemm over the whole of C on a team of `threads` OpenMP threads: each KC slice of the
// operand every thread reads (op(B), or op(A) for products with few rows) is packed once for the
// team, and chunks of rows (or columns) are claimed as threads become free, shrinking towards the
// end. Every operand is packed (no in-place reads). The bits are heed_sgemm's, whatever the
// thread count.
void heed_sgemm_team(SgemmKernel kernel, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                     int threads, double* a_row_sums = nullptr, const float* bias = nullptr,
                     const SgemmEpilogue& epilogue = {});
// Which code computes float32 gemms: Auto (the default) is heed's AVX-512 kernel on every CPU
// with AVX-512F, heed's AVX2 kernel on every other CPU with AVX2 (whatever set OpenBLAS runs),
// OpenBLAS in builds without heed's kernels.
// HEED_CPU_GEMM=openblas|avx2|avx512 in the environment sets it at start-up.
// (The same values as heed::CpuGemm in heed/blas_info.h, which converts to it.)
enum class GemmCode { Auto, Openblas, HeedAvx2, HeedAvx512 };
void set_gemm_code(GemmCode code);
// The code in effect (Auto resolved), and its name ("openblas", "heed-avx2", "heed-avx512").
GemmCode gemm_code();
const char* gemm_code_name(GemmCode code);
// sgemm GFLOP/s of one d x d x d product through the gemm kernel (best of `repeats`).
double measure_sgemm_gflops(int64_t d, int repeats);
// The float32 FMA peak with the current thread count (fma_peak.cpp): GFLOP/s of `iterations`
// rounds of independent FMA chains per thread on vector_bits-wide vectors (512 where the CPU has
// AVX-512F, 256 with AVX2, 32: scalar, a build without AVX2), the best of `repeats`, with the
// number of threads that ran it.
struct FmaPeakRun {
  double gflops = 0;
  int vector_bits = 32;
  int threads = 1;
};
FmaPeakRun measure_fma_peak_gflops(int64_t iterations, int repeats);

// Every kernel of HEED_FOR_EACH_KERNEL (kernels.h), with the signature of its table entry;
// defined in the kernels/cpu/*.cpp file of its group (global_norm in clip_norm.cpp).
HEED_FOR_EACH_KERNEL(HEED_DECLARE_KERNEL_FUNCTION)

}  // namespace heed::kernels::cpu
