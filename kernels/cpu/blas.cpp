// kernels/cpu/blas.cpp — the CPU gemm: C split into blocks, each block on OpenBLAS (the OpenMP
// build, sharing heed's thread pool) or, for float32 on AVX-512 CPUs and where OpenBLAS runs a
// generic kernel set on an AVX2 CPU, on heed's own packed kernels (sgemm.cpp; the choice is
// GemmCode, heed::CpuGemm).
//
// On the first gemm, when OpenBLAS picked a kernel set narrower than the CPU's vector units
// (Debian 12's OpenBLAS 0.3.21 picks its generic pre-AVX2 set on Intel CPUs newer than itself,
// and its AVX2 Haswell set on AMD's AVX-512 Zen 5), heed measures what sgemm reaches
// and says once on stderr which OPENBLAS_CORETYPE selects the faster kernels the library
// already contains. HEED_BLAS_WARNING=0 silences it.
//
// Invariants: operands are passed with transpose flags and leading dimensions, never
// copied here. OpenBLAS itself always runs single-threaded (blas_call.h); heed parallelises
// by splitting C into blocks, one single-threaded gemm per block, and the result is
// bit-identical for every thread count: for OpenBLAS the blocks depend on the problem shape
// only; heed's kernels give an element the same bits in any block, so there one block per
// thread packs each operand once (plan_grid_for_threads). One product runs all its blocks on
// one code (read once per call). The row-sum epilogue is summed in double in k order, in a
// pass of its own or (heed's kernels, op(A) = A^T) while A^T is packed or read: the same bits.
// The element-wise epilogues (GELU, GELU with its derivative, the multiplier) run on each block
// right after its gemm, while it is in cache, with the element-wise kernels' own functions.
#include <strings.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <numeric>
#include <type_traits>
#include <vector>

#include "blas_call.h"
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "vec_math.h"

