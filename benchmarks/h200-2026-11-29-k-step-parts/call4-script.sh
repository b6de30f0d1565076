set -x
L=$OUT/logs4; mkdir -p $L
export CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ FUSED_OPS_LIBRARY=$PWD/build-gpu/libfused_ops.so FUSED_OPS_INFER=$PWD/build-gpu/examples/fused_ops_infer PYTHONPATH=$PWD
st() { echo "=== [$(( $(date +%s) - T0 ))s] $*" | tee -a $L/steps.txt; }
T0=$(date +%s)
st build
OUT=$L/dc tools/device_check.sh build >> $L/steps.txt 2>&1
prof() { python3 benchmarks/profile_conv3d_onepass.py --forward-kernels > $L/k-$1.txt 2>&1; grep -E "kernel|per call|error" $L/k-$1.txt >> $L/steps.txt; }
st prof windows-1; prof windows-1
st prof plain-1; FUSED_OPS_ONEPASS_WINDOWS=0 prof plain-1
st prof windows-2; prof windows-2
st prof plain-2; FUSED_OPS_ONEPASS_WINDOWS=0 prof plain-2
st tests onepass
timeout 200 python3 -m pytest -q -n 8 -k "not cpu" python_tests/test_conv3d_onepass.py > $L/pytest-onepass.txt 2>&1; tail -5 $L/pytest-onepass.txt >> $L/steps.txt
st numerics headline Conv3d
timeout 200 python3 -m pytest -q -rP -k "headline_contract and Conv3dGroupNormMean" python_tests/test_numerics_contract.py > $L/pytest-headline.txt 2>&1; grep -E "fused error|passed|failed" $L/pytest-headline.txt >> $L/steps.txt
st numerics headline Conv3d windows off
FUSED_OPS_ONEPASS_WINDOWS=0 timeout 200 python3 -m pytest -q -rP -k "headline_contract and Conv3dGroupNormMean and inference" python_tests/test_numerics_contract.py > $L/pytest-headline-plain.txt 2>&1; grep -E "fused error|passed|failed" $L/pytest-headline-plain.txt >> $L/steps.txt
st done
grep -v "^+ " $L/steps.txt | tail -60
cd $OUT && tar czf logs4.tgz logs4 && rm -rf logs4
