set -x
L=$OUT/logs3; mkdir -p $L
export CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ FUSED_OPS_LIBRARY=$PWD/build-gpu/libfused_ops.so FUSED_OPS_INFER=$PWD/build-gpu/examples/fused_ops_infer PYTHONPATH=$PWD
st() { echo "=== [$(( $(date +%s) - T0 ))s] $*" | tee -a $L/steps.txt; }
T0=$(date +%s)
st build windows
OUT=$L/dc tools/device_check.sh build >> $L/steps.txt 2>&1
prof() { python3 benchmarks/profile_conv3d_onepass.py --forward-kernels > $L/k-$1.txt 2>&1; grep -E "kernel|per call|error" $L/k-$1.txt >> $L/steps.txt; }
st prof windows-1; prof windows-1
st prof plain-1; FUSED_OPS_ONEPASS_WINDOWS=0 prof plain-1
st prof windows-2; prof windows-2
st prof plain-2; FUSED_OPS_ONEPASS_WINDOWS=0 prof plain-2
st tests windows
timeout 200 python3 -m pytest -q -n 8 -k "not cpu" python_tests/test_conv3d_onepass.py > $L/pytest-onepass-windows.txt 2>&1; tail -5 $L/pytest-onepass-windows.txt >> $L/steps.txt
st ncu windows
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 150 $NCU --set full --import-source yes -k regex:"tensor_core_kernel" -c 1 -o $L/ncu-windows python3 benchmarks/profile_conv3d_onepass.py --forward-kernels > $L/ncu-run.txt 2>&1; tail -3 $L/ncu-run.txt >> $L/steps.txt
$NCU --import $L/ncu-windows.ncu-rep --page details > $L/ncu-details.txt 2>&1
$NCU --import $L/ncu-windows.ncu-rep --page raw --csv > $L/ncu-raw.csv 2>&1
$NCU --import $L/ncu-windows.ncu-rep --page source --csv --print-source sass > $L/ncu-source.csv 2>&1
rm -f $L/ncu-windows.ncu-rep
st done
cat $L/steps.txt | grep -v "^+" | tail -40
cd $OUT && tar czf logs3.tgz logs3 && rm -rf logs3
