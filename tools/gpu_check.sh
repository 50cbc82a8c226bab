#!/usr/bin/env bash
# tools/gpu_check.sh — every check that needs a real GPU, in one run, for a machine that has one
# (prepared here, run there first whenever a GPU is lent):
#  1. the CUDA-vs-CPU suites: test_cuda (every kernel, the tensor-core attention, mixed
#     precision training) and the op harness test_backend_ops;
#  2. compute-sanitizer memcheck and racecheck on the flash attention (CUDA-core and
#     tensor-core) and LayerNorm cases (recorded as unavailable where the runtime refuses it);
#  3. tools/gpu_sdpa_vs_torch.py: heed's fused attention against PyTorch's
#     scaled_dot_product_attention, correctness (float64 reference) and speed, up to
#     B4 H16 T4096 D128 causal in bf16 and fp16 (TFLOP/s and the ratio);
#  4. tools/gpu_lm_vs_torch.py: heed-bench lm on CUDA in bf16 against the same model in
#     PyTorch eager (tokens/s and the ratio); the same kind of step with Linear's cuBLASLt
#     epilogues against heed's fallback kernels (--gemm-epilogues, side by side);
#  5. charlm on CUDA for 200 iterations against the same run on the CPU (final validation loss
#     and the loss curve);
#  6. heed::dist with CUDA tensors: a 1-rank NCCL group and 2 ranks over Gloo via the host;
# then writes summary.json and summary.md into OUT_DIR (with every log) and prints the table.
# Exits non-zero when a check fails, and at once, with a clear message, when no GPU is present.
#
# SOURCE is a pack made by tools/gpu_pack.sh (bin/ and lib/: what travels to a GPU machine
# without Debian's packages) or a heed build directory with the CUDA backend.
#
# Usage: tools/gpu_check.sh SOURCE OUT_DIR [--quick]
# Environment: PYTHON (default python3).
# Through the device tool (which returns at most 8 files from $OUT), e.g.:
#   tar xJf gpu_pack.tar.xz && tools/gpu_check.sh gpu_pack /tmp/gc; rc=$?;
#   cp /tmp/gc/summary.md /tmp/gc/summary.json $OUT/; tar czf $OUT/gpu_check.tgz -C /tmp gc; exit $rc
set -uo pipefail
cd "$(dirname "$0")/.."

if [ $# -lt 2 ] || [ ! -d "$1" ]; then
  echo "usage: tools/gpu_check.sh SOURCE OUT_DIR [--quick]   (SOURCE: a gpu_pack folder or a CUDA build dir)" >&2
  exit 2
fi
source=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
quick=""
[ "${3:-}" = "--quick" ] && quick="--quick"
python=${PYTHON:-python3}
export PYTHONUNBUFFERED=1

if [ -x "$source/bin/heed_tests" ]; then  # a pack
  tests="$source/bin/heed_tests" bench="$source/bin/heed-bench" charlm="$source/bin/charlm"
  probe="$source/bin/gpu-sdpa-probe"
  export LD_LIBRARY_PATH="$source/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
elif [ -f "$source/CMakeCache.txt" ]; then  # a build directory
  if grep -q "HEED_CUDA_EMULATION:BOOL=ON" "$source/CMakeCache.txt"; then
    echo "gpu_check: $source is the CPU emulation build; give a pack or a build with the real CUDA backend" >&2
    exit 2
  fi
  tests="$source/tests/heed_tests" bench="$source/tools/heed-bench" charlm="$source/examples/charlm"
  probe="$source/gpu_sdpa_probe/build/gpu-sdpa-probe"
else
  echo "gpu_check: $source is neither a gpu_pack folder nor a heed build directory" >&2
  exit 2
fi

# ---- is there a GPU? ------------------------------------------------------------------------
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU on this machine (nvidia-smi missing or lists no device); nothing to check" >&2
  exit 3
fi
{
  date -u +%Y-%m-%dT%H:%MZ
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  command -v nvcc >/dev/null && nvcc --version | tail -1
  "$python" -c 'import torch; print("torch", torch.__version__)' 2>&1
  [ -f "$source/BUILD_INFO" ] && cat "$source/BUILD_INFO"
} | tee "$out/environment.txt"
device_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)

declare -a names results seconds details
status=0
# record NAME RESULT(ok|FAIL|unavailable) SECONDS DETAIL
record() {
  names+=("$1") results+=("$2") seconds+=("$3") details+=("$4")
  [ "$2" = "FAIL" ] && status=1
  return 0
}

# ---- 1. the CUDA suites -----------------------------------------------------------------------
for suite in test_cuda test_backend_ops; do
  start=$(date +%s)
  "$tests" --source-file="*$suite.cpp" --no-intro=true >"$out/$suite.log" 2>&1
  rc=$?
  tail -4 "$out/$suite.log"
  # A skip means heed does not see the GPU that nvidia-smi lists: a failure here.
  if grep -q "SKIPPED" "$out/$suite.log"; then rc=1; fi
  assertions=$(grep -oE 'assertions: *[0-9]+' "$out/$suite.log" | grep -oE '[0-9]+' | head -1)
  record "$suite" "$([ $rc = 0 ] && echo ok || echo FAIL)" $(($(date +%s) - start)) "${assertions:-0} assertions"
