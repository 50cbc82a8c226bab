#!/usr/bin/env bash
# tools/gpu_pack.sh — packs what tools/gpu_check.sh runs on a GPU machine into one compressed
# tarball small enough to travel with the working tree (the device tool carries at most
# 64 MiB): the programs (heed_tests, heed-bench, charlm, translate and tools/gpu_sdpa_probe.cpp
# built against the build tree), libheed and every shared library they load that is not part
# of the C/C++ runtime or of CUDA (OpenBLAS, fmt, Gloo and their dependencies): the GPU
# machine has CUDA 13 and PyTorch but none of Debian's packages.
#
# Invariants: the build directory must hold the real CUDA backend (not the emulator); the
# pack's layout is bin/ and lib/, and gpu_check.sh runs the programs with LD_LIBRARY_PATH=lib.
#
# Usage: tools/gpu_pack.sh BUILD_DIR TARBALL      (e.g. build/release gpu_pack.tar.xz)
set -euo pipefail
cd "$(dirname "$0")/.."
source_dir=$(pwd)
if [ $# -ne 2 ] || [ ! -f "$1/CMakeCache.txt" ]; then
  echo "usage: tools/gpu_pack.sh BUILD_DIR TARBALL   (BUILD_DIR: a configured heed build with CUDA)" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
tarball=$2
if grep -q "HEED_CUDA_EMULATION:BOOL=ON" "$build_dir/CMakeCache.txt" ||
  ! grep -rqs "nvcc" "$build_dir/CMakeFiles/rules.ninja" "$build_dir/CMakeFiles/Makefile2"; then
  echo "gpu_pack: $build_dir is not a build with the real CUDA backend" >&2
  exit 2
fi
cmake --build "$build_dir" -j "${JOBS:-2}" --target heed_tests heed-bench charlm translate

# The SDPA probe, built here against the build tree (find_package(heed) needs fmt's CMake files,
# which the GPU machine does not have).
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
cmake -S "$probe_build" -B "$probe_build/build" -DCMAKE_BUILD_TYPE=Release -Dheed_DIR="$build_dir" >/dev/null
cmake --build "$probe_build/build" >/dev/null

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/gpu_pack/bin" "$stage/gpu_pack/lib"
programs=("$build_dir/tests/heed_tests" "$build_dir/tools/heed-bench" "$build_dir/examples/charlm"
  "$build_dir/examples/translate" "$probe_build/build/gpu-sdpa-probe")
cp "${programs[@]}" "$stage/gpu_pack/bin/"
# Shared libraries: everything ldd resolves except the C/C++ runtime and CUDA's own (the GPU
# machine's driver and toolkit provide those, in versions that match its driver).
for program in "${programs[@]}"; do
  ldd "$program" | awk '/=> \//{print $3}'
done | sort -u | while read -r library; do
  case "$(basename "$library")" in
    libc.so* | libm.so* | libstdc++.so* | libgcc_s.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux*) ;;
    libcuda.so* | libcudart.so* | libcublas*.so* | libnccl.so* | libnvrtc*.so* | libnvJitLink*.so*) ;;
    *) cp -L "$library" "$stage/gpu_pack/lib/" ;;
  esac
done
printf 'built %s from %s (%s)\n' "$(date -u +%Y-%m-%dT%H:%MZ)" "$(git rev-parse --short HEAD)" \
  "$(grep -rhoE "arch=compute_[0-9]+" "$build_dir/build.ninja" 2>/dev/null | sort -u |
    tr '\n' ' ')" >"$stage/gpu_pack/BUILD_INFO"
tar -C "$stage" -cJf "$tarball" gpu_pack
echo "gpu_pack: wrote $tarball ($(du -h "$tarball" | cut -f1)); on the GPU machine:"
echo "  tar xJf $tarball && tools/gpu_check.sh gpu_pack \$OUT"
