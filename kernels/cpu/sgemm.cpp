// kernels/cpu/sgemm.cpp — heed's own float32 gemm: single-threaded for one block of C
// (heed_sgemm), with AVX-512 and AVX2 register kernels (chosen at run time from the CPU, never
// from what OpenBLAS thinks the CPU is), and one product on a team of threads with either kernel
// (heed_sgemm_team: the operand every thread reads packed once per KC slice, rows or columns of C
// claimed as threads become free, every operand packed, shared_gemm).
//
// Why: OpenBLAS chooses its kernel set once, from a CPU table frozen at its release; Debian 12's
// 0.3.21 runs its AVX2 set on AMD Zen 5 (half the FMA width that CPU has) and its SSE3 set
// on recent Xeons (a quarter of it). heed runs its AVX-512 kernel on every AVX-512 CPU (with one
// block per thread it is ahead of OpenBLAS's AVX-512 set too) and its AVX2 kernel on every other
// AVX2 CPU (ahead of OpenBLAS's AVX2 sets as well: blas.cpp).
// This is the classic packed design (Goto / BLIS): op(B) = B^T is packed per KC x NR sliver
// (op(B) = B too with the AVX2 kernel; the AVX-512 kernel reads it in place beside at most two
// MC blocks of rows, its rows being the slivers' rows, and packs only a partial last sliver),
// op(A) per MR x KC panel in blocks of MC panels (12, or 4-11 where a packed B slice
// then stays in L2: heed_sgemm_mc_panels; op(A) = A^T is read in place by
// the AVX-512 kernel, its panels' rows being A's rows, except beside B read in place with rows
// 2 KiB apart; only a partial last panel is packed; operands with rows 4 KiB apart are always
// packed, l1_aliasing), and an MR x NR register tile accumulates over KC while it prefetches the
// rows of the next in-place sliver of B and panel of A^T (RowPrefetch).
//
// Invariants:
// - every C element is one float accumulator per KC slice, fed p in increasing order with fused
//   multiply-adds; slices are added to C in order (the first as alpha * acc (+ beta * C), the
//   others as C + alpha * acc). The order depends on k only, so the result is the same for every
//   thread count and for every position of the element in its tile (a last partial panel of
//   op(A) runs the tile of its own rows, tile_rows_512 / tile_rows_256: each element's chain is
//   the same; a partial sliver of op(B) runs the whole tile on zero-padded columns).
// - a bias (one per column of C) is added in the first slice's store, as C = bias + alpha * acc:
//   the bits of filling C with the bias and running with beta = 1.
// - beta == 0 never reads C (it may hold NaN, as BLAS allows).
// - this file is compiled with -ffp-contract=off (CMakeLists.txt): the stores' multiply and add
//   stay two roundings on every path, vector and scalar alike.
// - packing buffers are thread-local and 64-byte aligned; nothing here allocates per call once
//   they have grown to the largest block seen (a team product allocates its slices' ranges).
// - a team product gives heed_sgemm's bits on any number of threads: the same tile kernel and
//   the same KC slices in order for every element, whichever thread ran it.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include <omp.h>

#include <unistd.h>  // sysconf(_SC_LEVEL2_CACHE_SIZE)

#include "cpu_kernels.h"
#include "heed/error.h"
#include "vec_math.h"  // HEED_HAVE_AVX2 and <immintrin.h> when the build targets AVX2 + FMA

