// tests/emulator/test_cuda_emulator.cpp — the CPU emulator of kernels/cuda/emulation checked on
// its own (built only with -DHEED_CUDA_EMULATION=ON, run by tools/ci_cuda_emulation.sh):
// the warp collectives and wmma tiles compute what CUDA defines, the cuBLAS substitute
// accumulates float32 in float32, and each check that is meant to stop a broken kernel does
// stop it (in a forked child, whose abort message is read back).
//
// Invariants: every kernel here is a plain function launched through heed_emu::Launcher, as
// HEED_LAUNCH does for heed's kernels; a death case passes only when the child was killed by
// SIGABRT and its stderr names the fault.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "heed/dtype.h"
#include "kernels/cuda/emulation/cuda_emulation.h"

namespace {

template <typename... Params, typename... Args>
void launch(const char* name, dim3 grid, dim3 block, size_t shared, void (*kernel)(Params...), Args&&... args) {
  heed_emu::Launcher(grid, block, shared, name).bind(kernel)(std::forward<Args>(args)...);
}

template <typename T>
T* device_copy(const std::vector<T>& host) {
  void* p = nullptr;
  REQUIRE(cudaMalloc(&p, host.size() * sizeof(T)) == cudaSuccess);
  REQUIRE(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  return static_cast<T*>(p);
}

template <typename T>
std::vector<T> host_copy(const T* device, size_t n) {
  std::vector<T> host(n);
  REQUIRE(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return host;
}

// Runs `body` in a forked child; returns its stderr when it died of SIGABRT, or a note saying
// how it ended otherwise.
std::string abort_message(const std::function<void()>& body) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::fflush(stderr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    std::signal(SIGABRT, SIG_DFL);  // not doctest's crash handler: the parent reads the abort
    std::freopen("/dev/null", "w", stdout);
    body();
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buffer[512];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof buffer)) > 0) text.append(buffer, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT) return "<the child did not abort>: " + text;
  return text;
}

// ---- kernels ------------------------------------------------------------------------------

void butterfly_sum(const float* in, float* out) {
  const unsigned t = threadIdx.x;
  float v = in[t];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  out[t] = v;
}

void broadcast_lane(const int* in, int* out, int source) {
  out[threadIdx.x] = __shfl_sync(0xffffffffu, in[threadIdx.x], source);
}

// C (16x16 float, row-major) = A (16x16, row- or column-major) B (16x16) + C, one warp.
template <typename T, typename LayoutA, typename LayoutB>
void one_mma(const T* a, const T* b, float* c) {
  namespace wmma = nvcuda::wmma;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LayoutA> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LayoutB> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::load_matrix_sync(fc, c, 16, wmma::mem_row_major);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}

void divergent_warp(float* out) {
  if (threadIdx.x < 16)
    __syncwarp();
  else
    __syncthreads();
  out[threadIdx.x] = 1.0f;
}

void early_exit(float* out) {
  if (threadIdx.x == 40) return;
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

void write_past_end(float* out, int n) { out[n + threadIdx.x] = 1.0f; }

void misaligned_load(const __half* a) {
  nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __half, nvcuda::wmma::row_major> f;
  nvcuda::wmma::load_matrix_sync(f, a + 4, 16);
}

}  // namespace

TEST_CASE("emulator: warp shuffles exchange values between the lanes of a warp") {
  std::vector<float> in(64);
  for (int i = 0; i < 64; ++i) in[i] = static_cast<float>(i);
  float* d_in = device_copy(in);
  float* d_out = device_copy(std::vector<float>(64, 0.0f));
  launch("butterfly_sum", 1, 64, 0, butterfly_sum, d_in, d_out);
  const std::vector<float> out = host_copy(d_out, 64);
  for (int i = 0; i < 64; ++i) {
    CAPTURE(i);
    CHECK(out[i] == (i < 32 ? 496.0f : 1520.0f));  // sum of 0..31, of 32..63: per warp
  }
  std::vector<int> lanes(64);
  for (int i = 0; i < 64; ++i) lanes[i] = 100 + i;
  int* d_lanes = device_copy(lanes);
  int* d_got = device_copy(std::vector<int>(64, 0));
  launch("broadcast_lane", 1, 64, 0, broadcast_lane, d_lanes, d_got, 5);
  const std::vector<int> got = host_copy(d_got, 64);
  for (int i = 0; i < 64; ++i) CHECK(got[i] == (i < 32 ? 105 : 137));
  for (void* p :
       {static_cast<void*>(d_in), static_cast<void*>(d_out), static_cast<void*>(d_lanes), static_cast<void*>(d_got)})
    cudaFree(p);
}

