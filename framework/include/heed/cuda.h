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
