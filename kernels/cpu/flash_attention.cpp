// kernels/cpu/flash_attention.cpp — flash-style scaled dot-product attention on the CPU.
//
// Forward: for each (batch, head, block of kBlockQ queries), an online softmax over blocks of
// kBlockK keys: S = scale * Q K^T, masks, running max m and sum l, acc = acc * e^(m_old - m)
// + P V. Only lse = m + log l per row is stored for backward, never the T x S matrix (except
// P itself where S <= 64, below).
// The float32 tile products run in registers (tile_gemm.h, AVX-512 where the CPU has it) on
// every CPU with AVX2, or through BLAS (flash_attention_tile_products, HEED_ATTENTION_TILES);
// float64 always through BLAS.
// Backward recomputes P = exp(S - lse) block by block: dV += P^T dO, dP = dO V^T,
// dS = P (dP - rowsum(dO * O)), dQ += scale dS K, dK += scale dS^T Q. With at most one key
// block (S <= 64) the caller may pass FlashAttentionArgs::probs: forward then also writes P
// (at most 64 values per query row, like a 64-wide output row) and backward reads it instead of
// recomputing the scores and their exps (keep_probabilities).
// Invariants:
//  * Blocks that causal/window/key-length masks exclude entirely are skipped; inside a block,
//    each group of 32 query rows skips the key columns those masks hide from all its rows
//    (RowGroups; the keep and additive masks are applied element by element).
//  * A fully masked row has l = 0: output 0, lse = -inf, zero gradients.
//  * Work is split by problem shape only (never by thread count), and every accumulation
//    runs in a fixed order, so results are identical for any number of threads:
//    with >= kSinglePassHeads (batch, head) pairs backward runs one pass per pair; with
//    fewer, one pass per key block (dK, dV) and one per query block (dQ).
//  * Dropout masks come from philox_uniform at the element's (b, h, i, j) index, so the
//    composed path with F::dropout draws the same mask.
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "blas_call.h"
#include "cpu_common.h"
#include "cpu_kernels.h"
#include "heed/philox.h"
#include "tile_gemm.h"
#include "vec_math.h"

namespace heed::kernels::cpu {

namespace {

constexpr int64_t kBlockQ = 64;
constexpr int64_t kBlockK = 64;
constexpr int64_t kSinglePassHeads = 8;

// HEED_ATTENTION_TILES=auto|registers|registers-avx2|blas sets the choice at start-up (for
// side-by-side measurements of whole programs); anything else is Auto, said once on stderr.
TileProducts tile_products_from_environment() {
  const char* setting = std::getenv("HEED_ATTENTION_TILES");
  if (!setting || !*setting) return TileProducts::Auto;
  const std::string value = setting;
  if (value == "registers") return TileProducts::Registers;
  if (value == "registers-avx2") return TileProducts::RegistersAvx2;
  if (value == "blas") return TileProducts::Blas;
  if (value != "auto")
    std::fprintf(stderr,
                 "heed: HEED_ATTENTION_TILES=%s is not one of auto, registers, registers-avx2, blas; using auto\n",
                 setting);
  return TileProducts::Auto;
}

// A function-local static: read on first use, never after a setter from another file's
// start-up code.
std::atomic<int>& tile_products_setting() {
  static std::atomic<int> setting{static_cast<int>(tile_products_from_environment())};
  return setting;
}

// exp(in - shift) (and its sum) where shift is at least every in[i], as a row maximum or lse is:
// float through exp_shifted's kNonPositive loops (the same bits, fewer steps).
template <typename T>
inline T exp_below_sum(const T* in, T* out, int64_t n, T shift) {
  if constexpr (std::is_same_v<T, float>)
    return exp_shifted_sum<true>(in, out, n, shift);
  else
    return exp_shifted_sum(in, out, n, shift);
}
template <typename T>
inline void exp_below(const T* in, T* out, int64_t n, T shift) {
  if constexpr (std::is_same_v<T, float>)
    exp_shifted<true>(in, out, n, shift);
  else
    exp_shifted(in, out, n, shift);
}

// The sum over c of x[c] * y[c] in lane_fma_sum's lanes and order (lane k takes c = k mod 8 with
// fused multiply-adds, the tail goes to lane 0, lane_tree adds the lanes): the same bits, with
// float's eight lanes in one ymm register (GCC leaves lane_fma_sum's float loop scalar).
template <typename T>
inline T row_dot(const T* x, const T* y, int64_t n) {
#if HEED_HAVE_AVX2
  if constexpr (std::is_same_v<T, float>) {
    static_assert(kSumLanes == 8);
    __m256 acc = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 8 <= n; c += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + c), _mm256_loadu_ps(y + c), acc);
    float lanes[kSumLanes];
    _mm256_storeu_ps(lanes, acc);
    for (; c < n; ++c) lanes[0] = std::fma(x[c], y[c], lanes[0]);
    return lane_tree(lanes);
  }
#endif
  return lane_fma_sum<T>(n, [&](int64_t c) { return std::pair{x[c], y[c]}; });
}

