set -x
L=$OUT/logs5; mkdir -p $L
export CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ FUSED_OPS_LIBRARY=$PWD/build-gpu/libfused_ops.so FUSED_OPS_INFER=$PWD/build-gpu/examples/fused_ops_infer PYTHONPATH=$PWD
st() { echo "=== [$(( $(date +%s) - T0 ))s] $*" | tee -a $L/steps.txt; }
T0=$(date +%s)
st build
OUT=$L/dc tools/device_check.sh build >> $L/steps.txt 2>&1
prof() { python3 benchmarks/profile_conv3d_onepass.py --forward-kernels > $L/k-$1.txt 2>&1; grep -E "kernel|per call|error|Error" $L/k-$1.txt >> $L/steps.txt; }
st prof own-1; prof own-1
st prof separate-1; FUSED_OPS_ONEPASS_OWN_FINALIZE=0 prof separate-1
st prof own-2; prof own-2
st prof separate-2; FUSED_OPS_ONEPASS_OWN_FINALIZE=0 prof separate-2
MODE=$(python3 - "$L" <<'PY'
import sys, re, glob
def per_call(name):
    v = []
    for f in glob.glob(f"{sys.argv[1]}/k-{name}-*.txt"):
        m = re.search(r"forward per call ms \(3 x 50 calls\): (.*)", open(f).read())
        if m:
            v += [float(x) for x in m.group(1).split()]
    return sum(v) / len(v) if v else 1e9
own, sep = per_call("own"), per_call("separate")
print("own" if own < sep else "separate")
PY
)
st "chosen: $MODE"
[ "$MODE" = separate ] && export FUSED_OPS_ONEPASS_OWN_FINALIZE=0
st bench c3
timeout 120 python3 benchmarks/bench.py --only c3 --skip-compile > $L/bench-c3.txt 2>&1; echo "bench rc=$?" >> $L/steps.txt
grep -E "fused +[0-9]|eager +[0-9]" $L/bench-c3.txt | head -8 >> $L/steps.txt
st catch2 cuda
timeout 100 build-gpu/cpp_tests/fused_ops_tests "[cuda]" > $L/catch2-cuda.txt 2>&1; echo "catch2 rc=$?" >> $L/steps.txt; tail -2 $L/catch2-cuda.txt >> $L/steps.txt
st sanitizers onepass
for tool in memcheck racecheck; do
  extra=""; [ $tool = racecheck ] && extra="--kernel-name kns=fused_ops"
  timeout 80 compute-sanitizer --tool $tool $extra --error-exitcode 99 build-gpu/cpp_tests/fused_ops_tests "[cuda][onepass]" > $L/$tool.txt 2>&1; echo "$tool rc=$?" >> $L/steps.txt
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|test cases|assertions" $L/$tool.txt | tail -2 >> $L/steps.txt
done
left=$(( 560 - ($(date +%s) - T0) ))
st "whole CUDA pytest (timeout $left s)"
timeout $left python3 -m pytest -q -rs -n 8 -k "not cpu" python_tests > $L/pytest-cuda.txt 2>&1; echo "pytest rc=$?" >> $L/steps.txt
tail -4 $L/pytest-cuda.txt >> $L/steps.txt
grep -E "^FAILED|^ERROR" $L/pytest-cuda.txt | head -20 >> $L/steps.txt
st done
grep -v "^+ " $L/steps.txt | tail -70
cd $OUT && tar czf logs5.tgz logs5 && rm -rf logs5
