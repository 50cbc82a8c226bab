// framework/src/core/cuda.cpp — CUDA availability and switches as the user sees them.
#include "heed/cuda.h"

#include "heed/error.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/kernels.h"

namespace heed::cuda {

bool compiled_with_cuda() { return kernels::cuda::compiled(); }
bool is_emulated() { return kernels::cuda::emulated(); }
int device_count() { return kernels::cuda::device_count(nullptr); }
bool is_available() { return device_count() > 0; }
std::string unavailable_reason() {
  std::string reason;
  return kernels::cuda::device_count(&reason) > 0 ? std::string() : reason;
}

void set_allow_tf32(bool allow) { kernels::cuda::set_allow_tf32(allow); }
bool allow_tf32() { return kernels::cuda::allow_tf32(); }

void set_gemm_epilogues_cublaslt(bool use) { kernels::cuda::set_gemm_epilogues_lt(use); }
bool gemm_epilogues_cublaslt() { return kernels::cuda::gemm_epilogues_lt(); }
GemmEpilogueCounts gemm_epilogue_counts() {
  const kernels::cuda::GemmEpilogueCounts c = kernels::cuda::gemm_epilogue_counts();
  return {c.lt_bias, c.lt_row_sums, c.lt_gelu, c.fallback_bias, c.fallback_row_sums, c.fallback_gelu};
}

void set_gemm_algorithm_cache_capacity(int64_t entries) {
  HEED_CHECK(entries >= 1, "cuda::set_gemm_algorithm_cache_capacity",
             "the cache needs room for at least 1 entry, got {}", entries);
  kernels::cuda::set_lt_algorithm_cache_capacity(static_cast<size_t>(entries));
}
int64_t gemm_algorithm_cache_size() { return static_cast<int64_t>(kernels::cuda::lt_algorithm_cache_size()); }

bool flash_attention_tensor_cores(int64_t head_dim, int64_t value_dim) {
  return is_available() && kernels::cuda::flash_attention_takes_16bit(head_dim, value_dim);
}

void synchronize() {
  if (is_available()) kernels::cuda::synchronize();
}

std::vector<KernelImplementations> kernel_implementations() {
  std::vector<KernelImplementations> table;
  for (int i = 0; i < kernels::kernel_count(); ++i) {
    const kernels::KernelSupport cpu = kernels::kernel_support(DeviceType::CPU, i);
    const kernels::KernelSupport gpu = kernels::kernel_support(DeviceType::CUDA, i);
    table.push_back({cpu.name, cpu.implemented, gpu.implemented});
  }
  return table;
}

}  // namespace heed::cuda