namespace heed::kernels::cpu {

namespace {
// C is split into a grid of tasks, each big enough (>= kMinTaskFlops) to amortise packing the
// operands. For OpenBLAS their count is a power of two that depends on the problem shape only
// (plan_grid); for heed's kernels it follows the thread count (plan_grid_for_threads).
constexpr double kMinTaskFlops = 4e6;
constexpr int64_t kMaxTasks = 16;
constexpr int64_t kRowAlign = 16, kColAlign = 64;

struct Grid {
  int64_t row_parts = 1, col_parts = 1, rows_per = 0, cols_per = 0;
};

// Among the grids of exactly `tasks` blocks (rows x cols == tasks, each part at least kRowAlign
// rows and kColAlign columns), the one that packs the least: every row part packs its
// (k, n/col_parts) slice of B, every column part its (m/row_parts, k) slice of A, so the packed
// volume is k * (row_parts * n + col_parts * m). False when no such grid fits.
bool least_packing_grid(int64_t m, int64_t n, int64_t tasks, Grid* out) {
  double best = -1;
  for (int64_t rows = 1; rows <= tasks; ++rows) {
    if (tasks % rows != 0) continue;
    const int64_t cols = tasks / rows;
    if (m / rows < kRowAlign && rows > 1) continue;
    if (n / cols < kColAlign && cols > 1) continue;
    const double packed =
        static_cast<double>(rows) * static_cast<double>(n) + static_cast<double>(cols) * static_cast<double>(m);
    if (best < 0 || packed < best) {
      best = packed;
      out->row_parts = rows;
      out->col_parts = cols;
    }
  }
  return best >= 0;
}

// The grid of at most `tasks` blocks: the most blocks that fit, counting down by halves
// (powers_of_two) or by ones, then block sizes rounded up to the alignment (which may leave
// fewer parts than asked for).
Grid grid_of(int64_t m, int64_t n, int64_t tasks, bool powers_of_two) {
  Grid g;
  for (int64_t t = tasks; t > 1; t = powers_of_two ? t / 2 : t - 1)
    if (least_packing_grid(m, n, t, &g)) break;
  auto round_up = [](int64_t v, int64_t align) { return (v + align - 1) / align * align; };
  g.rows_per = round_up((m + g.row_parts - 1) / g.row_parts, kRowAlign);
  g.cols_per = round_up((n + g.col_parts - 1) / g.col_parts, kColAlign);
  g.row_parts = (m + g.rows_per - 1) / g.rows_per;
  g.col_parts = (n + g.cols_per - 1) / g.cols_per;
  return g;
}

// OpenBLAS: a power-of-two task count (1, 2, 4, ... threads share it evenly) that depends on the
// problem shape only (an OpenBLAS block's bits may depend on its shape, so the blocks must not
// depend on the thread count).
Grid plan_grid(int64_t m, int64_t n, int64_t k) {
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  int64_t tasks = 1;
  while (tasks < kMaxTasks && flops / static_cast<double>(tasks * 2) >= kMinTaskFlops) tasks *= 2;
  return grid_of(m, n, tasks, /*powers_of_two=*/true);
}

// heed's kernels: an element's bits depend on its row, column and k only (sgemm.cpp), so the
// blocks may follow the thread count: per product as many blocks as make batch x blocks a
// multiple of the threads (one block per thread for a single product), each of at least
// kMinTaskFlops; each block packs its operands once instead of once per small task.
Grid plan_grid_for_threads(int64_t m, int64_t n, int64_t k, int64_t batch, int threads) {
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const int64_t per_batch = threads / std::gcd(std::max<int64_t>(batch, 1), static_cast<int64_t>(threads));
  const int64_t by_size = std::max<int64_t>(1, static_cast<int64_t>(flops / kMinTaskFlops));
  return grid_of(m, n, std::max<int64_t>(1, std::min(per_batch, by_size)), /*powers_of_two=*/false);
}
}  // namespace

void set_threads(int n) { omp_set_num_threads(n); }

namespace {
// Auto: heed's AVX-512 kernel on every CPU with AVX-512F (faster there than each of OpenBLAS's
// sets, its SkylakeX set included: one block per thread instead of shape-only blocks, the
// bias gradient summed while packing; README, "Which BLAS kernels run"); heed's AVX2 kernel on
// every other CPU with AVX2 and FMA, whatever set OpenBLAS runs (ahead of OpenBLAS's AVX2 Zen
// set on an AVX2-only Zen 3 since stop 36's packing fix: the lm step 9% and charlm 10% faster,
// stop 41; far ahead of a generic set); OpenBLAS where heed's kernels are not built.
GemmCode resolve(GemmCode code) {
  if (code != GemmCode::Auto) return code;
  if (heed_sgemm_supported(SgemmKernel::Avx512)) return GemmCode::HeedAvx512;
  if (heed_sgemm_supported(SgemmKernel::Avx2)) return GemmCode::HeedAvx2;
  return GemmCode::Openblas;
}

GemmCode code_from_environment() {
  const char* setting = std::getenv("HEED_CPU_GEMM");
  if (!setting || !*setting || std::strcmp(setting, "auto") == 0) return resolve(GemmCode::Auto);
  if (std::strcmp(setting, "openblas") == 0) {
    if (openblas_runs_here()) return GemmCode::Openblas;
    std::fprintf(stderr, "heed: HEED_CPU_GEMM=openblas but OpenBLAS loaded kernels this CPU cannot run; using auto\n");
    return resolve(GemmCode::Auto);
  }
  if (std::strcmp(setting, "avx2") == 0) {
    if (heed_sgemm_supported(SgemmKernel::Avx2)) return GemmCode::HeedAvx2;
    std::fprintf(stderr, "heed: HEED_CPU_GEMM=avx2 but this build has no AVX2 kernels; using auto\n");
    return resolve(GemmCode::Auto);
  }
  if (std::strcmp(setting, "avx512") == 0) {
    if (heed_sgemm_supported(SgemmKernel::Avx512)) return GemmCode::HeedAvx512;
    std::fprintf(stderr, "heed: HEED_CPU_GEMM=avx512 but this CPU has no AVX-512; using auto\n");
    return resolve(GemmCode::Auto);
  }
  std::fprintf(stderr, "heed: HEED_CPU_GEMM=%s is not one of auto, openblas, avx2, avx512; using auto\n", setting);
  return resolve(GemmCode::Auto);
}

std::atomic<GemmCode>& current_gemm_code() {
  static std::atomic<GemmCode> code{code_from_environment()};
  return code;
}
}  // namespace

void set_gemm_code(GemmCode code) {
  if (code == GemmCode::Openblas) check_openblas_runs_here("set_cpu_gemm");
  HEED_CHECK(code != GemmCode::HeedAvx512 || heed_sgemm_supported(SgemmKernel::Avx512), "set_cpu_gemm",
             "heed's AVX-512 gemm needs a CPU with AVX-512F, this one has none");
  HEED_CHECK(code != GemmCode::HeedAvx2 || heed_sgemm_supported(SgemmKernel::Avx2), "set_cpu_gemm",
             "heed's AVX2 gemm is not in this build (it needs HEED_ARCH_FLAGS with AVX2 and FMA)");
  current_gemm_code().store(resolve(code));
}

GemmCode gemm_code() { return current_gemm_code().load(std::memory_order_relaxed); }

const char* gemm_code_name(GemmCode code) {
  switch (resolve(code)) {
    case GemmCode::Openblas:
      return "openblas";
    case GemmCode::HeedAvx2:
      return "heed-avx2";
    default:
      return "heed-avx512";
  }
}

namespace {
// gelu of one row of z, as the unary rows gelu / gelu_tanh compute it (the same functions).
template <typename T>
void activate_row(GemmActivation activation, const T* z, T* out, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if (activation == GemmActivation::GeluErf) return gelu_erf_forward(z, out, n);
  }
  for (int64_t j = 0; j < n; ++j)
    out[j] = activation == GemmActivation::GeluErf ? elementwise::gelu_erf(z[j]) : elementwise::gelu_tanh(z[j]);
}

// The epilogues after the product of one block (m, n) of C at row r0, column c0: gelu (and
// gelu') from z, then the multiplier; nothing without them.
template <typename T>
void finish_block(const GemmArgs& g, int64_t m, int64_t n, int64_t r0, int64_t c0, T* batch_c) {
  T* const c = batch_c + r0 * g.ldc + c0;
  const T* const z = g.activation == GemmActivation::None || !g.pre_activation
                         ? c
                         : static_cast<const T*>(g.pre_activation) + r0 * g.ldc + c0;
  if (g.activation_derivative) {  // gelu(z) and gelu'(z) (GeluErf: checked in gemm), as the gelu row's kernels
    T* derivative = static_cast<T*>(g.activation_derivative) + r0 * g.ldc + c0;
    for (int64_t i = 0; i < m; ++i) {
      const T* z_row = z + i * g.ldc;
      if constexpr (std::is_same_v<T, float>) {
        gelu_erf_forward(z_row, c + i * g.ldc, n, derivative + i * g.ldc);
      } else {
        for (int64_t j = 0; j < n; ++j) {
          const T v = z_row[j];  // z may be C's own block
          c[i * g.ldc + j] = elementwise::gelu_erf(v);
          derivative[i * g.ldc + j] = elementwise::gelu_erf_grad(v);
        }
      }
    }
    return;
  }
  if (g.activation != GemmActivation::None)
    for (int64_t i = 0; i < m; ++i) activate_row(g.activation, z + i * g.ldc, c + i * g.ldc, n);
  if (g.c_multiplier) {
    const T* factor = static_cast<const T*>(g.c_multiplier) + r0 * g.ldc + c0;
    for (int64_t i = 0; i < m; ++i) {
      T* row = c + i * g.ldc;
      const T* factor_row = factor + i * g.ldc;
      for (int64_t j = 0; j < n; ++j) row[j] *= factor_row[j];
    }
  }
}

// One block (m, n) of C at row r0, column c0 of the whole product. With a bias epilogue heed's
// kernels add it in their first store; for OpenBLAS the block is filled with the bias first and
// the gemm accumulates onto it (beta = 1, the same bits); with an
// activation the gemm writes z into pre_activation's block and C's block is gelu(z), while z
// is still in cache.
template <typename T>
void gemm_one(const GemmArgs& g, GemmCode code, int64_t m, int64_t n, int64_t r0, int64_t c0, const T* a, const T* b,
              T* batch_c, double* row_sums) {
  T* const c = batch_c + r0 * g.ldc + c0;
  T* const z = g.activation == GemmActivation::None || !g.pre_activation
                   ? c
                   : static_cast<T*>(g.pre_activation) + r0 * g.ldc + c0;
  T beta = static_cast<T>(g.beta);
  const T* bias = g.bias ? static_cast<const T*>(g.bias) + c0 : nullptr;
  const bool heed_kernel = std::is_same_v<T, float> && code != GemmCode::Openblas;
  if (bias && !heed_kernel) {  // heed's kernels add the bias in their first store instead
    for (int64_t i = 0; i < m; ++i) std::memcpy(z + i * g.ldc, bias, static_cast<size_t>(n) * sizeof(T));
    beta = T(1);
  }
  if constexpr (std::is_same_v<T, float>) {
    if (heed_kernel) {
      heed_sgemm(code == GemmCode::HeedAvx512 ? SgemmKernel::Avx512 : SgemmKernel::Avx2, g.trans_a, g.trans_b, m, n,
                 g.k, static_cast<float>(g.alpha), a, g.lda, b, g.ldb, bias ? 0.0f : beta, z, g.ldc, row_sums, bias);
    } else {
      blas_gemm<T>(g.trans_a, g.trans_b, m, n, g.k, static_cast<T>(g.alpha), a, g.lda, b, g.ldb, beta, z, g.ldc);
    }
  } else {
    blas_gemm<T>(g.trans_a, g.trans_b, m, n, g.k, static_cast<T>(g.alpha), a, g.lda, b, g.ldb, beta, z, g.ldc);
  }
  finish_block<T>(g, m, n, r0, c0, batch_c);
}

// a_row_sums[i] = sum_p op(A)[i, p] in float64, in p order (independent of the thread count).
// op(A) = A^T (the weight-gradient case, A = dY) is walked row by row of A, unit stride.
template <typename T>
void a_row_sums(const GemmArgs& g) {
  const T* a = static_cast<const T*>(g.a);
  T* out = static_cast<T*>(g.a_row_sums);
  constexpr int64_t kRowsPerTask = 256;
  parallel_for(g.m, kRowsPerTask, [&](int64_t begin, int64_t end) {
    std::vector<double> sums(static_cast<size_t>(end - begin), 0.0);
    if (g.trans_a) {
      for (int64_t p = 0; p < g.k; ++p) {
        const T* row = a + p * g.lda;
        for (int64_t i = begin; i < end; ++i) sums[i - begin] += row[i];
      }
    } else {
      for (int64_t i = begin; i < end; ++i) {
        const T* row = a + i * g.lda;
        double s = 0.0;
        for (int64_t p = 0; p < g.k; ++p) s += row[p];
        sums[i - begin] = s;
      }
    }
    for (int64_t i = begin; i < end; ++i) out[i] = static_cast<T>(sums[i - begin]);
  });
}

// One float32 product on one of heed's kernels shared by the whole team (heed_sgemm_team): the
// operand every block reads is packed once, and row or column chunks go to whichever thread is
// free, so a thread slowed by another process no longer holds the rest at the end of each
// product (charlm on a Zen 3: the static halves' finishing times were 4-9% of gemm time apart).
void gemm_team(const GemmArgs& g, SgemmKernel kernel, int threads) {
  float* c = static_cast<float*>(g.c);
  float* z = g.activation == GemmActivation::None || !g.pre_activation ? c : static_cast<float*>(g.pre_activation);
  std::vector<double> sums;
  if (g.a_row_sums) sums.assign(static_cast<size_t>(g.m), 0.0);
  SgemmEpilogue epilogue;
  if (g.activation != GemmActivation::None || g.c_multiplier) {
    epilogue.context = const_cast<GemmArgs*>(&g);
    epilogue.run = [](void* context, int64_t r0, int64_t rows, int64_t c0, int64_t cols) {
      const GemmArgs& args = *static_cast<const GemmArgs*>(context);
      finish_block<float>(args, rows, cols, r0, c0, static_cast<float*>(args.c));
    };
  }
  heed_sgemm_team(kernel, g.trans_a, g.trans_b, g.m, g.n, g.k, static_cast<float>(g.alpha),
                  static_cast<const float*>(g.a), g.lda, static_cast<const float*>(g.b), g.ldb,
                  g.bias ? 0.0f : static_cast<float>(g.beta), z, g.ldc, threads, sums.empty() ? nullptr : sums.data(),
                  static_cast<const float*>(g.bias), epilogue);
  if (!sums.empty()) {
    float* out = static_cast<float*>(g.a_row_sums);
    for (int64_t r = 0; r < g.m; ++r) out[r] = static_cast<float>(sums[static_cast<size_t>(r)]);
  }
}

template <typename T>
void gemm_typed(const GemmArgs& g, GemmCode code) {
  const T* a = static_cast<const T*>(g.a);
  const T* b = static_cast<const T*>(g.b);
  T* c = static_cast<T*>(g.c);
  const int threads = max_threads();
  const Grid grid =
      code == GemmCode::Openblas ? plan_grid(g.m, g.n, g.k) : plan_grid_for_threads(g.m, g.n, g.k, g.batch, threads);
  if constexpr (std::is_same_v<T, float>) {
    // A single product on heed's kernels runs as one team product (gemm_team), unless the AVX-512
    // kernel would read an operand of its per-thread blocks in place (the team packs every operand:
    // charlm's A^T B weight gradients, read in place, ran 8-30% slower packed by the team on a Zen 4).
    const double flops = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
    const bool heed_kernel = code == GemmCode::HeedAvx2 || code == GemmCode::HeedAvx512;
    const SgemmKernel kernel = code == GemmCode::HeedAvx512 ? SgemmKernel::Avx512 : SgemmKernel::Avx2;
    if (heed_kernel && g.batch == 1 && threads > 1 && flops >= 2 * kMinTaskFlops &&
        (g.a_row_sums == nullptr || g.trans_a) &&
        !heed_sgemm_reads_in_place(kernel, g.trans_a, g.trans_b, grid.rows_per, grid.cols_per, g.lda, g.ldb))
      return gemm_team(g, kernel, threads);
  }
  const int64_t tasks_per_batch = grid.row_parts * grid.col_parts;
  // Many small batched products: group them so each parallel chunk has real work (grouping
  // never changes what a task computes).
  const double flops_per_task = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k) /
                                static_cast<double>(tasks_per_batch);
  const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(kMinTaskFlops / std::max(flops_per_task, 1.0)));
  // heed's kernels sum the rows of op(A) = A^T as they pack or read it (the tasks of the first column
  // part, which between them cover every row once), in the order the separate pass uses.
  std::vector<double> fused_sums;
  if (std::is_same_v<T, float> && code != GemmCode::Openblas && g.a_row_sums && g.trans_a)
    fused_sums.assign(static_cast<size_t>(g.m), 0.0);
  parallel_for(g.batch * tasks_per_batch, grain, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t i = task / tasks_per_batch, t = task % tasks_per_batch;
      const int64_t r0 = (t / grid.col_parts) * grid.rows_per, c0 = (t % grid.col_parts) * grid.cols_per;
      const int64_t rows = std::min(grid.rows_per, g.m - r0), cols = std::min(grid.cols_per, g.n - c0);
      const T* ai = a + i * g.batch_stride_a + (g.trans_a ? r0 : r0 * g.lda);
      const T* bi = b + i * g.batch_stride_b + (g.trans_b ? c0 * g.ldb : c0);
      double* sums = !fused_sums.empty() && c0 == 0 ? fused_sums.data() + r0 : nullptr;
      gemm_one(g, code, rows, cols, r0, c0, ai, bi, c + i * g.batch_stride_c, sums);
    }
  });
  if (!fused_sums.empty()) {
    T* out = static_cast<T*>(g.a_row_sums);
    for (int64_t r = 0; r < g.m; ++r) out[r] = static_cast<T>(fused_sums[static_cast<size_t>(r)]);
  } else if (g.a_row_sums) {
    a_row_sums<T>(g);
  }
}
}  // namespace

