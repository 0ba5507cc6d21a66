"""A backend option set beside a swept backend group (`backend=int8_tbe,uint4 backend.mlp=fp32`): run in every job
when every swept backend has it, else refused in one line that names the backends that have it and the command
that sweeps them (exit 2, no Hydra traceback, nothing run)."""

import json

import pytest

from bench import preflight
from tests.conftest import run_bench


def _common(tmp_path):
    return [f"cache_dir={tmp_path / 'cache'}", f"reports_dir={tmp_path / 'reports'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"]


def _one_line_refusal(result) -> str:
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr and "Could not override" not in result.stderr
    assert not (result.stdout.strip()), result.stdout
    return lines[0]


@pytest.mark.slow
def test_a_key_every_swept_backend_has_runs_in_every_job(tmp_path):
    result = run_bench("-m", "+preset=tiny", "backend=int8_tbe,uint4", "backend.mlp=fp32", *_common(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in sorted((tmp_path / "sweep").glob("*/record.json"))]
    assert sorted(r["backend"] for r in records) == ["int8_tbe", "uint4"]
    for r in records:
        assert r["status"] == "ok", r.get("error")
        assert r["config"]["backend"]["mlp"] == "fp32" and r["metrics"]["dense_path"] == "fp32"


def test_a_key_some_swept_backends_lack_is_refused_in_one_line_naming_the_sweep_that_works(tmp_path):
    line = _one_line_refusal(run_bench("-m", "+preset=tiny", "backend=fp32,int8_tbe", "backend.mlp=fp32", *_common(tmp_path)))
    assert "backend.mlp=fp32: backend fp32 has no option 'mlp' (int8_tbe has it)" in line
    assert "python -m bench -m +preset=tiny backend=int8_tbe backend.mlp=fp32" in line
    assert not (tmp_path / "reports").exists()


def test_a_sweep_config_s_backends_are_checked_too(tmp_path):
    line = _one_line_refusal(run_bench("+sweep=quant", "+preset=tiny", "backend.mlp=fp32", *_common(tmp_path)))
    assert "backend fp32 has no option 'mlp' (" in line and "int8_tbe" in line and "uint4" in line and "backend=" in line


def test_a_key_no_swept_backend_has_is_refused_with_the_closest_option(tmp_path):
    line = _one_line_refusal(run_bench("-m", "+preset=tiny", "backend=int8_tbe,uint4", "backend.mlpp=fp32", *_common(tmp_path)))
    assert "no backend of this sweep has the option 'mlpp'" in line and "did you mean backend.mlp?" in line


@pytest.mark.parametrize(("argv", "ready"), [
    (["-m", "backend=int8_tbe,uint4", "backend.mlp=fp32"], ["-m", "backend=int8_tbe,uint4", "backend.mlp=choice(fp32)"]),
    (["-m", "backend=int8_tbe", "backend.mlp=fp32"], ["-m", "backend=int8_tbe", "backend.mlp=fp32"]),  # nothing swept: as it is
    (["backend=uint4", "backend.mlp=fp32", "batch_size=1,2"], ["backend=uint4", "backend.mlp=fp32", "batch_size=1,2"]),
    (["-m", "backend=int8_tbe,uint4", "backend.mlp=fp32,int8"], ["-m", "backend=int8_tbe,uint4", "backend.mlp=fp32,int8"]),  # already a sweep
])  # fmt: skip
def test_sweep_ready_makes_the_key_a_one_value_sweep_only_beside_a_swept_backend(argv, ready):
    assert preflight.sweep_ready(argv) == ready
