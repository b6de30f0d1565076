#!/usr/bin/env bash
# Builds everything, then runs the main example end to end: the Python script builds the
# original and the fused model, loads the same weights into both, checks that they agree and
# saves the scripted fused model; the C++ program (no Python) loads it and runs it on the GPU
# if there is one, else on the CPU, printing the output's checksum and time.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/build.sh "$@"
build_dir="${BUILD_DIR:-build}"
models=("$build_dir/conv_transpose3d_relu_group_norm.pt" "$build_dir/conv3d_group_norm_mean.pt")
FUSED_OPS_LIBRARY="$PWD/$build_dir/libfused_ops.so" python3 examples/export_torchscript.py "${models[@]}"
for model in "${models[@]}"; do
  "$build_dir/examples/fused_ops_infer" "$model"
done
