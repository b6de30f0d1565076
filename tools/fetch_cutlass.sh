#!/usr/bin/env bash
# Puts NVIDIA CUTLASS's headers (the version CMakeLists.txt pins) under .deps/cutlass/include,
# where CMake looks for them first: from the nvidia-cutlass package on PyPI, without
# installing it into any environment. For machines without PyPI access, copy that folder.
set -euo pipefail
cd "$(dirname "$0")/.."
version=4.2.0.0
[ -f .deps/cutlass/include/cutlass/version.h ] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip install --quiet --no-deps --target "$tmp" "nvidia-cutlass==$version"
mkdir -p .deps/cutlass
cp -r "$tmp/cutlass_library/source/include" .deps/cutlass/include
echo "CUTLASS $version headers in .deps/cutlass/include"
