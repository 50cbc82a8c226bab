// kernels/cuda/cuda_stub.cpp — the CUDA backend when heed is built without CUDA.
#include <atomic>

#include "kernels/cuda/cuda_backend.h"

namespace heed::kernels::cuda {

bool compiled() { return false; }
bool emulated() { return false; }

int device_count(std::string* reason) {
  if (reason) *reason = "heed was built without CUDA (configure with nvcc available and HEED_CUDA=ON)";
  return 0;
}

const KernelTable& kernel_table() {
  static const KernelTable empty;
  return empty;
}

namespace {
std::atomic<bool> tf32_allowed{false};
}
void set_allow_tf32(bool allow) { tf32_allowed = allow; }
bool allow_tf32() { return tf32_allowed; }
namespace {
std::atomic<bool> epilogues_lt{true};
}
void set_gemm_epilogues_lt(bool use) { epilogues_lt = use; }
bool gemm_epilogues_lt() { return epilogues_lt; }
GemmEpilogueCounts gemm_epilogue_counts() { return {}; }
void set_lt_algorithm_cache_capacity(size_t) {}
size_t lt_algorithm_cache_size() { return 0; }
bool flash_attention_takes_16bit(int64_t, int64_t) { return false; }
void synchronize() {}

}  // namespace heed::kernels::cuda
