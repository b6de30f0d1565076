set -x
L=$OUT/logs2; mkdir -p $L
export CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ FUSED_OPS_LIBRARY=$PWD/build-gpu/libfused_ops.so FUSED_OPS_INFER=$PWD/build-gpu/examples/fused_ops_infer PYTHONPATH=$PWD
st() { echo "=== [$(( $(date +%s) - T0 ))s] $*" | tee -a $L/steps.txt; }
T0=$(date +%s)
st build
OUT=$L/dc tools/device_check.sh build >> $L/steps.txt 2>&1
prof() { python3 benchmarks/profile_conv3d_onepass.py --forward-kernels > $L/k-$1.txt 2>&1; grep -E "kernel|per call|error|Error" $L/k-$1.txt >> $L/steps.txt; }
st prof windows-1; prof windows-1
st prof plain-1; FUSED_OPS_ONEPASS_WINDOWS=0 prof plain-1
st prof windows-2; prof windows-2
st bench c3
timeout 120 python3 benchmarks/bench.py --only c3 --skip-compile > $L/bench-c3.txt 2>&1; echo "bench rc=$?" >> $L/steps.txt
grep -E "fused +[0-9]|eager +[0-9]" $L/bench-c3.txt | head -8 >> $L/steps.txt
st pytest onepass
timeout 200 python3 -m pytest -q -rs -n 8 -k "not cpu" python_tests/test_conv3d_onepass.py python_tests/test_numerics_contract.py > $L/pytest-onepass.txt 2>&1; echo "pytest rc=$?" >> $L/steps.txt
tail -3 $L/pytest-onepass.txt >> $L/steps.txt
grep -E "^FAILED|^ERROR" $L/pytest-onepass.txt | head -20 >> $L/steps.txt
st catch2 cuda
timeout 100 build-gpu/cpp_tests/fused_ops_tests "[cuda]" > $L/catch2-cuda.txt 2>&1; echo "catch2 rc=$?" >> $L/steps.txt; tail -2 $L/catch2-cuda.txt >> $L/steps.txt
st sanitizers onepass
for tool in memcheck racecheck; do
  extra=""; [ $tool = racecheck ] && extra="--kernel-name kns=fused_ops"
  timeout 80 compute-sanitizer --tool $tool $extra --error-exitcode 99 build-gpu/cpp_tests/fused_ops_tests "[cuda][onepass]" > $L/$tool.txt 2>&1; echo "$tool rc=$?" >> $L/steps.txt
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test cases|assertions" $L/$tool.txt | tail -2 >> $L/steps.txt
done
st ncu
timeout 120 ncu --set full --import-source yes -k regex:onepass_tensor_core_kernel -c 1 -o $L/ncu-windows python3 benchmarks/profile_conv3d_onepass.py --forward-kernels > $L/ncu-run.txt 2>&1; echo "ncu rc=$?" >> $L/steps.txt
ncu --import $L/ncu-windows.ncu-rep --page details --csv > $L/ncu-details.csv 2>/dev/null
grep -E '"(Duration|Registers Per Thread|Achieved Occupancy|Issue Slots Busy|Executed Ipc Active|Compute \(SM\) Throughput|Memory Throughput)"' $L/ncu-details.csv | cut -c1-200 >> $L/steps.txt
st done
grep -v "^+ " $L/steps.txt | tail -70
cd $OUT && tar czf logs2.tgz logs2 && rm -rf logs2
