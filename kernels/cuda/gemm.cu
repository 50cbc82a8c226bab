// kernels/cuda/gemm.cu — gemm through cuBLAS (cublasGemmStridedBatchedEx), and Linear's
// epilogues (bias, GELU, bias gradient) through cuBLASLt (cublasLtMatmul).
//
// Row-major C = alpha op(A) op(B) + beta C is computed as the column-major product
// C^T = op(B)^T op(A)^T: a row-major matrix read column-major is its transpose, so B goes
// first with trans_b's flag and A second with trans_a's, dimensions (n, m, k), leading
// dimensions unchanged. In that column-major product Linear's bias (n, one per output
// feature) is one per row of D: cuBLASLt's BIAS epilogue; and the row sums of our op(A) (m) are
// the column sums of cuBLASLt's op(B) over k: its BGRADB epilogue.
// Invariants: float32 accumulates in float32 (TF32 tensor cores only after
// heed::cuda::set_allow_tf32(true)); float64 in float64; float16/bfloat16 operands and results
// with float32 accumulation. Batches larger than INT_MAX are split. One cuBLAS and one cuBLASLt
// handle for the process, on the default stream; every status is checked. GELU in the epilogue
// is cuBLASLt's GELU_AUX(_BIAS), which computes the tanh form; the erf form (and the tanh form
// where cuBLASLt declines) runs as the gemm into pre_activation and heed's unary kernel. An
// epilogue that
// cuBLASLt has no algorithm for (its heuristic answers none for that shape, type and
// alignment; the answer is cached, at most set_lt_algorithm_cache_capacity entries, the least
// recently used dropped first) or that set_gemm_epilogues_lt(false) turns off runs as
// heed's own kernels around the plain gemm: the bias written into C first (beta = 1), the row
// sums in a separate pass; the counters say which path ran.
#include <atomic>
#include <climits>
#include <cstdio>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/lru_cache.h"

namespace heed::kernels::cuda {

namespace {

cublasHandle_t handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t created = nullptr;
    HEED_CUBLAS_CHECK(cublasCreate(&created));
    return created;
  }();
  return h;
}

int checked_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX) {
    const std::string message = std::string(what) + " " + std::to_string(v) + " does not fit cuBLAS's 32-bit int";
    throw_error("gemm", message.c_str());
  }
  return static_cast<int>(v);
}

struct GemmTypes {
  cudaDataType type;
  cublasComputeType_t compute;
  cudaDataType scale;  // of alpha and beta
};

