#!/usr/bin/env bash
# One call on the GPU machine: GPU tests, a memcheck/racecheck subset, and the benchmarks.
# Usage (device tool): bash tools/device_check.sh [quick|full|middle] ; results under $OUT.
set -u
usage="usage: bash tools/device_check.sh [quick|full|middle]  (GPU machine; results under \$OUT, default /tmp/out)
  quick:  tests/test_gpu_topk.py (or \$PYTEST_ARGS), bench --quick, bench --host and
          tools/bench_jax.py (where JAX has a GPU)
  full:   the same, memcheck and racecheck of tools/sanitize_subset.py (whole logs kept under
          \$OUT), and the whole bench grid
  middle: a dispatch change at 1-512 rows: the split tests, natively and as compute_80/86/89
          PTX; the bench grid's 1-512-row cases, after the same cases of the tree in .carry/before
          (\`git archive REF | tar -x -C .carry/before\`) where there is one, then --against them;
          the read roof with ours at 1-512 rows; FlashInfer's top_k where .peers/flashinfer is;
          tools/tune_split.py at 16-512 rows (every way to split a row beside the rule's pick)"
mode=${1:-quick}
case "$mode" in
  quick|full|middle) ;;
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

gpu_tests() {  # gpu_tests LOG FILE...: the GPU tests of FILE... with their summary printed
  local log=$1; shift
  python3 -m pytest -m gpu -q --maxfail=8 --tb=short -p no:cacheprovider "$@" 2>&1 | tee "$OUT/$log" | tail -25
}

if [ "$mode" = middle ]; then
  rows=1,6,64,256,512
  python3 -m deepselect_rt.cli warmup > "$OUT/warmup.log" 2>&1; echo "warmup exit $?"
  gpu_tests pytest_split.log -n 8 tests/test_gpu_split.py
  for ptx in compute_80 compute_86 compute_89; do
    echo "== $ptx PTX"
    DEEPSELECT_RT_ARCH=$ptx gpu_tests "pytest_$ptx.log" -n 8 tests/test_gpu_split.py tests/test_gpu_topk.py
  done
  against=()
  if [ -d .carry/before/deepselect_rt ]; then
    echo "== baseline: .carry/before"
    (cd .carry/before && PYTHONPATH=$PWD:/tmp/site python3 -m deepselect_rt.cli bench --rows $rows \
      --json "$OUT/before.json" > "$OUT/before.log" 2>&1); echo "baseline bench exit $?"
    against=(--against "$OUT/before.json")
  fi
  python3 -m deepselect_rt.cli bench --rows $rows --json "$OUT/bench.json" "${against[@]}" 2>&1 \
    | tee "$OUT/bench.log" | tail -40
  python3 tools/read_roof.py --rows 1,8,16,64,512 --widths 16K,64K,256K,1M --ours --json "$OUT/roof.json" 2>&1 \
    | tee "$OUT/roof.log" | tail -30
  if [ -f .peers/flashinfer/run_fi.py ]; then
    python3 .peers/flashinfer/run_fi.py 2>&1 | tee "$OUT/flashinfer.log" | tail -20
  fi
  # Last, as the longest: every way to split a row beside the rule's pick (the dispatch table).
  python3 tools/tune_split.py --rows 16,64,256,512 --widths 64K,256K,1M --json "$OUT/tune.json" 2>&1 \
    | tee "$OUT/tune.log" | tail -30
  exit 0
fi

gpu_tests pytest_gpu.log ${PYTEST_ARGS:-tests/test_gpu_topk.py}

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
