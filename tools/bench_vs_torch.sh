#!/usr/bin/env bash
# tools/bench_vs_torch.sh — heed against the PyTorch reference (../shared/bench/torch_ref.py,
# Debian's python3-torch), side by side in one run, with each of OpenBLAS's kernel sets that matter here.
#
# For each kernel set (the one OpenBLAS picks on this CPU, then the others: the fast set named by
# heed's hint when the default is generic or AVX2 on an AVX-512 CPU, and the generic Prescott set)
# and each case, heed-bench and torch_ref.py run alternately ROUNDS times with the same flags and
# the same OPENBLAS_CORETYPE (PyTorch runs its matmuls on that OpenBLAS set; heed on the code its
# CpuGemm::Auto picks for it, named in the table: heed's AVX-512 kernel on AVX-512 CPUs, its AVX2
# kernel where OpenBLAS is generic on an AVX2 CPU, else OpenBLAS); the medians, the ratio PyTorch / heed (> 1: heed is faster),
# the range and median of each round's own ratio (a round's two runs are seconds apart, so they
# share the host's state: on these shared machines whole minutes run 20% slower, memory-bound
# kernels 3-4x, and a ratio of medians can pair a fast heed round with a slow PyTorch one), and
# heed's whole-step FLOP rate against the sgemm ceiling and the CPU's FMA peak measured in the same
# process go into a markdown table headed by the CPU model, the BLAS and each kernel set's ceiling
# and peak.
#
# Usage: tools/bench_vs_torch.sh [ROUNDS] (default 3) [--charlm] [--out FILE]
#   --charlm   also time charlm against ../shared/bench/torch_charlm.py (the nanoGPT CPU
#              recipe; CHARLM_ITERS iterations, default 2000; CHARLM_ROUNDS alternating pairs,
#              default 1, minutes per side each: the row gives the medians and, with several
#              pairs, the range of the pairs' ratios, as PyTorch's time spreads by 15% or more)
#   --out FILE write the table to FILE as well (default: stdout only)
# Environment: HEED_BENCH (default build/release/tools/heed-bench), HEED_CHARLM (default
# build/release/examples/charlm), TORCH_REF, TORCH_CHARLM, DATA (tinyshakespeare.txt),
# PYTHON (default /usr/bin/python3), KERNEL_SETS (e.g. "default SkylakeX" to choose them).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=3 charlm=0 out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --charlm) charlm=1 ;;
    --out) out="$2"; shift ;;
    [0-9]*) rounds="$1" ;;
    *) echo "usage: tools/bench_vs_torch.sh [ROUNDS] [--charlm] [--out FILE]" >&2; exit 2 ;;
  esac
  shift
done
heed_bench=${HEED_BENCH:-build/release/tools/heed-bench}
heed_charlm=${HEED_CHARLM:-build/release/examples/charlm}
torch_ref=${TORCH_REF:-../shared/bench/torch_ref.py}
torch_charlm=${TORCH_CHARLM:-../shared/bench/torch_charlm.py}
data=${DATA:-../shared/data/tinyshakespeare.txt}
charlm_iters=${CHARLM_ITERS:-2000}
charlm_rounds=${CHARLM_ROUNDS:-1}
python=${PYTHON:-/usr/bin/python3}
[ -x "$heed_bench" ] || { echo "build heed first (./build.sh build): $heed_bench not found" >&2; exit 1; }
[ -f "$torch_ref" ] || { echo "PyTorch reference not found: $torch_ref" >&2; exit 1; }
"$python" -c 'import torch' 2>/dev/null || { echo "PyTorch missing: apt-get install python3-torch" >&2; exit 1; }

cases=(
  "lm --vocab 256 --d 256 --heads 4 --layers 4 --seq 128 --batch 16 --steps 10 --warmup 3 --threads 2"
  "lm --vocab 256 --d 512 --heads 8 --layers 2 --seq 256 --batch 8 --steps 10 --warmup 3 --threads 2"
  "attn --batch 4 --heads 8 --d 512 --seq 1024 --steps 5 --warmup 1 --threads 2"
  "attn --batch 2 --heads 4 --d 512 --seq 2048 --steps 3 --warmup 1 --threads 2"
)
field() { "$python" -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { "$python" -c "print(f'{$1 / $2:.2f}')"; }
ratio_range() { sort -g | awk '{a[NR]=$1} END {printf "%sx-%sx", a[1], a[NR]}'; }  # "lowx-highx" of ratios on stdin

# The kernel sets: OpenBLAS's own choice, then the other one.
info=$("$heed_bench" matmul --d 256 --m 256 --n 256 --k 256 --steps 1 --warmup 0)
default_core=$(echo "$info" | field blas_core)
cpu=$(echo "$info" | field cpu)
blas=$(echo "$info" | field blas)
if [ -z "${KERNEL_SETS:-}" ]; then
  case "$(echo "$default_core" | tr 'A-Z' 'a-z')" in
    skylakex | cooperlake | sapphirerapids) KERNEL_SETS="default Prescott" ;;
    haswell | zen)
      # An AVX2 set: on an AVX-512 CPU (AMD Zen 5 under Debian 12's OpenBLAS) SkylakeX is faster.
      if grep -q avx512f /proc/cpuinfo; then KERNEL_SETS="default SkylakeX Prescott"; else KERNEL_SETS="default Prescott"; fi ;;
    *)
      if grep -q avx512f /proc/cpuinfo; then KERNEL_SETS="default SkylakeX"
      elif grep -q AuthenticAMD /proc/cpuinfo; then KERNEL_SETS="default Zen"
      else KERNEL_SETS="default Haswell"; fi ;;
  esac
