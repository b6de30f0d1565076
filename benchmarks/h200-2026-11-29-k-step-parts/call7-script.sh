L=$OUT/logs7; mkdir -p $L
export CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ FUSED_OPS_LIBRARY=$PWD/build-gpu/libfused_ops.so FUSED_OPS_INFER=$PWD/build-gpu/examples/fused_ops_infer PYTHONPATH=$PWD
T0=$(date +%s)
OUT=$L/dc tools/device_check.sh build > $L/steps.txt 2>&1
echo "=== [$(( $(date +%s) - T0 ))s] bench" >> $L/steps.txt
timeout 170 python3 benchmarks/bench.py --only c3 --skip-compile > $L/bench-c3.txt 2>&1; echo "bench rc=$?" >> $L/steps.txt
echo "=== [$(( $(date +%s) - T0 ))s] done" >> $L/steps.txt
cat $L/steps.txt $L/bench-c3.txt | tail -60
