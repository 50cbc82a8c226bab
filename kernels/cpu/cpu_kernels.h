// kernels/cpu/cpu_kernels.h — the CPU backend's kernels, declared from the kernel table
// (HEED_FOR_EACH_KERNEL in kernels/kernels.h), so a new kernel needs no line here.
#pragma once

#include "kernels/kernels.h"

namespace heed::kernels::cpu {

const KernelTable& kernel_table();
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
// AVX-512 ("" when nothing is lost). A pure function of its inputs (tests call it with any
// combination).
const char* openblas_coretype_hint(const char* core, bool cpu_avx2, bool cpu_avx512, bool cpu_amd);
// Whether `core` is one of OpenBLAS's AVX2 kernel sets (Haswell, Zen) or AVX-512 sets
// (SkylakeX, Cooperlake, SapphireRapids), any case; every other set is a generic one.
bool is_avx2_core(const char* core);
bool is_avx512_core(const char* core);
// Neither: one of OpenBLAS's generic (pre-AVX2) kernel sets.
bool is_generic_core(const char* core);

// How flash attention computes the float32 products inside its tiles: Auto (the default)
// uses heed's AVX2 register kernel (tile_gemm.h) when OpenBLAS runs a generic kernel set and
// BLAS otherwise; Registers and Blas force one (for tests and measurements).
enum class TileProducts { Auto, Registers, Blas };
void set_flash_attention_tile_products(TileProducts choice);
// The choice in effect (Auto resolved).
TileProducts flash_attention_tile_products();
// sgemm GFLOP/s of one d x d x d product through the gemm kernel (best of `repeats`).
double measure_sgemm_gflops(int64_t d, int repeats);

// Every kernel of HEED_FOR_EACH_KERNEL (kernels.h), with the signature of its table entry;
// defined in the kernels/cpu/*.cpp file of its group (global_norm in clip_norm.cpp).
HEED_FOR_EACH_KERNEL(HEED_DECLARE_KERNEL_FUNCTION)

}  // namespace heed::kernels::cpu
