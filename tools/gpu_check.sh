#!/usr/bin/env bash
# tools/gpu_check.sh — the checks that need a real GPU, for a machine that has one:
#  1. the CUDA-vs-CPU test suites (ctest -R test_cuda and the op harness test_backend_ops) in a
#     prebuilt heed build directory
#     (configured with the CUDA backend, e.g. -DCMAKE_CUDA_ARCHITECTURES=90 for an H100/H200);
#  2. tools/gpu_sdpa_vs_torch.py: heed's fused attention against PyTorch's
#     scaled_dot_product_attention (output and gradients, and speed), through the small
#     tools/gpu_sdpa_probe.cpp built here against that build directory;
#  3. heed-bench lm and attn on the GPU;
#  4. heed::dist with CUDA tensors: a 1-rank NCCL group and 2 ranks over Gloo staged through
#     the host (tests/test_dist.cpp; a skip counts as a failure here);
# and prints a short summary table last. Exits non-zero when any check fails, and at once,
# with a clear message, when no GPU is present.
#
# Usage: tools/gpu_check.sh BUILD_DIR [--quick]
# Environment: PYTHON (default python3), CTEST (default ctest), CMAKE (default cmake).
set -uo pipefail
cd "$(dirname "$0")/.."
source_dir=$(pwd)

if [ $# -lt 1 ] || [ ! -d "$1" ]; then
  echo "usage: tools/gpu_check.sh BUILD_DIR [--quick]   (BUILD_DIR: a heed build with the CUDA backend)" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
quick=""
[ "${2:-}" = "--quick" ] && quick="--quick"
python=${PYTHON:-python3}
ctest=${CTEST:-ctest}
cmake=${CMAKE:-cmake}

# ---- is there a GPU? ------------------------------------------------------------------------
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU on this machine (nvidia-smi missing or lists no device); nothing to check" >&2
  exit 3
fi
nvidia-smi -L
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  echo "gpu_check: $build_dir is not a heed build directory (no CMakeCache.txt)" >&2
  exit 2
fi
if grep -q "HEED_CUDA_EMULATION:BOOL=ON" "$build_dir/CMakeCache.txt"; then
  echo "gpu_check: $build_dir is the CPU emulation build; give a build with the real CUDA backend" >&2
  exit 2
fi

declare -a summary
status=0

# ---- 1. the CUDA test suite ---------------------------------------------------------------
start=$(date +%s)
log=$(mktemp)
(cd "$build_dir" && "$ctest" --output-on-failure -R '^(test_cuda|test_backend_ops)$') 2>&1 | tee "$log"
tests_rc=${PIPESTATUS[0]}
# The suite skips (and passes) when heed itself sees no device: that is a failure here. ctest
# hides the skip message of a passing test, so ask the binary directly.
if "$build_dir/tests/heed_tests" --source-file='*test_cuda.cpp' --test-case='cuda: availability*' \
  --no-intro=true 2>&1 | tee -a "$log" | grep -q "test_cuda: skipped"; then
  grep "test_cuda: skipped" "$log" >&2
  echo "gpu_check: nvidia-smi sees a GPU but heed does not (see the skip reason above)" >&2
  tests_rc=1
fi
rm -f "$log"
summary+=("$(printf '%-44s %-6s %5ss' 'ctest -R test_cuda, test_backend_ops' "$([ $tests_rc = 0 ] && echo ok || echo FAIL)" $(($(date +%s) - start)))")
[ $tests_rc = 0 ] || status=1

# ---- 2. heed vs torch SDPA ------------------------------------------------------------------
start=$(date +%s)
probe_build="$build_dir/gpu_sdpa_probe"
mkdir -p "$probe_build"
cat >"$probe_build/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(heed_gpu_sdpa_probe CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(heed CONFIG REQUIRED)
add_executable(gpu-sdpa-probe "$source_dir/tools/gpu_sdpa_probe.cpp")
target_link_libraries(gpu-sdpa-probe PRIVATE heed::heed)
CMAKE
sdpa_rc=0
if "$cmake" -S "$probe_build" -B "$probe_build/build" -DCMAKE_BUILD_TYPE=Release -Dheed_DIR="$build_dir" \
  >"$probe_build/configure.log" 2>&1 && "$cmake" --build "$probe_build/build" >"$probe_build/build.log" 2>&1; then
  "$python" tools/gpu_sdpa_vs_torch.py "$probe_build/build/gpu-sdpa-probe" $quick
  sdpa_rc=$?
else
  echo "gpu_check: could not build tools/gpu_sdpa_probe.cpp (logs in $probe_build)" >&2
  tail -20 "$probe_build/configure.log" "$probe_build/build.log" >&2
  sdpa_rc=2
fi
summary+=("$(printf '%-44s %-6s %5ss' 'flash attention vs torch SDPA' \
  "$([ $sdpa_rc = 0 ] && echo ok || echo FAIL)" $(($(date +%s) - start)))")
[ $sdpa_rc = 0 ] || status=1

# ---- 3. the LM training step and causal attention on the GPU (heed-bench) -------------------
bench="$build_dir/tools/heed-bench"
if [ -x "$bench" ]; then
  for args in "lm --vocab 256 --d 256 --heads 4 --layers 4 --seq 128 --batch 16 --steps 10 --warmup 3" \
              "attn --batch 4 --heads 8 --d 512 --seq 1024 --steps 5 --warmup 1"; do
    start=$(date +%s)
    if line=$("$bench" $args --device cuda); then
      echo "$line"
      ms=$(echo "$line" | "$python" -c 'import json,sys; print(json.loads(sys.stdin.read())["ms_per_step"])')
      summary+=("$(printf '%-44s %-6s %5ss  %s ms/step' "heed-bench ${args%% *} (cuda)" ok $(($(date +%s) - start)) "$ms")")
    else
      summary+=("$(printf '%-44s %-6s %5ss' "heed-bench ${args%% *} (cuda)" FAIL $(($(date +%s) - start)))")
      status=1
    fi
  done
fi

# ---- 4. heed::dist with CUDA tensors: a 1-rank NCCL group, 2 ranks over Gloo via the host --
start=$(date +%s)
dist_log=$(mktemp)
"$build_dir/tests/heed_tests" --source-file='*test_dist.cpp' \
  --test-case="dist: CUDA tensors staged*,dist: backend 'nccl' on a GPU*" --no-intro=true 2>&1 | tee "$dist_log"
dist_rc=${PIPESTATUS[0]}
# A skip (no Gloo, no NCCL in this build, or no device seen) is a failure here.
if grep -q "SKIPPED" "$dist_log"; then dist_rc=1; fi
rm -f "$dist_log"
summary+=("$(printf '%-44s %-6s %5ss' 'dist: NCCL 1 rank, Gloo-staged 2 ranks' \
  "$([ $dist_rc = 0 ] && echo ok || echo FAIL)" $(($(date +%s) - start)))")
[ $dist_rc = 0 ] || status=1

echo
echo "gpu_check summary ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1))"
printf '%s\n' "${summary[@]}"
exit $status