// out (cols x rows, row-major) = the transpose of src (rows x cols, rows ld apart): 8 x 8 blocks
// through ymm registers (transpose_8x8), the edges one element at a time.
inline void transpose(const float* src, int64_t ld, int64_t rows, int64_t cols, float* out) {
  int64_t r0 = 0;
#if HEED_HAVE_AVX2
  for (; r0 + 8 <= rows; r0 += 8) {
    int64_t c0 = 0;
    for (; c0 + 8 <= cols; c0 += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + (r0 + i) * ld + c0);
      transpose_8x8(r);
      for (int q = 0; q < 8; ++q) _mm256_storeu_ps(out + (c0 + q) * rows + r0, r[q]);
    }
    for (; c0 < cols; ++c0)
      for (int64_t i = r0; i < r0 + 8; ++i) out[c0 * rows + i] = src[i * ld + c0];
  }
#endif
  for (; r0 < rows; ++r0)
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r0] = src[r0 * ld + c];
}

// One tile product, BLAS conventions (row-major, op(A) m x k, op(B) k x n). With register
// tiles (float32), A or A^T is read through its strides and B is read row-major; B^T operands
// (key and value blocks) go through TransposedOperand below. float64 (the reference precision)
// always goes to BLAS.
template <typename T>
void gemm(TileProducts products, bool trans_a, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    if (products != TileProducts::Blas) {
      const int64_t a_row = trans_a ? 1 : lda, a_col = trans_a ? lda : 1;
      const bool avx512 = products == TileProducts::Registers && tile_gemm_has_avx512();
      return tile_gemm(m, n, k, alpha, a, a_row, a_col, b, ldb, beta, c, ldc, avx512);
    }
  }
  blas_gemm<T>(trans_a, false, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// The B^T operand of C = alpha A B^T + beta C, where B (n x k, rows ldb apart) is a key or value
// block: register tiles need it transposed, which is done once here (8 x 8 blocks in ymm
// registers: element by element it cost as much as the product) into `scratch`, so that the
// row groups of a masked tile can each multiply by their own range of its columns.
template <typename T>
class TransposedOperand {
 public:
  TransposedOperand(TileProducts products, const T* b, int64_t ldb, int64_t n, int64_t k, std::vector<T>& scratch)
      : products_(products), b_(b), ldb_(ldb), n_(n), k_(k) {
    if constexpr (std::is_same_v<T, float>) {
      if (products != TileProducts::Blas) {
        scratch.resize(static_cast<size_t>(k * n));
        transpose(b, ldb, n, k, scratch.data());  // bt(p, j) = b[j * ldb + p]
        bt_ = scratch.data();
      }
    }
  }
  // C[:, c_lo:c_hi] (m rows, ldc apart) = alpha A (m x k, lda) B[c_lo:c_hi, :]^T + beta C[:, c_lo:c_hi].
  void product(int64_t m, int64_t c_lo, int64_t c_hi, T alpha, const T* a, int64_t lda, T beta, T* c,
               int64_t ldc) const {
    if (c_hi <= c_lo) return;
    if (bt_ != nullptr)
      return gemm<T>(products_, false, m, c_hi - c_lo, k_, alpha, a, lda, bt_ + c_lo, n_, beta, c + c_lo, ldc);
    blas_gemm<T>(false, true, m, c_hi - c_lo, k_, alpha, a, lda, b_ + c_lo * ldb_, ldb_, beta, c + c_lo, ldc);
  }

 private:
  TileProducts products_;
  const T* b_;
  int64_t ldb_, n_, k_;
  const T* bt_ = nullptr;
};

// Row groups of one (query block, key block) tile: rows [r0, r1) of the tile see at most its
// columns [c_lo, c_hi) (all relative to the tile). A tile is one group with every column unless
// the causal, window or key-length masks hide some columns from some of its rows; then it is
// split into groups of kGroupRows rows, each with the columns key_range gives its rows, so the
// causal diagonal tiles skip the six 16 x 16 blocks above their four-step staircase (of the
// causal products at T = 64, 62.5% of a full tile's instead of 75% with 32-row groups; 56%
// instead of 62.5% at T = 128). Skipped products are exactly the ones whose probabilities are 0:
// the products' sums only lose terms that add +-0 (each element accumulates from +0 with fused
// multiply-adds). The softmax sums see the same values, in the same lanes where every group's
// c_lo is 0 and its c_hi a multiple of 8 or the whole tile (the causal tiles at T = S = 64, 128,
// ...: the same bits as before groups); elsewhere (windows, ragged lengths) they add them in
// other lanes: the same accuracy, other roundings. Groups depend on the problem's shape and
// key lengths only, never on the thread count.
constexpr int64_t kGroupRows = 16;
struct RowGroup {
  int64_t r0, r1, c_lo, c_hi;
};
struct RowGroups {
  RowGroup group[kBlockQ / kGroupRows];
  int64_t count = 0;
  bool masked = false;  // whether mask_tile must run on the tile (Problem::tile_needs_mask)
  const RowGroup* begin() const { return group; }
  const RowGroup* end() const { return group + count; }
  // The rows [r_lo, r_hi) whose groups can see any of the columns [c0, c1) (r_lo == r_hi: none).
  void rows_seeing(int64_t c0, int64_t c1, int64_t* r_lo, int64_t* r_hi) const {
    *r_lo = *r_hi = 0;
    for (const RowGroup& x : *this) {
      if (x.c_lo >= c1 || x.c_hi <= c0 || x.c_hi <= x.c_lo) continue;
      if (*r_lo == *r_hi) *r_lo = x.r0;
      *r_hi = x.r1;
    }
  }
};

// For each row group: tile[r0:r1, c_lo:c_hi] = alpha A[r0:r1, :] B[c_lo:c_hi, :]^T, A's rows lda
// apart, the tile kBlockK wide (its other columns are left as they are).
template <typename T>
void group_products(const RowGroups& groups, const TransposedOperand<T>& b, T alpha, const T* a, int64_t lda, T* tile) {
  for (const RowGroup& x : groups)
    b.product(x.r1 - x.r0, x.c_lo, x.c_hi, alpha, a + x.r0 * lda, lda, T(0), tile + x.r0 * kBlockK, kBlockK);
}

int64_t view_offset(const StridedView& v, int64_t b, int64_t h, int64_t i, int64_t j) {
  return b * v.strides[0] + h * v.strides[1] + i * v.strides[2] + j * v.strides[3];
}

// The geometry and masks of one problem, shared by forward and backward.
template <typename T>
struct Problem {
  const FlashAttentionArgs& a;
  int64_t B, H, T_, S, D, Dv, shift;  // shift = S - T: query i sits at key position i + shift
  bool has_keep, has_additive;
  TileProducts products;  // float32 tile products in registers (tile_gemm.h) or through BLAS (never Auto)
  AttentionLayout q, k, v, o, go, gq, gk, gv;
  explicit Problem(const FlashAttentionArgs& args)
      : a(args),
        B(args.batch),
        H(args.heads),
        T_(args.queries),
        S(args.keys),
        D(args.head_dim),
        Dv(args.value_dim),
        shift(args.keys - args.queries),
        has_keep(args.keep.data != nullptr),
        has_additive(args.additive.data != nullptr),
        products(flash_attention_tile_products()),
        q(resolve(args.q_layout, T_, D)),
        k(resolve(args.k_layout, S, D)),
        v(resolve(args.v_layout, S, Dv)),
        o(resolve(args.out_layout, T_, Dv)),
        go(resolve(args.grad_out_layout, T_, Dv)),
        gq(resolve(args.grad_q_layout, T_, D)),
        gk(resolve(args.grad_k_layout, S, D)),
        gv(resolve(args.grad_v_layout, S, Dv)) {}

  AttentionLayout resolve(const AttentionLayout& l, int64_t len, int64_t dim) const {
    if (l.batch == 0 && l.head == 0 && l.seq == 0) return {H * len * dim, len * dim, dim};
    return l;
  }
  static int64_t at(const AttentionLayout& l, int64_t b, int64_t h, int64_t i) {
    return b * l.batch + h * l.head + i * l.seq;
  }

  int64_t key_limit(int64_t b) const { return a.key_lengths ? std::min(S, a.key_lengths[b]) : S; }

  // Key range [lo, hi) that queries [i0, i1) may see at all (for block skipping).
  void key_range(int64_t b, int64_t i0, int64_t i1, int64_t* lo, int64_t* hi) const {
    *lo = 0;
    *hi = key_limit(b);
    if (a.causal) *hi = std::min(*hi, i1 - 1 + shift + 1);
    if (a.window >= 0) {
      *lo = std::max<int64_t>(0, i0 + shift - a.window);
      *hi = std::min(*hi, i1 - 1 + shift + a.window + 1);
    }
    if (*hi < *lo) *hi = *lo;
  }

  // Whether element-wise masking is needed inside the tile [i0,i1) x [j0,j1).
  bool tile_needs_mask(int64_t b, int64_t i0, int64_t i1, int64_t j0, int64_t j1) const {
    if (has_keep || has_additive) return true;
    if (j1 > key_limit(b)) return true;
    if (a.causal && j1 - 1 > i0 + shift) return true;
    if (a.window >= 0 && (j0 < i1 - 1 + shift - a.window || j1 - 1 > i0 + shift + a.window)) return true;
    return false;
  }

  // The row groups of the tile [i0, i1) x [j0, j1) (RowGroups): one with every column when no
  // mask applies inside it, else groups of kGroupRows rows with the columns key_range gives them.
  RowGroups row_groups(int64_t b, int64_t i0, int64_t i1, int64_t j0, int64_t j1) const {
    RowGroups out;
    out.masked = tile_needs_mask(b, i0, i1, j0, j1);
    if (!out.masked) {
      out.group[out.count++] = {0, i1 - i0, 0, j1 - j0};
      return out;
    }
    bool every_column = true;
    for (int64_t r0 = 0; r0 < i1 - i0; r0 += kGroupRows) {
      const int64_t r1 = std::min(i1 - i0, r0 + kGroupRows);
      int64_t lo, hi;
      key_range(b, i0 + r0, i0 + r1, &lo, &hi);
      const int64_t c_lo = std::clamp(lo, j0, j1) - j0, c_hi = std::max(c_lo, std::clamp(hi, j0, j1) - j0);
      out.group[out.count++] = {r0, r1, c_lo, c_hi};
      every_column = every_column && c_lo == 0 && c_hi == j1 - j0;
    }
    if (every_column) {  // masked element by element only (keep, additive): one group
      out.count = 1;
      out.group[0] = {0, i1 - i0, 0, j1 - j0};
    }
    return out;
  }

  // Applies masks and the additive bias to a scores tile (rows x cols, ld = ldS).
  void mask_tile(T* s, int64_t ld, int64_t b, int64_t h, int64_t i0, int64_t i1, int64_t j0, int64_t j1) const {
    const int64_t limit = key_limit(b);
    const T neg_inf = -std::numeric_limits<T>::infinity();
    if (!has_keep && !has_additive) {  // the position masks only: each row sees one run of keys
      for (int64_t i = i0; i < i1; ++i) {
        T* row = s + (i - i0) * ld;
        const int64_t pos = i + shift;
        int64_t lo = j0, hi = std::min(j1, limit);
        if (a.causal) hi = std::min(hi, pos + 1);
        if (a.window >= 0) {
          lo = std::max(lo, pos - a.window);
          hi = std::min(hi, pos + a.window + 1);
        }
        lo = std::min(lo, j1);
        hi = std::clamp(hi, lo, j1);  // keys [lo, hi) are visible, j0 <= lo <= hi <= j1
        std::fill(row, row + (lo - j0), neg_inf);
        std::fill(row + (hi - j0), row + (j1 - j0), neg_inf);
      }
      return;
    }
    for (int64_t i = i0; i < i1; ++i) {
      T* row = s + (i - i0) * ld;
      const int64_t pos = i + shift;
      for (int64_t j = j0; j < j1; ++j) {
        bool keep = j < limit;
        if (a.causal) keep = keep && j <= pos;
        if (a.window >= 0) keep = keep && j >= pos - a.window && j <= pos + a.window;
        if (keep && has_keep) keep = *(static_cast<const bool*>(a.keep.data) + view_offset(a.keep, b, h, i, j));
        if (!keep) {
          row[j - j0] = neg_inf;
        } else if (has_additive) {
          row[j - j0] += *(static_cast<const T*>(a.additive.data) + view_offset(a.additive, b, h, i, j));
        }
      }
    }
  }

  // Multiplies a tile of probabilities by the dropout keep mask / (1 - p).
  void dropout_tile(T* p, int64_t ld, int64_t b, int64_t h, int64_t i0, int64_t i1, int64_t j0, int64_t j1) const {
    const float threshold = static_cast<float>(a.dropout_p);
    const T scale = static_cast<T>(1.0 / (1.0 - a.dropout_p));
    float u[kBlockK];
    for (int64_t i = i0; i < i1; ++i) {
      const uint64_t base = a.dropout_state.offset + static_cast<uint64_t>(((b * H + h) * T_ + i) * S);
      philox_uniform_fill(a.dropout_state.seed, base + static_cast<uint64_t>(j0), j1 - j0, u);
      T* row = p + (i - i0) * ld;
      for (int64_t j = j0; j < j1; ++j) row[j - j0] = u[j - j0] >= threshold ? row[j - j0] * scale : T(0);
    }
  }
};

// Writes the rows of P = softmax(scores) that backward reads instead of recomputing them
// (FlashAttentionArgs::probs), for a problem with a single key block [j0, j1) (so l is final
// after it): row r of `kept` (S wide) is exps * (1 / l) over its group's columns, the inverse
// the output row is scaled by, and 0 on every other column (as backward_tile's recomputed P).
template <typename T>
void keep_probabilities(const RowGroups& groups, const T* exps, const T* l, int64_t j0, int64_t S, T* kept) {
  for (const RowGroup& x : groups)
    for (int64_t r = x.r0; r < x.r1; ++r) {
      T* out = kept + r * S;
      const T* in = exps + r * kBlockK;
      const T inv = l[r] > T(0) ? T(1) / l[r] : T(0);
      const int64_t c0 = j0 + x.c_lo, c1 = j0 + x.c_hi;
      std::fill(out, out + c0, T(0));
      for (int64_t c = x.c_lo; c < x.c_hi; ++c) out[j0 + c] = in[c] * inv;
      std::fill(out + c1, out + S, T(0));
    }
}

template <typename T>
void forward_typed(const FlashAttentionArgs& args) {
  const Problem<T> pr(args);
  if (!std::is_same_v<T, float> || pr.products == TileProducts::Blas)
    check_openblas_runs_here("flash_attention_forward");
  const T* Q = static_cast<const T*>(args.q);
  const T* K = static_cast<const T*>(args.k);
  const T* V = static_cast<const T*>(args.v);
  T* O = static_cast<T*>(args.out);
  T* LSE = static_cast<T*>(args.lse);
  T* kept = static_cast<T*>(args.probs);  // (B,H,T,S) or null: keep_probabilities below
  if (kept != nullptr && pr.S > kBlockK)
    fail("flash_attention_forward", "keeps probabilities for at most {} keys (one key block), got {} keys", kBlockK,
         pr.S);
  const int64_t q_blocks = (pr.T_ + kBlockQ - 1) / kBlockQ;
  const T scale = static_cast<T>(args.scale);
  const bool dropout = args.dropout_p > 0.0;
  parallel_for(pr.B * pr.H * q_blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> s_tile(static_cast<size_t>(kBlockQ * kBlockK)), p_drop(dropout ? s_tile.size() : 0);
    std::vector<T> acc(static_cast<size_t>(kBlockQ * pr.Dv)), m(kBlockQ), l(kBlockQ), b_transposed;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / q_blocks, qb = task % q_blocks, b = bh / pr.H, h = bh % pr.H;
      const int64_t i0 = qb * kBlockQ, i1 = std::min(pr.T_, i0 + kBlockQ), rows = i1 - i0;
      const T* q = Q + Problem<T>::at(pr.q, b, h, i0);
      const T* k = K + Problem<T>::at(pr.k, b, h, 0);
      const T* v = V + Problem<T>::at(pr.v, b, h, 0);
      std::fill(acc.begin(), acc.begin() + rows * pr.Dv, T(0));
      std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
      std::fill(l.begin(), l.end(), T(0));
      int64_t lo, hi;
      pr.key_range(b, i0, i1, &lo, &hi);
      T* kept_rows = kept != nullptr ? kept + (bh * pr.T_ + i0) * pr.S : nullptr;  // rows ld S apart
      if (kept_rows != nullptr && hi <= lo)  // no key visible to the block (no key block below)
        std::fill(kept_rows, kept_rows + rows * pr.S, T(0));
      for (int64_t j0 = lo - lo % kBlockK; j0 < hi; j0 += kBlockK) {
        const int64_t j1 = std::min(hi, j0 + kBlockK), cols = j1 - j0;
        // S = scale q k^T for each row group's columns; mask_tile sets every other score to -inf.
        const RowGroups groups = pr.row_groups(b, i0, i1, j0, j1);
        const TransposedOperand<T> keys(pr.products, k + j0 * pr.k.seq, pr.k.seq, cols, pr.D, b_transposed);
        group_products(groups, keys, scale, q, pr.q.seq, s_tile.data());
        if (groups.masked) pr.mask_tile(s_tile.data(), kBlockK, b, h, i0, i1, j0, j1);
        // P over each group's columns (the others are never read), in three passes over its rows
        // (maxima, exps, then the running statistics): each row's steps wait on one another
        // (max, exp, sum, the next row), rows do not, so the passes let rows overlap.
        T block_max[kBlockQ], block_sum[kBlockQ];
        for (const RowGroup& x : groups) {
          const int64_t width = x.c_hi - x.c_lo;
          if (width == 0) continue;  // no column visible to these rows: m, l and acc unchanged
          for (int64_t r = x.r0; r < x.r1; ++r)
            block_max[r] = std::max(m[r], row_max(s_tile.data() + r * kBlockK + x.c_lo, width));
          for (int64_t r = x.r0; r < x.r1; ++r) {
            T* srow = s_tile.data() + r * kBlockK + x.c_lo;
            if (block_max[r] == -std::numeric_limits<T>::infinity()) {  // nothing visible yet
              for (int64_t c = 0; c < width; ++c) srow[c] = T(0);
              continue;
            }
            block_sum[r] = exp_below_sum(srow, srow, width, block_max[r]);
          }
          for (int64_t r = x.r0; r < x.r1; ++r) {
            const T new_max = block_max[r];
            if (new_max == -std::numeric_limits<T>::infinity()) continue;
            if (m[r] == -std::numeric_limits<T>::infinity()) {  // the row's first visible block: acc is 0
              l[r] = block_sum[r];
            } else {
              const T correction = std::exp(m[r] - new_max);
              l[r] = std::fma(l[r], correction, block_sum[r]);  // one rounding, whatever a compiler contracts
              if (correction != T(1)) {
                T* arow = acc.data() + r * pr.Dv;
                for (int64_t c = 0; c < pr.Dv; ++c) arow[c] *= correction;
              }
            }
            m[r] = new_max;
          }
        }
        if (kept_rows != nullptr) keep_probabilities(groups, s_tile.data(), l.data(), j0, pr.S, kept_rows);
        const T* p = s_tile.data();
        if (dropout) {
          std::copy(s_tile.begin(), s_tile.end(), p_drop.begin());
          pr.dropout_tile(p_drop.data(), kBlockK, b, h, i0, i1, j0, j1);
          p = p_drop.data();
        }
        for (const RowGroup& x : groups) {  // acc += P V over the group's columns (P = 0 elsewhere)
          if (x.c_hi > x.c_lo)
            gemm<T>(pr.products, false, x.r1 - x.r0, pr.Dv, x.c_hi - x.c_lo, T(1), p + x.r0 * kBlockK + x.c_lo, kBlockK,
                    v + (j0 + x.c_lo) * pr.v.seq, pr.v.seq, T(1), acc.data() + x.r0 * pr.Dv, pr.Dv);
        }
      }
      for (int64_t r = 0; r < rows; ++r) {
        T* orow = O + Problem<T>::at(pr.o, b, h, i0 + r);
        const T inv = l[r] > T(0) ? T(1) / l[r] : T(0);
        for (int64_t c = 0; c < pr.Dv; ++c) orow[c] = acc[static_cast<size_t>(r * pr.Dv + c)] * inv;
        LSE[bh * pr.T_ + i0 + r] = l[r] > T(0) ? m[r] + std::log(l[r]) : -std::numeric_limits<T>::infinity();
      }
    }
  });
}

