set -x
L=$OUT/logs6; mkdir -p $L
export CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ FUSED_OPS_LIBRARY=$PWD/build-gpu/libfused_ops.so FUSED_OPS_INFER=$PWD/build-gpu/examples/fused_ops_infer PYTHONPATH=$PWD
st() { echo "=== [$(( $(date +%s) - T0 ))s] $*" | tee -a $L/steps.txt; }
T0=$(date +%s)
st build
OUT=$L/dc tools/device_check.sh build >> $L/steps.txt 2>&1
st prof
python3 benchmarks/profile_conv3d_onepass.py --forward-kernels > $L/k-final.txt 2>&1; grep -E "kernel|per call|error|Error" $L/k-final.txt >> $L/steps.txt
st bench c3
timeout 60 python3 benchmarks/bench.py --only c3 --skip-compile > $L/bench-c3.txt 2>&1; echo "bench rc=$?" >> $L/steps.txt
grep -E "fused +[0-9]|eager +[0-9]" $L/bench-c3.txt | head -8 >> $L/steps.txt
st pytest onepass
timeout 90 python3 -m pytest -q -rs -n 8 -k "not cpu" python_tests/test_conv3d_onepass.py python_tests/test_numerics_contract.py > $L/pytest-onepass.txt 2>&1; echo "pytest rc=$?" >> $L/steps.txt
tail -2 $L/pytest-onepass.txt >> $L/steps.txt
grep -E "^FAILED|^ERROR" $L/pytest-onepass.txt | head -20 >> $L/steps.txt
st catch2 cuda
timeout 40 build-gpu/cpp_tests/fused_ops_tests "[cuda]" > $L/catch2-cuda.txt 2>&1; echo "catch2 rc=$?" >> $L/steps.txt; tail -2 $L/catch2-cuda.txt >> $L/steps.txt
st sanitizers onepass
for tool in memcheck racecheck; do
  extra=""; [ $tool = racecheck ] && extra="--kernel-name kns=fused_ops"
  timeout 40 compute-sanitizer --tool $tool $extra --error-exitcode 99 build-gpu/cpp_tests/fused_ops_tests "[cuda][onepass]" > $L/$tool.txt 2>&1; echo "$tool rc=$?" >> $L/steps.txt
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test cases|assertions" $L/$tool.txt | tail -2 >> $L/steps.txt
done
st done
grep -v "^+ " $L/steps.txt | tail -50
cd $OUT && tar czf logs6.tgz logs6 && rm -rf logs6
