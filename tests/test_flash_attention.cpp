// tests/test_flash_attention.cpp — the fused flash-style attention kernel against the composed
// reference path (forward, gradients, every mask kind, dropout, odd sizes that are not
// multiples of the block size; float32 with the tile products through BLAS and in registers),
// float64 gradient checks, its O(T) memory, and the register tile product (tile_gemm) against
// a float64 product.
#include <doctest/doctest.h>
#include <heed/heed.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/tile_gemm.h"

using namespace heed;

namespace {

double max_diff(const Tensor& a, const Tensor& b) {
  return max(abs(a.detach().to(kFloat64) - b.detach().to(kFloat64))).item<double>();
}

struct Case {
  const char* name;
  int64_t B, H, T, S, D, Dv;
  F::AttentionMask mask;
  double dropout;
};

// Runs flash and composed attention on the same inputs (and the same dropout seed) and
// compares the outputs and all three gradients.
void compare(const Case& c, DType dtype, double tol) {
  CAPTURE(c.name);
  CAPTURE(dtype_name(dtype));
  manual_seed(11);
  Tensor q = randn({c.B, c.H, c.T, c.D}, dtype).requires_grad_();
  Tensor k = randn({c.B, c.H, c.S, c.D}, dtype).requires_grad_();
  Tensor v = randn({c.B, c.H, c.S, c.Dv}, dtype).requires_grad_();
  const Tensor upstream = randn({c.B, c.H, c.T, c.Dv}, dtype);
  manual_seed(5);
  const Tensor fused = F::flash_attention(q, k, v, c.mask, c.dropout);
  fused.backward(upstream);
  const Tensor gq = q.grad(), gk = k.grad(), gv = v.grad();
  q.zero_grad();
  k.zero_grad();
  v.zero_grad();
  manual_seed(5);
  const Tensor composed = F::scaled_dot_product_attention_with_weights(q, k, v, c.mask, c.dropout).output;
  composed.backward(upstream);
  CHECK(max_diff(fused, composed) < tol);
  CHECK(max_diff(gq, q.grad()) < tol);
  CHECK(max_diff(gk, k.grad()) < tol);
  CHECK(max_diff(gv, v.grad()) < tol);
  CHECK(isfinite_all(fused));
  CHECK(isfinite_all(gq));
  CHECK(isfinite_all(gk));
  CHECK(isfinite_all(gv));
}

std::vector<Case> cases() {
  std::vector<Case> out;
  F::AttentionMask none, causal, window, window_only, window_lengths, lengths, padding, keep, additive, combined;
  causal.causal = true;
  window.window = 7;
  window.causal = true;
  window_only.window = 20;  // both sides of each query: the run's upper end is pos + window
  window_lengths.window = 9;
  window_lengths.key_lengths = tensor({130, 50}, kInt64);
  lengths.key_lengths = tensor({0, 45}, kInt64);  // the first batch row has every key masked
  padding.key_padding = gt(rand({2, 90}), scalar_tensor(0.7));
  keep.keep = gt(rand({2, 1, 33, 90}), scalar_tensor(0.85));
  additive.additive = randn({1, 2, 33, 90}, kFloat64);
  combined.causal = true;
  combined.key_lengths = tensor({60, 90}, kInt64);
  combined.additive = randn({33, 90}, kFloat64) * 2.0;
  combined.key_padding = gt(rand({2, 90}), scalar_tensor(0.8));
  out.push_back({"no mask, odd sizes", 2, 3, 70, 77, 16, 19, none, 0.0});
  out.push_back({"causal, T < S (KV cache)", 2, 2, 37, 130, 16, 16, causal, 0.0});
  out.push_back({"causal, T > S", 1, 2, 130, 70, 8, 8, causal, 0.0});
  out.push_back({"local window + causal", 1, 2, 150, 150, 8, 8, window, 0.0});
  out.push_back({"local window, not causal", 1, 2, 150, 150, 8, 8, window_only, 0.0});
  out.push_back({"window + key lengths, T < S (shifted positions)", 2, 2, 37, 130, 8, 8, window_lengths, 0.0});
  out.push_back({"key lengths (one row empty)", 2, 2, 33, 90, 8, 8, lengths, 0.0});
  out.push_back({"key padding", 2, 2, 33, 90, 8, 8, padding, 0.0});
  out.push_back({"sparse boolean mask", 2, 2, 33, 90, 8, 8, keep, 0.0});
  out.push_back({"additive mask", 2, 2, 33, 90, 8, 8, additive, 0.0});
  out.push_back({"everything combined", 2, 2, 33, 90, 8, 8, combined, 0.0});
  out.push_back({"dropout + causal", 2, 3, 70, 70, 16, 16, causal, 0.3});
  // Eight (batch, head) pairs: backward's one pass per pair (the cases above have fewer), with
  // masked tiles split into row groups (the diagonal's 16-row groups, a window's sliding ones).
  out.push_back({"causal, 8 pairs, T not a multiple of 32", 2, 4, 100, 100, 16, 16, causal, 0.0});
  out.push_back({"window + causal, 8 pairs", 2, 4, 150, 150, 8, 8, window, 0.0});
  out.push_back({"dropout + window, 8 pairs", 2, 4, 100, 100, 8, 8, window_only, 0.2});
  // Groups with no visible column and fully masked rows under dropout; a window with T > S
  // (negative shift: the top rows see nothing); a one-row last group in a window tile.
  out.push_back({"dropout + causal, T > S", 1, 2, 130, 70, 8, 8, causal, 0.2});
  out.push_back({"window, T > S", 1, 2, 130, 70, 8, 8, window_only, 0.0});
  out.push_back({"window + causal, T = 97", 1, 2, 97, 97, 8, 8, window, 0.0});
  // Key lengths with T < S in the one-pass backward (groups cut by the length, not the diagonal).
  F::AttentionMask causal_lengths;
  causal_lengths.causal = true;
  causal_lengths.key_lengths = tensor({100, 40}, kInt64);
  out.push_back({"causal + key lengths, 8 pairs, T < S", 2, 4, 70, 100, 8, 8, causal_lengths, 0.0});
  // A boolean mask over several query blocks with causal (the groups' ranges and the element
  // masks together), some of its rows all false (lse = -inf inside a group), with dropout.
  F::AttentionMask keep_causal;
  keep_causal.causal = true;
  Tensor keep_rows = gt(rand({2, 1, 100, 130}), scalar_tensor(0.2));
  keep_rows = mul(keep_rows.to(kFloat64), gt(rand({2, 1, 100, 1}), scalar_tensor(0.1)).to(kFloat64));
  keep_causal.keep = gt(keep_rows, scalar_tensor(0.5));
  out.push_back({"keep + causal, T = 100, S = 130, dropout", 2, 2, 100, 130, 8, 8, keep_causal, 0.1});
  // At most 64 keys (one key block): backward reads forward's kept probabilities (F::flash_attention
  // keeps them on the CPU). charlm's shape (T = S = 64, head dim 32) on the one-pass and the
  // two-pass backward, dropout, an empty row, T > S over several query blocks, element masks.
  F::AttentionMask short_lengths, short_keep;
  short_lengths.key_lengths = tensor({0, 25}, kInt64);
  short_keep.keep = gt(rand({2, 1, 40, 50}), scalar_tensor(0.3));
  short_keep.additive = randn({40, 50}, kFloat64);
  out.push_back({"kept P: causal, T = S = 64, 8 pairs", 2, 4, 64, 64, 32, 32, causal, 0.0});
  out.push_back({"kept P: causal, T = S = 64, 2 pairs, dropout", 1, 2, 64, 64, 16, 16, causal, 0.2});
  out.push_back({"kept P: key lengths (one row empty), S = 40", 2, 2, 33, 40, 8, 8, short_lengths, 0.0});
  out.push_back({"kept P: window, T = 130 > S = 30", 1, 2, 130, 30, 8, 8, window_only, 0.0});
  out.push_back({"kept P: keep + additive, S = 50", 2, 2, 40, 50, 8, 8, short_keep, 0.0});
  return out;
}

}  // namespace