// Backward state shared by the tile routine.
template <typename T>
struct BackwardTensors {
  const T *Q, *K, *V, *O, *dO, *LSE;
  T *dQ, *dK, *dV;
  std::vector<T> delta;     // rowsum(dO * O), (B*H*T)
  const T* kept = nullptr;  // forward's P (FlashAttentionArgs::probs, one key block) or null
};

// Scratch of one thread's backward tiles: P, dP / dS, P after dropout, and the transposed key and
// value blocks (TransposedOperand).
template <typename T>
struct TileScratch {
  std::vector<T> p, dp, pd, transposed_k, transposed_v;
  TileScratch() : p(kBlockQ * kBlockK), dp(kBlockQ * kBlockK), pd(kBlockQ * kBlockK) {}
};

// The key and value blocks [j0, j1) of pair bh as TransposedOperands, in s's scratch: the key
// block tasks (one-pass backward, and the dK/dV pass of the two-pass one) make it once per key
// block for every query block's tile (backward_tile); the dQ pass still makes it once per tile.
// With forward's P kept, the scores are not recomputed and the keys are not transposed (an
// empty operand that no product reads).
template <typename T>
struct KeyValueBlock {
  TransposedOperand<T> keys, values;
  KeyValueBlock(const Problem<T>& pr, const BackwardTensors<T>& t, int64_t bh, int64_t j0, int64_t j1,
                TileScratch<T>& s)
      : keys(pr.products, t.K + Problem<T>::at(pr.k, bh / pr.H, bh % pr.H, j0), pr.k.seq,
             t.kept != nullptr ? 0 : j1 - j0, pr.D, s.transposed_k),
        values(pr.products, t.V + Problem<T>::at(pr.v, bh / pr.H, bh % pr.H, j0), pr.v.seq, j1 - j0, pr.Dv,
               s.transposed_v) {}
};