namespace heed::kernels::cpu {

namespace {

constexpr int64_t kMcPanels = 12;  // MR-row panels of A per block (at most): MC x KC floats stay in L2
constexpr int64_t kMinMcPanels = 4;

// The L2 size the MC blocks are fitted to (heed_sgemm_l2_bytes): read once, settable by tests.
std::atomic<int64_t>& l2_setting() {
  static std::atomic<int64_t> bytes{[] {
    const char* setting = std::getenv("HEED_GEMM_L2_BLOCKS");
    if (setting != nullptr && std::strcmp(setting, "0") == 0) return int64_t{0};
    const long size = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return size > 0 ? static_cast<int64_t>(size) : int64_t{0};
  }()};
  return bytes;
}

}  // namespace

// The MR-row panels of op(A) per MC block. A packed B slice (packed_b_floats) is read again by
// every MC block; between two reads of one of its slivers the block's tiles also bring in their
// MC x nc part of C and MC x kc of A (and A's source when it is packed from memory). With the
// default 12 panels that is more than the L2 holds whenever B's slice is large (on a Xeon with
// 2 MiB of L2, the lm step's 1024 x 1024 x 256 blocks: 1 MiB of B, 672 KiB of C), and the slice
// went back to L3 every block. So, when the slice alone fits in three quarters of the L2, MC is
// the most panels (4 to 12) with which the rest fits beside it; otherwise (the slice does not
// stay in L2 whatever MC is, or the L2 size is unknown) the default. MC only orders the tiles:
// no element's arithmetic depends on it.
int64_t heed_sgemm_mc_panels(int64_t mr, int64_t packed_b_floats, int64_t nc, int64_t kc) {
  const int64_t l2 = heed_sgemm_l2_bytes();
  const int64_t budget = l2 / 4 * 3 / static_cast<int64_t>(sizeof(float)) - packed_b_floats;
  if (l2 == 0 || budget <= 0) return kMcPanels;
  return std::clamp<int64_t>(budget / ((nc + 2 * kc) * mr), kMinMcPanels, kMcPanels);
}
int64_t heed_sgemm_l2_bytes() { return l2_setting().load(std::memory_order_relaxed); }
void set_heed_sgemm_l2_bytes(int64_t bytes) { l2_setting().store(std::max<int64_t>(bytes, 0)); }

namespace {

#if HEED_HAVE_AVX2
constexpr int64_t kKc = 256;   // depth of one packed slice: KC x NR floats of B stay in L1
constexpr int64_t kNc = 4096;  // columns of C per block: a packed KC x NC slice of B is at most 4 MiB

// True when rows `ld` floats apart all fall into the same L1 set: a multiple of 4 KiB (64 sets of
// 64-byte lines on the Zen 4 and 5 and on Intel's cores since Skylake), so the 256 rows of a KC
// slice read in place compete for that set's 8-12 ways and are fetched from L2 again by every
// tile. Operands with such rows are packed instead: on a Zen 4 with cold operands (as in a
// training step), the lm step's weight gradients 256 x 1024 x 2048 (B's rows 4 KiB apart) ran
// 171 -> 183 GFLOP/s and 1024 x 256 x 2048 (A's) 172 -> 182, every other shape unchanged.
inline bool l1_aliasing(int64_t ld) { return ld % 1024 == 0; }

// A thread-local packing buffer that only grows (a failed allocation leaves the old one in place);
// B's packed slice reaches 4 MiB, which system_allocate puts on huge pages.
struct PackingBuffer {
  float* data = nullptr;
  int64_t floats = 0;
  ~PackingBuffer() { system_free(data, static_cast<size_t>(floats) * sizeof(float)); }
};
// Slots: 0 packed op(A), 1 packed op(B), 2 the operand a shared product packs for all its threads.
float* scratch(int slot, int64_t floats) {
  thread_local PackingBuffer buffers[3];
  PackingBuffer& buffer = buffers[slot];
  if (buffer.floats < floats) {
    float* grown = static_cast<float*>(system_allocate(static_cast<size_t>(floats) * sizeof(float)));
    HEED_CHECK(grown != nullptr, "gemm", "could not allocate a {}-float packing buffer", floats);
    system_free(buffer.data, static_cast<size_t>(buffer.floats) * sizeof(float));
    buffer.data = grown;
    buffer.floats = floats;
  }
  return buffer.data;
}

// out[0, lanes) = v's first `lanes` lanes (1 <= lanes <= 8), nothing past them, in plain stores of
// 8, 4, 2 and 1 floats: AMD's Zen cores run the masked store (vmaskmovps) several times slower
// (on a Zen 4, packing took 23% of a single-threaded 768 x 128 x 512 A B^T product with it, 7%
// without). With today's panel widths (14 and 6 rows of A, 32 and 16 columns of B) only 8 and 6
// lanes occur.
inline void store_first_lanes(float* out, __m256 v, int64_t lanes) {
  if (lanes == 8) return _mm256_storeu_ps(out, v);
  __m128 part = _mm256_castps256_ps128(v);
  if (lanes >= 4) {
    _mm_storeu_ps(out, part);
    part = _mm256_extractf128_ps(v, 1);
    out += 4;
    lanes -= 4;
  }
  if (lanes >= 2) {
    _mm_storel_pi(reinterpret_cast<__m64*>(out), part);
    part = _mm_movehl_ps(part, part);
    out += 2;
    lanes -= 2;
  }
  if (lanes == 1) _mm_store_ss(out, part);
}

// out[p * width + i] = src[i * ld + p] for i < rows, 0 for rows <= i < width, p < kc: the
// transposing copy behind both packings whose source runs along p (op(A) = A, op(B) = B^T).
// 8 x 8 blocks are transposed in ymm registers; the p tail is scalar.
void pack_transposed(const float* src, int64_t ld, int64_t rows, int64_t kc, int64_t width, float* out) {
  alignas(32) static const float kZeroRow[kKc] = {};  // the source of rows past `rows` (kc <= kKc)
  for (int64_t i0 = 0; i0 < width; i0 += 8) {
    const int64_t valid = std::clamp<int64_t>(rows - i0, 0, 8), lanes = std::min<int64_t>(width - i0, 8);
    const float* row[8];  // chosen once per group: no per-load test in the loop below
    for (int i = 0; i < 8; ++i) row[i] = i < valid ? src + (i0 + i) * ld : kZeroRow;
    int64_t p0 = 0;
    for (; p0 + 8 <= kc; p0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(row[i] + p0);
      transpose_8x8(r);
      for (int q = 0; q < 8; ++q) store_first_lanes(out + (p0 + q) * width + i0, r[q], lanes);
    }
    for (; p0 < kc; ++p0)
      for (int64_t i = 0; i < lanes; ++i) out[p0 * width + i0 + i] = row[i][p0];
  }
}

// One full panel of op(A) = A^T: out[p * MR + i] = src[p * ld + i] for i < MR, p < kc (unless out
// is null: the panel is read in place), and sums[i] += src[p * ld + i] in double, p in increasing
// order (each row's own sequence of adds, as the scalar loop below; the rows are added four to a
// vector).
template <int MR>
void copy_and_sum_panel(const float* src, int64_t ld, int64_t kc, float* out, double* sums) {
  constexpr int kGroups = MR / 4, kRest = MR % 4;
  __m256d acc[kGroups];
  double rest[kRest > 0 ? kRest : 1];
  for (int g = 0; g < kGroups; ++g) acc[g] = _mm256_loadu_pd(sums + 4 * g);
  for (int r = 0; r < kRest; ++r) rest[r] = sums[4 * kGroups + r];
  for (int64_t p = 0; p < kc; ++p, src += ld) {
    if (out != nullptr) {
      std::memcpy(out, src, MR * sizeof(float));
      out += MR;
    }
    for (int g = 0; g < kGroups; ++g) acc[g] = _mm256_add_pd(acc[g], _mm256_cvtps_pd(_mm_loadu_ps(src + 4 * g)));
    for (int r = 0; r < kRest; ++r) rest[r] += static_cast<double>(src[4 * kGroups + r]);
  }
  for (int g = 0; g < kGroups; ++g) _mm256_storeu_pd(sums + 4 * g, acc[g]);
  for (int r = 0; r < kRest; ++r) sums[4 * kGroups + r] = rest[r];
}

// Packs rows [0, m) x depth [p0, p0 + kc) of op(A) into MR-row panels: panel r holds, for each p,
// the MR values op(A)[r*MR + i, p] contiguously; rows past m are zero.
// With row_sums (trans_a only), row_sums[i] += op(A)[i, p] for p in increasing order, in double.
template <int MR>
void pack_a(bool trans_a, const float* a, int64_t lda, int64_t m, int64_t p0, int64_t kc, float* out,
            double* row_sums) {
  for (int64_t r0 = 0; r0 < m; r0 += MR) {
    const int64_t rows = std::min<int64_t>(MR, m - r0);
    if (trans_a) {                              // op(A)[i, p] = a[p * lda + i]: each p is a contiguous run of rows
      if (rows == MR && row_sums != nullptr) {  // the common case, its sums in registers
        copy_and_sum_panel<MR>(a + p0 * lda + r0, lda, kc, out, row_sums + r0);
        out += MR * kc;
        continue;
      }
      double sums[MR];  // the running row sums, added to in p order as the separate pass would
      if (row_sums != nullptr)
        for (int64_t i = 0; i < rows; ++i) sums[i] = row_sums[r0 + i];
      for (int64_t p = 0; p < kc; ++p) {
        const float* src = a + (p0 + p) * lda + r0;
        float* dst = out + p * MR;
        if (rows == MR) {
          std::memcpy(dst, src, MR * sizeof(float));
        } else {
          int64_t i = 0;
          for (; i < rows; ++i) dst[i] = src[i];
          for (; i < MR; ++i) dst[i] = 0.0f;
        }
        if (row_sums != nullptr)
          for (int64_t i = 0; i < rows; ++i) sums[i] += static_cast<double>(src[i]);
      }
      if (row_sums != nullptr)
        for (int64_t i = 0; i < rows; ++i) row_sums[r0 + i] = sums[i];
    } else {  // op(A)[i, p] = a[i * lda + p]: each row runs along p
      pack_transposed(a + r0 * lda + p0, lda, rows, kc, MR, out);
    }
    out += MR * kc;
  }
}

// Packs depth [p0, p0 + kc) x columns [0, n) of op(B) into NR-column slivers: sliver s holds, for
// each p, the NR values op(B)[p, s*NR + j] contiguously; columns past n are zero.
template <int NR>
void pack_b(bool trans_b, const float* b, int64_t ldb, int64_t n, int64_t p0, int64_t kc, float* out) {
  for (int64_t c0 = 0; c0 < n; c0 += NR) {
    const int64_t cols = std::min<int64_t>(NR, n - c0);
    if (!trans_b) {  // op(B)[p, j] = b[p * ldb + j]
      for (int64_t p = 0; p < kc; ++p) {
        const float* src = b + (p0 + p) * ldb + c0;
        float* dst = out + p * NR;
        if (cols == NR) {
          std::memcpy(dst, src, NR * sizeof(float));
        } else {
          int64_t j = 0;
          for (; j < cols; ++j) dst[j] = src[j];
          for (; j < NR; ++j) dst[j] = 0.0f;
        }
      }
    } else {  // op(B)[p, j] = b[j * ldb + p]: each column of op(B) is a row of b, along p
      pack_transposed(b + c0 * ldb + p0, ldb, cols, kc, NR, out);
    }
    out += NR * kc;
  }
}

// Writes one register tile (held in `tile`, MR x NR row-major) into C's (rows, cols) corner:
// C = alpha * acc (+ beta * C) for the first KC slice, or bias[j] + alpha * acc with a bias (beta
// is then 0: the bits of filling C with the bias and running with beta = 1, one rounding either
// way), and C += alpha * acc for the others.
template <int MR, int NR>
void store_edge(const float* tile, int64_t rows, int64_t cols, float* c, int64_t ldc, float alpha, float beta,
                bool first, const float* bias) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      float* out = c + i * ldc + j;
      const float scaled = alpha * tile[i * NR + j];
      if (!first)
        *out = *out + scaled;
      else if (bias != nullptr)
        *out = bias[j] + scaled;
      else
        *out = beta == 0.0f ? scaled : std::fma(beta, *out, scaled);
    }
}

