"""Bad input ends as a clear message (an error record inside a job, a one-line error at the edges),
never as a crash or a silently wrong number.

Covered elsewhere, not repeated here: a truncated or foreign checkpoint, a pickle carrying code, a
state dict that does not match the model (tests/test_models.py); the single-class check at unit
level (tests/test_measure.py); batch size 0, negative or not a number (tests/test_cli.py); a batch
size larger than the eval split (tests/test_runner.py); empty-line, torn, alien and newer-schema
record files for the reporter (tests/test_report_cli.py, tests/test_results.py).
"""

import sys
from pathlib import Path

import numpy as np
import pytest
from hydra.core.global_hydra import GlobalHydra

from bench.errors import UserError
from bench.runner import run_job
from bench.store import StoreIndex, read_records
from bench.report.__main__ import main as report_main
from bench.results.load import load_records
from tests.test_faults import fast_cfg, fast_models  # noqa: F401 (fixtures)


@pytest.mark.slow
def test_empty_checkpoint_file_is_an_error_record(fast_cfg, tmp_path):
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    record, exc = run_job(fast_cfg(f"model.checkpoint={empty}"))
    assert record.status == "error" and isinstance(exc, UserError)
    assert f"checkpoint {empty} is empty (0 bytes)" in record.error


def test_empty_records_file_for_the_reporter(tmp_path, capsys):
    path = tmp_path / "records.jsonl"
    path.write_bytes(b"")
    assert read_records(path) == [] and StoreIndex(path).latest("abc", "m") is None
    with pytest.raises(UserError, match="holds no records"):
        load_records(tmp_path)
    assert report_main([str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no records" in err


@pytest.mark.slow
def test_resume_against_an_empty_store_measures(fast_cfg, tmp_path):
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "records.jsonl").write_bytes(b"")
    record = run_job(fast_cfg("resume=true"))[0]
    assert record.status == "ok" and record.resumed_from is None


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncated", "empty", "pickle", "plain npy", "wrong arrays"])
def test_a_damaged_scores_cache_is_a_miss_and_is_rewritten(fast_cfg, damage):
    cfg = fast_cfg()
    first = run_job(cfg)[0]
    [path] = (Path(cfg.cache_dir) / "scores").glob("*.npz")
    good = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "pickle":
        with open(path, "wb") as f:
            np.save(f, np.array([{"not": "scores"}], dtype=object), allow_pickle=True)  # refused, never unpickled
    elif damage == "plain npy":
        with open(path, "wb") as f:
            np.save(f, np.zeros(2048))
    else:
        np.savez(path, labels=np.zeros(3), logits=np.zeros(4))
    second = run_job(cfg)[0]
    assert second.status == "ok" and second.metrics["auc"] == first.metrics["auc"]
    with np.load(path) as data:
        assert data["logits"].shape == (2048,)
    assert not list(path.parent.glob(".*tmp*"))


@pytest.mark.slow
def test_an_eval_split_without_positives_is_an_error_record_end_to_end(fast_cfg):
    record, exc = run_job(fast_cfg("workload.positive_rate=1e-9"))
    assert record.status == "error" and isinstance(exc, UserError)
    assert "the eval split has a single class (all labels 0): AUC is undefined" in record.error


def cli(monkeypatch, *argv):
    from bench import cli as bench_cli

    monkeypatch.setattr(sys, "argv", ["bench", *argv])
    GlobalHydra.instance().clear()
    try:
        bench_cli.main()
    except SystemExit as exc:
        return exc.code
    finally:
        GlobalHydra.instance().clear()
    return 0


@pytest.mark.slow
@pytest.mark.parametrize("key", ["batch_sise=5", "timing.trails=3", "workload.eval_sample=10"])
def test_a_mistyped_config_key_exits_non_zero_naming_it(monkeypatch, capsys, tmp_path, key):
    code = cli(monkeypatch, key, f"reports_dir={tmp_path}", f"hydra.run.dir={tmp_path / 'run'}")
    err = capsys.readouterr().err
    assert code not in (0, None) and key.split("=")[0] in err
    assert not (tmp_path / "records.jsonl").exists()  # nothing ran


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder` with its bytes (None for a folder): what "unchanged" compares."""
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


# Each documented class of bad input (docs/usage.md, "Bad input"): refused with one line and exit 2 before any work.
BAD_INPUT = {
    "unknown backend": (["backend=nope"], "unknown backend 'nope'"),
    "batch size not positive": (["batch_size=0"], "batch_size must be a positive integer"),
    "unknown key": (["timing.trails=3"], "did you mean timing.trials?"),
    "added key nowhere": (["+foo=1"], "unknown key 'foo'"),
    "key the backend lacks": (["backend=int8_tbe", "backend.bits=4"], "backend int8_tbe has no option 'bits'"),
    "choice the backend lacks": (["backend=fake_quant", "backend.bits=3"], "backend.bits=3: choose"),
    "missing data file": (["workload=criteo_kaggle", "workload.path={tmp}/nope.tsv"], "no such file or folder"),
    "empty data file": (["workload=criteo_kaggle", "workload.path={tmp}/empty.tsv"], "is an empty file"),
    "data file of another kind": (["workload=criteo_kaggle", "workload.path={tmp}/junk.tsv"], "first line has 2 fields"),
    "the same in a sweep": (["+sweep=quant", "workload=criteo_kaggle", "workload.path={tmp}/junk.tsv"], "first line has 2 fields"),
    "missing checkpoint": (["model.checkpoint={tmp}/nope.pt"], "checkpoint not found"),
    "checkpoint of another kind": (["model.checkpoint={tmp}/model.pt"], "is not a torch checkpoint"),
    "value out of range": (["timing.trials=0"], "timing.trials"),
    "a planted speedup (testing only)": (["backend=int8_tbe", "backend.planted_slowdown=0.5"], "backend.planted_slowdown (testing only)"),
    "combination that cannot run": (["backend=ps_redis", "sharding=row_wise"], "ps_redis"),
    "an option of a section the run leaves null": (["serve.bound_ms=80"], "serve is null in this run, so it has no options to set: python -m bench recommend or +sweep=serve sets it"),
    "an option of another model's section": (["model.hstu.num_layers=3"], "model.hstu is null in this run, so it has no options to set: model=hstu or +preset=dlrmv3 sets it"),
    "a training budget under one batch": (["model.train.samples=-5"], "model.train.samples must be a positive integer, got -5"),
    "a sweep in a run of one job": (["batch_size=1024,2048"], "batch_size=1024,2048 sweeps over values in a run of one job: add -m (--multirun)"),
    "a glob that matches no option": (["-m", "backend=glob(zz*)"], "backend=glob(zz*) matches no backend"),
    "two of Hydra's modes": (["-m", "batch_size=1024,2048", "--cfg", "job"], "--multirun and --cfg: give one of them"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_stores_nothing_and_caches_nothing(monkeypatch, capsys, tmp_path, case):
    """One line and exit 2 before any work, and the store and the cache byte-for-byte as they were: no record
    appended, no cache folder made (a data file's first line is read before calibration, probes or training)."""
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "empty.tsv").write_bytes(b"")
    (inputs / "junk.tsv").write_bytes(b"a\tb\nc\td\n")  # two fields: not a Criteo file
    (inputs / "model.pt").write_bytes(b"\x13\x37" * 500)
    reports, cache = tmp_path / "reports", tmp_path / "cache"
    reports.mkdir()
    (cache / "criteo").mkdir(parents=True)
    fixture = Path(__file__).parent / "fixtures" / "records" / "sweep_a" / "records.jsonl"
    (reports / "records.jsonl").write_bytes(fixture.read_bytes())  # a store with records in it
    before = (reports / "records.jsonl").read_bytes(), _tree(cache)
    args, says = BAD_INPUT[case]
    args = [a.replace("{tmp}", str(inputs)) for a in args]
    code = cli(monkeypatch, *args, f"reports_dir={reports}", f"cache_dir={cache}", f"hydra.run.dir={tmp_path / 'run'}",
               f"hydra.sweep.dir={tmp_path / 'multirun'}")
    err = capsys.readouterr().err.strip()
    assert code == 2 and says in err and err.count("\n") == 0, err
    assert ((reports / "records.jsonl").read_bytes(), _tree(cache)) == before
    assert sorted(p.name for p in reports.iterdir()) == ["records.jsonl"]
    assert not (tmp_path / "run").exists() and not (tmp_path / "multirun").exists()


@pytest.mark.parametrize("command", [[], ["recommend"]])
def test_a_failure_of_the_checks_themselves_is_one_line_and_exit_3(monkeypatch, capsys, tmp_path, command):
    """Not a refusal and not a failed gate: a bug in the pre-flight checks exits 3 with one line and its traceback
    saved, where a bare traceback would exit 1 and read as a failed gate in a nightly's CI."""
    from bench import preflight

    def broken(*args, **kwargs):
        raise RuntimeError("planted in the pre-flight check")

    monkeypatch.setattr(preflight, "check", broken)
    reports = tmp_path / "reports"
    code = cli(monkeypatch, *command, f"reports_dir={reports}", f"hydra.run.dir={tmp_path / 'run'}")
    err = capsys.readouterr().err.strip()
    assert code == 3 and err.count("\n") == 0, err
    assert err.startswith("error: the harness failed in its pre-flight check, before any work: RuntimeError: planted")
    saved = Path(err.rsplit("(traceback: ", 1)[1].rstrip(")"))
    assert "planted in the pre-flight check" in saved.read_text()
    saved.unlink()  # a temporary file: no run folder exists before the checks pass
    assert not reports.exists() and not (tmp_path / "run").exists()


def test_a_subcommand_that_fails_in_the_harness_is_one_line_and_exit_3(monkeypatch, capsys):
    """`python -m bench store check` exits 1 for an unsound store: a crash of the command must not read as that."""
    import bench.store

    def broken(argv):
        raise OSError("planted in the store command")

    monkeypatch.setattr(bench.store, "main", broken)
    code = cli(monkeypatch, "store", "check")
    err = capsys.readouterr().err.strip()
    assert code == 3 and err.count("\n") == 0 and err.startswith("error: the harness failed: OSError: planted"), err
    Path(err.rsplit("(traceback: ", 1)[1].rstrip(")")).unlink()