TEST_CASE("flash attention matches the composed path in float64") {
  for (const Case& c : cases()) compare(c, kFloat64, 1e-12);
}

TEST_CASE("flash attention matches the composed path in float32, tile products through BLAS and in registers") {
  using kernels::cpu::TileProducts;
  std::vector<Case> all = cases();
  F::AttentionMask causal;
  causal.causal = true;
  all.push_back({"causal, head dim 64 (full 4 x 16 register blocks)", 1, 2, 130, 130, 64, 64, causal, 0.0});
  all.push_back({"no mask, head dims 32 and 40", 2, 2, 64, 70, 32, 40, F::AttentionMask{}, 0.0});
  // Query/key head dims that are no multiple of 8 (and one under 8): the transposed key blocks'
  // ragged edges in the register path.
  all.push_back({"causal, head dims 19 and 12", 2, 2, 70, 70, 19, 12, causal, 0.0});
  all.push_back({"no mask, head dims 5 and 3, T < S", 1, 2, 33, 90, 5, 3, F::AttentionMask{}, 0.0});
  const auto name = [](TileProducts p) {
    return p == TileProducts::Blas ? "BLAS" : p == TileProducts::RegistersAvx2 ? "AVX2 registers" : "widest registers";
  };
  if (!kernels::cpu::tile_gemm_has_avx512())
    MESSAGE("this CPU has no AVX-512F: 'widest registers' runs the AVX2 blocks, the AVX-512 ones are skipped");
  for (TileProducts products : {TileProducts::Blas, TileProducts::Registers, TileProducts::RegistersAvx2}) {
    CAPTURE(name(products));
    kernels::cpu::set_flash_attention_tile_products(products);
    CHECK(kernels::cpu::flash_attention_tile_products() == products);
    for (const Case& c : all) compare(c, kFloat32, 2e-5);
  }
  kernels::cpu::set_flash_attention_tile_products(TileProducts::Auto);
  // Auto: the widest registers wherever heed's AVX2 kernels are built, whatever OpenBLAS's set.
#if defined(__AVX2__) && defined(__FMA__)
  CHECK(kernels::cpu::flash_attention_tile_products() == TileProducts::Registers);
#else
  CHECK(kernels::cpu::flash_attention_tile_products() == TileProducts::Blas);
#endif
}