// Rows a tile kernel brings into L1 while it runs: `count` rows `ld` floats apart from `rows`, one
// row every `every` steps of p, as every 64-byte line of its first `width` floats (a 32-float
// sliver may span three lines, a 14-float panel row two); none when rows is null. Prefetches
// change no arithmetic.
struct RowPrefetch {
  const float* rows = nullptr;
  int64_t ld = 0, count = 0, every = 1, width = 0;
};

// A tile kernel's two prefetch streams: issue_until(p_end) issues every row whose turn (row index
// x every) comes before step p_end. Tiles with a stream call it once per kPrefetchChunk steps of p,
// outside the loop of fused multiply-adds; tiles without one run the plain loop (the chunks'
// bookkeeping spills registers: the AVX2 kernel lost up to a quarter on a hot 1024^3 with it).
constexpr int64_t kPrefetchChunk = 8;
class Prefetcher {
 public:
  explicit Prefetcher(const RowPrefetch (&streams)[2]) : streams_(streams) {}
  void issue_until(int64_t p_end) {
    for (int q = 0; q < 2; ++q) {
      const RowPrefetch& stream = streams_[q];  // a null stream has count 0
      for (; issued_[q] < stream.count && issued_[q] * stream.every < p_end; ++issued_[q]) {
        const float* row = stream.rows + issued_[q] * stream.ld;
        for (int64_t offset = 0; offset < stream.width; offset += 16)
          _mm_prefetch(reinterpret_cast<const char*>(row + offset), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(row + stream.width - 1), _MM_HINT_T0);
      }
    }
  }

 private:
  const RowPrefetch (&streams_)[2];
  int64_t issued_[2] = {0, 0};
};

// ---- AVX-512: a 14 x 32 tile in 28 zmm accumulators -------------------------------------------

constexpr int kMr512 = 14, kNr512 = 32;

__attribute__((target("avx512f,fma"))) inline void store_row_512(float* out, __m512 acc0, __m512 acc1, float alpha,
                                                                 float beta, bool first, const float* bias) {
  const __m512 va = _mm512_set1_ps(alpha);
  const __m512 s0 = _mm512_mul_ps(va, acc0), s1 = _mm512_mul_ps(va, acc1);
  if (!first) {
    _mm512_storeu_ps(out, _mm512_add_ps(_mm512_loadu_ps(out), s0));
    _mm512_storeu_ps(out + 16, _mm512_add_ps(_mm512_loadu_ps(out + 16), s1));
  } else if (bias != nullptr) {
    _mm512_storeu_ps(out, _mm512_add_ps(_mm512_loadu_ps(bias), s0));
    _mm512_storeu_ps(out + 16, _mm512_add_ps(_mm512_loadu_ps(bias + 16), s1));
  } else if (beta == 0.0f) {
    _mm512_storeu_ps(out, s0);
    _mm512_storeu_ps(out + 16, s1);
  } else {
    const __m512 vb = _mm512_set1_ps(beta);
    _mm512_storeu_ps(out, _mm512_fmadd_ps(vb, _mm512_loadu_ps(out), s0));
    _mm512_storeu_ps(out + 16, _mm512_fmadd_ps(vb, _mm512_loadu_ps(out + 16), s1));
  }
}

