#!/usr/bin/env bash
# Installs the heed build into a temporary prefix, extracts the example program from the
# README (between the example markers), builds it as a separate CMake project with
# find_package(heed), and runs it. Usage: run.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
source_dir=$1 build_dir=$2 work=$3
rm -rf "$work" && mkdir -p "$work/project"
cmake --install "$build_dir" --prefix "$work/prefix" > "$work/install.log"
cp "$source_dir/tests/consumer/CMakeLists.txt" "$work/project/"
awk '/<!-- readme-example:begin -->/{on=1; next} /<!-- readme-example:end -->/{on=0} on' "$source_dir/README.md" \
  | sed '/^```/d' > "$work/project/readme_example.cpp"
if [ ! -s "$work/project/readme_example.cpp" ]; then
  echo "no example program found between the readme-example markers in README.md" >&2
  exit 1
fi
cmake -S "$work/project" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release \
  > "$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" || exit 1
LD_LIBRARY_PATH="$work/prefix/lib:${LD_LIBRARY_PATH:-}" "$work/build/readme_example"