TEST_CASE("tile_gemm: C = alpha A B + beta C against a float64 product, A or A^T, ragged sizes") {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<bool> widths = {false};
  if (kernels::cpu::tile_gemm_has_avx512())
    widths.push_back(true);
  else
    MESSAGE("skipped the AVX-512 blocks: this CPU has no AVX-512F");
  for (bool avx512 : widths)
    for (int64_t m : {1, 3, 4, 5, 6, 8, 9, 12, 17, 32, 64})
      for (int64_t n : {1, 7, 8, 16, 23, 32, 40, 64, 72})
        for (int64_t k : {1, 5, 32, 64})
          for (bool trans_a : {false, true})
            for (float beta : {0.0f, 1.0f}) {
              CAPTURE(avx512);
              CAPTURE(m);
              CAPTURE(n);
              CAPTURE(k);
              CAPTURE(trans_a);
              CAPTURE(beta);
              // A stored m x k (lda = k + 3) or k x m (lda = m + 2); B k x n with ldb = n + 5;
              // C m x n with ldc = n + 1, its padding and (beta = 0) its contents NaN.
              const int64_t lda = trans_a ? m + 2 : k + 3, ldb = n + 5, ldc = n + 1;
              std::vector<float> a(static_cast<size_t>((trans_a ? k : m) * lda)), b(static_cast<size_t>(k * ldb));
              std::vector<float> c(static_cast<size_t>(m * ldc), nan);
              for (float& x : a) x = normal(rng);
              for (float& x : b) x = normal(rng);
              if (beta != 0.0f)
                for (int64_t i = 0; i < m; ++i)
                  for (int64_t j = 0; j < n; ++j) c[static_cast<size_t>(i * ldc + j)] = normal(rng);
              const std::vector<float> c_before = c;
              const float alpha = 0.125f;
              const int64_t a_row = trans_a ? 1 : lda, a_col = trans_a ? lda : 1;
              kernels::cpu::tile_gemm(m, n, k, alpha, a.data(), a_row, a_col, b.data(), ldb, beta, c.data(), ldc,
                                      avx512);
              // Every row the same bits as that row alone (one-row blocks): the 6- and 4-row
              // blocks feed each element the same chain of fused multiply-adds.
              std::vector<float> by_row = c_before;
              for (int64_t i = 0; i < m; ++i)
                kernels::cpu::tile_gemm(1, n, k, alpha, a.data() + i * a_row, a_row, a_col, b.data(), ldb, beta,
                                        by_row.data() + i * ldc, ldc, avx512);
              CHECK(std::memcmp(by_row.data(), c.data(), c.size() * sizeof(float)) == 0);
              if (avx512) {  // the same bits as the AVX2 blocks
                std::vector<float> narrow = c_before;
                kernels::cpu::tile_gemm(m, n, k, alpha, a.data(), a_row, a_col, b.data(), ldb, beta, narrow.data(), ldc,
                                        false);
                CHECK(std::memcmp(narrow.data(), c.data(), c.size() * sizeof(float)) == 0);
              }
              int bad = 0;
              for (int64_t i = 0; i < m; ++i) {
                for (int64_t j = 0; j < n; ++j) {
                  double exact = 0, magnitude = 0;
                  for (int64_t p = 0; p < k; ++p) {
                    const double term = static_cast<double>(a[static_cast<size_t>(i * a_row + p * a_col)]) *
                                        static_cast<double>(b[static_cast<size_t>(p * ldb + j)]);
                    exact += term;
                    magnitude += std::abs(term);
                  }
                  const size_t at = static_cast<size_t>(i * ldc + j);
                  const double before = beta == 0.0f ? 0.0 : static_cast<double>(c_before[at]);
                  const double expected = alpha * exact + beta * before;
                  bad += !(std::abs(static_cast<double>(c[at]) - expected) <=
                           1e-6 * (alpha * magnitude + std::abs(before)));
                }
                bad += !std::isnan(c[static_cast<size_t>(i * ldc + n)]);  // padding untouched
              }
              CHECK(bad == 0);
            }
}

