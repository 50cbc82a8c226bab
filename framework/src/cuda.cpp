// framework/src/cuda.cpp — CUDA availability as the user sees it.
#include "heed/cuda.h"

#include "kernels/cuda/cuda_backend.h"

namespace heed::cuda {

bool compiled_with_cuda() { return kernels::cuda::compiled(); }
int device_count() { return kernels::cuda::device_count(nullptr); }
bool is_available() { return device_count() > 0; }
std::string unavailable_reason() {
  std::string reason;
  return kernels::cuda::device_count(&reason) > 0 ? std::string() : reason;
}

}  // namespace heed::cuda
