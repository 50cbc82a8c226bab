#!/usr/bin/env bash
# build.sh — heed's quick-start driver over CMake.
#   ./build.sh demo   install missing Debian packages, build (Release), train and evaluate the toy translator
#   ./build.sh test   install missing Debian packages, build (Release), run every test (ctest)
#   ./build.sh build  install missing packages and build only
# Environment: BUILD_DIR (default build/release), JOBS (default: number of cores).
set -euo pipefail
cd "$(dirname "$0")"

BUILD_DIR=${BUILD_DIR:-build/release}
JOBS=${JOBS:-$(nproc)}
PACKAGES=(build-essential cmake ninja-build pkg-config libopenblas-openmp-dev nlohmann-json3-dev doctest-dev
          libfmt-dev libgloo-dev)

install_missing_packages() {
  local missing=()
  for package in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "build.sh: installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

build() {
  install_missing_packages
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release
  cmake --build "$BUILD_DIR" -j "$JOBS"
}

case "${1:-}" in
  demo)
    build
    # The main demo: the toy German->English translator (about 5 minutes on 2 cores).
    "$BUILD_DIR"/examples/translate --out-dir "$BUILD_DIR"/translate_out
    ;;
  test)
    build
    ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS"
    ;;
  build)
    build
    ;;
  *)
    echo "usage: ./build.sh demo|test|build" >&2
    exit 2
    ;;
esac