TEST_CASE("flash attention on 16-bit inputs computes in float32") {
  F::AttentionMask causal;
  causal.causal = true;
  manual_seed(2);
  const Tensor q = randn({1, 2, 40, 8}), k = randn({1, 2, 40, 8}), v = randn({1, 2, 40, 8});
  const Tensor reference = F::flash_attention(q.to(kBFloat16).to(kFloat32), k.to(kBFloat16).to(kFloat32),
                                              v.to(kBFloat16).to(kFloat32), causal);
  const Tensor half = F::flash_attention(q.to(kBFloat16), k.to(kBFloat16), v.to(kBFloat16), causal);
  CHECK(half.dtype() == kBFloat16);
  CHECK(max_diff(half, reference) < 1e-2);
}

TEST_CASE("flash attention gradients pass gradcheck with masks and dropout") {
  manual_seed(3);
  Tensor q = randn({1, 2, 5, 4}, kFloat64).requires_grad_(), k = randn({1, 2, 7, 4}, kFloat64).requires_grad_(),
         v = randn({1, 2, 7, 3}, kFloat64).requires_grad_();
  F::AttentionMask m;
  m.causal = true;
  m.key_lengths = tensor({6}, kInt64);
  m.additive = randn({1, 2, 5, 7}, kFloat64);
  auto plain =
      gradcheck([&](const std::vector<Tensor>& in) { return F::flash_attention(in[0], in[1], in[2], m); }, {q, k, v});
  CHECK_MESSAGE(plain.passed, plain.message);
  auto with_dropout = gradcheck(
      [&](const std::vector<Tensor>& in) {
        manual_seed(5);  // the same mask for every evaluation
        return F::flash_attention(in[0], in[1], in[2], m, 0.4);
      },
      {q, k, v});
  CHECK_MESSAGE(with_dropout.passed, with_dropout.message);
  // A single head given as (B, L, D).
  Tensor q3 = randn({2, 6, 4}, kFloat64).requires_grad_(), k3 = randn({2, 6, 4}, kFloat64).requires_grad_(),
         v3 = randn({2, 6, 4}, kFloat64).requires_grad_();
  auto three_d = gradcheck(
      [&](const std::vector<Tensor>& in) { return F::flash_attention(in[0], in[1], in[2], {}, 0.0, 0.7, true); },
      {q3, k3, v3});
  CHECK_MESSAGE(three_d.passed, three_d.message);
}