GemmTypes gemm_types(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return {CUDA_R_32F, allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::Float64:
      return {CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F};
    case DType::Float16:
      return {CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::BFloat16:
      return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    default:
      unsupported_dtype("gemm", dtype);
  }
}

// alpha and beta in the scale type, alive as long as the call.
struct Scalars {
  float alpha32, beta32;
  double alpha64, beta64;
  bool wide;
  Scalars(const GemmArgs& g, const GemmTypes& t, double beta)
      : alpha32(static_cast<float>(g.alpha)),
        beta32(static_cast<float>(beta)),
        alpha64(g.alpha),
        beta64(beta),
        wide(t.scale == CUDA_R_64F) {}
  const void* alpha() const { return wide ? static_cast<const void*>(&alpha64) : &alpha32; }
  const void* beta() const { return wide ? static_cast<const void*>(&beta64) : &beta32; }
};

// The plain cuBLAS gemm (every batch), with beta given.
void cublas_gemm(const GemmArgs& g, double beta) {
  const GemmTypes t = gemm_types(g.dtype);
  const int m = checked_int(g.m, "m"), n = checked_int(g.n, "n"), k = checked_int(g.k, "k");
  const int lda = checked_int(g.lda, "lda"), ldb = checked_int(g.ldb, "ldb"), ldc = checked_int(g.ldc, "ldc");
  const Scalars s(g, t, beta);
  const size_t element = dtype_size(g.dtype);
  for (int64_t first = 0; first < g.batch; first += INT_MAX) {
    const int count = static_cast<int>(std::min<int64_t>(g.batch - first, INT_MAX));
    const char* a = static_cast<const char*>(g.a) + static_cast<size_t>(first * g.batch_stride_a) * element;
    const char* b = static_cast<const char*>(g.b) + static_cast<size_t>(first * g.batch_stride_b) * element;
    char* c = static_cast<char*>(g.c) + static_cast<size_t>(first * g.batch_stride_c) * element;
    HEED_CUBLAS_CHECK(cublasGemmStridedBatchedEx(handle(), g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                 g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, s.alpha(), b, t.type,
                                                 ldb, g.batch_stride_b, a, t.type, lda, g.batch_stride_a, s.beta(), c,
                                                 t.type, ldc, g.batch_stride_c, count, t.compute, CUBLAS_GEMM_DEFAULT));
  }
}

// ---- the fallback epilogues: heed's own kernels -------------------------------------------------

// c (m, n) with leading dimension ldc: every row = bias (n).
template <typename T>
__global__ void fill_rows_with_bias_kernel(const T* bias, T* c, int64_t m, int64_t n, int64_t ldc) {
  for (int64_t i = global_thread_index(); i < m * n; i += grid_stride()) c[(i / n) * ldc + i % n] = bias[i % n];
}

// out[i] = sum_p op(A)[i, p] (m, k), accumulated in the compute type in p order. One thread per
// row; with trans_a (the weight-gradient case) neighbouring threads read neighbouring elements.
template <typename T>
__global__ void a_row_sums_kernel(const T* a, int64_t m, int64_t k, int64_t lda, bool trans_a, T* out) {
  for (int64_t i = global_thread_index(); i < m; i += grid_stride()) {
    compute_t<T> sum = 0;
    for (int64_t p = 0; p < k; ++p) sum += load(a + (trans_a ? p * lda + i : i * lda + p));
    store(out + i, sum);
  }
}

// ---- cuBLASLt -------------------------------------------------------------------------------------

std::atomic<bool> epilogues_lt{true};
std::atomic<int64_t> lt_bias_count{0}, lt_row_sums_count{0}, lt_gelu_count{0}, fallback_bias_count{0},
    fallback_row_sums_count{0}, fallback_gelu_count{0};

cublasLtHandle_t lt_handle() {
  static cublasLtHandle_t h = [] {
    cublasLtHandle_t created = nullptr;
    HEED_CUBLAS_CHECK(cublasLtCreate(&created));
    return created;
  }();
  return h;
}

// cuBLAS's recommended workspace for Hopper; taken once from heed's caching allocator (which
// gives its cached blocks back and retries before it reports the device full) and kept for the
// process. Null when even then there was no room: the epilogues run in the fallback.
constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;
void* lt_workspace() {
  static void* workspace = [] {
    try {
      return allocate(kLtWorkspaceBytes);
    } catch (const std::exception& e) {
      std::fprintf(stderr,
                   "heed: no room for cuBLASLt's %zu MiB workspace (%s); Linear's epilogues run in heed's kernels\n",
                   kLtWorkspaceBytes >> 20, e.what());
      return static_cast<void*>(nullptr);
    }
  }();
  return workspace;
}

// The largest power of two (up to 256) that divides the address: what the heuristic may assume.
uint32_t alignment_of(const void* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 1;
  while (alignment < 256 && address % (alignment * 2) == 0) alignment *= 2;
  return alignment;
}

struct LtDesc {
  cublasLtMatmulDesc_t desc = nullptr;
  ~LtDesc() {
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};
struct LtLayout {
  cublasLtMatrixLayout_t layout = nullptr;
  ~LtLayout() {
    if (layout) cublasLtMatrixLayoutDestroy(layout);
  }
};
struct LtPreference {
  cublasLtMatmulPreference_t preference = nullptr;
  ~LtPreference() {
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
  }
};

// What the heuristic's answer depends on.
using AlgoKey = std::tuple<int, int, int, int, int, int, int, int, bool, bool, uint32_t, uint32_t, uint32_t, uint32_t,
                           uint32_t, uint32_t>;

// The heuristic's answers (nullopt: none), one per distinct problem, the least recently used
// dropped beyond the capacity: a training run has a handful of shapes, but inference over
// varying lengths (and operand alignments) would otherwise grow the cache without end.
using AlgoCache = LruCache<AlgoKey, std::optional<cublasLtMatmulAlgo_t>>;

AlgoCache& algo_cache() {
  static AlgoCache* cache = new AlgoCache(1024);  // never destroyed: gemms may run during static destruction
  return *cache;
}

// Runs the gemm with its epilogue in cuBLASLt; false (nothing launched) when cuBLASLt has no
// algorithm for it.
bool lt_gemm(const GemmArgs& g) {
  const GemmTypes t = gemm_types(g.dtype);
  const int m = checked_int(g.m, "m"), n = checked_int(g.n, "n"), k = checked_int(g.k, "k");
  const int lda = checked_int(g.lda, "lda"), ldb = checked_int(g.ldb, "ldb"), ldc = checked_int(g.ldc, "ldc");
  // Column-major: D (n, m) = op(B') (n, k) op(A') ... with A' = our B, B' = our A.
  const cublasOperation_t op_first = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const bool gelu = g.activation == GemmActivation::GeluTanh;
  const uint32_t epilogue = gelu     ? (g.bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                            : g.bias ? CUBLASLT_EPILOGUE_BIAS
                                     : CUBLASLT_EPILOGUE_BGRADB;
  void* vector = g.bias ? const_cast<void*>(g.bias) : g.a_row_sums;  // null for GELU_AUX

  LtDesc desc;
  HEED_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.desc, t.compute, t.scale));
  HEED_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
  HEED_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
  HEED_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (vector) {
    HEED_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &vector, sizeof(vector)));
    const int32_t vector_type = t.type;
    HEED_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &vector_type,
                                                     sizeof(vector_type)));
  }
  if (gelu) {  // z, the GELU's input, in D's type and layout
    const int64_t aux_ld = g.ldc;
    HEED_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                     &g.pre_activation, sizeof(g.pre_activation)));
    HEED_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(desc.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
  }
  // Stored shapes (rows, cols) of the column-major operands.
  LtLayout first, second, out;
  HEED_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&first.layout, t.type, g.trans_b ? k : n, g.trans_b ? n : k, ldb));
  HEED_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&second.layout, t.type, g.trans_a ? m : k, g.trans_a ? k : m, lda));
  HEED_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&out.layout, t.type, n, m, ldc));

  const uint32_t align_a = alignment_of(g.b), align_b = alignment_of(g.a), align_c = alignment_of(g.c),
                 align_vector = vector ? alignment_of(vector) : 0,
                 align_aux = gelu ? alignment_of(g.pre_activation) : 0;
  const AlgoKey key{m,
                    n,
                    k,
                    lda,
                    ldb,
                    ldc,
                    static_cast<int>(g.dtype),
                    t.compute,
                    g.trans_a,
                    g.trans_b,
                    epilogue,
                    align_a,
                    align_b,
                    align_c,
                    align_vector,
                    align_aux};
  std::optional<cublasLtMatmulAlgo_t> algo;
  if (!algo_cache().find(key, &algo)) {
    LtPreference preference;
    HEED_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference.preference));
    const uint64_t workspace = kLtWorkspaceBytes;
    HEED_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        preference.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
    const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c}};
    for (const auto& [attribute, bytes] : alignments)
      HEED_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference.preference, attribute, &bytes, sizeof(bytes)));
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(lt_handle(), desc.desc, first.layout, second.layout, out.layout, out.layout,
                                       preference.preference, 1, &result, &returned);
    // No answer, or a refusal: the fallback runs it instead. NOT_SUPPORTED is the documented
    // refusal; any other failure is reported once on stderr (a descriptor heed built wrong would
    // show here: gpu_check.sh keeps that output) and still falls back rather than stop a run.
    if (status == CUBLAS_STATUS_SUCCESS && returned > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
      algo = result.algo;
    } else if (status != CUBLAS_STATUS_SUCCESS && status != CUBLAS_STATUS_NOT_SUPPORTED) {
      static std::once_flag reported;
      std::call_once(reported, [&] {
        std::fprintf(stderr,
                     "heed: cuBLASLt's heuristic failed (%s) for a gemm epilogue (m %d n %d k %d, %s); it runs in "
                     "heed's kernels instead\n",
                     cublasGetStatusName(status), m, n, k, std::string(dtype_name(g.dtype)).c_str());
      });
    }
    algo_cache().insert(key, algo);
  }
  if (!algo || !lt_workspace()) return false;
  const Scalars s(g, t, 0.0);
  HEED_CUBLAS_CHECK(cublasLtMatmul(lt_handle(), desc.desc, s.alpha(), g.b, first.layout, g.a, second.layout, s.beta(),
                                   g.c, out.layout, g.c, out.layout, &*algo, lt_workspace(), kLtWorkspaceBytes,
                                   nullptr));
  return true;
}