done

# ---- 2. compute-sanitizer on the attention and LayerNorm kernels ------------------------------
cases='cuda: flash attention forward and backward*,cuda: tensor-core flash attention*,cuda: layer_norm*'
for tool in memcheck racecheck; do
  start=$(date +%s)
  if ! command -v compute-sanitizer >/dev/null 2>&1; then
    record "compute-sanitizer $tool" unavailable 0 "compute-sanitizer not installed"
    continue
  fi
  compute-sanitizer --tool "$tool" --error-exitcode 97 "$tests" --source-file='*test_cuda.cpp' \
    --test-case="$cases" --no-intro=true >"$out/sanitizer_$tool.log" 2>&1
  rc=$?
  tail -3 "$out/sanitizer_$tool.log"
  if grep -qE "Device not supported|Target application terminated before first instrumented API call" \
    "$out/sanitizer_$tool.log"; then
    record "compute-sanitizer $tool" unavailable $(($(date +%s) - start)) "refused on this runtime (see log)"
  else
    summary_line=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$out/sanitizer_$tool.log" | tail -1)
    record "compute-sanitizer $tool" "$([ $rc = 0 ] && echo ok || echo FAIL)" $(($(date +%s) - start)) \
      "${summary_line:-no summary line}"
  fi
done

# ---- 3. heed vs torch SDPA --------------------------------------------------------------------
start=$(date +%s)
if [ -x "$probe" ]; then
  "$python" tools/gpu_sdpa_vs_torch.py "$probe" $quick --json "$out/sdpa.json" 2>&1 | tee "$out/sdpa.log"
  rc=${PIPESTATUS[0]}
  detail=$("$python" - "$out/sdpa.json" <<'PY' 2>/dev/null
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
r = rows[-2] if len(rows) > 2 else rows[-1]
print(f"{r['case']}: fwd {r['heed_fwd_tflops']:.0f} TFLOP/s ({r['fwd_speed_vs_torch']:.2f}x torch), "
      f"f+b {r['heed_fb_tflops']:.0f} TFLOP/s ({r['fb_speed_vs_torch']:.2f}x torch)")
PY
  )
  record "flash attention vs torch SDPA" "$([ $rc = 0 ] && echo ok || echo FAIL)" $(($(date +%s) - start)) \
    "${detail:-see sdpa.log}"
else
  record "flash attention vs torch SDPA" FAIL 0 "no probe program at $probe (tools/gpu_pack.sh builds it)"
fi

# ---- 4. heed lm (bf16) vs torch eager -------------------------------------------------------------
start=$(date +%s)
"$python" tools/gpu_lm_vs_torch.py "$bench" $quick --json "$out/lm.json" 2>&1 | tee "$out/lm.log"
rc=${PIPESTATUS[0]}
detail=$("$python" -c 'import json,sys; print("; ".join(f"{r[\"case\"]}: {r[\"heed_over_torch\"]:.2f}x torch tokens/s" for r in json.load(open(sys.argv[1]))["rows"]))' "$out/lm.json" 2>/dev/null)
record "lm bf16 step vs torch eager" "$([ $rc = 0 ] && echo ok || echo FAIL)" $(($(date +%s) - start)) \
  "${detail:-see lm.log}"
for args in "lm --vocab 256 --d 256 --heads 4 --layers 4 --seq 128 --batch 16 --steps 10 --warmup 3" \
  "attn --batch 4 --heads 8 --d 512 --seq 1024 --steps 5 --warmup 1"; do
  start=$(date +%s)
  if line=$("$bench" $args --device cuda 2>>"$out/heed_bench.log"); then
    echo "$line" | tee -a "$out/heed_bench.log"
    ms=$(echo "$line" | "$python" -c 'import json,sys; print(json.loads(sys.stdin.read())["ms_per_step"])')
    record "heed-bench ${args%% *} float32 (cuda)" ok $(($(date +%s) - start)) "$ms ms/step"
  else
    record "heed-bench ${args%% *} float32 (cuda)" FAIL $(($(date +%s) - start)) "see heed_bench.log"
  fi
done

# Linear's cuBLASLt epilogues (bias, bias gradient, tanh GELU) against heed's fallback kernels
# around plain cuBLAS, the same bf16 lm step side by side (alternately, three rounds).
start=$(date +%s)
epi_args="lm --vocab 8192 --d 768 --heads 12 --layers 4 --seq 512 --batch 8 --steps 10 --warmup 3 --device cuda \
--amp bf16 --activation gelu_tanh"
[ -n "$quick" ] && epi_args="lm --vocab 2048 --d 256 --heads 4 --layers 2 --seq 128 --batch 8 --steps 5 --warmup 2 \
--device cuda --amp bf16 --activation gelu_tanh"
epi_ok=1
for round in 1 2 3; do
  for mode in cublaslt fallback; do
    if line=$("$bench" $epi_args --gemm-epilogues $mode 2>>"$out/heed_bench.log"); then
      echo "$line" | tee -a "$out/epilogues.jsonl"
    else
      epi_ok=0
    fi
  done