TEST_CASE("flash attention: fully masked rows give zeros and zero gradients") {
  manual_seed(4);
  Tensor q = randn({1, 1, 4, 8}).requires_grad_(), k = randn({1, 1, 6, 8}).requires_grad_(),
         v = randn({1, 1, 6, 8}).requires_grad_();
  F::AttentionMask m;
  m.keep = from_vector(std::vector<bool>{false, false, false, false, false, false}, {1, 1, 1, 6});
  Tensor out = F::flash_attention(q, k, v, m);
  CHECK(max(abs(out)).item<double>() == 0.0);
  out.sum().backward();
  CHECK(max(abs(q.grad())).item<double>() == 0.0);
  CHECK(max(abs(k.grad())).item<double>() == 0.0);
  CHECK(isfinite_all(v.grad()));
}

TEST_CASE("flash attention results do not depend on the thread count") {
  F::AttentionMask causal;
  causal.causal = true;
  for (int64_t heads : {1, 16}) {  // both backward schedules
    manual_seed(6);
    Tensor q = randn({1, heads, 150, 16}).requires_grad_(), k = randn({1, heads, 150, 16}).requires_grad_(),
           v = randn({1, heads, 150, 16}).requires_grad_();
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      Tensor out = F::flash_attention(q, k, v, causal);
      out.sum().backward();
      std::vector<float> all = out.to_vector<float>();
      for (const Tensor* g : {&q, &k, &v}) {
        const std::vector<float> gv = g->grad().to_vector<float>();
        all.insert(all.end(), gv.begin(), gv.end());
      }
      results.push_back(all);
      q.zero_grad();
      k.zero_grad();
      v.zero_grad();
    }
    set_num_threads(2);
    CHECK(results[0] == results[1]);
  }
}

TEST_CASE("flash attention memory is linear in the sequence length") {
  // Causal attention over T = 4096 keys: the composed path would hold several (T, T) float
  // matrices (64 MB each); the fused kernel allocates O(T) plus per-thread tiles.
  F::AttentionMask causal;
  causal.causal = true;
  manual_seed(8);
  const int64_t T = 4096, D = 32;
  Tensor q = randn({1, 1, T, D}).requires_grad_(), k = randn({1, 1, T, D}).requires_grad_(),
         v = randn({1, 1, T, D}).requires_grad_();
  cpu_empty_cache();
  const size_t before = cpu_allocator_stats().bytes_in_use;
  Tensor out = F::flash_attention(q, k, v, causal);
  out.sum().backward();
  const size_t peak_added = cpu_allocator_stats().peak_bytes_in_use - before;
  const size_t one_matrix = static_cast<size_t>(T * T) * sizeof(float);
  CAPTURE(peak_added);
  CHECK(peak_added < one_matrix / 4);
}

