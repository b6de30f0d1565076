#!/usr/bin/env bash
# Builds everything, then runs every test: the Catch2 suite through CTest, then pytest.
# CUDA tests run when a GPU is present and skip, saying why, when not.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/build.sh "$@"
build_dir="${BUILD_DIR:-build}"
ctest --test-dir "$build_dir" --output-on-failure
FUSED_OPS_LIBRARY="$PWD/$build_dir/libfused_ops.so" \
FUSED_OPS_INFER="$PWD/$build_dir/examples/fused_ops_infer" \
  python3 -m pytest -rs python_tests
