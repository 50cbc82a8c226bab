// heed/cuda.h — CUDA availability. Never crashes on a machine without a GPU or driver:
// any error from the CUDA runtime while probing means "no device".
#pragma once

#include <string>

namespace heed::cuda {

// True when heed was built with CUDA and at least one device answers.
bool is_available();
int device_count();
// Why CUDA is unavailable ("built without CUDA", the runtime's error text), or "".
std::string unavailable_reason();
// True when this build of heed contains the CUDA backend.
bool compiled_with_cuda();

}  // namespace heed::cuda
