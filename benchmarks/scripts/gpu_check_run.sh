#!/bin/bash
# On the GPU machine, from the project root with .gpu/ (`make gpu-check` prepares it): the cuda-marked tests,
# then the default CUDA sweep, `python -m bench +sweep=quant device=cuda timing.cuda_graphs=true` (21 jobs with the
# GPU image's packages; each CUDA job also timed replayed from CUDA graphs), leaving under $OUT: report.md, results.csv and records.jsonl of the sweep, cuda-tests.txt,
# sweep.log and the GPU probe's and roofline's caches (kernels/, roofline/). Exit code: the sweep's.
set -uo pipefail
OUT=${OUT:?set OUT to the folder whose contents are copied back}
mkdir -p "$OUT"
CACHE=${BENCH_GPU_CACHE:-/tmp/bench-gpu-cache}
bash .gpu/run.sh > "$OUT/stack.txt" 2>&1 || { cat "$OUT/stack.txt"; exit 1; }  # installs into /tmp/site once; prints the GPU and stack
cat "$OUT/stack.txt"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pytest -m cuda -p no:randomly -p no:cacheprovider -q tests/test_row_layout.py tests/test_cuda.py tests/test_cuda_graph.py 2>&1 | tail -40 > "$OUT/cuda-tests.txt"
tail -5 "$OUT/cuda-tests.txt"
bash .gpu/run.sh +sweep=quant device=cuda timing.cuda_graphs=true "cache_dir=$CACHE" "reports_dir=$OUT/reports" "hydra.sweep.dir=$OUT/multirun" > "$OUT/sweep.log" 2>&1
rc=$?
tail -30 "$OUT/sweep.log"
latest=$(ls -d "$OUT"/reports/quant/2* 2>/dev/null | tail -1)
[ -n "$latest" ] && cp "$latest"/report.md "$latest"/results.csv "$latest"/records.jsonl "$OUT"/ 2>/dev/null
mkdir -p "$OUT/kernels" "$OUT/roofline"
cp "$CACHE"/timing/*kernels.json "$OUT/kernels/" 2>/dev/null; cp "$CACHE"/roofline/*.json "$OUT/roofline/" 2>/dev/null
rm -rf "$OUT/multirun"
exit $rc