TEST_CASE("emulator: wmma 16x16x16 tiles in every layout, float16 and bfloat16, against a float64 product") {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto run = [&](auto tag, auto layout_a, auto layout_b) {
    using T = decltype(tag);
    using LA = decltype(layout_a);
    using LB = decltype(layout_b);
    constexpr bool row_a = std::is_same_v<LA, nvcuda::wmma::row_major>;
    constexpr bool row_b = std::is_same_v<LB, nvcuda::wmma::row_major>;
    std::vector<T> a(256), b(256);
    std::vector<float> c(256);
    std::vector<double> a_value(256), b_value(256);  // logical (row, column) order
    for (int r = 0; r < 16; ++r)
      for (int k = 0; k < 16; ++k) {
        T va, vb;
        if constexpr (std::is_same_v<T, __half>) {
          va = __float2half(normal(rng));
          vb = __float2half(normal(rng));
        } else {
          va = __float2bfloat16(normal(rng));
          vb = __float2bfloat16(normal(rng));
        }
        a[row_a ? r * 16 + k : k * 16 + r] = va;  // A(r, k)
        b[row_b ? r * 16 + k : k * 16 + r] = vb;  // B(r, k): row r of B is the inner index
        if constexpr (std::is_same_v<T, __half>) {
          a_value[r * 16 + k] = __half2float(va);
          b_value[r * 16 + k] = __half2float(vb);
        } else {
          a_value[r * 16 + k] = __bfloat162float(va);
          b_value[r * 16 + k] = __bfloat162float(vb);
        }
      }
    for (float& v : c) v = normal(rng);
    T* d_a = device_copy(a);
    T* d_b = device_copy(b);
    float* d_c = device_copy(c);
    launch("one_mma", 1, 32, 0, one_mma<T, LA, LB>, d_a, d_b, d_c);
    const std::vector<float> got = host_copy(d_c, 256);
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 16; ++j) {
        double want = c[i * 16 + j];
        for (int k = 0; k < 16; ++k) want += a_value[i * 16 + k] * b_value[k * 16 + j];
        CAPTURE(i);
        CAPTURE(j);
        CHECK(std::abs(got[i * 16 + j] - want) <= 1e-5 * (1.0 + std::abs(want)));
      }
    cudaFree(d_a);
    cudaFree(d_b);
    cudaFree(d_c);
  };
  using nvcuda::wmma::col_major;
  using nvcuda::wmma::row_major;
  run(__half{}, row_major{}, row_major{});
  run(__half{}, row_major{}, col_major{});
  run(__half{}, col_major{}, row_major{});
  run(__nv_bfloat16{}, row_major{}, col_major{});
  run(__nv_bfloat16{}, col_major{}, col_major{});
}