// One (query block, key block) tile of the backward pass, kv being key block [j0, j1). Accumulates
// into dq (rows x D, may be null), dk (cols x D) and dv (cols x Dv) (may be null).
template <typename T>
void backward_tile(const Problem<T>& pr, const BackwardTensors<T>& t, int64_t bh, int64_t i0, int64_t i1, int64_t j0,
                   int64_t j1, const KeyValueBlock<T>& kv, T* dq, T* dk, T* dv, TileScratch<T>& s) {
  const int64_t b = bh / pr.H, h = bh % pr.H, cols = j1 - j0;
  const T scale = static_cast<T>(pr.a.scale);
  const bool dropout = pr.a.dropout_p > 0.0;
  const T* q = t.Q + Problem<T>::at(pr.q, b, h, i0);
  const T* k = t.K + Problem<T>::at(pr.k, b, h, j0);
  const T* dout = t.dO + Problem<T>::at(pr.go, b, h, i0);
  const RowGroups groups = pr.row_groups(b, i0, i1, j0, j1);
  // P over each row group's columns, 0 on the others (rows ldp apart): forward's (kept: the only
  // key block, j0 = 0), or exp(scale q k^T (+ masks) - lse) recomputed into s.p.
  const T* p = s.p.data();
  int64_t ldp = kBlockK;
  if (t.kept != nullptr) {
    p = t.kept + (bh * pr.T_ + i0) * pr.S;
    ldp = pr.S;
  } else {
    group_products(groups, kv.keys, scale, q, pr.q.seq, s.p.data());
    if (groups.masked) pr.mask_tile(s.p.data(), kBlockK, b, h, i0, i1, j0, j1);
    for (const RowGroup& x : groups) {
      for (int64_t r = x.r0; r < x.r1; ++r) {
        T* prow = s.p.data() + r * kBlockK;
        const T lse = t.LSE[bh * pr.T_ + i0 + r];
        std::fill(prow, prow + x.c_lo, T(0));
        std::fill(prow + x.c_hi, prow + cols, T(0));
        if (lse == -std::numeric_limits<T>::infinity()) {
          std::fill(prow + x.c_lo, prow + x.c_hi, T(0));
        } else {
          exp_below(prow + x.c_lo, prow + x.c_lo, x.c_hi - x.c_lo, lse);  // s <= m <= lse
        }
      }
    }
  }
  const T* p_used = p;  // P after dropout, rows ld_used apart
  int64_t ld_used = ldp;
  if (dropout) {
    for (int64_t r = 0; r < i1 - i0; ++r) std::copy(p + r * ldp, p + r * ldp + cols, s.pd.data() + r * kBlockK);
    pr.dropout_tile(s.pd.data(), kBlockK, b, h, i0, i1, j0, j1);
    p_used = s.pd.data();
    ld_used = kBlockK;
  }
  // The products over the tile's rows (dV, dK) run per block of kGroupRows keys when the tile has
  // several row groups, each over the rows that can see it (P and dS are 0 on the others); one
  // block otherwise.
  const int64_t key_step = groups.count > 1 ? kGroupRows : cols;
  const auto for_key_blocks = [&](auto&& product) {
    for (int64_t c0 = 0; c0 < cols; c0 += key_step) {
      const int64_t c1 = std::min(cols, c0 + key_step);
      int64_t r_lo, r_hi;
      groups.rows_seeing(c0, c1, &r_lo, &r_hi);
      if (r_hi > r_lo) product(c0, c1, r_lo, r_hi);
    }
  };
  if (dv)
    for_key_blocks([&](int64_t c0, int64_t c1, int64_t r_lo, int64_t r_hi) {
      gemm<T>(pr.products, true, c1 - c0, pr.Dv, r_hi - r_lo, T(1), p_used + r_lo * ld_used + c0, ld_used,
              dout + r_lo * pr.go.seq, pr.go.seq, T(1), dv + c0 * pr.gv.seq, pr.gv.seq);
    });
  // dP = dO v^T over each row group's columns, 0 on the others (times the dropout mask),
  // dS = P (dP - delta)
  group_products(groups, kv.values, T(1), dout, pr.go.seq, s.dp.data());
  if (dropout) pr.dropout_tile(s.dp.data(), kBlockK, b, h, i0, i1, j0, j1);
  for (const RowGroup& x : groups) {  // dS, and 0 outside the group's columns (as P is)
    for (int64_t r = x.r0; r < x.r1; ++r) {
      const T delta = t.delta[static_cast<size_t>(bh * pr.T_ + i0 + r)];
      T* dprow = s.dp.data() + r * kBlockK;
      const T* prow = p + r * ldp;
      std::fill(dprow, dprow + x.c_lo, T(0));
      for (int64_t c = x.c_lo; c < x.c_hi; ++c) dprow[c] = prow[c] * (dprow[c] - delta);
      std::fill(dprow + x.c_hi, dprow + cols, T(0));
    }
  }
  if (dq)
    for (const RowGroup& x : groups) {  // dQ += scale dS k over the group's columns
      if (x.c_hi > x.c_lo)
        gemm<T>(pr.products, false, x.r1 - x.r0, pr.D, x.c_hi - x.c_lo, scale, s.dp.data() + x.r0 * kBlockK + x.c_lo,
                kBlockK, k + x.c_lo * pr.k.seq, pr.k.seq, T(1), dq + x.r0 * pr.gq.seq, pr.gq.seq);
    }
  if (dk)
    for_key_blocks([&](int64_t c0, int64_t c1, int64_t r_lo, int64_t r_hi) {
      gemm<T>(pr.products, true, c1 - c0, pr.D, r_hi - r_lo, scale, s.dp.data() + r_lo * kBlockK + c0, kBlockK,
              q + r_lo * pr.q.seq, pr.q.seq, T(1), dk + c0 * pr.gk.seq, pr.gk.seq);
    });
}

