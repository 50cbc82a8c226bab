// kernels/cuda/cuda_errors.cpp — turns CUDA runtime failures into heed::Error (host C++, so
// the .cu files stay free of the formatting library), and the backend's dtype errors.
#include "heed/error.h"
#include "kernels/cuda/cuda_backend.h"

namespace heed::kernels::cuda {

void throw_cuda_error(const char* call, const char* message, const char* name) {
  fail("cuda", "{} failed: {} ({})", call, message, name);
}

void throw_error(const char* op, const char* message) { fail(op, "{}", message); }

void unsupported_dtype(const char* kernel, DType dtype) {
  fail(kernel, "the CUDA kernel has no {} version", dtype_name(dtype));
}

}  // namespace heed::kernels::cuda