void fallback_epilogue_gemm(const GemmArgs& g) {
  double beta = g.beta;
  if (g.bias) {
    dispatch_floating(g.dtype, "gemm", [&](auto tag) {
      using T = decltype(tag);
      HEED_LAUNCH(grid_for(g.m * g.n), kThreads, 0, fill_rows_with_bias_kernel<T>)
      (static_cast<const T*>(g.bias), static_cast<T*>(g.c), g.m, g.n, g.ldc);
    });
    check_launch("gemm (bias)");
    beta = 1.0;
  }
  cublas_gemm(g, beta);
  if (g.a_row_sums) {
    dispatch_floating(g.dtype, "gemm", [&](auto tag) {
      using T = decltype(tag);
      HEED_LAUNCH(grid_for(g.m), kThreads, 0, a_row_sums_kernel<T>)
      (static_cast<const T*>(g.a), g.m, g.k, g.lda, g.trans_a, static_cast<T*>(g.a_row_sums));
    });
    check_launch("gemm (row sums of A)");
  }
}

}  // namespace

void set_gemm_epilogues_lt(bool use) { epilogues_lt = use; }
bool gemm_epilogues_lt() { return epilogues_lt; }

void set_lt_algorithm_cache_capacity(size_t entries) { algo_cache().set_capacity(entries); }
size_t lt_algorithm_cache_size() { return algo_cache().size(); }

