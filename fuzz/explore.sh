#!/usr/bin/env bash
# fuzz/explore.sh — a fuzzing campaign by hand: every target (or the ones named) for SECONDS each
# from a fresh random seed, one or two at a time (JOBS), findings kept in FUZZ_ARTIFACTS
# (default fuzz_findings/, ignored by git). CI never runs this: it replays the committed corpus
# and regressions with a fixed seed (run_fuzzers.sh's reproducible mode), so a finding must be
# minimised and committed before CI knows about it:
#   build/fuzz/fuzz/fuzz_<target> -minimize_crash=1 -runs=10000 fuzz_findings/<target>-crash-<sha1>
#   cp minimized-from-<sha1> fuzz/regressions/<target>/<short-description>   # + the fix
#   fuzz/explore.sh [SECONDS [TARGET...]]     (default 600 s, every target; build: cmake --preset fuzz)
set -uo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-600}
shift $(( $# < 1 ? $# : 1 ))
export FUZZ_ARTIFACTS=${FUZZ_ARTIFACTS:-$PWD/fuzz_findings}
export FUZZ_SEED=random
unset FUZZ_RUNS
mkdir -p "$FUZZ_ARTIFACTS"
exec fuzz/run_fuzzers.sh "${FUZZ_BUILD_DIR:-build/fuzz}" "$SECONDS_PER_TARGET" "$@"