namespace {

// The CPU kernel run directly on contiguous (B, H, L, D) operands, forward keeping P or not.
struct KernelRun {
  std::vector<double> out, lse, probs, dq, dk, dv;
};
template <typename T>
KernelRun run_kernel(const kernels::FlashAttentionArgs& base, bool keep, uint64_t seed) {
  const int64_t B = base.batch, H = base.heads, T_ = base.queries, S = base.keys, D = base.head_dim,
                Dv = base.value_dim;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  auto filled = [&](int64_t n) {
    std::vector<T> x(static_cast<size_t>(n));
    for (T& e : x) e = static_cast<T>(normal(rng));
    return x;
  };
  const std::vector<T> q = filled(B * H * T_ * D), k = filled(B * H * S * D), v = filled(B * H * S * Dv),
                       g = filled(B * H * T_ * Dv);
  std::vector<T> out(g.size()), lse(static_cast<size_t>(B * H * T_)), probs(keep ? B * H * T_ * S : 0);
  std::vector<T> dq(q.size()), dk(k.size()), dv(v.size());
  kernels::FlashAttentionArgs a = base;
  a.dtype = std::is_same_v<T, float> ? kFloat32 : kFloat64;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.out = out.data();
  a.lse = lse.data();
  a.probs = keep ? probs.data() : nullptr;
  a.grad_out = g.data();
  a.grad_q = dq.data();
  a.grad_k = dk.data();
  a.grad_v = dv.data();
  kernels::cpu::kernel_table().flash_attention_forward(a);
  kernels::cpu::kernel_table().flash_attention_backward(a);
  auto wide = [](const std::vector<T>& x) { return std::vector<double>(x.begin(), x.end()); };
  return {wide(out), wide(lse), wide(probs), wide(dq), wide(dk), wide(dv)};
}

double worst_gap(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

}  // namespace

TEST_CASE("flash attention backward from forward's kept probabilities matches the recomputing backward") {
  struct KernelCase {
    const char* name;
    int64_t B, H, T, S, D;
    bool causal;
    int64_t window;
    double dropout;
    std::vector<int64_t> key_lengths;
  };
  const std::vector<KernelCase> kernel_cases = {
      {"charlm's shape: causal, T = S = 64, D = 32, 48 pairs", 12, 4, 64, 64, 32, true, -1, 0.0, {}},
      {"causal, 2 pairs (two-pass backward), dropout", 1, 2, 64, 64, 16, true, -1, 0.25, {}},
      {"no mask, T = 70 > S = 45, ragged head dim", 2, 4, 70, 45, 13, false, -1, 0.0, {}},
      {"window 5 with key lengths, one row empty", 2, 4, 40, 40, 8, false, 5, 0.0, {0, 31}},
  };
  for (const KernelCase& c : kernel_cases) {
    CAPTURE(c.name);
    kernels::FlashAttentionArgs a;
    a.batch = c.B;
    a.heads = c.H;
    a.queries = c.T;
    a.keys = c.S;
    a.head_dim = a.value_dim = c.D;
    a.scale = 1.0 / std::sqrt(static_cast<double>(c.D));
    a.causal = c.causal;
    a.window = c.window;
    a.key_lengths = c.key_lengths.empty() ? nullptr : c.key_lengths.data();
    a.dropout_p = c.dropout;
    a.dropout_state = {77, 5};
    for (bool float64 : {true, false}) {
      CAPTURE(float64);
      const KernelRun kept = float64 ? run_kernel<double>(a, true, 9) : run_kernel<float>(a, true, 9);
      const KernelRun recomputed = float64 ? run_kernel<double>(a, false, 9) : run_kernel<float>(a, false, 9);
      // Forward is the same computation either way; only where backward takes P from differs.
      CHECK(kept.out == recomputed.out);
      CHECK(kept.lse == recomputed.lse);
      const double tol = float64 ? 1e-13 : 2e-6;
      CHECK(worst_gap(kept.dq, recomputed.dq) < tol);
      CHECK(worst_gap(kept.dk, recomputed.dk) < tol);
      CHECK(worst_gap(kept.dv, recomputed.dv) < tol);
      // P is a softmax: each row sums to 1 over the keys it sees (0 where it sees none), with 0
      // on every key a mask hides, and exp(score - lse) elsewhere.
      const int64_t S = c.S;
      int64_t rows_checked = 0;
      for (int64_t row = 0; row < c.B * c.H * c.T; ++row) {
        const int64_t b = row / (c.H * c.T), i = row % c.T, pos = i + c.S - c.T;
        const int64_t limit = c.key_lengths.empty() ? S : c.key_lengths[static_cast<size_t>(b)];
        double total = 0;
        bool hidden_zero = true;
        for (int64_t j = 0; j < S; ++j) {
          const double p = kept.probs[static_cast<size_t>(row * S + j)];
          bool visible = j < limit && (!c.causal || j <= pos);
          if (c.window >= 0) visible = visible && j >= pos - c.window && j <= pos + c.window;
          if (!visible) hidden_zero = hidden_zero && p == 0.0;
          total += p;
        }
        CHECK(hidden_zero);
        const bool empty = std::isinf(kept.lse[static_cast<size_t>(row)]);
        CHECK(std::fabs(total - (empty ? 0.0 : 1.0)) < (float64 ? 1e-13 : 1e-5));
        ++rows_checked;
      }
      CHECK(rows_checked == c.B * c.H * c.T);
    }
  }
  // More keys than one block: the kernel refuses to keep probabilities (the caller never asks).
  kernels::FlashAttentionArgs too_many;
  too_many.batch = too_many.heads = 1;
  too_many.queries = 4;
  too_many.keys = kernels::kFlashKeptProbsMaxKeys + 1;
  too_many.head_dim = too_many.value_dim = 8;
  CHECK_THROWS_AS(run_kernel<float>(too_many, true, 1), Error);
}

TEST_CASE("flash attention rejects bad input") {
  const Tensor q = randn({2, 2, 4, 8}), k = randn({2, 2, 5, 8}), v = randn({2, 2, 5, 8});
  CHECK_THROWS_AS(F::flash_attention(q, randn({2, 3, 5, 8}), v), Error);  // head count mismatch
  CHECK_THROWS_AS(F::flash_attention(q, randn({2, 2, 5, 7}), v), Error);  // head dim mismatch
  CHECK_THROWS_AS(F::flash_attention(q, k, randn({2, 2, 6, 8})), Error);  // keys vs values
  CHECK_THROWS_AS(F::flash_attention(q, k, v, {}, 1.0), Error);           // dropout 1
  F::AttentionMask bad_lengths;
  bad_lengths.key_lengths = tensor({3, 9}, kInt64);  // 9 > S
  CHECK_THROWS_AS(F::flash_attention(q, k, v, bad_lengths), Error);
  F::AttentionMask bad_keep;
  bad_keep.keep = ones({3, 4, 5}, kBool);
  CHECK_THROWS_AS(F::flash_attention(q, k, v, bad_keep), Error);
  F::AttentionMask float_keep;
  float_keep.keep = ones({4, 5});
  CHECK_THROWS_AS(F::flash_attention(q, k, v, float_keep), Error);
  try {
    F::flash_attention(q, randn({2, 3, 5, 8}), v);
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("flash_attention") != std::string::npos);
  }
}

