"""`make gpu-check` (benchmarks/scripts/gpu_check.sh) and the command it prints (gpu_check_run.sh), run with stand-ins
for make_carry.sh and for .gpu/run.sh: the GPU machine, its wheels and its sweep are not here."""

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "benchmarks" / "scripts"


def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "benchmarks" / "scripts").mkdir(parents=True)
    for name in ("gpu_check.sh", "gpu_check_run.sh", "gpu_session.sh"):
        shutil.copy(SCRIPTS / name, root / "benchmarks" / "scripts" / name)
    return root


def stub(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "make_carry.sh"
    path.write_text("#!/bin/bash\nset -euo pipefail\n" + body)
    return path


CARRY = """grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
mkdir -p .gpu/wheels && echo x > .gpu/fbgemm.tar.xz && echo 'echo ran "$@"' > .gpu/run.sh
"""


def check(root: Path, carry: Path):
    return subprocess.run(["bash", str(root / "benchmarks/scripts/gpu_check.sh")], env={**os.environ, "GPU_CARRY": str(carry)},
                          capture_output=True, text=True, timeout=60)


def test_gpu_check_prepares_the_carry_once_and_prints_the_command(tmp_path):
    root = project(tmp_path)
    done = check(root, stub(tmp_path, CARRY))
    assert done.returncode == 0, done.stderr
    assert (root / ".gpu" / "fbgemm.tar.xz").exists() and (root / ".gpu" / "run.sh").exists()
    assert "  OUT=<a folder to copy back> bash benchmarks/scripts/gpu_check_run.sh" in done.stdout.splitlines()
    again = check(root, stub(tmp_path, "exit 7\n"))  # .gpu/ is there: the carry is not built again
    assert again.returncode == 0 and "bash benchmarks/scripts/gpu_check_run.sh" in again.stdout


def test_gpu_check_without_make_carry_is_one_line_and_exit_2(tmp_path):
    done = check(project(tmp_path), tmp_path / "missing.sh")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "set GPU_CARRY=PATH" in done.stderr


# .gpu/run.sh as on the GPU machine: without arguments it names the stack; with them it runs `python -m bench`, here
# leaving a sweep's files that hold its arguments (and failing with SWEEP_RC when that is set)
GPU_RUN = """[ $# -eq 0 ] && { echo 'NVIDIA H100 80GB HBM3'; exit 0; }
for a in "$@"; do case $a in reports_dir=*) r=${a#reports_dir=};; cache_dir=*) c=${a#cache_dir=};; esac; done
mkdir -p "$r/quant/2026-01-01T00-00-00" "$c/timing" "$c/roofline"
for f in report.md results.csv records.jsonl; do echo "$*" > "$r/quant/2026-01-01T00-00-00/$f"; done
echo '{}' > "$c/timing/abc-cuda-kernels.json"; echo '{}' > "$c/roofline/fp-cuda.json"
exit ${SWEEP_RC:-0}
"""


def gpu_project(tmp_path: Path) -> Path:
    root = project(tmp_path)
    (root / ".gpu").mkdir()
    (root / ".gpu" / "run.sh").write_text(GPU_RUN)
    return root


def test_the_gpu_command_leaves_the_sweep_s_outputs_under_out(tmp_path):
    root = gpu_project(tmp_path)
    out = tmp_path / "out"
    done = subprocess.run(["bash", "benchmarks/scripts/gpu_check_run.sh"], cwd=root, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OUT": str(out), "BENCH_GPU_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("report.md", "results.csv", "records.jsonl"):
        assert "+sweep=quant device=cuda" in (out / name).read_text()
    assert (out / "stack.txt").read_text().startswith("NVIDIA H100") and (out / "cuda-tests.txt").exists()
    assert (out / "kernels" / "abc-cuda-kernels.json").exists() and (out / "roofline" / "fp-cuda.json").exists()


def session(tmp_path: Path, budget_s: int, **env):
    out = tmp_path / "out"
    done = subprocess.run(["bash", "benchmarks/scripts/gpu_session.sh"], cwd=gpu_project(tmp_path), capture_output=True,
                          text=True, timeout=120, env={**os.environ, "OUT": str(out), "BUDGET_S": str(budget_s),
                                                       "BENCH_GPU_CACHE": str(tmp_path / "cache"), **env})
    return done, out


def test_the_gpu_session_runs_the_check_then_the_scale_steps_while_time_lasts(tmp_path):
    done, out = session(tmp_path, 3600)
    assert done.returncode == 0, done.stdout + done.stderr
    steps = [line.split(":")[0] for line in (out / "session.txt").read_text().splitlines()]
    assert steps == ["check", "full-fp32", "full-uint4", "full-int8", "scale"]
    assert "model=dlrm_v2_full backend=uint4 device=cuda" in (out / "reports-full-uint4" / "quant" / "2026-01-01T00-00-00"
                                                               / "records.jsonl").read_text()
    assert "+sweep=scale device=cuda" in next((out / "reports-scale").rglob("records.jsonl")).read_text()
    assert (out / "report.md").exists() and not list(out.glob("multirun-*"))


def test_the_gpu_session_skips_what_its_time_cannot_hold(tmp_path):
    done, out = session(tmp_path, 60)  # at most 50 s left after the check: the fp32 refusal (20 s) fits, nothing after it
    # (90 s and more) does, however fast or slow the stand-in check runs up to 30 s
    assert done.returncode == 0, done.stdout + done.stderr
    lines = (out / "session.txt").read_text().splitlines()
    assert [line.split(":")[0] for line in lines] == ["check", "full-fp32", "full-uint4", "full-int8", "scale"]
    assert all("skipped" in line for line in lines[2:]) and "skipped" not in lines[1]
    assert not (out / "reports-full-uint4").exists()


def test_a_failing_gpu_check_ends_the_session_with_its_exit_code(tmp_path):
    done, out = session(tmp_path, 3600, SWEEP_RC="3")
    assert done.returncode == 3
    assert [line.split(" at ")[0] for line in (out / "session.txt").read_text().splitlines()] == ["check: exit 3"]
    assert not list(out.glob("reports-*"))
