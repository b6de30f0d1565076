#!/usr/bin/env bash
# Builds benchmarks/split_tf32_wgmma_check.cu for sm_90a and runs it on the current GPU (an
# H100 or H200): the wgmma split-TF32 convolution against CUTLASS's sm80 one and float64, on
# the headline problems (timed) and small shapes over the parameter surface. Needs CUTLASS's
# headers (tools/fetch_cutlass.sh, or .deps/cutlass carried). With a built binary as the
# first argument, runs that instead of building; further arguments go to the program (--stress,
# --wgrad, --wgrad-small, --moments-small, --ncdhw, --ncdhw-small). `--build-only PATH`: builds
# the program at PATH and exits (tools/device_check.sh's sanitizer step runs it under
# compute-sanitizer).
set -euo pipefail
cd "$(dirname "$0")/.."
build() {
  tools/fetch_cutlass.sh >/dev/null
  nvcc -O3 -std=c++17 --expt-relaxed-constexpr -lineinfo -gencode=arch=compute_90a,code=sm_90a \
    -Iops -isystem .deps/cutlass/include benchmarks/split_tf32_wgmma_check.cu \
    ops/conv/split_tf32_wgmma_conv3d_cuda.cu ops/conv/wgmma_plane_conv3d_cuda.cu \
    ops/norm/relu_group_norm_channels_last_cuda.cu \
    ops/common/cuda/transpose_cuda.cu -o "$1"
}
if [ "${1:-}" = "--build-only" ]; then
  build "${2:?--build-only needs the output path}"
  exit 0
fi
binary="${1:-}"
if [ -z "$binary" ]; then
  binary=$(mktemp -d)/split_tf32_wgmma_check
  build "$binary"
fi
"$binary" "${@:2}"