// One step of p of an R x 32 tile: acc[i] += pa[i] * pb[0, 32), i < R.
template <int R>
__attribute__((target("avx512f,fma"), always_inline)) inline void step_512(__m512 (&acc)[R][2], const float* pa,
                                                                           const float* pb) {
  const __m512 b0 = _mm512_loadu_ps(pb), b1 = _mm512_loadu_ps(pb + 16);
#pragma GCC unroll 14
  for (int i = 0; i < R; ++i) {
    const __m512 x = _mm512_set1_ps(pa[i]);
    acc[i][0] = _mm512_fmadd_ps(x, b0, acc[i][0]);
    acc[i][1] = _mm512_fmadd_ps(x, b1, acc[i][1]);
  }
}

// The first R rows of a panel times one sliver (tile_512's arguments): the full 14-row tile, and
// the last panel of an operand whose rows are not a multiple of 14 (R = its rows), which ran the
// whole tile on zero rows before (m = 128: a tenth panel of 2 rows at the cost of 14; the
// 2-row tile's 4 chains of fused multiply-adds cost about a seventh of it). Every C element is
// the same chain of fused multiply-adds from 0 in p order whatever R is, and the same store: the
// bits do not depend on which tile computed the element.
template <int R>
__attribute__((target("avx512f,fma"))) void tile_rows_512(int64_t kc, const float* pa, const float* pb, float* c,
                                                          int64_t ldc, int64_t rows, int64_t cols, float alpha,
                                                          float beta, bool first, const float* bias, int64_t ldpb,
                                                          int64_t a_step, const RowPrefetch (&prefetch)[2]) {
  __m512 acc[R][2];
#pragma GCC unroll 14
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int i = 0; i < rows; ++i) {  // C's tile is needed at the end: start bringing it in now
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 16), _MM_HINT_T0);
  }
  if (prefetch[0].rows == nullptr && prefetch[1].rows == nullptr) {  // nothing to prefetch: the plain loop
    for (int64_t p = 0; p < kc; ++p, pa += a_step, pb += ldpb) step_512<R>(acc, pa, pb);
  } else {
    Prefetcher prefetcher(prefetch);
    for (int64_t p0 = 0; p0 < kc; p0 += kPrefetchChunk) {
      const int64_t p_end = std::min(kc, p0 + kPrefetchChunk);
      prefetcher.issue_until(p_end);
      for (int64_t p = p0; p < p_end; ++p, pa += a_step, pb += ldpb) step_512<R>(acc, pa, pb);
    }
  }
  if (rows == R && cols == kNr512) {
#pragma GCC unroll 14
    for (int i = 0; i < R; ++i) store_row_512(c + i * ldc, acc[i][0], acc[i][1], alpha, beta, first, bias);
    return;
  }
  alignas(64) float tile[R * kNr512];
#pragma GCC unroll 14
  for (int i = 0; i < R; ++i) {
    _mm512_store_ps(tile + i * kNr512, acc[i][0]);
    _mm512_store_ps(tile + i * kNr512 + 16, acc[i][1]);
  }
  store_edge<R, kNr512>(tile, rows, cols, c, ldc, alpha, beta, first, bias);
}

// A table of a kernel's tiles for a partial panel, entry r - 1 for r rows (r = 1 .. MR - 1):
// Rows::tile<R> is the R-row tile (tile_rows_512, tile_rows_256).
template <typename Rows, int... R>
constexpr auto partial_panel_tiles(std::integer_sequence<int, R...>) {
  return std::array{Rows::template tile<R + 1>...};
}

// A tile kernel of MR-row panels: a full panel runs the MR-row tile, a partial one (1 to MR - 1
// real rows) the tile of that many rows.
template <typename Rows, int MR>
void panel_tile(int64_t kc, const float* pa, const float* pb, float* c, int64_t ldc, int64_t rows, int64_t cols,
                float alpha, float beta, bool first, const float* bias, int64_t ldpb, int64_t a_step,
                const RowPrefetch (&prefetch)[2]) {
  static constexpr auto kPartial = partial_panel_tiles<Rows>(std::make_integer_sequence<int, MR - 1>{});
  if (rows >= MR)
    return Rows::template tile<MR>(kc, pa, pb, c, ldc, rows, cols, alpha, beta, first, bias, ldpb, a_step, prefetch);
  kPartial[static_cast<size_t>(rows - 1)](kc, pa, pb, c, ldc, rows, cols, alpha, beta, first, bias, ldpb, a_step,
                                          prefetch);
}

struct Rows512 {
  template <int R>
  static constexpr auto tile = &tile_rows_512<R>;
};
// The 14 x 32 tile kernel.
constexpr auto tile_512 = &panel_tile<Rows512, kMr512>;

// ---- AVX2: a 6 x 16 tile in 12 ymm accumulators -----------------------------------------------

constexpr int kMr256 = 6, kNr256 = 16;

inline void store_row_256(float* out, __m256 acc0, __m256 acc1, float alpha, float beta, bool first,
                          const float* bias) {
  const __m256 va = _mm256_set1_ps(alpha);
  const __m256 s0 = _mm256_mul_ps(va, acc0), s1 = _mm256_mul_ps(va, acc1);
  if (!first) {
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_loadu_ps(out), s0));
    _mm256_storeu_ps(out + 8, _mm256_add_ps(_mm256_loadu_ps(out + 8), s1));
  } else if (bias != nullptr) {
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_loadu_ps(bias), s0));
    _mm256_storeu_ps(out + 8, _mm256_add_ps(_mm256_loadu_ps(bias + 8), s1));
  } else if (beta == 0.0f) {
    _mm256_storeu_ps(out, s0);
    _mm256_storeu_ps(out + 8, s1);
  } else {
    const __m256 vb = _mm256_set1_ps(beta);
    _mm256_storeu_ps(out, _mm256_fmadd_ps(vb, _mm256_loadu_ps(out), s0));
    _mm256_storeu_ps(out + 8, _mm256_fmadd_ps(vb, _mm256_loadu_ps(out + 8), s1));
  }
}

