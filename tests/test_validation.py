"""The one validation pass (bench.config.validation, run by bench.preflight on every variant of a command
line): bad values, impossible combinations and places that cannot be written are one line and exit 2
before any work, and nothing is created in the reports folder."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench import preflight
from bench.cli import run
from bench.errors import UserError
from bench.config.validation import writable_folder
from tests.conftest import REPO

README_URL = "backend.url=redis://localhost:6379/0?prefix=bench"


@pytest.fixture
def a_file(tmp_path):
    path = tmp_path / "a-file"
    path.write_text("not a folder")
    return path


def refused(argv, tmp_path, capsys) -> str:
    reports = tmp_path / "reports"
    assert run([f"reports_dir={reports}", f"hydra.run.dir={tmp_path / 'run'}", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert not reports.exists() and not (tmp_path / "run").exists()  # nothing stored, no run folder
    return err


@pytest.mark.parametrize(
    "argv,says",
    [
        (["timing.max_rounds=0"], "timing.max_rounds must be at least 1, got 0"),
        (["timing.max_rounds=-1"], "timing.max_rounds must be at least 1, got -1"),
        (["timing.trials=0"], "timing.trials must be at least 1, got 0"),
        (["timing.min_trial_seconds=-1"], "timing.min_trial_seconds must be 0 or more"),
        (["memory_fraction=0"], "memory_fraction must be a positive number"),
        (["+sweep=serve", "measure_again=-1"], "measure_again must be 0 or more"),
        (["backend=ps_redis", "sharding=row_wise", "world_size=2"], "backend=ps_redis cannot be sharded"),
        (["backend=ps_redis", "backend.cache_fraction=2"], "backend.cache_fraction must be in (0, 1]"),
        (["+sweep=nightly", "gate.history_runs=0"], "gate.history_runs must be at least 1"),
        (["+sweep=nightly", "compare.alpha=2"], "compare.alpha must be between 0 and 1"),
        (["sweep=quant"], "a sweep is added to the config, not chosen: write +sweep=quant"),
        ([README_URL], f"""quote the value for Hydra and the shell: 'backend.url="redis://localhost:6379/0?prefix=bench"'"""),
        (["workload.path=/data/café.tsv"], """quote the value for Hydra and the shell: 'workload.path="/data/café.tsv"'"""),
    ],
)
@pytest.mark.slow
def test_bad_values_and_combinations_are_refused_before_any_work(argv, says, tmp_path, capsys):
    assert says in refused(argv, tmp_path, capsys)


@pytest.mark.slow
@pytest.mark.parametrize("key", ["reports_dir", "cache_dir", "hydra.run.dir", "gate.history_file"])
def test_places_that_cannot_be_written_are_refused_for_root_too(key, a_file, tmp_path, capsys):
    argv = [f"{key}={a_file}/below"] + (["+sweep=nightly"] if key == "gate.history_file" else [])
    if key == "reports_dir":  # `refused` sets its own reports_dir; this one must win
        assert run([f"hydra.run.dir={tmp_path / 'run'}", *argv]) == 2
        err = capsys.readouterr().err
    else:
        err = refused(argv, tmp_path, capsys)
    assert f"{key}: cannot write" in err and f"{a_file} is a file, not a folder" in err and f"({key}=PATH)" in err


def test_a_records_file_that_is_a_folder_is_refused(tmp_path, capsys):
    (tmp_path / "reports" / "records.jsonl").mkdir(parents=True)
    assert run([f"reports_dir={tmp_path / 'reports'}", f"hydra.run.dir={tmp_path / 'run'}"]) == 2
    assert "the record store " in (err := capsys.readouterr().err) and "records.jsonl is not a regular file" in err


def test_quoted_values_parse():
    [url, path] = preflight.parse(['backend.url="redis://h:6379/0?prefix=x"', 'workload.path="/data/café.tsv"'])
    assert url.value() == "redis://h:6379/0?prefix=x" and path.value() == "/data/café.tsv"


def test_writable_folder(tmp_path, a_file):
    writable_folder(tmp_path / "new" / "deeper", "reports_dir")  # created later, in a folder that exists
    assert not (tmp_path / "new").exists() and not list(tmp_path.glob(".bench-probe-*"))  # the probe leaves nothing
    with pytest.raises(UserError, match="is a file, not a folder"):
        writable_folder(a_file / "x", "reports_dir")
    with pytest.raises(UserError, match=r"cannot create a folder in /proc"):
        writable_folder("/proc/bench-reports", "reports_dir")


@pytest.mark.slow
def test_preprocess_out_that_cannot_be_written(a_file):
    src = REPO.parent / "shared" / "data" / "criteo" / "criteo_kaggle_train_head10k.tsv"
    result = subprocess.run([sys.executable, "-m", "bench.preprocess", str(src), "--out", f"{a_file}/out"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == f"error: --out: cannot write {a_file}/out: {a_file} is a file, not a folder; give a folder you can write (--out PATH)"
