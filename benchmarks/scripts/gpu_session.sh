#!/bin/bash
# One GPU session on a lent machine (docs/gpu.md): the check (gpu_check_run.sh: the cuda tests and the default CUDA
# sweep), then, while BUDGET_S seconds last, the GPU scale items, each bounded by the time left: the full MLPerf
# DLRM-v2 as fp32 (refused by the memory estimate before any work), INT4 and INT8, then one scale workload (2 GB of
# fp32 tables, zipf ids) at two batch sizes. Each leaves reports-<step>/ and <step>.log under $OUT, and a line in
# session.txt. Exit code: the check's when it fails (nothing else runs then), else 0.
set -uo pipefail
OUT=${OUT:?set OUT to the folder whose contents are copied back}; BUDGET_S=${BUDGET_S:-540}
export BENCH_GPU_CACHE=${BENCH_GPU_CACHE:-/tmp/bench-gpu-cache}
OUT=$OUT bash benchmarks/scripts/gpu_check_run.sh; rc=$?
echo "check: exit $rc at ${SECONDS}s" | tee "$OUT/session.txt"
[ $rc -eq 0 ] || exit $rc
step() {  # step NAME MIN_S ARGS...: `python -m bench ARGS` if at least MIN_S seconds are left, bounded by what is left
  local name=$1 min=$2; shift 2; local left=$((BUDGET_S - SECONDS - 10))
  [ $left -ge $min ] || { echo "$name: skipped, ${left}s left" | tee -a "$OUT/session.txt"; return 0; }
  timeout $left bash .gpu/run.sh "$@" "cache_dir=$BENCH_GPU_CACHE" "reports_dir=$OUT/reports-$name" \
    "hydra.sweep.dir=$OUT/multirun-$name" > "$OUT/$name.log" 2>&1
  echo "$name: exit $? at ${SECONDS}s" | tee -a "$OUT/session.txt"; tail -25 "$OUT/$name.log"
}
step full-fp32 20 model=dlrm_v2_full backend=fp32 device=cuda
step full-uint4 90 model=dlrm_v2_full backend=uint4 device=cuda
step full-int8 120 model=dlrm_v2_full backend=int8_tbe device=cuda
step scale 90 +sweep=scale device=cuda workload.access=zipf workload.table_rows=300000 batch_size=1024,8192
rm -rf "$OUT"/multirun-*
exit 0