// One step of p of an R x 16 tile: acc[i] += pa[i] * pb[0, 16), i < R.
template <int R>
__attribute__((always_inline)) inline void step_256(__m256 (&acc)[R][2], const float* pa, const float* pb) {
  const __m256 b0 = _mm256_loadu_ps(pb), b1 = _mm256_loadu_ps(pb + 8);
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) {
    const __m256 x = _mm256_broadcast_ss(pa + i);
    acc[i][0] = _mm256_fmadd_ps(x, b0, acc[i][0]);
    acc[i][1] = _mm256_fmadd_ps(x, b1, acc[i][1]);
  }
}

// The first R rows of a panel times one sliver (tile_256's arguments), as tile_rows_512.
template <int R>
void tile_rows_256(int64_t kc, const float* pa, const float* pb, float* c, int64_t ldc, int64_t rows, int64_t cols,
                   float alpha, float beta, bool first, const float* bias, int64_t ldpb, int64_t a_step,
                   const RowPrefetch (&prefetch)[2]) {
  __m256 acc[R][2];
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  if (prefetch[0].rows == nullptr && prefetch[1].rows == nullptr) {  // nothing to prefetch
    // A packed panel and sliver (what every AVX2 product reads): strides known at compile time,
    // so eight steps share one loop counter and address by displacement. With the strides as
    // variables, each step also advanced two pointers and tested the counter, and the products
    // ran 6-13% slower (charlm's step 5%; stop 49). The same steps in the same order: the same bits.
    if (a_step == kMr256 && ldpb == kNr256) {
#pragma GCC unroll 8
      for (int64_t p = 0; p < kc; ++p) step_256<R>(acc, pa + p * kMr256, pb + p * kNr256);
    } else {
      for (int64_t p = 0; p < kc; ++p, pa += a_step, pb += ldpb) step_256<R>(acc, pa, pb);
    }
  } else {
    Prefetcher prefetcher(prefetch);
    for (int64_t p0 = 0; p0 < kc; p0 += kPrefetchChunk) {
      const int64_t p_end = std::min(kc, p0 + kPrefetchChunk);
      prefetcher.issue_until(p_end);
      for (int64_t p = p0; p < p_end; ++p, pa += a_step, pb += ldpb) step_256<R>(acc, pa, pb);
    }
  }
  if (rows == R && cols == kNr256) {
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i) store_row_256(c + i * ldc, acc[i][0], acc[i][1], alpha, beta, first, bias);
    return;
  }
  alignas(32) float tile[R * kNr256];
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) {
    _mm256_store_ps(tile + i * kNr256, acc[i][0]);
    _mm256_store_ps(tile + i * kNr256 + 8, acc[i][1]);
  }
  store_edge<R, kNr256>(tile, rows, cols, c, ldc, alpha, beta, first, bias);
}

struct Rows256 {
  template <int R>
  static constexpr auto tile = &tile_rows_256<R>;
};
// The 6 x 16 tile kernel.
constexpr auto tile_256 = &panel_tile<Rows256, kMr256>;

// The AVX-512 kernel's in-place reads (packed_gemm explains them): op(B) = B's full slivers when
// the block has at most two MC row blocks and B's rows do not alias in L1; op(A) = A^T's full
// panels unless A's rows alias in L1, or B is read in place too with rows a multiple of 2 KiB apart.
inline bool reads_b_in_place_512(bool trans_b, int64_t m, int64_t ldb) {
  return !trans_b && m <= 2 * kMr512 * kMcPanels && !l1_aliasing(ldb);
}
inline bool reads_a_in_place_512(bool trans_a, int64_t lda, bool b_in_place, int64_t ldb) {
  return trans_a && !l1_aliasing(lda) && !(b_in_place && ldb % 512 == 0);
}

