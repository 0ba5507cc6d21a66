#!/bin/bash
# `make gpu-check`: prepares .gpu/ (fbgemm-gpu's inference libraries, torchrec and the pure-Python wheels a GPU
# machine without network lacks; ../shared/gpu/make_carry.sh, about 36 MB, git-ignored) unless it is there,
# then prints the one command to run on the GPU machine, from the project root copied there with .gpu/.
# make_carry.sh writes .gpu/ into its working folder and notes it in .git/info/exclude, which a git worktree
# (where .git is a file) does not have: it runs in a staging folder of its own, and .gpu/ is moved here.
set -euo pipefail
cd "$(dirname "$0")/../.."
CARRY=$(readlink -f "${GPU_CARRY:-../shared/gpu/make_carry.sh}" 2>/dev/null || true)
if [ ! -f .gpu/fbgemm.tar.xz ] || [ ! -f .gpu/run.sh ]; then
  [ -n "$CARRY" ] && [ -f "$CARRY" ] || { echo "error: make_carry.sh not found at ${GPU_CARRY:-../shared/gpu/make_carry.sh}: set GPU_CARRY=PATH" >&2; exit 2; }
  stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
  mkdir -p "$stage/.git/info"
  (cd "$stage" && bash "$CARRY")
  rm -rf .gpu && mv "$stage/.gpu" .gpu
fi
echo ".gpu/ is ready ($(du -sh .gpu | cut -f1)). On the GPU machine, from the project root (with .gpu/), run:"
echo
echo "  OUT=<a folder to copy back> bash benchmarks/scripts/gpu_check_run.sh"
echo
echo "It runs the cuda-marked tests, then the default CUDA sweep (python -m bench +sweep=quant device=cuda, each job"
echo "also timed replayed from CUDA graphs: timing.cuda_graphs=true), and"
echo "leaves report.md, results.csv, records.jsonl, the tests' output and the GPU probe's caches under \$OUT."
