#!/usr/bin/env bash
# One call on the GPU machine: GPU tests, a memcheck/racecheck subset, and the benchmarks.
# Usage (device tool): bash tools/device_check.sh [quick|full] ; results under $OUT.
set -u
usage="usage: bash tools/device_check.sh [quick|full]  (GPU machine; results under \$OUT, default /tmp/out)
  quick: tests/test_gpu_topk.py (or \$PYTEST_ARGS), bench --quick, bench --host and
         tools/bench_jax.py (where JAX has a GPU)
  full:  the same, memcheck and racecheck of tools/sanitize_subset.py (whole logs kept under
         \$OUT), and the whole bench grid"
mode=${1:-quick}
case "$mode" in
  quick|full) ;;
  -h|--help) echo "$usage"; exit 0 ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
if ! command -v nvidia-smi >/dev/null; then
  echo "tools/device_check.sh needs an NVIDIA GPU (no nvidia-smi here)" >&2
  exit 1
fi
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1
export DEEPSELECT_RT_FIXTURES=$PWD/.carry/fixtures
export DEEPSELECT_RT_CACHE_DIR=/tmp/ds-cache XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
git rev-parse --short HEAD 2>/dev/null | tee -a "$OUT/gpu.txt"

python3 -m pytest -m gpu -q --maxfail=8 --tb=short -p no:cacheprovider ${PYTEST_ARGS:-tests/test_gpu_topk.py} 2>&1 | tee "$OUT/pytest_gpu.log" | tail -25

if [ "$mode" = full ]; then
  # Whole logs under $OUT, their ends printed: a report cut off by a time limit stays readable.
  compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 python3 tools/sanitize_subset.py > "$OUT/memcheck.log" 2>&1
  echo "memcheck exit $?"; tail -5 "$OUT/memcheck.log"
  compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 9 python3 tools/sanitize_subset.py > "$OUT/racecheck.log" 2>&1
  echo "racecheck exit $?"; tail -5 "$OUT/racecheck.log"
fi
if [ "$mode" = full ]; then grid=""; else grid="--quick"; fi
python3 -m deepselect_rt.cli bench $grid --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log" | tail -60
python3 -m deepselect_rt.cli bench --host --rows 1 --width 16K --k 512 --dtype bfloat16 --json "$OUT/host.json" 2>&1 | tee "$OUT/host.log" | tail -16
python3 tools/bench_jax.py --json "$OUT/bench_jax.json" 2>&1 | tee "$OUT/bench_jax.log" | tail -22