// The packed loops around a register tile kernel (Goto's order): C's columns in blocks of at
// most kNc; for each KC slice, that block's op(B) is packed once when it is B^T (it stays in
// L2/L3; B itself is read in place), then op(A) once per MC rows (in L2; A^T mostly read in place),
// and every (MR, NR) tile of those rows runs over the slice with its A panel (a_step floats
// between its p: MR packed, lda in place) and its B sliver (ldpb floats between its rows: NR
// packed, ldb in place). op(A)'s row sums are taken in the first column block only (each (i, p)
// once).
template <int MR, int NR, typename Tile>
void packed_gemm(Tile tile, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc, double* a_row_sums,
                 const float* bias) {
  constexpr int64_t kMc = MR * kMcPanels;
  const int64_t kc_max = std::min(k, kKc);
  float* packed_a = scratch(0, kMc * kc_max);
  float* packed_b = scratch(1, (std::min(n, kNc) + NR - 1) / NR * NR * kc_max);
  for (int64_t j0 = 0; j0 < n; j0 += kNc) {
    const int64_t nc = std::min(kNc, n - j0);
    const int64_t n_slivers = (nc + NR - 1) / NR;
    const float* b_block = trans_b ? b + j0 * ldb : b + j0;
    double* row_sums = j0 == 0 ? a_row_sums : nullptr;
    for (int64_t p0 = 0; p0 < k; p0 += kKc) {
      const int64_t kc = std::min(kKc, k - p0);
      const bool first = p0 == 0;
      // With the AVX-512 kernel, op(B) = B is read in place for every full sliver when the block has
      // at most two MC row blocks (its KC x NR sliver is NR floats of each of KC rows, ldb apart:
      // for few rows, copying it cost the weight gradients up to a fifth of their time, waiting on
      // B's rows from memory; for many, the packed copy's reuse wins: 1024^3 ran 10% slower in
      // place), unless its rows alias in L1 (l1_aliasing); only a partial last sliver is packed
      // (zero-padded). Not with the AVX2 kernel: on a Zen 3 (32 KiB L1, 512 KiB L2), charlm's
      // weight gradients with 128-row blocks (128 x 512 x 768 and 128 x 128 x 768, B's rows 2 KiB
      // and 512 B apart, so a sliver read in place never stays in L1) ran 15-30% faster packed,
      // in a training step and alone, the packed 16 KiB sliver staying in L1 for all the block's tiles.
      const int64_t full_slivers = MR == kMr512 && reads_b_in_place_512(trans_b, m, ldb) ? nc / NR : 0;
      if (full_slivers < n_slivers)
        pack_b<NR>(trans_b, b_block + full_slivers * NR, ldb, nc - full_slivers * NR, p0, kc, packed_b);
      // With the AVX-512 kernel, op(A) = A^T is read in place in every full panel (for each p its
      // 14 values are contiguous, lda apart over p): packing it waited
      // on memory, a tenth to a fifth of the weight gradients' time. Not when B's slivers are read
      // in place too with rows a multiple of 2 KiB apart: then B's rows share a few L1 sets and the
      // packed copy of A is faster; not with the AVX2 kernel, whose 6-row panels use 24 bytes of
      // each line they touch (9% slower in place); nor when A's own rows alias in L1
      // (l1_aliasing). Only a partial last panel is packed
      // (zero-padded); the in-place panels' row sums are taken right after their tile with the
      // first sliver (copy_and_sum_panel without the copy: the same adds, in p order).
      const bool a_in_place = MR == kMr512 && reads_a_in_place_512(trans_a, lda, full_slivers > 0, ldb);
      const int64_t mc_rows = MR * heed_sgemm_mc_panels(MR, (n_slivers - full_slivers) * NR * kc, nc, kc);
      for (int64_t i0 = 0; i0 < m; i0 += mc_rows) {
        const int64_t mc = std::min(mc_rows, m - i0);
        const int64_t m_panels = (mc + MR - 1) / MR;
        const int64_t in_place_panels = a_in_place ? mc / MR : 0, packed_rows = mc - in_place_panels * MR;
        if (packed_rows > 0) {
          const int64_t r0 = i0 + in_place_panels * MR;
          pack_a<MR>(trans_a, trans_a ? a + r0 : a + r0 * lda, lda, packed_rows, p0, kc, packed_a,
                     row_sums != nullptr ? row_sums + r0 : nullptr);
        }
        for (int64_t s = 0; s < n_slivers; ++s) {
          const bool in_place = s < full_slivers;
          const float* pb = in_place ? b_block + p0 * ldb + s * NR : packed_b + (s - full_slivers) * NR * kc;
          const int64_t ldpb = in_place ? ldb : NR;
          const int64_t cols = std::min<int64_t>(NR, nc - s * NR);
          const float* sliver_bias = bias != nullptr ? bias + j0 + s * NR : nullptr;
          for (int64_t r = 0; r < m_panels; ++r) {
            const int64_t rows = std::min<int64_t>(MR, mc - r * MR);
            const bool panel_in_place = r < in_place_panels;
            const float* pa = panel_in_place ? a + p0 * lda + i0 + r * MR : packed_a + (r - in_place_panels) * MR * kc;
            // While a tile runs it brings into L1 what a later tile will read from memory: its
            // share (1 / m_panels of the rows) of the next in-place sliver of B (then the next
            // sliver's first tile finds it in L1/L2 instead of waiting on rows ldb apart, which
            // the hardware prefetchers do not follow), and with the first sliver, the next in-place
            // panel of A^T (each panel's first tile waits on A's rows, lda apart, the same way).
            RowPrefetch prefetch[2];
            if (in_place && s + 1 < full_slivers) {
              const int64_t share = (kc + m_panels - 1) / m_panels, p_lo = r * share;
              if (p_lo < kc) {
                const int64_t count = std::min(share, kc - p_lo);
                prefetch[0] = {pb + NR + p_lo * ldb, ldb, count, kc / count, NR};
              }
            }
            if (s == 0 && r + 1 < in_place_panels) prefetch[1] = {pa + MR, lda, kc, 1, MR};
            tile(kc, pa, pb, c + (i0 + r * MR) * ldc + j0 + s * NR, ldc, rows, cols, alpha, beta, first, sliver_bias,
                 ldpb, panel_in_place ? lda : MR, prefetch);
            if (panel_in_place && s == 0 && row_sums != nullptr)
              copy_and_sum_panel<MR>(pa, lda, kc, nullptr, row_sums + i0 + r * MR);
          }
        }
      }
    }
  }
}

// ---- one product on a team of threads ----------------------------------------------------

// Hands out the units [0, total) of one KC slice: each thread owns a contiguous share (the same
// share in every slice, so the rows or columns of C it adds to stay in its own cache from slice
// to slice) and claims chunks from its front, a quarter of what is left at a time (at least
// min_chunk); a thread whose share is done takes chunks from the back of another's. A thread
// that stalls (another process on its core) then holds up the rest by one chunk at most.
class SharedRanges {
 public:
  // Call once per slice before any claim, from one thread; `threads` is the team's size.
  void reset(int64_t total, int64_t min_chunk, int threads) {
    threads_ = std::max(threads, 1);
    min_chunk_ = std::max<int64_t>(min_chunk, 1);
    for (int t = 0; t < threads_; ++t)
      range_[t].store(pack(total * t / threads_, total * (t + 1) / threads_), std::memory_order_relaxed);
  }
  bool claim(int me, int64_t* begin, int64_t* end) {
    if (take(me, /*from_back=*/false, begin, end)) return true;
    for (int step = 1; step < threads_; ++step)
      if (take((me + step) % threads_, /*from_back=*/true, begin, end)) return true;
    return false;
  }
  static constexpr int kMaxThreads = 64;