BlasLibrary blas_library() {
  BlasLibrary info;
  info.config = openblas_get_config();
  info.core = openblas_get_corename();
  info.parallel = openblas_get_parallel();
  return info;
}

bool is_avx2_core(const char* core) {
  for (const char* set : {"haswell", "zen"})
    if (strcasecmp(core, set) == 0) return true;
  return false;
}

bool is_avx512_core(const char* core) {
  for (const char* set : {"skylakex", "cooperlake", "sapphirerapids"})
    if (strcasecmp(core, set) == 0) return true;
  return false;
}

bool is_generic_core(const char* core) { return !is_avx2_core(core) && !is_avx512_core(core); }

bool openblas_core_runs_on(const char* core, bool cpu_avx2, bool cpu_avx512) {
  if (is_avx512_core(core)) return cpu_avx512;
  if (is_avx2_core(core)) return cpu_avx2 || cpu_avx512;
  return true;
}

bool openblas_runs_here() {
  static const bool runs = [] {
    __builtin_cpu_init();
    return openblas_core_runs_on(blas_library().core, __builtin_cpu_supports("avx2"),
                                 __builtin_cpu_supports("avx512f"));
  }();
  return runs;
}

const char* openblas_coretype_hint(const char* core, bool cpu_avx2, bool cpu_avx512, bool cpu_amd) {
  if (!openblas_core_runs_on(core, cpu_avx2, cpu_avx512)) {
    if (cpu_avx2) return cpu_amd ? "Zen" : "Haswell";
    return "";  // no OpenBLAS set of heed's lists is faster than the generic one it would pick
  }
  if (!cpu_avx2 && !cpu_avx512) return "";
  // OpenBLAS 0.3.21's kernel sets with AVX-512 FMA for sgemm: nothing faster to advise.
  if (is_avx512_core(core)) return "";
  // Its AVX2 sets are the fastest on an AVX2 CPU; on an AVX-512 CPU (0.3.21 picks Haswell on
  // AMD's Zen 5; on a Zen 4 it chose Cooperlake) the SkylakeX set is what newer OpenBLAS releases choose there.
  if (is_avx2_core(core)) return cpu_avx512 ? "SkylakeX" : "";
  if (cpu_avx512) return "SkylakeX";
  return cpu_amd ? "Zen" : "Haswell";
}

