"""`python -m bench` as a user runs it: bad input is one line and exit code 2."""

import json

import pytest

from bench.record import SCHEMA_VERSION
from tests.conftest import TINY, run_bench


@pytest.mark.parametrize(
    "args,message",
    [
        (["backend=nope"], "unknown backend 'nope': choose one of"),
        (["workload=nope"], "unknown workload 'nope'"),
        (["batch_size=0"], "batch_size must be a positive integer, got '0'"),
        (["batch_size=-5"], "batch_size must be a positive integer"),
        (["batch_size=big"], "batch_size must be a positive integer, got 'big'"),
        (["+sweep=nope"], "unknown sweep 'nope'"),
        (["backend=int8tbe"], "unknown backend 'int8tbe': did you mean backend=int8_tbe? choose one of"),
    ],
)
@pytest.mark.slow
def test_bad_names_and_sizes_exit_2_with_one_line(args, message):
    result = run_bench(*args, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("line,says", [
    ("backend=int8tbe", "did you mean backend=int8_tbe?"),
    ("backend=fp32,unit4", "did you mean backend=uint4?"),
    ("workload=synthetc", "did you mean workload=synthetic?"),
    ("model=smal", "did you mean model=small?"),
    ("+sweep=nightlly", "did you mean +sweep=nightly?"),
])  # fmt: skip
def test_a_misspelled_name_gets_the_closest_one(line, says):
    from bench.cli import check_overrides
    from bench.errors import UserError

    with pytest.raises(UserError) as info:
        check_overrides([line])
    assert says in str(info.value) and "choose one of" in str(info.value)


def test_a_name_far_from_any_gets_the_list_only():
    from bench.cli import check_overrides
    from bench.errors import UserError

    with pytest.raises(UserError) as info:
        check_overrides(["backend=zzzzzz"])
    assert "did you mean" not in str(info.value) and "fp32" in str(info.value)


@pytest.mark.slow
def test_missing_checkpoint_is_refused_before_any_work(tmp_path):
    result = run_bench(*TINY, "model.checkpoint=/no/such.pt", f"reports_dir={tmp_path}", f"hydra.run.dir={tmp_path / 'run'}")
    assert result.returncode == 2 and "checkpoint not found: /no/such.pt" in result.stderr
    assert result.stderr.strip().count("\n") == 0 and "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists() and not (tmp_path / "records.jsonl").exists()  # the store keeps measurements only


@pytest.mark.slow
def test_end_to_end_run_writes_records_and_reuses_the_checkpoint(tmp_path):
    common = [*TINY, f"reports_dir={tmp_path / 'reports'}", f"cache_dir={tmp_path / 'cache'}"]
    first = run_bench(*common, f"hydra.run.dir={tmp_path / 'run1'}")
    assert first.returncode == 0, first.stderr
    assert "fp32 on synthetic, cpu, batch 512: ok" in first.stdout and "AUC" in first.stdout
    second = run_bench(*common, f"hydra.run.dir={tmp_path / 'run2'}")
    assert second.returncode == 0, second.stderr
    r1, r2 = (json.loads((tmp_path / d / "record.json").read_text()) for d in ("run1", "run2"))
    assert r1["metrics"]["model_source"] == "trained" and r2["metrics"]["model_source"] == "cache"
    assert r1["metrics"]["auc"] == r2["metrics"]["auc"]
    lines = (tmp_path / "reports" / "records.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line)["schema_version"] == SCHEMA_VERSION for line in lines)
