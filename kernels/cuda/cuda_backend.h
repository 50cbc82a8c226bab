// kernels/cuda/cuda_backend.h — the CUDA backend's entry points (host-side declarations).
//
// Invariants: probing never crashes: any CUDA runtime error while counting devices means
// "no device" (a machine without a GPU answers cudaGetDeviceCount with an error). Without
// CUDA in the build every entry is a stub and the kernel table is empty.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/kernels.h"

namespace heed::kernels::cuda {

bool compiled();
// True when the backend is the CPU emulator of kernels/cuda/emulation (a test build).
bool emulated();
// Number of usable devices; on 0, *reason says why (never throws).
int device_count(std::string* reason);
const KernelTable& kernel_table();
// Raises heed::Error("heed::cuda: <call> failed: <message> (<name>)"); defined in a .cpp so
// the .cu files need no formatting library.
[[noreturn]] void throw_cuda_error(const char* call, const char* message, const char* name);
// Raises heed::Error("heed::<op>: <message>") (host C++, for the .cu files).
[[noreturn]] void throw_error(const char* op, const char* message);
// Raises heed::Error "heed::<kernel>: the CUDA kernel has no <dtype> version".
[[noreturn]] void unsupported_dtype(const char* kernel, DType dtype);
// Whether float32 gemm may use TF32 tensor cores (off by default).
void set_allow_tf32(bool allow);
bool allow_tf32();
// Linear's gemm epilogues (GemmArgs::bias, ::activation, ::a_row_sums): through cuBLASLt
// (default), or with false heed's own kernels around the plain cuBLAS gemm (also what runs when
// cuBLASLt has no algorithm for a shape, and for the erf GELU, which cuBLASLt does not have). The counters say how many
// epilogues ran each way since start-up.
struct GemmEpilogueCounts {
  int64_t lt_bias = 0, lt_row_sums = 0, lt_gelu = 0, fallback_bias = 0, fallback_row_sums = 0, fallback_gelu = 0;
};
void set_gemm_epilogues_lt(bool use);
bool gemm_epilogues_lt();
GemmEpilogueCounts gemm_epilogue_counts();
// cuBLASLt's algorithm choices, cached per problem: at most `entries` of them (default 1024), the
// least recently used dropped first; and how many are cached now.
void set_lt_algorithm_cache_capacity(size_t entries);
size_t lt_algorithm_cache_size();
// Whether flash_attention_forward/backward take float16/bfloat16 operands (tensor-core kernels,
// float32 accumulation and log-sum-exp) for these head dims: D == Dv in {64, 128} and a device
// that has tensor cores for both types (sm_80 or newer; always under the emulator). Other head
// dims are handed over in float32.
bool flash_attention_takes_16bit(int64_t head_dim, int64_t value_dim);
// Blocks until every queued kernel has finished (raises heed::Error on a kernel failure).
void synchronize();

}  // namespace heed::kernels::cuda