double measure_sgemm_gflops(int64_t d, int repeats) {
  if (gemm_code() == GemmCode::Openblas) check_openblas_runs_here("measure_sgemm_gflops");
  const size_t n = static_cast<size_t>(d * d);
  std::vector<float> a(n, 1.0f), b(n, 0.5f), c(n, 0.0f);
  GemmArgs g;
  g.m = g.n = g.k = d;
  g.a = a.data();
  g.b = b.data();
  g.c = c.data();
  g.lda = g.ldb = g.ldc = d;
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    gemm_typed<float>(g, gemm_code());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, 2.0 * static_cast<double>(d) * static_cast<double>(d) * static_cast<double>(d) /
                              std::max(seconds, 1e-9) / 1e9);
  }
  return best;
}

void check_openblas_runs_here(const char* op) {
  if (openblas_runs_here()) return;
  __builtin_cpu_init();
  const char* core = blas_library().core;
  const char* setting = std::getenv("OPENBLAS_CORETYPE");
  const char* hint = openblas_coretype_hint(core, __builtin_cpu_supports("avx2"), __builtin_cpu_supports("avx512f"),
                                            __builtin_cpu_is("amd"));
  fail(op,
       "OpenBLAS loaded its '{}' kernels (OPENBLAS_CORETYPE={}), which need {}, and this CPU has {}: the call would "
       "stop the program with an illegal instruction. Unset OPENBLAS_CORETYPE{}{}",
       core, setting ? setting : "(not set)", is_avx512_core(core) ? "AVX-512" : "AVX2",
       __builtin_cpu_supports("avx2") ? "AVX2 only" : "neither AVX2 nor AVX-512", *hint ? " or set it to " : "", hint);
}

