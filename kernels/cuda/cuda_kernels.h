// kernels/cuda/cuda_kernels.h — the CUDA backend's kernel entry points (host functions with the
// signatures of kernels/kernels.h), one group per kernels/cuda/*.cu file, and the backend's
// internal services (allocator, cuBLAS handle, TF32 switch).
//
// Invariants: every entry runs on the default stream of device 0 and returns once its work is
// queued (results are read through copy_host, which synchronises); entries that must return a
// value to the host (global_norm) synchronise once.
#pragma once

#include "kernels/kernels.h"

namespace heed::kernels::cuda {

// Every kernel of HEED_FOR_EACH_KERNEL (kernels.h), with the signature of its table entry;
// memory, transfers, fill and copy live in cuda_backend.cu, the others in the .cu file of their
// group (elementwise.cu, reduce.cu, gemm.cu, softmax.cu, index.cu, random.cu, optim.cu,
// layer_norm.cu, flash_attention.cu).
HEED_FOR_EACH_KERNEL(HEED_DECLARE_KERNEL_FUNCTION)

}  // namespace heed::kernels::cuda
