// kernels/cpu/cpu_kernels.h — the CPU backend's kernels, declared from the kernel table
// (HEED_FOR_EACH_KERNEL in kernels/kernels.h), so a new kernel needs no line here.
#pragma once

#include "kernels/kernels.h"

namespace heed::kernels::cpu {

const KernelTable& kernel_table();
// Sets heed's OpenMP threads (OpenBLAS stays single-threaded, see blas.cpp).
void set_threads(int n);

// Every kernel of HEED_FOR_EACH_KERNEL (kernels.h), with the signature of its table entry;
// defined in the kernels/cpu/*.cpp file of its group (global_norm in clip_norm.cpp).
HEED_FOR_EACH_KERNEL(HEED_DECLARE_KERNEL_FUNCTION)

}  // namespace heed::kernels::cpu
