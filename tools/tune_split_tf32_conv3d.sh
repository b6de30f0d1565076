#!/usr/bin/env bash
# Builds every tile candidate of benchmarks/tune_split_tf32_conv3d.cu (one binary each, in
# parallel), forward and weight gradient, for ${ARCH:-sm_90a} and runs them one after another
# on the current GPU. Arguments go to each binary (N C D H W K k pad [split-K slices];
# default: the headline ConvTranspose3d's forward rewrite).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/fetch_cutlass.sh >/dev/null
out=$(mktemp -d)
tiles=$(grep -c '^template <> struct Candidate<' benchmarks/tune_split_tf32_conv3d.cu)
{
  for i in $(seq 0 $((tiles - 1))); do echo "-DFUSED_OPS_TUNE_TILE=$i -o $out/fprop_$i"; done
  for i in $(seq 0 $((tiles - 1))); do
    echo "-DFUSED_OPS_TUNE_WGRAD -DFUSED_OPS_TUNE_TILE=$i -o $out/wgrad_$i"
  done
} | xargs -P "$(nproc)" -L1 nvcc -O3 -std=c++17 --expt-relaxed-constexpr -arch="${ARCH:-sm_90a}" \
  -Iops -isystem .deps/cutlass/include benchmarks/tune_split_tf32_conv3d.cu
status=0
for kind in fprop wgrad; do
  for i in $(seq 0 $((tiles - 1))); do "$out/${kind}_$i" "$@" || status=1; done
done
rm -rf "$out"
exit $status
