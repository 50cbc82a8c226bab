// heed/parallel.h — thread count for heed's OpenMP kernels and OpenBLAS (one shared pool).
//
// Invariant: results never depend on the thread count: parallel loops split work into
// fixed chunks whose partial results are combined in a fixed order.
#pragma once

namespace heed {

// Sets the threads used by heed kernels and OpenBLAS (n >= 1).
void set_num_threads(int n);
int get_num_threads();

}  // namespace heed
