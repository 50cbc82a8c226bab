// tools/gpu_sdpa_probe.cpp — heed's side of tools/gpu_sdpa_vs_torch.py: reads q, k, v and an
// upstream gradient (raw little-endian float32 files written by the script), runs
// F::scaled_dot_product_attention (the fused flash kernel) forward and backward on a device,
// writes the output and the three gradients back as raw float32, and prints one JSON line
// with the median milliseconds of a forward and of a forward+backward.
//
// Not part of the CMake build: tools/gpu_check.sh compiles it against a heed build tree
// (find_package(heed) with heed_DIR=<build dir>).
//
// Usage: gpu-sdpa-probe DIR B H T D CAUSAL(0|1) DTYPE(float32|float16|bfloat16) STEPS [DEVICE]
#include <heed/heed.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

using namespace heed;

namespace {

std::vector<float> read_floats(const std::string& path, int64_t count) {
  std::vector<float> values(static_cast<size_t>(count));
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(count * sizeof(float)));
  if (!in) throw Error("gpu-sdpa-probe: cannot read " + std::to_string(count) + " floats from " + path);
  return values;
}

void write_floats(const std::string& path, const Tensor& t) {
  const std::vector<float> values = t.detach().to(kCPU).to(kFloat32).contiguous().to_vector<float>();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
  if (!out) throw Error("gpu-sdpa-probe: cannot write " + path);
}

double median_ms(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2] * 1e3;
}

double seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 9) {
    std::fprintf(stderr, "usage: %s DIR B H T D CAUSAL DTYPE STEPS [DEVICE]\n", argv[0]);
    return 2;
  }
  try {
    const std::string dir = argv[1];
    const int64_t B = std::atoll(argv[2]), H = std::atoll(argv[3]), T = std::atoll(argv[4]), D = std::atoll(argv[5]);
    const bool causal = std::string(argv[6]) == "1";
    const std::string dtype_text = argv[7];
    const int steps = std::max(1, std::atoi(argv[8]));
    const Device device = parse_device(argc > 9 ? argv[9] : "cuda");
    if (device.is_cuda() && !cuda::is_available()) {
      std::fprintf(stderr, "gpu-sdpa-probe: no CUDA device: %s\n", cuda::unavailable_reason().c_str());
      return 1;
    }
    const DType dtype = dtype_text == "float16" ? kFloat16 : dtype_text == "bfloat16" ? kBFloat16 : kFloat32;
    const Dims shape = {B, H, T, D};
    const int64_t n = B * H * T * D;
    auto load = [&](const char* name) {
      return from_vector<float>(read_floats(dir + "/" + name + ".bin", n), shape, kFloat32).to(dtype).to(device);
    };
    Tensor q = load("q").requires_grad_(), k = load("k").requires_grad_(), v = load("v").requires_grad_();
    const Tensor upstream = load("dout");
    auto forward = [&] { return F::scaled_dot_product_attention(q, k, v, {}, 0.0, std::nullopt, causal); };

    Tensor out = forward();
    out.backward(upstream);
    write_floats(dir + "/out.bin", out);
    write_floats(dir + "/dq.bin", q.grad());
    write_floats(dir + "/dk.bin", k.grad());
    write_floats(dir + "/dv.bin", v.grad());

    std::vector<double> forward_s, step_s;
    for (int i = 0; i < steps + 2; ++i) {  // two warm-up rounds
      cuda::synchronize();
      const double t0 = seconds();
      {
        NoGradGuard no_grad;
        const Tensor o = forward();
        cuda::synchronize();
      }
      const double t1 = seconds();
      q.zero_grad();
      k.zero_grad();
      v.zero_grad();
      const double t2 = seconds();
      forward().backward(upstream);
      cuda::synchronize();
      const double t3 = seconds();
      if (i >= 2) {
        forward_s.push_back(t1 - t0);
        step_s.push_back(t3 - t2);
      }
    }
    std::printf(
        "{\"B\": %lld, \"H\": %lld, \"T\": %lld, \"D\": %lld, \"causal\": %s, \"dtype\": \"%s\", "
        "\"forward_ms\": %.4f, \"forward_backward_ms\": %.4f}\n",
        static_cast<long long>(B), static_cast<long long>(H), static_cast<long long>(T), static_cast<long long>(D),
        causal ? "true" : "false", dtype_text.c_str(), median_ms(forward_s), median_ms(step_s));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu-sdpa-probe: %s\n", e.what());
    return 1;
  }
}
