"""The pytest-benchmark suites: they collect and run in quick mode, their JSON carries the stack and the
derived rates, `python -m bench.report F.json` renders it, and `--benchmark-compare-fail` works against
a saved run; the suites' compare hook refuses a run from another stack.

Each suite run is a `pytest benchmarks/suites/ ...` subprocess, as a user runs it, with this tree's `bench` first
on PYTHONPATH. Quick mode: tiny grids and the tiny gate config; timings are not asserted.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import torch

from bench import registry
from bench.errors import UserError
from bench.report.__main__ import main as report_main
from tests.support.backends import make_backend as make
from tests.support.load_file import load_file
from bench.report.benchmark_json import (
    benchmark_rows,
    load_benchmark_json,
    render_benchmarks_markdown,
)

REPO = Path(__file__).resolve().parents[1]
SUITES = REPO / "benchmarks" / "suites"
QUIET = ["-p", "no:cacheprovider", "-q", "-W", "ignore::DeprecationWarning", "-W", "ignore::UserWarning"]
ONE_ROUND = ["--benchmark-min-rounds=1", "--benchmark-max-time=0", "--benchmark-warmup=off"]
# FBGEMM row bytes at dim 16 (the quick grid's): FP32 4D, FP16 2D, INT8 D+4, INT4 D/2+4, INT2 D/4+4.
ROW_BYTES_D16 = {"fp32": 64, "fp16": 32, "int8": 20, "int4": 12, "int2": 8}

pytestmark = pytest.mark.slow


def run_suites(*args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    env.pop("BENCH_SUITES_QUICK", None)
    for name in [n for n in env if n.startswith("PYTEST_XDIST")]:  # under `make test`'s workers: pytest-benchmark
        env.pop(name)  # reads PYTEST_XDIST_WORKER as "xdist is on" and turns every benchmark off
    cmd = [sys.executable, "-m", "pytest", *args, "--suites-quick", *QUIET]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def runnable_backends() -> list[str]:
    """Every registered backend but a toolkit one whose extra is not installed here (Quark lives in its
    own environment): the suites skip those, naming the install."""
    cpu = torch.device("cpu")
    return [n for n in registry.names("backend") if not (registry.get("backend", n).toolkit and make(n).unsupported_reason(cpu))]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """Every suite in quick mode, one timed round each, saved to a storage folder and a JSON file."""
    work = tmp_path_factory.mktemp("suites")
    (work / "out").mkdir()  # pytest-benchmark does not create the JSON's folder
    proc = run_suites(
        str(SUITES), *ONE_ROUND, f"--benchmark-json={work / 'out' / 'bench.json'}",
        f"--benchmark-storage=file://{work / 'storage'}", "--benchmark-save=base", cwd=work,
    )  # fmt: skip
    return work, proc


def test_quick_run_passes(quick_run):
    _, proc = quick_run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout and "error" not in proc.stdout.lower().split("warnings")[0]


def test_json_holds_every_case_with_stack_and_rates(quick_run):
    work, proc = quick_run
    assert proc.returncode == 0, proc.stdout[-4000:]
    data = load_benchmark_json(work / "out" / "bench.json")
    info = data["machine_info"]
    for key in ("torch", "torchrec", "fbgemm_gpu"):
        assert info[key] and info["bench"][key] == info[key]
    assert info["bench"]["fingerprint"] and info["bench"]["threads"] >= 1

    by_test: dict[str, list[dict]] = {}
    for b in data["benchmarks"]:
        by_test.setdefault(b["name"].split("[")[0], []).append(b)
    tbe, mlp, forward = by_test["test_tbe_lookup"], by_test["test_mlp"], by_test["test_forward"]
    assert sorted(b["params"]["weight_type"] for b in tbe) == sorted(ROW_BYTES_D16)
    for b in tbe:
        x = b["extra_info"]
        assert x["row_bytes"] == ROW_BYTES_D16[x["weight_type"]]
        assert x["bytes_read"] == x["batch_size"] * x["pooling"] * x["tables"] * x["row_bytes"]
        assert x["gbps"] == pytest.approx(x["bytes_read"] / b["stats"]["median"] / 1e9)
    assert {b["params"]["precision"] for b in mlp} == {"fp32", "int8"}
    assert all(b["extra_info"]["gflops"] > 0 for b in mlp)
    assert next(b for b in mlp if b["params"]["precision"] == "int8")["extra_info"]["rel_error_vs_fp32"] < 0.1
    assert {b["params"]["backend_name"] for b in forward} == set(runnable_backends())
    for b in forward:
        x = b["extra_info"]
        assert x["batch_size"] == b["params"]["batch_size"] and x["samples_per_s"] > 0 and x["embedding_bytes"] > 0


def test_gate_ran_per_backend(quick_run):
    _, proc = quick_run
    assert proc.returncode == 0, proc.stdout[-4000:]
    # the gate tests carry no benchmark: they are in the pass count, not in the JSON
    n_benchmarks = len(load_benchmark_json(quick_run[0] / "out" / "bench.json")["benchmarks"])
    passed = int(proc.stdout.strip().splitlines()[-1].split(" passed")[0].split()[-1])
    assert passed == n_benchmarks + len(registry.names("backend"))  # the quick gate gates every backend, as the full one


def test_report_renders_benchmark_json(quick_run, capsys):
    work, proc = quick_run
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert report_main([str(work / "out" / "bench.json")]) == 0
    md = (work / "out" / "benchmarks.md").read_text()
    assert f"benchmarks: {work / 'out' / 'benchmarks.md'}" in capsys.readouterr().out
    for text in ("## tbe rows=1000 pooling=2", "## forward bs=64", "GB/s", "samples/s", "rel. error vs fp32", f"fbgemm_gpu {version('fbgemm-gpu-cpu')}"):
        assert text in md, text
    assert md.count("| test_forward |") == len(runnable_backends())


# --------------------------------------------------------------------- reader, without a suite run


def _fake(median: float = 0.002, **extra) -> dict:
    bench = {
        "group": "g", "name": "test_x[a1]", "fullname": "benchmarks/suites/t.py::test_x[a1]", "params": {"a": 1},
        "extra_info": extra, "stats": {"median": median, "iqr": 0.0001, "ops": 480.0, "rounds": 7},
    }  # fmt: skip
    return {"machine_info": {"torch": "2.13.0"}, "commit_info": {"id": "abc", "dirty": True}, "benchmarks": [bench], "version": "5.3.1"}


def test_reader_derives_rates_and_picks_units():
    rows = benchmark_rows(_fake(bytes_read=4e6, batch_size=1000))
    assert rows[0]["extra_info"]["gbps"] == pytest.approx(2.0) and rows[0]["extra_info"]["samples_per_s"] == pytest.approx(5e5)
    md = render_benchmarks_markdown(_fake(bytes_read=4e6, batch_size=1000))
    assert "median (ms)" in md and "| test_x | a=1 | 2.000 | 0.100 | 480.0 | 7 | 1,000 | 2.00 | 500,000 |" in md
    assert "dirty tree" in md


def test_reader_refuses_what_it_cannot_read(tmp_path):
    bad = tmp_path / "bad.json"
    for text, message in [("{", "not JSON"), ('{"a": 1}', "not a pytest-benchmark file"), ('{"machine_info": {}, "benchmarks": []}', "holds no benchmarks")]:
        bad.write_text(text)
        with pytest.raises(UserError, match=message):
            load_benchmark_json(bad)
    assert report_main([str(tmp_path / "missing.json")]) == 2
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_fake()))
    assert report_main([str(good), "--baseline", str(tmp_path)]) == 2


# --------------------------------------------------------------------- compare against a saved run


def _saved(work: Path) -> Path:
    (path,) = (work / "storage").glob("*/0001_base.json")
    return path


def _save_variant(saved: Path, number: int, name: str, scale: float) -> None:
    data = json.loads(saved.read_text())
    variant = copy.deepcopy(data)
    for b in variant["benchmarks"]:
        for key in ("min", "max", "mean", "median", "q1", "q3"):
            b["stats"][key] *= scale
    (saved.parent / f"{number:04d}_{name}.json").write_text(json.dumps(variant))


def test_compare_fail_against_a_saved_run(quick_run):
    """A baseline 1000x faster than now fails median:50%; one 1000x slower passes."""
    work, proc = quick_run
    assert proc.returncode == 0, proc.stdout[-4000:]
    saved = _saved(work)
    _save_variant(saved, 2, "fast", scale=1e-3)
    _save_variant(saved, 3, "slow", scale=1e3)
    one = [str(SUITES / "test_kernels.py"), "-k", "test_mlp and fp32", *ONE_ROUND, f"--benchmark-storage=file://{work / 'storage'}"]

    regressed = run_suites(*one, "--benchmark-compare=0002", "--benchmark-compare-fail=median:50%", cwd=work)
    assert regressed.returncode != 0 and "Performance has regressed" in regressed.stdout + regressed.stderr

    fine = run_suites(*one, "--benchmark-compare=0003", "--benchmark-compare-fail=median:50%", cwd=work)
    assert fine.returncode == 0, fine.stdout[-3000:] + fine.stderr[-2000:]


def test_compare_refuses_another_stack(quick_run):
    """The suites' compare hook raises on a saved run from another torch/torchrec/fbgemm or machine fingerprint."""
    work, proc = quick_run
    assert proc.returncode == 0, proc.stdout[-4000:]
    suites_conftest = load_file("suites_conftest", SUITES / "conftest.py")
    saved = json.loads(_saved(work).read_text())
    same = copy.deepcopy(saved["machine_info"])
    suites_conftest.pytest_benchmark_compare_machine_info(None, None, same, saved)  # same stack: no error
    for key, value in [("torch", "0.0.0"), ("fbgemm_gpu", "0.0.0"), ("fingerprint", "elsewhere")]:
        other = copy.deepcopy(same)
        other["bench"][key] = value
        with pytest.raises(pytest.UsageError, match=f"refusing to compare.*{key}"):
            suites_conftest.pytest_benchmark_compare_machine_info(None, None, other, saved)