GemmEpilogueCounts gemm_epilogue_counts() {
  return {lt_bias_count.load(),       lt_row_sums_count.load(),       lt_gelu_count.load(),
          fallback_bias_count.load(), fallback_row_sums_count.load(), fallback_gelu_count.load()};
}

void gemm(const GemmArgs& g) {
  if (g.activation_derivative || g.c_multiplier)
    throw_error("gemm", "the activation_derivative and c_multiplier epilogues are CPU-only");
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  const bool activation = g.activation != GemmActivation::None;
  if (!g.bias && !g.a_row_sums && !activation) return cublas_gemm(g, g.beta);
  if (g.batch != 1 || g.k == 0 || g.beta != 0.0 || (g.a_row_sums && (g.bias || activation || g.alpha != 1.0)) ||
      (activation && (!g.pre_activation || g.ldc != g.n)))
    throw_error("gemm",
                "the epilogues need batch == 1, k >= 1 and beta == 0, the row sums alone with alpha 1, and an "
                "activation a pre_activation buffer and a contiguous C");
  gemm_types(g.dtype);  // rejects other dtypes before anything runs
  if (activation) {
    // cuBLASLt's GELU is the tanh form; its auxiliary z needs a leading dimension divisible by 8.
    if (epilogues_lt && g.activation == GemmActivation::GeluTanh && g.ldc % 8 == 0 && lt_gemm(g)) {
      ++lt_gelu_count;
      if (g.bias) ++lt_bias_count;
      return;
    }
    // z = the gemm (with its bias epilogue) into pre_activation, then the unary kernel.
    GemmArgs to_z = g;
    to_z.c = g.pre_activation;
    to_z.activation = GemmActivation::None;
    to_z.pre_activation = nullptr;
    gemm(to_z);
    unary(g.activation == GemmActivation::GeluTanh ? UnaryOp::GeluTanh : UnaryOp::GeluErf, g.dtype, g.pre_activation,
          g.c, g.m * g.n, 0.0);
    ++fallback_gelu_count;
    return;
  }
  if (epilogues_lt && lt_gemm(g)) {
    ++(g.bias ? lt_bias_count : lt_row_sums_count);
    return;
  }
  fallback_epilogue_gemm(g);
  ++(g.bias ? fallback_bias_count : fallback_row_sums_count);
}

}  // namespace heed::kernels::cuda
