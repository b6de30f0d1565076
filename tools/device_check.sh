#!/usr/bin/env bash
# On a GPU machine: build, then run what the CPU-only CI cannot. Steps (default: all):
#   build      configure + build into build-gpu (TORCH_CUDA_ARCH_LIST defaults to 9.0a)
#   tests      CTest (Catch2, CUDA sections included) and pytest (CUDA tests included)
#   sanitizer  compute-sanitizer memcheck and racecheck on the Catch2 CUDA test cases; on
#              Hopper also memcheck, racecheck and synccheck on the wgmma kernels' small problems
#              (benchmarks/split_tf32_wgmma_check.cu)
#   bench      benchmarks/bench.py (eager vs torch.compile vs fused-ops, with the ceilings)
#   fuzz       python_tests/test_fuzz.py with the long hypothesis profile (400 examples per
#              test, CPU and CUDA; CI runs the fixed 20-example one)
#   tune       tools/tune_split_tf32_conv3d.sh: times the split-TF32 convolution's tile candidates
#   numerics   benchmarks/numerics.py: the drop-ins' errors vs eager's against float64, both
#              TF32 modes, headline and small sizes, gradients too
# Logs go to $OUT (or ./device-out). Exit status: non-zero if any step failed.
#   tools/device_check.sh build tests sanitizer
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/device-out}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0a}"
build_dir="${BUILD_DIR:-build-gpu}"
# The lent GPU machines' default g++ (/opt/gcc) links libstdc++ statically into shared
# libraries, and a second libstdc++ beside PyTorch's crashes on the first formatted error
# message; the system g++ links it dynamically (CTest checks this). CXX also picks the compiler
# torch._inductor builds AOTInductor packages with (python_tests/test_cpp_example.py): one
# linked with a static libstdc++ makes loading the package crash.
if [ -z "${FUSED_OPS_KEEP_CXX:-}" ] && [ -x /usr/bin/g++ ]; then
  export CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++
fi
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(build tests sanitizer fuzz bench numerics)
failed=()
t0=$(date +%s)
note() { echo "=== [$(( $(date +%s) - t0 ))s] $*"; }

for step in "${steps[@]}"; do
  case "$step" in
    build)
      note "build"
      {
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
        python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
        # CUTLASS's headers: fetched, or carried in .deps/cutlass where the machine has no PyPI.
        tools/fetch_cutlass.sh || echo "no CUTLASS headers: the split-TF32 convolution is not built"
        BUILD_DIR="$build_dir" BUILD_JOBS="$(nproc)" tools/build.sh
      } > "$out/build.log" 2>&1 || { failed+=(build); tail -n 40 "$out/build.log"; break; }
      grep -iE "warning" "$out/build.log" | grep -v "CMake Warning" | head -n 20
      ;;
    tests)
      note "ctest"
      ctest --test-dir "$build_dir" --output-on-failure > "$out/ctest.log" 2>&1 || failed+=(ctest)
      tail -n 8 "$out/ctest.log"
      note "pytest"
      xdist=""
      python3 -c "import xdist" 2>/dev/null && xdist="-n 8"
      FUSED_OPS_LIBRARY="$PWD/$build_dir/libfused_ops.so" \
      FUSED_OPS_INFER="$PWD/$build_dir/examples/fused_ops_infer" \
        python3 -m pytest -rs -q $xdist python_tests > "$out/pytest.log" 2>&1 || failed+=(pytest)
      grep -E "passed|failed|error|SKIPPED" "$out/pytest.log" | tail -n 25
      ;;
    sanitizer)
      for tool in memcheck racecheck; do
        note "compute-sanitizer --tool $tool"
        # memcheck runs every CUDA test case. racecheck runs the norm, one-pass and split-TF32
        # conv test cases (every kernel of ours, the channels-last one included, and no cuDNN:
        # racecheck fails with an internal error on cuDNN's Hopper convolution kernels) and
        # looks at our kernels only (ATen's reduce kernels, the references' mean, report their
        # own warp-synchronous shared-memory use; CUTLASS's are named cutlass::Kernel<...>).
        if [ "$tool" = racecheck ]; then
          args=(--kernel-name kns=fused_ops "$build_dir/cpp_tests/fused_ops_tests"
                "[cuda][norm],[cuda][onepass],[cuda][split_tf32]")
        else
          args=("$build_dir/cpp_tests/fused_ops_tests" "[cuda]")
        fi
        compute-sanitizer --tool "$tool" --error-exitcode 99 "${args[@]}" \
          >> "$out/sanitizer.log" 2>&1 || failed+=("$tool")
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test cases|assertions" "$out/sanitizer.log" | tail -n 3
      done
      # Our wgmma kernels on Hopper, on the check program's small problems: the weight gradient
      # (split and plain TF32: the plain one runs in no Catch2 case racecheck can take, as the
      # TF32 step's other convolutions are cuDNN's), the forward with the GroupNorm's
      # statistics, and the forward writing NCDHW. Needs CUTLASS's headers, as the build.
      if [ "$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1)" = "9.0" ]; then
        check="$build_dir/split_tf32_wgmma_check"
        if tools/split_tf32_wgmma_check.sh --build-only "$check" >> "$out/sanitizer.log" 2>&1; then
          for tool in memcheck racecheck synccheck; do
            for problems in --wgrad-small --moments-small --ncdhw-small; do
              note "compute-sanitizer --tool $tool split_tf32_wgmma_check $problems"
              compute-sanitizer --tool "$tool" --error-exitcode 99 "$check" "$problems" \
                >> "$out/sanitizer.log" 2>&1 || failed+=("$tool $problems")
              grep -E "ERROR SUMMARY|RACECHECK SUMMARY|all passed|FAILED" "$out/sanitizer.log" |
                tail -n 2
            done
          done
        else
          failed+=("split_tf32_wgmma_check build")
        fi
      fi
      ;;
    fuzz)
      note "fuzz (long profile)"
      xdist=""
      python3 -c "import xdist" 2>/dev/null && xdist="-n 8"
      FUSED_OPS_FUZZ=long FUSED_OPS_LIBRARY="$PWD/$build_dir/libfused_ops.so" \
        python3 -m pytest -rs -q $xdist python_tests/test_fuzz.py > "$out/fuzz.log" 2>&1 \
        || failed+=(fuzz)
      grep -E "passed|failed|Falsifying" "$out/fuzz.log" | tail -n 5
      ;;
    tune)
      note "tune the split-TF32 convolution"
      tools/tune_split_tf32_conv3d.sh > "$out/tune.log" 2>&1 || failed+=(tune)
      cat "$out/tune.log"
      ;;
    bench)
      note "benchmark"
      FUSED_OPS_LIBRARY="$PWD/$build_dir/libfused_ops.so" \
        python3 benchmarks/bench.py --out "$out/bench" ${BENCH_ARGS:-} > "$out/bench.log" 2>&1 || failed+=(bench)
      tail -n 60 "$out/bench.log"
      ;;
    numerics)
      note "numerics"
      FUSED_OPS_LIBRARY="$PWD/$build_dir/libfused_ops.so" \
        python3 benchmarks/numerics.py --device cuda --headline --grad \
        --json "$out/numerics.json" > "$out/numerics.txt" 2>&1 || failed+=(numerics)
      tail -n 1 "$out/numerics.txt"
      ;;
    *) echo "unknown step: $step"; exit 2 ;;
  esac
done
note "done; failed: ${failed[*]:-none}"
[ ${#failed[@]} -eq 0 ]
