#!/usr/bin/env bash
# Configures and builds everything (library, C++ tests, C++ example) into ${BUILD_DIR:-build}.
# Extra arguments go to CMake, e.g. tools/build.sh -DFUSED_OPS_WITH_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${BUILD_DIR:-build}"
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$build_dir" --parallel "${BUILD_JOBS:-$(nproc)}"
