// heed/cuda.h — CUDA availability and the CUDA backend's switches. Never crashes on a machine
// without a GPU or driver: any error from the CUDA runtime while probing means "no device".
//
// Invariants: work on kCUDA is queued on one stream (the default stream of device 0) and runs
// asynchronously; reading a value back to the host (item(), to(kCPU), ...) waits for it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace heed::cuda {

// True when heed was built with CUDA and at least one device answers.
bool is_available();
int device_count();
// Why CUDA is unavailable ("built without CUDA", the runtime's error text), or "".
std::string unavailable_reason();
// True when this build of heed contains the CUDA backend.
bool compiled_with_cuda();
// True when the CUDA backend is the CPU emulator (a test build configured with
// -DHEED_CUDA_EMULATION=ON): every kernel runs, slowly, on the CPU.
bool is_emulated();

// Lets float32 matmuls use TF32 tensor cores (10-bit mantissa products, float32 accumulation:
// about 1e-3 relative error instead of 1e-6). Off by default, as torch.backends.cuda.matmul
// .allow_tf32; a process-wide switch, read at each gemm.
void set_allow_tf32(bool allow);
bool allow_tf32();

// Linear's bias on CUDA is added in the gemm's epilogue and its gradient summed in the weight
// gradient's gemm, both through cuBLASLt (BIAS and BGRADB epilogues); F::linear_gelu's tanh GELU
// is cuBLASLt's GELU_AUX(_BIAS) epilogue. With false, or where cuBLASLt offers no algorithm for a
// shape, heed's own kernels do the same around a plain cuBLAS gemm (the bias written into the
// output first, the gradient in a separate pass, the GELU as its unary kernel after the gemm;
// always so for the erf GELU, which cuBLASLt does not compute). On by default.
void set_gemm_epilogues_cublaslt(bool use);
bool gemm_epilogues_cublaslt();
// How many of those epilogues ran each way since the process started (all 0 without CUDA).
struct GemmEpilogueCounts {
  int64_t cublaslt_bias = 0, cublaslt_bias_grad = 0, cublaslt_gelu = 0;
  int64_t fallback_bias = 0, fallback_bias_grad = 0, fallback_gelu = 0;
};
GemmEpilogueCounts gemm_epilogue_counts();
// cuBLASLt's algorithm for each epilogue gemm is chosen once per problem (shapes, leading
// dimensions, types, epilogue, operand alignments) and cached: at most `entries` problems
// (default 1024; at least 1), the least recently used dropped first, so inference over many
// lengths keeps a bounded cache. The size is how many are cached now (0 without CUDA).
void set_gemm_algorithm_cache_capacity(int64_t entries);
int64_t gemm_algorithm_cache_size();

// True when F::flash_attention (and flash_attention_packed, scaled_dot_product_attention's
// fused path, MultiHeadAttention) runs float16 or bfloat16 operands with these head dims on the
// device's tensor cores: D == Dv in {64, 128} on a device of compute capability 8.0 or newer
// (float32 accumulation and log-sum-exp, P rounded to the operand type before P V). Other
// 16-bit attention on CUDA computes in float32. False without a device.
bool flash_attention_tensor_cores(int64_t head_dim, int64_t value_dim);

// Waits until every queued CUDA kernel has finished (for timing); raises heed::Error when a
// kernel failed. A no-op without CUDA.
void synchronize();

// Which backend implements which kernel of the kernel table (kernels/kernels.h), in table
// order; `cuda` is false for every kernel in a build without the CUDA backend.
struct KernelImplementations {
  std::string name;
  bool cpu = false;
  bool cuda = false;
};
std::vector<KernelImplementations> kernel_implementations();

}  // namespace heed::cuda
