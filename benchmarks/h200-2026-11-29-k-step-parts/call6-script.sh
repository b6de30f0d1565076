set -x
L=$OUT/logs6; mkdir -p $L
export CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ FUSED_OPS_LIBRARY=$PWD/build-gpu/libfused_ops.so FUSED_OPS_INFER=$PWD/build-gpu/examples/fused_ops_infer PYTHONPATH=$PWD
st() { echo "=== [$(( $(date +%s) - T0 ))s] $*" | tee -a $L/steps.txt; }
T0=$(date +%s)
st build
OUT=$L/dc tools/device_check.sh build >> $L/steps.txt 2>&1
prof() { python3 benchmarks/profile_conv3d_onepass.py --forward-kernels > $L/k-$1.txt 2>&1; grep -E "kernel|per call|error" $L/k-$1.txt >> $L/steps.txt; }
st prof windows-1; prof windows-1
st prof plain-1; FUSED_OPS_ONEPASS_WINDOWS=0 prof plain-1
st prof windows-2; prof windows-2
st catch2 cuda
timeout 150 build-gpu/cpp_tests/fused_ops_tests "[cuda]" > $L/catch2-cuda.txt 2>&1; echo "catch2 rc=$?" >> $L/steps.txt; tail -2 $L/catch2-cuda.txt >> $L/steps.txt
st sanitizers onepass
for tool in memcheck racecheck; do
  extra=""; [ $tool = racecheck ] && extra="--kernel-name kns=fused_ops"
  timeout 100 compute-sanitizer --tool $tool $extra --error-exitcode 99 build-gpu/cpp_tests/fused_ops_tests "[cuda][onepass]" > $L/$tool.txt 2>&1; echo "$tool rc=$?" >> $L/steps.txt
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test cases|assertions" $L/$tool.txt | tail -2 >> $L/steps.txt
done
left=$(( 555 - ($(date +%s) - T0) ))
st "whole CUDA pytest (timeout $left s)"
timeout $left python3 -m pytest -q -rs -n 8 -k "not cpu" python_tests > $L/pytest-cuda.txt 2>&1; echo "pytest rc=$?" >> $L/steps.txt
tail -4 $L/pytest-cuda.txt >> $L/steps.txt
grep -E "^FAILED|^ERROR" $L/pytest-cuda.txt | head -20 >> $L/steps.txt
st done
grep -v "^+ " $L/steps.txt | tail -60
cd $OUT && tar czf logs6.tgz logs6 && rm -rf logs6