namespace {

void warn_if_generic_kernels() {
  const char* setting = std::getenv("HEED_BLAS_WARNING");
  if (setting && std::strcmp(setting, "0") == 0) return;
  if (gemm_code() != GemmCode::Openblas) return;  // heed's own kernels run float32 at the CPU's width
  if (!openblas_runs_here()) return;              // gemm's check says what is wrong, as an Error
  __builtin_cpu_init();
  const BlasLibrary lib = blas_library();
  const char* hint = openblas_coretype_hint(lib.core, __builtin_cpu_supports("avx2"), __builtin_cpu_supports("avx512f"),
                                            __builtin_cpu_is("amd"));
  if (!*hint) return;
  const double gflops = measure_sgemm_gflops(256, 3);
  const bool avx2_set = is_avx2_core(lib.core);
  std::fprintf(stderr,
               "heed: OpenBLAS runs its %s '%s' kernels on this CPU, which has %s: sgemm reaches %.0f GFLOP/s "
               "here, %s what the library's %s kernels do. Start the program with OPENBLAS_CORETYPE=%s to use "
               "them (HEED_BLAS_WARNING=0 silences this message; see the README, \"Which BLAS kernels run\").\n",
               avx2_set ? "AVX2" : "generic", lib.core, __builtin_cpu_supports("avx512f") ? "AVX-512" : "AVX2", gflops,
               avx2_set ? "up to 2x below (on CPUs with full-width AVX-512 units)" : "typically 3-5x below", hint,
               hint);
}
}  // namespace

