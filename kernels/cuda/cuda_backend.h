// kernels/cuda/cuda_backend.h — the CUDA backend's entry points (host-side declarations).
//
// Invariants: probing never crashes: any CUDA runtime error while counting devices means
// "no device" (a machine without a GPU answers cudaGetDeviceCount with an error). Without
// CUDA in the build every entry is a stub and the kernel table is empty.
#pragma once

#include <string>

#include "kernels/kernels.h"

namespace heed::kernels::cuda {

bool compiled();
// Number of usable devices; on 0, *reason says why (never throws).
int device_count(std::string* reason);
const KernelTable& kernel_table();
// Raises heed::Error("heed::cuda: <call> failed: <message> (<name>)"); defined in a .cpp so
// the .cu files need no formatting library.
[[noreturn]] void throw_cuda_error(const char* call, const char* message, const char* name);

}  // namespace heed::kernels::cuda