template <typename T>
void backward_typed(const FlashAttentionArgs& args) {
  const Problem<T> pr(args);
  if (!std::is_same_v<T, float> || pr.products == TileProducts::Blas)
    check_openblas_runs_here("flash_attention_backward");
  BackwardTensors<T> t{static_cast<const T*>(args.q),        static_cast<const T*>(args.k),
                       static_cast<const T*>(args.v),        static_cast<const T*>(args.out),
                       static_cast<const T*>(args.grad_out), static_cast<const T*>(args.lse),
                       static_cast<T*>(args.grad_q),         static_cast<T*>(args.grad_k),
                       static_cast<T*>(args.grad_v),         {},
                       static_cast<const T*>(args.probs)};
  if (t.kept != nullptr && pr.S > kBlockK)
    fail("flash_attention_backward", "reads kept probabilities for at most {} keys (one key block), got {} keys",
         kBlockK, pr.S);
  const int64_t BH = pr.B * pr.H;
  t.delta.resize(static_cast<size_t>(BH * pr.T_));
  parallel_for(BH * pr.T_, 256, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t bh = row / pr.T_, i = row % pr.T_;
      const T* o = t.O + Problem<T>::at(pr.o, bh / pr.H, bh % pr.H, i);
      const T* g = t.dO + Problem<T>::at(pr.go, bh / pr.H, bh % pr.H, i);
      // rowsum(dO * O) in lanes (row_dot): one running sum was a chain of dependent adds.
      t.delta[static_cast<size_t>(row)] = row_dot(o, g, pr.Dv);
    }
  });
  // Zeroes rows [r0, r1) of pair bh's block of a gradient (the buffers may be strided views of a
  // larger tensor): each task zeroes the rows it accumulates into just before its first tile, so
  // they are in cache when the tiles add to them (a separate pass over the three gradients
  // streamed them through memory twice).
  auto zero_rows = [&](T* base, const AttentionLayout& l, int64_t bh, int64_t r0, int64_t r1, int64_t dim) {
    for (int64_t r = r0; r < r1; ++r) {
      T* row = base + Problem<T>::at(l, bh / pr.H, bh % pr.H, r);
      std::fill(row, row + dim, T(0));
    }
  };
  const int64_t q_blocks = (pr.T_ + kBlockQ - 1) / kBlockQ, k_blocks = (pr.S + kBlockK - 1) / kBlockK;

  // Query blocks that can see key block kb, and key blocks a query block can see.
  auto visits = [&](int64_t b, int64_t qb, int64_t kb) {
    const int64_t i0 = qb * kBlockQ, i1 = std::min(pr.T_, i0 + kBlockQ);
    int64_t lo, hi;
    pr.key_range(b, i0, i1, &lo, &hi);
    const int64_t j0 = kb * kBlockK, j1 = std::min(pr.S, j0 + kBlockK);
    return j0 < hi && j1 > lo;
  };

  if (BH >= kSinglePassHeads) {
    // One pass per (batch, head): key blocks outer, query blocks inner, all in order.
    parallel_for(BH, 1, [&](int64_t begin, int64_t end) {
      TileScratch<T> scratch;
      for (int64_t bh = begin; bh < end; ++bh) {
        const int64_t b = bh / pr.H;
        zero_rows(t.dQ, pr.gq, bh, 0, pr.T_, pr.D);
        for (int64_t kb = 0; kb < k_blocks; ++kb) {
          const int64_t j0 = kb * kBlockK, j1 = std::min(pr.S, j0 + kBlockK);
          zero_rows(t.dK, pr.gk, bh, j0, j1, pr.D);
          zero_rows(t.dV, pr.gv, bh, j0, j1, pr.Dv);
          std::optional<KeyValueBlock<T>> kv;  // transposed at the block's first visit
          for (int64_t qb = 0; qb < q_blocks; ++qb) {
            if (!visits(b, qb, kb)) continue;
            if (!kv) kv.emplace(pr, t, bh, j0, j1, scratch);
            const int64_t i0 = qb * kBlockQ, i1 = std::min(pr.T_, i0 + kBlockQ);
            backward_tile(pr, t, bh, i0, i1, j0, j1, *kv, t.dQ + Problem<T>::at(pr.gq, b, bh % pr.H, i0),
                          t.dK + Problem<T>::at(pr.gk, b, bh % pr.H, j0),
                          t.dV + Problem<T>::at(pr.gv, b, bh % pr.H, j0), scratch);
          }
        }
      }
    });
    return;
  }
  // Few (batch, head) pairs: parallel over key blocks for dK/dV, then over query blocks for dQ.
  parallel_for(BH * k_blocks, 1, [&](int64_t begin, int64_t end) {
    TileScratch<T> scratch;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / k_blocks, kb = task % k_blocks, b = bh / pr.H;
      const int64_t j0 = kb * kBlockK, j1 = std::min(pr.S, j0 + kBlockK);
      zero_rows(t.dK, pr.gk, bh, j0, j1, pr.D);
      zero_rows(t.dV, pr.gv, bh, j0, j1, pr.Dv);
      std::optional<KeyValueBlock<T>> kv;
      for (int64_t qb = 0; qb < q_blocks; ++qb) {
        if (!visits(b, qb, kb)) continue;
        if (!kv) kv.emplace(pr, t, bh, j0, j1, scratch);
        const int64_t i0 = qb * kBlockQ, i1 = std::min(pr.T_, i0 + kBlockQ);
        backward_tile(pr, t, bh, i0, i1, j0, j1, *kv, static_cast<T*>(nullptr),
                      t.dK + Problem<T>::at(pr.gk, b, bh % pr.H, j0), t.dV + Problem<T>::at(pr.gv, b, bh % pr.H, j0),
                      scratch);
      }
    }
  });
  parallel_for(BH * q_blocks, 1, [&](int64_t begin, int64_t end) {
    TileScratch<T> scratch;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / q_blocks, qb = task % q_blocks, b = bh / pr.H;
      const int64_t i0 = qb * kBlockQ, i1 = std::min(pr.T_, i0 + kBlockQ);
      zero_rows(t.dQ, pr.gq, bh, i0, i1, pr.D);
      for (int64_t kb = 0; kb < k_blocks; ++kb) {
        if (!visits(b, qb, kb)) continue;
        const int64_t j0 = kb * kBlockK, j1 = std::min(pr.S, j0 + kBlockK);
        const KeyValueBlock<T> kv(pr, t, bh, j0, j1, scratch);
        backward_tile(pr, t, bh, i0, i1, j0, j1, kv, t.dQ + Problem<T>::at(pr.gq, b, bh % pr.H, i0),
                      static_cast<T*>(nullptr), static_cast<T*>(nullptr), scratch);
      }
    }
  });
}

}  // namespace