void gemm(const GemmArgs& args) {
  static std::once_flag checked_blas;
  std::call_once(checked_blas, warn_if_generic_kernels);
  constexpr int64_t kMaxBlasInt = 2147483647;
  HEED_CHECK(args.m <= kMaxBlasInt && args.n <= kMaxBlasInt && args.k <= kMaxBlasInt, "gemm",
             "matrix sizes ({}, {}, {}) exceed the 32-bit BLAS interface", args.m, args.n, args.k);
  const bool activation = args.activation != GemmActivation::None;
  HEED_CHECK(!args.a_row_sums || (!args.bias && !activation), "gemm",
             "the row sums of A are an epilogue of their own, got them with a bias or an activation");
  HEED_CHECK(!args.a_row_sums || (args.alpha == 1.0 && args.beta == 0.0), "gemm",
             "the row-sum epilogue needs alpha 1 and beta 0 (as cuBLASLt's BGRADB is used), got {} and {}", args.alpha,
             args.beta);
  HEED_CHECK(
      !activation || ((args.pre_activation || args.activation_derivative) && args.ldc >= args.n && args.beta == 0.0),
      "gemm",
      "the activation epilogue needs pre_activation (or activation_derivative), C's rows ldc {} >= n {} apart "
      "and beta 0 (got {})",
      args.ldc, args.n, args.beta);
  HEED_CHECK(!args.activation_derivative || (args.activation == GemmActivation::GeluErf && args.batch == 1), "gemm",
             "the activation_derivative epilogue is for the erf GELU epilogue with batch 1");
  HEED_CHECK(!args.c_multiplier || (!args.bias && !args.a_row_sums && !activation && args.beta == 0.0 &&
                                    args.ldc >= args.n && args.batch == 1 && args.k > 0),
             "gemm",
             "the c_multiplier epilogue needs batch 1, k >= 1, beta 0, C's rows ldc {} >= n {} apart and no other "
             "epilogue",
             args.ldc, args.n);
  HEED_CHECK((!args.bias && !args.a_row_sums && !activation) || args.batch == 1, "gemm",
             "the bias and row-sum epilogues need batch == 1, got batch {}", args.batch);
  HEED_CHECK(!args.bias || args.beta == 0.0, "gemm", "the bias epilogue needs beta == 0, got {}", args.beta);
  HEED_CHECK((!args.bias && !args.a_row_sums && !activation) || args.k > 0, "gemm",
             "the epilogues need k >= 1, got k = 0");
  if (args.m == 0 || args.n == 0 || args.batch == 0) {
    // Nothing to multiply; the row sums of op(A) (m x k) are still asked for when n == 0.
    if (args.a_row_sums && args.m > 0 && args.dtype == kFloat32) a_row_sums<float>(args);
    if (args.a_row_sums && args.m > 0 && args.dtype == kFloat64) a_row_sums<double>(args);
    return;
  }
  if (args.dtype == kFloat64 || gemm_code() == GemmCode::Openblas) check_openblas_runs_here("gemm");
  // The code is read once: every block of one product runs on the same one.
  if (args.dtype == kFloat32) return gemm_typed<float>(args, gemm_code());
  if (args.dtype == kFloat64) return gemm_typed<double>(args, GemmCode::Openblas);
  fail("gemm", "the CPU gemm has no {} version (16-bit operands are widened by matmul)", dtype_name(args.dtype));
}

}  // namespace heed::kernels::cpu
