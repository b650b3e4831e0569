#!/bin/bash
# One device run (a lent GPU machine, see README "GPU"): the environment, the device
# test suites without CUDA_LAUNCH_BLOCKING (RUNS times, 14 workers), the CUDA-graph
# overhead benchmark and the GPU benchmarks.  Logs go to $OUT (default ./gpu-out).
# Adapted from the shared H100 run's script (gpu-runs/2026-11-26-h100/gpu_check.sh).
#   RUNS=3 TEST_S=200 BENCH_S=240 BENCH="softmax_infer elemwise" bash benchmarks/gpu_check.sh
set -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TENURE_TEST_CUDA=device
nvidia-smi -L
python3 -c "import cupy, numpy, scipy, torch, jax; print('cupy', cupy.__version__, 'numpy', numpy.__version__, 'scipy', scipy.__version__, 'torch', torch.__version__, 'jax', jax.__version__)" 2>&1 | tail -1
gcc --version | head -1
python3 -c "import tenure as tn; print('tenure', tn.__version__)"
SUITES="tests/linkers/cuda tests/symbolic/ops tests/test_contract.py tests/test_transactions.py tests/test_pickle.py tests/test_gpu_benchmark.py"
for i in $(seq 1 "${RUNS:-1}"); do
  T0=$(date +%s)
  timeout "${TEST_S:-200}" python3 -m pytest -q -n 14 -p no:cacheprovider -o addopts="" --dist loadgroup -rfE \
    $SUITES -k "cuda or device or gpu" > "$OUT/tests$i.log" 2>&1
  echo "tests run $i: rc=$? in $(( $(date +%s) - T0 )) s; illegal-address lines: $(grep -ci 'illegal' "$OUT/tests$i.log")"
  grep -E "^(FAILED|ERROR)" "$OUT/tests$i.log" | cut -c1-220 | head -30
  tail -1 "$OUT/tests$i.log"
done
if [ -n "${OVERHEAD-1}" ]; then
  T0=$(date +%s)
  timeout "${OVERHEAD_S:-120}" python3 benchmarks/cuda_graph_overhead.py 2>&1 | tee "$OUT/overhead.log" | grep -v Warning
  echo "overhead rc=$? in $(( $(date +%s) - T0 )) s"
fi
if [ -n "${BENCH-softmax_infer softmax_grad elemwise mlp_train}" ]; then
  T0=$(date +%s)
  timeout "${BENCH_S:-240}" python3 benchmarks/run.py --device cuda \
    --only ${BENCH-softmax_infer softmax_grad elemwise mlp_train} --out "$OUT/bench" > "$OUT/bench.log" 2>&1
  echo "bench rc=$? in $(( $(date +%s) - T0 )) s"
  cat "$OUT"/bench/*.md 2>/dev/null | grep -E "^\||✓|✗" | head -40
fi