 private:
  static uint64_t pack(int64_t lo, int64_t hi) { return static_cast<uint64_t>(lo) << 32 | static_cast<uint64_t>(hi); }
  bool take(int owner, bool from_back, int64_t* begin, int64_t* end) {
    std::atomic<uint64_t>& range = range_[owner];
    uint64_t now = range.load(std::memory_order_relaxed), next = 0;
    int64_t lo = 0, hi = 0, size = 0;
    do {
      lo = static_cast<int64_t>(now >> 32);
      hi = static_cast<int64_t>(now & 0xffffffffu);
      if (lo >= hi) return false;
      size = std::min(hi - lo, std::max(min_chunk_, (hi - lo) / 4));
      next = from_back ? pack(lo, hi - size) : pack(lo + size, hi);
    } while (!range.compare_exchange_weak(now, next, std::memory_order_relaxed));
    *begin = from_back ? hi - size : lo;
    *end = from_back ? hi : lo + size;
    return true;
  }
  std::atomic<uint64_t> range_[kMaxThreads];
  int threads_ = 1;
  int64_t min_chunk_ = 1;
};

// Products with at most this many rows (and fewer rows than columns) are shared out by columns:
// op(A)'s KC slice (at most 256 KiB) is packed once for the team and each chunk of B's slivers
// runs every row; the others by rows, sharing op(B)'s slice (charlm's 128 x 512 x 768 weight
// gradient: 22 row panels of 6 to share out by rows, 32 slivers of 16 by columns). Chunks of
// rows hold at least two panels; of columns, one sliver.
constexpr int64_t kColumnsMaxRows = 256;
constexpr int64_t kMinChunkPanels = 2;

// The whole product on `threads` threads (Goto's loops as packed_gemm, every operand packed: no
// in-place reads). Per KC slice, the team first packs the shared operand (each
// thread its share of B's slivers, or of A's panels by columns) into one of two buffers (slices
// alternate, so one barrier per slice orders both the packing and the slices' adds to C), then
// claims chunks of row panels (each packs its own rows of A, MC panels at a time) or of B's
// slivers (each packs its own slivers) from SharedRanges. Every C element's arithmetic is
// packed_gemm's: the same tile kernel, the same KC slices in order, so the bits do not depend on
// the thread count or on which thread ran which chunk. Row sums are taken while A is packed,
// each panel by one thread per slice, slices in order.
template <int MR, int NR, typename Tile>
void shared_gemm(Tile tile, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc, double* a_row_sums,
                 const float* bias, int threads, const SgemmEpilogue& epilogue) {
  constexpr int64_t kMc = MR * kMcPanels;
  const int64_t kc_max = std::min(k, kKc), nc_max = std::min(n, kNc);
  const int64_t m_panels = (m + MR - 1) / MR, max_slivers = (nc_max + NR - 1) / NR;
  const bool by_columns = m <= kColumnsMaxRows && m < n;
  const int64_t shared_floats = (by_columns ? m_panels * MR : max_slivers * NR) * kc_max;
  float* shared = scratch(2, 2 * shared_floats);
  const int64_t n_blocks = (n + kNc - 1) / kNc, n_slices = (k + kKc - 1) / kKc;
  std::unique_ptr<SharedRanges[]> queues(new SharedRanges[static_cast<size_t>(n_blocks * n_slices)]);
  const RowPrefetch no_prefetch[2] = {};
  std::atomic<bool> failed{false};
#pragma omp parallel num_threads(std::min(threads, SharedRanges::kMaxThreads))
  {
    const int team = omp_get_num_threads(), me = omp_get_thread_num();
    float* local = nullptr;  // this thread's packed rows of A (by rows) or slivers of B (by columns)
    try {
      local = by_columns ? scratch(1, max_slivers * NR * kc_max) : scratch(0, kMc * kc_max);
    } catch (...) {
      failed.store(true);
    }
#pragma omp single
    for (int64_t j = 0; j < n_blocks; ++j) {  // the ranges of every slice, shared out among this team
      const int64_t slivers = (std::min(kNc, n - j * kNc) + NR - 1) / NR;
      for (int64_t q = 0; q < n_slices; ++q)
        queues[j * n_slices + q].reset(by_columns ? slivers : m_panels, by_columns ? 1 : kMinChunkPanels, team);
    }                   // (the implied barrier: every range is set, and every thread's buffer allocated or failed)
    int64_t slice = 0;  // KC slices so far, over every column block
    for (int64_t j0 = 0; j0 < n && !failed.load(std::memory_order_relaxed); j0 += kNc) {
      const int64_t nc = std::min(kNc, n - j0), n_slivers = (nc + NR - 1) / NR;
      const float* b_block = trans_b ? b + j0 * ldb : b + j0;
      double* row_sums = j0 == 0 ? a_row_sums : nullptr;
      for (int64_t p0 = 0; p0 < k; p0 += kKc, ++slice) {
        const int64_t kc = std::min(kKc, k - p0);
        const bool first = p0 == 0, last = p0 + kc >= k;
        float* packed = shared + (slice % 2) * shared_floats;
        if (by_columns) {  // this thread's share of A's panels, with their row sums
          const int64_t q0 = m_panels * me / team, q1 = m_panels * (me + 1) / team;
          const int64_t r0 = q0 * MR, rows = std::min(m, q1 * MR) - r0;
          if (rows > 0)
            pack_a<MR>(trans_a, trans_a ? a + r0 : a + r0 * lda, lda, rows, p0, kc, packed + q0 * MR * kc,
                       row_sums != nullptr ? row_sums + r0 : nullptr);
        } else {  // this thread's share of B's slivers
          const int64_t s0 = n_slivers * me / team, s1 = n_slivers * (me + 1) / team;
          const int64_t cols = std::min(nc, s1 * NR) - s0 * NR;
          if (cols > 0)
            pack_b<NR>(trans_b, trans_b ? b_block + s0 * NR * ldb : b_block + s0 * NR, ldb, cols, p0, kc,
                       packed + s0 * NR * kc);
        }
#pragma omp barrier
        SharedRanges& queue = queues[slice];
        int64_t lo = 0, hi = 0;
        while (queue.claim(me, &lo, &hi)) {
          if (by_columns) {  // slivers [lo, hi) for every row
            const int64_t c_lo = lo * NR, cols = std::min(nc, hi * NR) - c_lo;
            pack_b<NR>(trans_b, trans_b ? b_block + c_lo * ldb : b_block + c_lo, ldb, cols, p0, kc, local);
            const int64_t mc_rows = MR * heed_sgemm_mc_panels(MR, (hi - lo) * NR * kc, cols, kc);
            for (int64_t i0 = 0; i0 < m; i0 += mc_rows) {
              const int64_t mc = std::min(mc_rows, m - i0), panels = (mc + MR - 1) / MR;
              for (int64_t s = 0; s < hi - lo; ++s) {
                const int64_t col = c_lo + s * NR, sliver_cols = std::min<int64_t>(NR, nc - col);
                const float* sliver_bias = bias != nullptr ? bias + j0 + col : nullptr;
                for (int64_t r = 0; r < panels; ++r)
                  tile(kc, packed + (i0 / MR + r) * MR * kc, local + s * NR * kc, c + (i0 + r * MR) * ldc + j0 + col,
                       ldc, std::min<int64_t>(MR, mc - r * MR), sliver_cols, alpha, beta, first, sliver_bias, NR, MR,
                       no_prefetch);
              }
            }
            if (last && epilogue.run != nullptr) epilogue.run(epilogue.context, 0, m, j0 + c_lo, cols);
          } else {  // row panels [lo, hi) for every column, MC panels at a time
            const int64_t mc_panels = heed_sgemm_mc_panels(MR, n_slivers * NR * kc, nc, kc);
            for (int64_t q0 = lo; q0 < hi; q0 += mc_panels) {
              const int64_t q1 = std::min(hi, q0 + mc_panels), r0 = q0 * MR, rows = std::min(m, q1 * MR) - r0;
              pack_a<MR>(trans_a, trans_a ? a + r0 : a + r0 * lda, lda, rows, p0, kc, local,
                         row_sums != nullptr ? row_sums + r0 : nullptr);
              for (int64_t s = 0; s < n_slivers; ++s) {
                const int64_t sliver_cols = std::min<int64_t>(NR, nc - s * NR);
                const float* sliver_bias = bias != nullptr ? bias + j0 + s * NR : nullptr;
                for (int64_t r = 0; r < q1 - q0; ++r)
                  tile(kc, local + r * MR * kc, packed + s * NR * kc, c + (r0 + r * MR) * ldc + j0 + s * NR, ldc,
                       std::min<int64_t>(MR, rows - r * MR), sliver_cols, alpha, beta, first, sliver_bias, NR, MR,
                       no_prefetch);
              }
            }
            if (last && epilogue.run != nullptr)
              epilogue.run(epilogue.context, lo * MR, std::min(m, hi * MR) - lo * MR, j0, nc);
          }
        }
      }
    }
  }
  HEED_CHECK(!failed.load(), "gemm", "could not allocate a packing buffer for a {}x{}x{} product on {} threads", m, n,
             k, threads);
}

