set -x
L=$OUT/logs5; mkdir -p $L
export CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ FUSED_OPS_LIBRARY=$PWD/build-gpu/libfused_ops.so FUSED_OPS_INFER=$PWD/build-gpu/examples/fused_ops_infer PYTHONPATH=$PWD
st() { echo "=== [$(( $(date +%s) - T0 ))s] $*" | tee -a $L/steps.txt; }
T0=$(date +%s)
st build
OUT=$L/dc tools/device_check.sh build >> $L/steps.txt 2>&1
prof() { python3 benchmarks/profile_conv3d_onepass.py --forward-kernels > $L/k-$1.txt 2>&1; grep -E "kernel|per call|error" $L/k-$1.txt >> $L/steps.txt; }
st prof windows-1; prof windows-1
st prof plain-1; FUSED_OPS_ONEPASS_WINDOWS=0 prof plain-1
st prof windows-2; prof windows-2
st tests onepass
timeout 200 python3 -m pytest -q -n 8 -k "not cpu" python_tests/test_conv3d_onepass.py > $L/pytest-onepass.txt 2>&1; tail -4 $L/pytest-onepass.txt >> $L/steps.txt
st tests onepass TMA=0
FUSED_OPS_ONEPASS_TMA=0 timeout 100 python3 -m pytest -q -n 8 -k "not cpu" python_tests/test_conv3d_onepass.py > $L/pytest-onepass-tma0.txt 2>&1; tail -2 $L/pytest-onepass-tma0.txt >> $L/steps.txt
st numerics headline Conv3d
timeout 200 python3 -m pytest -q -rP -k "headline_contract and Conv3dGroupNormMean" python_tests/test_numerics_contract.py > $L/pytest-headline.txt 2>&1; grep -E "fused error|passed|failed" $L/pytest-headline.txt >> $L/steps.txt
st scale test
timeout 100 python3 -m pytest -q -rA -k "scales_as_accurate" python_tests/test_conv3d_onepass.py > $L/pytest-scales.txt 2>&1; grep -E "PASS|FAIL|XFAIL|XPASS|passed|failed" $L/pytest-scales.txt | tail -8 >> $L/steps.txt
st sanitizers onepass
for tool in memcheck racecheck synccheck; do
  extra=""; [ $tool = racecheck ] && extra="--kernel-name kns=fused_ops"
  timeout 150 compute-sanitizer --tool $tool $extra --error-exitcode 99 build-gpu/cpp_tests/fused_ops_tests "[cuda][onepass]" > $L/$tool.txt 2>&1; echo "$tool rc=$?" >> $L/steps.txt
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test cases|assertions" $L/$tool.txt | tail -2 >> $L/steps.txt
done
st ncu finalize
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 100 $NCU --set full -k regex:"finalize" -c 1 python3 benchmarks/profile_conv3d_onepass.py --forward-kernels > $L/ncu-finalize.txt 2>&1; grep -E "Duration|Elapsed Cycles|Issued Instructions  |SM Frequency" $L/ncu-finalize.txt >> $L/steps.txt
st done
grep -v "^+ " $L/steps.txt | tail -80
cd $OUT && tar czf logs5.tgz logs5 && rm -rf logs5