done
detail=$("$python" - "$out/epilogues.jsonl" <<'PY' 2>/dev/null
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ms = {m: statistics.median(r["ms_per_step"] for r in rows if r["gemm_epilogues"] == m) for m in ("cublaslt", "fallback")}
counts = next(r["epilogue_counts"] for r in rows if r["gemm_epilogues"] == "cublaslt")
print(f"cuBLASLt {ms['cublaslt']:.2f} ms/step, fallback {ms['fallback']:.2f} ms/step "
      f"({ms['fallback'] / ms['cublaslt']:.3f}x); cuBLASLt ran {counts}")
# Aligned bf16 shapes: cuBLASLt must have taken the bias, bias-gradient and GELU epilogues.
sys.exit(0 if min(counts[k] for k in ("cublaslt_bias", "cublaslt_bias_grad", "cublaslt_gelu")) > 0 else 1)
PY
)
[ $? = 0 ] || epi_ok=0
record "Linear epilogues: cuBLASLt vs fallback (lm bf16)" "$([ $epi_ok = 1 ] && echo ok || echo FAIL)" \
  $(($(date +%s) - start)) "${detail:-see heed_bench.log}"

# ---- 5. charlm on CUDA against the CPU ------------------------------------------------------------
start=$(date +%s)
iters=200
[ -n "$quick" ] && iters=40
charlm_args=(--iters $iters --warmup 20 --eval-every $iters --eval-batches 20 --final-eval-batches 20
  --sample-tokens 0 --seed 3)
"$charlm" "${charlm_args[@]}" --device cuda --out-dir "$out/charlm_cuda" >"$out/charlm_cuda.log" 2>&1
rc_gpu=$?
"$charlm" "${charlm_args[@]}" --device cpu --out-dir "$out/charlm_cpu" >"$out/charlm_cpu.log" 2>&1
rc_cpu=$?
detail=$("$python" - "$out/charlm_cuda/metrics.jsonl" "$out/charlm_cpu/metrics.jsonl" <<'PY'
import json, math, sys
def read(path):
    train, val = [], None
    for line in open(path):
        rec = json.loads(line)
        if "loss" in rec and "iter" in rec: train.append(rec["loss"])
        if "final_val_loss" in rec: val = rec["final_val_loss"]
    return train, val
try:
    gpu, cpu = read(sys.argv[1]), read(sys.argv[2])
except (OSError, ValueError) as e:
    print(f"FAIL no metrics to compare ({e})")
    sys.exit(0)
finite = all(math.isfinite(x) for x in gpu[0]) and gpu[1] is not None and math.isfinite(gpu[1])
close = finite and abs(gpu[1] - cpu[1]) <= 0.02 * cpu[1]
print(("ok" if close else "FAIL") + f" val loss cuda {gpu[1]:.4f} cpu {cpu[1]:.4f}, {len(gpu[0])} logged train losses finite: {finite}")
PY
)
result=FAIL
[ $rc_gpu = 0 ] && [ $rc_cpu = 0 ] && [ "${detail%% *}" = ok ] && result=ok
record "charlm $iters iterations cuda vs cpu" $result $(($(date +%s) - start)) "${detail#* }"

# ---- 6. heed::dist with CUDA tensors ----------------------------------------------------------------
start=$(date +%s)
"$tests" --source-file='*test_dist.cpp' \
  --test-case="dist: CUDA tensors staged*,dist: backend 'nccl' on a GPU*" --no-intro=true >"$out/dist.log" 2>&1
rc=$?
if grep -q "SKIPPED" "$out/dist.log"; then rc=1; fi  # no Gloo, no NCCL or no device: a failure here
record "dist: NCCL 1 rank, Gloo-staged 2 ranks" "$([ $rc = 0 ] && echo ok || echo FAIL)" $(($(date +%s) - start)) ""

# ---- summary ------------------------------------------------------------------------------------
{
  echo "| check | result | seconds | detail |"
  echo "| --- | --- | --- | --- |"
  for i in "${!names[@]}"; do
    echo "| ${names[$i]} | ${results[$i]} | ${seconds[$i]} | ${details[$i]} |"
  done
} >"$out/summary.md"
for i in "${!names[@]}"; do
  printf '%s\t%s\t%s\t%s\n' "${names[$i]}" "${results[$i]}" "${seconds[$i]}" "${details[$i]}"
done | "$python" -c '
import json, sys
rows = [dict(zip(("check", "result", "seconds", "detail"), line.rstrip("\n").split("\t"))) for line in sys.stdin]
for r in rows: r["seconds"] = int(r["seconds"])
json.dump({"device": sys.argv[1], "environment": open(sys.argv[2]).read(), "checks": rows}, open(sys.argv[3], "w"), indent=1)
' "$device_name" "$out/environment.txt" "$out/summary.json"
echo
echo "gpu_check summary ($device_name); files in $out"
cat "$out/summary.md"
exit $status
