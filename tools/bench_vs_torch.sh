#!/usr/bin/env bash
# tools/bench_vs_torch.sh — runs each benchmark case for heed and for the PyTorch reference
# (../shared/bench/torch_ref.py, Debian's python3-torch) alternately in one run, and prints
# the median of each side and the ratio PyTorch / heed (> 1: heed is faster).
#
# Usage: tools/bench_vs_torch.sh [ROUNDS] (default 3)
# Environment: HEED_BENCH (default build/release/tools/heed-bench), TORCH_REF
# (default ../shared/bench/torch_ref.py next to the repository), PYTHON (default /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
heed_bench=${HEED_BENCH:-build/release/tools/heed-bench}
torch_ref=${TORCH_REF:-../shared/bench/torch_ref.py}
python=${PYTHON:-/usr/bin/python3}
[ -x "$heed_bench" ] || { echo "build heed first (./build.sh build): $heed_bench not found" >&2; exit 1; }
[ -f "$torch_ref" ] || { echo "PyTorch reference not found: $torch_ref" >&2; exit 1; }
"$python" -c 'import torch' 2>/dev/null || { echo "PyTorch missing: apt-get install python3-torch" >&2; exit 1; }

cases=(
  "lm --vocab 256 --d 256 --heads 4 --layers 4 --seq 128 --batch 16 --steps 10 --warmup 3 --threads 2"
  "attn --batch 4 --heads 8 --d 512 --seq 1024 --steps 5 --warmup 1 --threads 2"
)
field() { "$python" -c "import json,sys; print(json.loads(sys.stdin.read())['$1'])"; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

printf "%-70s %12s %12s %8s\n" "case" "heed ms" "torch ms" "ratio"
for args in "${cases[@]}"; do
  heed_times=() torch_times=()
  for ((r = 0; r < rounds; r++)); do
    heed_times+=("$("$heed_bench" $args | field ms_per_step)")
    torch_times+=("$(OMP_NUM_THREADS=2 "$python" "$torch_ref" $args | field ms_per_step)")
  done
  h=$(printf "%s\n" "${heed_times[@]}" | median)
  t=$(printf "%s\n" "${torch_times[@]}" | median)
  printf "%-70s %12.1f %12.1f %7.2fx\n" "$args" "$h" "$t" "$("$python" -c "print($t / $h)")"
done
