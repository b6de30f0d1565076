set -x
L=$OUT/logs3; mkdir -p $L
export CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ FUSED_OPS_LIBRARY=$PWD/build-gpu/libfused_ops.so FUSED_OPS_INFER=$PWD/build-gpu/examples/fused_ops_infer PYTHONPATH=$PWD
st() { echo "=== [$(( $(date +%s) - T0 ))s] $*" | tee -a $L/steps.txt; }
T0=$(date +%s)
st build
OUT=$L/dc tools/device_check.sh build >> $L/steps.txt 2>&1
st ncu finalize
timeout 150 ncu --set full --import-source yes -k regex:onepass_finalize -c 1 -o $L/ncu-finalize python3 benchmarks/profile_conv3d_onepass.py --forward-kernels > $L/ncu-finalize-run.txt 2>&1; echo "ncu rc=$?" >> $L/steps.txt
ncu --import $L/ncu-finalize.ncu-rep --page source --csv --print-source sass > $L/ncu-finalize-source.csv 2>&1
ncu --import $L/ncu-finalize.ncu-rep --page details > $L/ncu-finalize-details.txt 2>&1
grep -E "Duration|Elapsed Cycles|Executed Ipc|Issue Slots|Warp Cycles Per Issued|Registers Per|Achieved Occ|Executed Instructions  " $L/ncu-finalize-details.txt >> $L/steps.txt
st ncu main source export (call 2's report)
ncu --import scratch_dev/out2/logs2/ncu-windows.ncu-rep --page source --csv --print-source sass > $L/ncu-main-source.csv 2>&1; echo "export rc=$?" >> $L/steps.txt
st prof
python3 benchmarks/profile_conv3d_onepass.py --forward-kernels > $L/k-windows.txt 2>&1; grep -E "kernel|per call" $L/k-windows.txt >> $L/steps.txt
ls -la $L >> $L/steps.txt
st done
grep -v "^+ " $L/steps.txt | tail -50
cd $OUT && tar czf logs3.tgz logs3 && rm -rf logs3
