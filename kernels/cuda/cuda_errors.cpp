// kernels/cuda/cuda_errors.cpp — turns CUDA runtime failures into heed::Error (host C++, so
// the .cu files stay free of the formatting library).
#include "heed/error.h"
#include "kernels/cuda/cuda_backend.h"

namespace heed::kernels::cuda {

void throw_cuda_error(const char* call, const char* message, const char* name) {
  fail("cuda", "{} failed: {} ({})", call, message, name);
}

}  // namespace heed::kernels::cuda
