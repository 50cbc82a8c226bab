// framework/src/core/parallel.cpp — one thread count for heed's OpenMP loops and OpenBLAS.
#include "heed/parallel.h"

#include <omp.h>

#include "heed/error.h"
#include "kernels/cpu/cpu_kernels.h"

namespace heed {

void set_num_threads(int n) {
  HEED_CHECK(n >= 1, "set_num_threads", "expected at least 1 thread, got {}", n);
  kernels::cpu::set_threads(n);
}

int get_num_threads() { return omp_get_max_threads(); }

}  // namespace heed