TEST_CASE("emulator: the cuBLAS substitute accumulates float32 GEMMs in float32") {
  // One row (2^24, 1, 1, 1) times ones: float32 accumulation loses each 1 against 2^24, float64
  // keeps them.
  const std::vector<float> a = {16777216.0f, 1.0f, 1.0f, 1.0f}, b = {1.0f, 1.0f, 1.0f, 1.0f};
  const std::vector<double> a64(a.begin(), a.end()), b64(b.begin(), b.end());
  cublasHandle_t handle;
  REQUIRE(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  float* d_a = device_copy(a);
  float* d_b = device_copy(b);
  float* d_c = device_copy(std::vector<float>(1, 0.0f));
  const float one = 1.0f, zero = 0.0f;
  // C (1x1) = A (1x4) B (4x1), column-major: m = n = 1, k = 4.
  REQUIRE(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 4, &one, d_a, CUDA_R_32F, 1, 0, d_b,
                                     CUDA_R_32F, 4, 0, &zero, d_c, CUDA_R_32F, 1, 0, 1, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  CHECK(host_copy(d_c, 1)[0] == 16777216.0f);
  double* d_a64 = device_copy(a64);
  double* d_b64 = device_copy(b64);
  double* d_c64 = device_copy(std::vector<double>(1, 0.0));
  const double one64 = 1.0, zero64 = 0.0;
  REQUIRE(cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 4, &one64, d_a64, CUDA_R_64F, 1, 0, d_b64,
                                     CUDA_R_64F, 4, 0, &zero64, d_c64, CUDA_R_64F, 1, 0, 1, CUBLAS_COMPUTE_64F,
                                     CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  CHECK(host_copy(d_c64, 1)[0] == 16777219.0);
  cublasDestroy(handle);
  for (void* p : {static_cast<void*>(d_a), static_cast<void*>(d_b), static_cast<void*>(d_c), static_cast<void*>(d_a64),
                  static_cast<void*>(d_b64), static_cast<void*>(d_c64)})
    cudaFree(p);
}

TEST_CASE("emulator: a read past the end of a block gives NaN (the guard zone)") {
  float* d = device_copy(std::vector<float>(64, 2.0f));  // 256 bytes: the guard follows at once
  void* whole = nullptr;
  REQUIRE(cudaMalloc(&whole, 64 * sizeof(float)) == cudaSuccess);
  // Copy out as the kernel would read it: the 64 floats after the block are its guard.
  launch(
      "read_guard", 1, 64, 0, +[](const float* src, float* dst) { dst[threadIdx.x] = src[64 + threadIdx.x]; }, d,
      static_cast<float*>(whole));
  for (float v : host_copy(static_cast<float*>(whole), 64)) CHECK(std::isnan(v));
  cudaFree(d);
  cudaFree(whole);
}

TEST_CASE("emulator: broken kernels stop with a message naming the fault") {
  SUBCASE("a warp split between __syncwarp and __syncthreads") {
    const std::string message = abort_message([] {
      void* out = nullptr;
      cudaMalloc(&out, 64 * sizeof(float));
      launch("divergent_warp", 1, 64, 0, divergent_warp, static_cast<float*>(out));
    });
    CHECK(message.find("divergent warp in divergent_warp") != std::string::npos);
    CHECK(message.find("__syncthreads") != std::string::npos);
  }
  SUBCASE("a thread exits while the others wait at __syncthreads") {
    const std::string message = abort_message([] {
      void* out = nullptr;
      cudaMalloc(&out, 64 * sizeof(float));
      launch("early_exit", 1, 64, 0, early_exit, static_cast<float*>(out));
    });
    CHECK(message.find("a thread exited while others of its block wait at __syncthreads") != std::string::npos);
  }
  SUBCASE("a write past the end of a device block") {
    const std::string message = abort_message([] {
      void* out = nullptr;
      cudaMalloc(&out, 100 * sizeof(float));  // rounded up to 512 bytes (128 floats)
      launch("write_past_end", 1, 2, 0, write_past_end, static_cast<float*>(out), 128);
    });
    CHECK(message.find("a write past the end of a 512-byte device block") != std::string::npos);
    CHECK(message.find("during write_past_end") != std::string::npos);
  }
  SUBCASE("a wmma load from a pointer that is not 32-byte aligned") {
    const std::string message = abort_message([] {
      void* a = nullptr;
      cudaMalloc(&a, 512 * sizeof(__half));
      launch("misaligned_load", 1, 32, 0, misaligned_load, static_cast<const __half*>(a));
    });
    CHECK(message.find("wmma::load_matrix_sync") != std::string::npos);
    CHECK(message.find("32-byte aligned") != std::string::npos);
  }
}
