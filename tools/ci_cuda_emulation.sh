#!/usr/bin/env bash
# tools/ci_cuda_emulation.sh — CI job for the CUDA backend on a machine without a GPU:
# configures and builds heed with -DHEED_CUDA_EMULATION=ON (the .cu kernels compiled as C++
# against the CPU emulator in kernels/cuda/emulation: one fiber per CUDA thread, real
# __syncthreads barriers, poisoned and access-protected device memory), then runs the
# CUDA-vs-CPU suite (ctest -R test_cuda) and the CUDA-tensor collectives of heed::dist (2
# ranks over Gloo, staged through the host) and the op harness (test_backend_ops: every
# gradient-check case on the device against the CPU, run from the test binary), after the
# emulator's own tests (tests/emulator), then trains charlm (bf16) and translate (fp16) on the
# emulated device under autocast, and prints how long each part took.
#
# The test binary links only the test files run here (HEED_TEST_FILES: test_cuda,
# test_backend_ops, test_dist, test_module); examples and tools stay configured, and only the
# heed_tests target (and what it needs) is built.
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
  -DHEED_BUILD_TESTS=ON -DHEED_TEST_FILES="cuda;backend_ops;dist;module"
cmake --build "$build_dir" -j "$jobs" --target heed_tests heed_emulator_tests charlm translate
built=$(date +%s)

# The emulator itself: warp collectives, wmma tiles, float32 cuBLAS accumulation, and the checks
# that stop broken kernels (divergent warps, early exits before a barrier, writes past a block).
"$build_dir/tests/heed_emulator_tests" --no-intro=true | tee "$build_dir/test_cuda_emulator.log"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] || { echo "ci_cuda_emulation: the emulator's own tests failed (exit $status)" >&2; exit 1; }

# OMP_NUM_THREADS=2 as every registered test; the emulator itself runs on one thread. Every
# case must run (a skip here means the emulated device was not found: a failure of this job),
# and the assertion count must reach a floor, so a suite that silently stopped checking fails.
OMP_NUM_THREADS=2 "$build_dir/tests/heed_tests" --source-file='*test_cuda.cpp' --no-intro=true \
  | tee "$build_dir/test_cuda.log"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] || { echo "ci_cuda_emulation: test_cuda failed (exit $status)" >&2; exit 1; }
if grep -q "SKIPPED" "$build_dir/test_cuda.log"; then
  echo "ci_cuda_emulation: CUDA cases skipped under the emulator" >&2
  exit 1
fi
assertions=$(grep -oE 'assertions: *[0-9]+' "$build_dir/test_cuda.log" | grep -oE '[0-9]+' | head -1)
min_assertions=${MIN_CUDA_ASSERTIONS:-14000}   # measured 14,268 on 2026-12-02
echo "ci_cuda_emulation: $assertions assertions (floor $min_assertions)"
[ "${assertions:-0}" -ge "$min_assertions" ] || {
  echo "ci_cuda_emulation: only ${assertions:-0} assertions ran, fewer than the floor $min_assertions" >&2
  exit 1
}

# The op harness: every gradient-check case on the emulated device against the CPU.
OMP_NUM_THREADS=2 "$build_dir/tests/heed_tests" --source-file='*test_backend_ops.cpp' --no-intro=true \
  | tee "$build_dir/test_backend_ops.log"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] && ! grep -q "SKIPPED" "$build_dir/test_backend_ops.log" || {
  echo "ci_cuda_emulation: the op harness (test_backend_ops) failed or skipped (exit $status)" >&2
  exit 1
}

# CUDA tensors through heed::dist (2 ranks over Gloo, staged through the host) on the emulator.
OMP_NUM_THREADS=1 "$build_dir/tests/heed_tests" --source-file='*test_dist.cpp' \
  --test-case='dist: CUDA tensors staged*' --no-intro=true | tee "$build_dir/test_dist_cuda.log"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] && ! grep -q "SKIPPED" "$build_dir/test_dist_cuda.log" || {
  echo "ci_cuda_emulation: the CUDA-tensor collectives test failed or skipped (exit $status)" >&2
  exit 1
}

# nn::Module::device() with tensors on two devices (needs a device, so the release suite skips it).
OMP_NUM_THREADS=2 "$build_dir/tests/heed_tests" --source-file='*test_module.cpp' \
  --test-case='Module: device() names two tensors*' --no-intro=true | tee "$build_dir/test_module_cuda.log"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] && ! grep -q "SKIPPED" "$build_dir/test_module_cuda.log" &&
  grep -qE "test cases: *1 \| *1 passed" "$build_dir/test_module_cuda.log" || {
  echo "ci_cuda_emulation: the mixed-device Module::device() case failed, skipped or did not run (exit $status)" >&2
  exit 1
}

# Mixed precision on the device end to end: the two examples train on the emulated GPU under
# autocast (charlm bf16, translate fp16 with loss scaling; heads 64 wide, so attention runs on
# the tensor-core path), evaluate, sample / decode, and report finite losses.
emu_out="$build_dir/amp_examples"
"$build_dir/examples/charlm" --device cuda --amp bf16 --iters 4 --warmup 1 --eval-every 2 --eval-batches 1 \
  --final-eval-batches 1 --sample-tokens 8 --d-model 128 --heads 2 --layers 1 --block 32 --batch 4 \
  --out-dir "$emu_out/charlm" | tee "$build_dir/charlm_cuda_bf16.log"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] && grep -qE "final validation loss [0-9]+\.[0-9]+" "$build_dir/charlm_cuda_bf16.log" || {
  echo "ci_cuda_emulation: charlm --device cuda --amp bf16 failed or reported no finite loss (exit $status)" >&2
  exit 1
}
"$build_dir/examples/translate" --device cuda --amp fp16 --steps 4 --warmup 1 --eval-every 2 --d-model 128 \
  --heads 2 --layers 1 --d-ff 128 --batch-size 4 --train-size 100 --val-size 8 --test-size 2 --beam 2 \
  --out-dir "$emu_out/translate" | tee "$build_dir/translate_cuda_fp16.log"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] && grep -qE "step 4: validation loss [0-9]+\.[0-9]+" "$build_dir/translate_cuda_fp16.log" || {
  echo "ci_cuda_emulation: translate --device cuda --amp fp16 failed or reported no finite loss (exit $status)" >&2
  exit 1
}
done_at=$(date +%s)

# The skip path: the emulator reporting no device must make the file skip (exit code 77, which
# ctest reports as skipped), never pass or fail.
set +e
HEED_CUDA_EMULATION_DEVICES=0 "$build_dir/tests/heed_tests" --source-file='*test_cuda.cpp' --no-intro=true \
  | tee "$build_dir/test_cuda_skip.log"
status=${PIPESTATUS[0]}
set -e
[ "$status" -eq 77 ] && grep -q "SKIPPED: test_cuda: no CUDA device" "$build_dir/test_cuda_skip.log" || {
  echo "ci_cuda_emulation: with HEED_CUDA_EMULATION_DEVICES=0 the suite did not report itself skipped (exit $status)" >&2
  exit 1
}
end=$(date +%s)

echo "ci_cuda_emulation: build $((built - start)) s, test_cuda + test_backend_ops + dist + module + amp examples $((done_at - built)) s," \
  "skip check $((end - done_at)) s, total $((end - start)) s"