void set_flash_attention_tile_products(TileProducts choice) { tile_products_setting() = static_cast<int>(choice); }

TileProducts flash_attention_tile_products() {
  const auto choice = static_cast<TileProducts>(tile_products_setting().load());
  if (choice != TileProducts::Auto) return choice;
#if HEED_HAVE_AVX2
  // Registers (the CPU's widest) on every CPU heed's kernels run on: with the key and value
  // blocks transposed through ymm registers they are ahead of every OpenBLAS set at these
  // sizes, its AVX-512 and AVX2 sets included, and far ahead of its generic ones (README,
  // Performance).
  return TileProducts::Registers;
#else
  return TileProducts::Blas;
#endif
}

void flash_attention_forward(const FlashAttentionArgs& args) {
  if (args.dtype == kFloat32) return forward_typed<float>(args);
  if (args.dtype == kFloat64) return forward_typed<double>(args);
  fail("flash_attention_forward", "the CPU kernel has no {} version", dtype_name(args.dtype));
}

void flash_attention_backward(const FlashAttentionArgs& args) {
  if (args.dtype == kFloat32) return backward_typed<float>(args);
  if (args.dtype == kFloat64) return backward_typed<double>(args);
  fail("flash_attention_backward", "the CPU kernel has no {} version", dtype_name(args.dtype));
}

}  // namespace heed::kernels::cpu
