// kernels/cpu/cpu_kernels.h — the CPU backend's kernels (signatures as in kernels/kernels.h).
#pragma once

#include "kernels/kernels.h"

namespace heed::kernels::cpu {

const KernelTable& kernel_table();
// Sets heed's OpenMP threads (OpenBLAS stays single-threaded, see blas.cpp).
void set_threads(int n);

void* allocate(size_t nbytes);
void deallocate(void* ptr, size_t nbytes);
void copy_host(void* dst, const void* src, size_t nbytes, bool to_host);
void fill(const StridedView& dst, double value);
void copy(const StridedView& dst, const StridedView& src);
void unary(UnaryOp op, DType dtype, const void* in, void* out, int64_t n, double alpha);
void binary(BinaryOp op, const StridedView& a, const StridedView& b, const StridedView& out);
void where(const StridedView& cond, const StridedView& a, const StridedView& b, const StridedView& out);
void reduce(ReduceOp op, DType dtype, const void* in, int64_t outer, int64_t extent, int64_t inner, void* out,
            int64_t* indices);
void variance(DType dtype, const void* in, int64_t outer, int64_t extent, int64_t inner, double correction, void* out);
void gemm(const GemmArgs& args);
void softmax_forward(DType dtype, const void* in, void* out, int64_t rows, int64_t cols, bool log);
void softmax_backward(DType dtype, const void* y, const void* grad_out, void* grad_in, int64_t rows, int64_t cols,
                      bool log);
void cross_entropy_forward(DType dtype, const void* logits, const int64_t* targets, int64_t rows, int64_t classes,
                           int64_t ignore_index, double smoothing, void* row_loss, void* row_lse);
void cross_entropy_backward(DType dtype, const void* logits, const int64_t* targets, const void* row_lse, int64_t rows,
                            int64_t classes, int64_t ignore_index, double smoothing, double scale, void* grad_logits);
void index_select(DType dtype, const void* in, int64_t outer, int64_t in_extent, int64_t inner, const int64_t* index,
                  int64_t index_count, void* out);
void index_add(DType dtype, void* out, int64_t outer, int64_t out_extent, int64_t inner, const int64_t* index,
               int64_t index_count, const void* src);
void gather(DType dtype, const void* in, int64_t outer, int64_t in_extent, int64_t inner, const int64_t* index,
            int64_t index_extent, void* out);
void scatter_add(DType dtype, void* out, int64_t outer, int64_t out_extent, int64_t inner, const int64_t* index,
                 int64_t index_extent, const void* src);
void random(RandomKind kind, DType dtype, void* out, int64_t n, double a, double b, PhiloxState state);
void dropout_mask(uint8_t* keep, int64_t n, double p, PhiloxState state);
void arange(DType dtype, void* out, int64_t n, double start, double step);
void adam_step(const AdamStepArgs& args);
void layer_norm_forward(DType dtype, const void* x, const void* weight, const void* bias, int64_t rows, int64_t cols,
                        double eps, void* y, void* mean, void* rstd);
void flash_attention_forward(const FlashAttentionArgs& args);
void flash_attention_backward(const FlashAttentionArgs& args);
void layer_norm_backward(DType dtype, const void* x, const void* weight, const void* mean, const void* rstd,
                         const void* dy, int64_t rows, int64_t cols, void* dx, void* dweight, void* dbias);
double global_norm(const NormInput* inputs, int count, double norm_type);  // clip_norm.cpp

}  // namespace heed::kernels::cpu
