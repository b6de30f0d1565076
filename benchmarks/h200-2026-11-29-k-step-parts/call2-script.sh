set -x
L=$OUT/logs2; mkdir -p $L
export CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ FUSED_OPS_LIBRARY=$PWD/build-gpu/libfused_ops.so FUSED_OPS_INFER=$PWD/build-gpu/examples/fused_ops_infer PYTHONPATH=$PWD
st() { echo "=== [$(( $(date +%s) - T0 ))s] $*" | tee -a $L/steps.txt; }
T0=$(date +%s)
st microbench
( cd benchmarks/h200-2026-11-29-k-step-parts && nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I../h200-2026-11-29-tile-barrier k_step_parts.cu -o /tmp/ksp && /tmp/ksp ) > $L/k-step-parts.txt 2>&1
cat $L/k-step-parts.txt >> $L/steps.txt
st build koff
OUT=$L/dc tools/device_check.sh build >> $L/steps.txt 2>&1
prof() { python3 benchmarks/profile_conv3d_onepass.py --forward-kernels > $L/k-$1.txt 2>&1; grep -E "kernel|per call|error" $L/k-$1.txt >> $L/steps.txt; }
st prof koff-1; prof koff-1
st prof koff-2; prof koff-2
st tests koff
timeout 200 python3 -m pytest -q -n 8 -k "not cpu" python_tests/test_conv3d_onepass.py > $L/pytest-onepass-koff.txt 2>&1; tail -3 $L/pytest-onepass-koff.txt >> $L/steps.txt
st ncu
NCU=$(which ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 150 $NCU --set full --import-source yes -k regex:"finalize|tensor_core_kernel" -c 2 -o $L/ncu-koff python3 benchmarks/profile_conv3d_onepass.py --forward-kernels > $L/ncu-run.txt 2>&1; tail -5 $L/ncu-run.txt >> $L/steps.txt
$NCU --import $L/ncu-koff.ncu-rep --page details > $L/ncu-details.txt 2>&1
$NCU --import $L/ncu-koff.ncu-rep --page raw --csv > $L/ncu-raw.csv 2>&1
$NCU --import $L/ncu-koff.ncu-rep --page source --csv --print-source sass > $L/ncu-source.csv 2>&1
ls -la $L >> $L/steps.txt
st revert to main
patch -p1 -R < scratch_dev/koff.patch >> $L/steps.txt 2>&1
cmake --build build-gpu -j 16 > $L/build-main.txt 2>&1; tail -2 $L/build-main.txt >> $L/steps.txt
st prof main-1; prof main-1
st prof main-2; prof main-2
patch -p1 < scratch_dev/koff.patch >> $L/steps.txt 2>&1
st done
cat $L/steps.txt | tail -60
cd $OUT && tar czf logs2.tgz logs2 && rm -rf logs2