#endif  // HEED_HAVE_AVX2

}  // namespace

bool heed_sgemm_supported(SgemmKernel kernel) {
#if HEED_HAVE_AVX2
  if (kernel == SgemmKernel::Avx2) return true;
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
#else
  (void)kernel;
  return false;
#endif
}

namespace {
void check_supported(SgemmKernel kernel) {
  HEED_CHECK(heed_sgemm_supported(kernel), "gemm", "heed's {} gemm kernel is not available on this CPU or build",
             kernel == SgemmKernel::Avx512 ? "AVX-512" : "AVX2");
}
}  // namespace

bool heed_sgemm_reads_in_place(SgemmKernel kernel, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t lda,
                               int64_t ldb) {
#if HEED_HAVE_AVX2
  if (kernel != SgemmKernel::Avx512) return false;
  const bool b_in_place = n >= kNr512 && reads_b_in_place_512(trans_b, m, ldb);
  return b_in_place || (m >= kMr512 && reads_a_in_place_512(trans_a, lda, b_in_place, ldb));
#else
  (void)kernel, (void)trans_a, (void)trans_b, (void)m, (void)n, (void)lda, (void)ldb;
  return false;
#endif
}

void heed_sgemm(SgemmKernel kernel, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                double* a_row_sums, const float* bias) {
  HEED_CHECK(a_row_sums == nullptr || trans_a, "gemm", "heed's gemm sums the rows of op(A) = A^T only");
  HEED_CHECK(bias == nullptr || beta == 0.0f, "gemm", "heed's gemm adds a bias with beta = 0 only (got beta {})", beta);
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // C = beta * C (beta 0 writes zeros without reading C), or the bias; no p to sum over
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = bias != nullptr ? bias[j] : beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  check_supported(kernel);
#if HEED_HAVE_AVX2
  if (kernel == SgemmKernel::Avx512)
    packed_gemm<kMr512, kNr512>(tile_512, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, a_row_sums,
                                bias);
  else
    packed_gemm<kMr256, kNr256>(tile_256, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, a_row_sums,
                                bias);
#endif
}

void heed_sgemm_team(SgemmKernel kernel, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                     int threads, double* a_row_sums, const float* bias, const SgemmEpilogue& epilogue) {
  check_supported(kernel);
  HEED_CHECK(a_row_sums == nullptr || trans_a, "gemm", "heed's gemm sums the rows of op(A) = A^T only");
  HEED_CHECK(bias == nullptr || beta == 0.0f, "gemm", "heed's gemm adds a bias with beta = 0 only (got beta {})", beta);
  if (m <= 0 || n <= 0) return;
  if (k <= 0 || threads <= 1) {
    heed_sgemm(kernel, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, a_row_sums, bias);
    if (epilogue.run != nullptr) epilogue.run(epilogue.context, 0, m, 0, n);
    return;
  }
#if HEED_HAVE_AVX2
  if (kernel == SgemmKernel::Avx512)
    shared_gemm<kMr512, kNr512>(tile_512, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, a_row_sums,
                                bias, threads, epilogue);
  else
    shared_gemm<kMr256, kNr256>(tile_256, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, a_row_sums,
                                bias, threads, epilogue);
#endif
}

}  // namespace heed::kernels::cpu
