#!/usr/bin/env bash
# tools/ci_cuda_emulation.sh — CI job for the CUDA backend on a machine without a GPU:
# configures and builds heed with -DHEED_CUDA_EMULATION=ON (the .cu kernels compiled as C++
# against the CPU emulator in kernels/cuda/emulation: one fiber per CUDA thread, real
# __syncthreads barriers, poisoned and access-protected device memory), then runs the
# CUDA-vs-CPU suite (ctest -R test_cuda) and prints how long each part took.
#
# The test binary links every tests/test_*.cpp, some of which use example and tool code, so
# examples and tools stay configured; only the heed_tests target (and what it needs) is built.
#
# Usage: tools/ci_cuda_emulation.sh
# Environment: BUILD_DIR (default build/cuda-emu), JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${BUILD_DIR:-build/cuda-emu}
jobs=${JOBS:-2}
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)

start=$(date +%s)
cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DHEED_CUDA_EMULATION=ON \
  -DHEED_BUILD_TESTS=ON
cmake --build "$build_dir" -j "$jobs" --target heed_tests
built=$(date +%s)

# OMP_NUM_THREADS=2 as every registered test; the emulator itself runs on one thread.
ctest --test-dir "$build_dir" --output-on-failure -R '^test_cuda$'
done_at=$(date +%s)

# The skip path: the emulator reporting no device must make every case skip, not fail.
HEED_CUDA_EMULATION_DEVICES=0 "$build_dir/tests/heed_tests" --source-file='*test_cuda.cpp' --no-intro=true \
  | tee "$build_dir/test_cuda_skip.log"
grep -q "test_cuda: skipped" "$build_dir/test_cuda_skip.log" || {
  echo "ci_cuda_emulation: with HEED_CUDA_EMULATION_DEVICES=0 the suite did not report its skip" >&2
  exit 1
}
end=$(date +%s)

echo "ci_cuda_emulation: build $((built - start)) s, test_cuda $((done_at - built)) s," \
  "skip check $((end - done_at)) s, total $((end - start)) s"
