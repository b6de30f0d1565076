set -x
L=$OUT/logs4; mkdir -p $L
export CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ FUSED_OPS_LIBRARY=$PWD/build-gpu/libfused_ops.so FUSED_OPS_INFER=$PWD/build-gpu/examples/fused_ops_infer PYTHONPATH=$PWD
st() { echo "=== [$(( $(date +%s) - T0 ))s] $*" | tee -a $L/steps.txt; }
T0=$(date +%s)
F=ops/conv/conv3d_group_norm_mean_onepass_cuda.cu
st build VQ
OUT=$L/dc tools/device_check.sh build >> $L/steps.txt 2>&1
prof() { python3 benchmarks/profile_conv3d_onepass.py --forward-kernels > $L/k-$1.txt 2>&1; grep -E "kernel|per call|error|Error" $L/k-$1.txt >> $L/steps.txt; }
st prof VQ-1; prof VQ-1
st "prof VQ-nodep"; FUSED_OPS_ONEPASS_DEPENDENT_FINALIZE=0 prof VQ-nodep
st prof VQ-2; prof VQ-2
st bench c3 VQ
timeout 120 python3 benchmarks/bench.py --only c3 --skip-compile > $L/bench-c3-VQ.txt 2>&1; echo "bench rc=$?" >> $L/steps.txt
grep -E "fused +[0-9]" $L/bench-c3-VQ.txt | head -4 >> $L/steps.txt
st pytest onepass VQ
timeout 150 python3 -m pytest -q -rs -n 8 -k "not cpu" python_tests/test_conv3d_onepass.py python_tests/test_numerics_contract.py > $L/pytest-onepass.txt 2>&1; echo "pytest rc=$?" >> $L/steps.txt
tail -2 $L/pytest-onepass.txt >> $L/steps.txt
grep -E "^FAILED|^ERROR" $L/pytest-onepass.txt | head -20 >> $L/steps.txt
st ncu finalize inference
timeout 100 ncu --set full --import-source yes -k regex:onepass_finalize --launch-skip 2 -c 1 -o $L/ncu-finalize python3 scratch_dev/fwd_only.py > $L/ncu-finalize-run.txt 2>&1; echo "ncu rc=$?" >> $L/steps.txt
ncu --import $L/ncu-finalize.ncu-rep --page source --csv --print-source sass > $L/ncu-finalize-source.csv 2>&1
ncu --import $L/ncu-finalize.ncu-rep --page details > $L/ncu-finalize-details.txt 2>&1
grep -E "Duration|Elapsed Cycles|Warp Cycles Per Issued|Executed Instructions  " $L/ncu-finalize-details.txt >> $L/steps.txt
for v in VP V0; do
  st "rebuild $v"
  cp scratch_dev/$v.cu $F
  ninja -C build-gpu > $L/rebuild-$v.txt 2>&1; echo "ninja rc=$?" >> $L/steps.txt
  st prof $v-1; prof $v-1
  st prof $v-2; prof $v-2
done
cp scratch_dev/VQ.cu $F
st done
grep -v "^+ " $L/steps.txt | tail -70
cd $OUT && tar czf logs4.tgz logs4 && rm -rf logs4
