#!/usr/bin/env bash
# fuzz/run_fuzzers.sh — runs every libFuzzer target on a temporary copy of its seed corpus
# (fuzz/corpus/<target>) plus every regression input (fuzz/regressions/<target>), so libFuzzer
# never writes into the repository. Fails (exit 1) on any crash, hang (-timeout), out-of-memory
# (-rss_limit_mb) or sanitizer report; the offending inputs are kept in $FUZZ_ARTIFACTS
# (default: a temporary folder, printed) to be minimised and committed to
# fuzz/regressions/<target>/.
#   fuzz/run_fuzzers.sh [BUILD_DIR [SECONDS [TARGET...]]]
# Defaults: build/fuzz (the 'fuzz' preset), 60 s, every target. JOBS (default: cores) targets
# run at once.
#
# Two modes:
#   fixed (CI): FUZZ_SEED=N (a number) and FUZZ_RUNS=M (or FUZZ_RUNS_<target>=M for one target):
#     each target executes M inputs from libFuzzer's seed N over the committed corpus and
#     regressions. Seed, corpus and budget never change between runs (libFuzzer's coverage
#     feedback is not bit-identical run to run, so the later mutations drift a little; any
#     finding is still a real bug with its input kept). SECONDS is only a safety cap.
#   exploration (by hand, fuzz/explore.sh): FUZZ_SEED unset or "random" and no FUZZ_RUNS:
#     libFuzzer picks a new seed each run and fuzzes for SECONDS per target; whatever it finds
#     is minimised and committed as a regression, which the reproducible mode then replays.
set -uo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${1:-build/fuzz}
SECONDS_PER_TARGET=${2:-60}
shift $(( $# < 2 ? $# : 2 ))
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(safetensors json checkpoint cli)
JOBS=${JOBS:-$(nproc)}
FUZZ_SEED=${FUZZ_SEED:-}
FUZZ_RUNS=${FUZZ_RUNS:-}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/heed_fuzz.XXXXXX")
ARTIFACTS=${FUZZ_ARTIFACTS:-$WORK/artifacts}
mkdir -p "$ARTIFACTS"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export OMP_NUM_THREADS=1

run_target() {
  local target=$1 exe="$BUILD_DIR/fuzz/fuzz_$1" corpus="$WORK/corpus/$1"
  mkdir -p "$corpus"
  # Seeds and regressions (dotfiles such as .gitkeep are not inputs).
  for dir in fuzz/corpus/"$target" fuzz/regressions/"$target"; do
    [ -d "$dir" ] && find "$dir" -maxdepth 1 -type f ! -name '.*' -exec cp {} "$corpus"/ \;
  done
  local mode=()
  [ -n "$FUZZ_SEED" ] && [ "$FUZZ_SEED" != random ] && mode+=(-seed="$FUZZ_SEED")
  local runs_variable="FUZZ_RUNS_$target" runs
  runs=${!runs_variable:-$FUZZ_RUNS}
  [ -n "$runs" ] && mode+=(-runs="$runs")
  "$exe" "$corpus" "${mode[@]}" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$ARTIFACTS/$target-" >"$WORK/$target.log" 2>&1
  local status=$?
  local stats
  stats=$(grep -E '^stat::number_of_executed_units|^stat::new_units_added' "$WORK/$target.log" | tr '\n' ' ')
  if [ $status -ne 0 ]; then
    echo "fuzz_$target: FAILED (exit $status) after at most ${SECONDS_PER_TARGET}s (seed ${FUZZ_SEED:-random}); log:"
    grep -v '^#[0-9]' "$WORK/$target.log" | tail -60
  else
    local seed
    seed=$(grep -m1 -oE 'Seed: [0-9]+' "$WORK/$target.log" | cut -d' ' -f2)
    if [ -n "$runs" ]; then
      echo "fuzz_$target: clean, $runs runs from seed $seed ($stats)"
    else
      echo "fuzz_$target: clean for ${SECONDS_PER_TARGET}s from seed $seed ($stats)"
    fi
  fi
  return $status
}

for target in "${TARGETS[@]}"; do
  if [ ! -x "$BUILD_DIR/fuzz/fuzz_$target" ]; then
    echo "run_fuzzers.sh: $BUILD_DIR/fuzz/fuzz_$target not built (cmake --preset fuzz && cmake --build --preset fuzz)" >&2
    exit 2
  fi
done

failed=0
pids=()
names=()
for target in "${TARGETS[@]}"; do
  run_target "$target" &
  pids+=($!)
  names+=("$target")
  if [ ${#pids[@]} -ge "$JOBS" ]; then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
    names=("${names[@]:1}")
  fi
done
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done

if [ $failed -ne 0 ]; then
  echo "run_fuzzers.sh: findings kept in $ARTIFACTS:"
  ls -la "$ARTIFACTS"
  echo "minimise one with: $BUILD_DIR/fuzz/fuzz_<target> -minimize_crash=1 -runs=10000 <file>," \
       "then copy it to fuzz/regressions/<target>/"
  exit 1
fi
[ -z "${FUZZ_ARTIFACTS:-}" ] && rm -rf "$WORK"
exit 0