fi

rows=()
ceilings=()
for set in $KERNEL_SETS; do
  if [ "$set" = default ]; then env_set=(); label="$default_core (default)"; else env_set=(OPENBLAS_CORETYPE="$set"); label="$set (OPENBLAS_CORETYPE)"; fi
  ceiling="" peak=""
  for args in "${cases[@]}"; do
    heed_times=() torch_times=() heed_gflops=() round_ratios=()
    for ((r = 0; r < rounds; r++)); do
      json=$(env "${env_set[@]}" HEED_BLAS_WARNING=0 "$heed_bench" $args)
      heed_times+=("$(echo "$json" | field ms_per_step)")
      heed_gflops+=("$(echo "$json" | field gflops)")
      ceiling=$(echo "$json" | field sgemm_ceiling_gflops)
      peak=$(echo "$json" | field fma_peak_gflops)
      heed_sgemm=$(echo "$json" | field sgemm)
      torch_times+=("$(env "${env_set[@]}" OMP_NUM_THREADS=2 "$python" "$torch_ref" $args | field ms_per_step)")
      round_ratios+=("$(ratio "${torch_times[-1]}" "${heed_times[-1]}")")
    done
    h=$(printf "%s\n" "${heed_times[@]}" | median)
    t=$(printf "%s\n" "${torch_times[@]}" | median)
    g=$(printf "%s\n" "${heed_gflops[@]}" | median)
    share=$("$python" -c "print(f'{100 * $g / $ceiling:.0f}% / {100 * $g / $peak:.0f}%')")
    spread=""
    [ "$rounds" -gt 1 ] && spread=" (per round $(printf "%s\n" "${round_ratios[@]}" | ratio_range), median $(printf "%s\n" "${round_ratios[@]}" | median)x)"
    rows+=("| $label | $heed_sgemm | \`${args%% --steps*}\`$spread | $h | $t | **$(ratio "$t" "$h")x** | $g ($share) |")
    echo "done: $label $args" >&2
  done
  ceilings+=("$label: heed's float32 matmuls on $heed_sgemm, sgemm 1024^3 ceiling $ceiling GFLOP/s, FMA peak $peak GFLOP/s")
  if [ "$charlm" = 1 ]; then
    [ -x "$heed_charlm" ] && [ -f "$torch_charlm" ] && [ -f "$data" ] || { echo "charlm, torch_charlm.py or data missing" >&2; exit 1; }
    h_times=() t_times=() pair_ratios=()
    for ((r = 0; r < charlm_rounds; r++)); do
      h_line=$(env "${env_set[@]}" HEED_BLAS_WARNING=0 "$heed_charlm" --data "$data" --iters "$charlm_iters" --threads 2 --sample-tokens 0 --out-dir /tmp/bench_vs_torch_charlm | grep "training wall time")
      h_times+=("$(echo "$h_line" | sed -E 's/.*, ([0-9.]+) ms\/iter.*/\1/')")
      h_val=$(echo "$h_line" | sed -E 's/.*final validation loss ([0-9.]+).*/\1/')
      t_json=$(env "${env_set[@]}" OMP_NUM_THREADS=2 "$python" "$torch_charlm" "$data" "$charlm_iters")
      t_times+=("$(echo "$t_json" | field ms_per_iter)")
      t_val=$(echo "$t_json" | field val_loss)
      pair_ratios+=("$(ratio "${t_times[-1]}" "${h_times[-1]}")")
    done
    h_ms=$(printf "%s\n" "${h_times[@]}" | median)
    t_ms=$(printf "%s\n" "${t_times[@]}" | median)
    pairs=""
    if [ "$charlm_rounds" -gt 1 ]; then
      pairs="; medians of $charlm_rounds pairs, per pair $(printf "%s\n" "${pair_ratios[@]}" | ratio_range)"
    fi
    rows+=("| $label | $heed_sgemm | charlm, nanoGPT CPU recipe, $charlm_iters iters (val loss heed $h_val, PyTorch $(printf %.4f "$t_val")$pairs) | $h_ms | $t_ms | **$(ratio "$t_ms" "$h_ms")x** | |")
  fi
done

ceilings_text=$(printf '%s; ' "${ceilings[@]}")
{
  echo "Machine: $cpu, 2 threads; $blas. ${ceilings_text%; }."
  echo "Medians of $rounds rounds, heed and PyTorch alternately (tools/bench_vs_torch.sh)."
  echo
  echo "| OpenBLAS kernels (both sides) | heed's sgemm | case | heed ms | PyTorch ms | PyTorch / heed | heed GFLOP/s (of ceiling / of FMA peak) |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  printf "%s\n" "${rows[@]}"
} | tee ${out:+"$out"}