TEST_CASE("flash_attention_packed gradients pass gradcheck (backward from forward's kept probabilities)") {
  manual_seed(22);
  const Tensor qkv = randn({2, 7, 3 * 2 * 3}, kFloat64).requires_grad_();  // B 2, T 7, 2 heads of 3
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    auto result = gradcheck(
        [&](const std::vector<Tensor>& in) { return F::flash_attention_packed(in[0], 2, {.causal = causal}); }, {qkv});
    CHECK_MESSAGE(result.passed, result.message);
  }
}

TEST_CASE("flash_attention_packed matches a float64 loop over the packed (B, T, 3C) layout") {
  manual_seed(21);
  const int64_t B = 2, T = 70, H = 3, D = 5, C = H * D;  // T spans two key blocks; D is odd
  const Tensor qkv = randn({B, T, 3 * C}, kFloat64);
  const std::vector<double> x = qkv.to_vector<double>();
  auto at = [&](int64_t b, int64_t t, int64_t col) { return x[static_cast<size_t>((b * T + t) * 3 * C + col)]; };
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    const std::vector<double> got = F::flash_attention_packed(qkv, H, {.causal = causal}).to_vector<double>();
    REQUIRE(got.size() == static_cast<size_t>(B * T * C));
    double worst = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < T; ++i) {
          const int64_t keys = causal ? i + 1 : T;
          std::vector<double> p(static_cast<size_t>(keys));
          double top = -INFINITY, total = 0;
          for (int64_t j = 0; j < keys; ++j) {
            double s = 0;
            for (int64_t d = 0; d < D; ++d) s += at(b, i, h * D + d) * at(b, j, C + h * D + d);
            p[static_cast<size_t>(j)] = s / std::sqrt(static_cast<double>(D));
            top = std::max(top, p[static_cast<size_t>(j)]);
          }
          for (double& v : p) total += (v = std::exp(v - top));
          for (int64_t d = 0; d < D; ++d) {
            double o = 0;
            for (int64_t j = 0; j < keys; ++j) o += p[static_cast<size_t>(j)] / total * at(b, j, 2 * C + h * D + d);
            worst = std::max(worst, std::fabs(o - got[static_cast<size_t>((b * T + i) * C + h * D + d)]));
          }
        }
    CHECK(worst < 1e-12);
  }
}
