set -x
L=$OUT/logs1; mkdir -p $L
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $L/gpu.txt 2>&1
cd benchmarks/h200-2026-11-29-k-step-parts
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I../h200-2026-11-29-tile-barrier k_step_parts.cu -o /tmp/ksp && /tmp/ksp > $L/k-step-parts.txt 2>&1
/tmp/ksp > $L/k-step-parts-2.txt 2>&1
cd ..
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a tf32_accumulation_bias.cu -o /tmp/bias && /tmp/bias > $L/tf32-accumulation-bias.txt 2>&1
cat $L/*.txt
