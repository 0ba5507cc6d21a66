"""`python -m bench recommend` as a user runs it: exit 2 for bad input (one line, nothing stored), exit 0 with a pick and
its folder, a second identical run that reuses the first's records, exit 1 with the nearest miss when the target rate
is beyond reach."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO, run_bench
from tests.support.models import FAST, trained_place
from tests.test_recommend import SHORT_SERVE

pytestmark = pytest.mark.slow

SMALL = ["recommend.backends=[int8_tbe,uint4]", "recommend.batch_sizes=[1024]", "recommend.threads=[1]", "recommend.confirm=1",
         "timing.max_rounds=2", *SHORT_SERVE]


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    return trained_place(tmp_path_factory.mktemp("recommend-command"), FAST)


def report(place):
    """`python -m bench.report <reports_dir>`, as a user re-renders the store."""
    return subprocess.run([sys.executable, "-m", "bench.report", str(place / "reports")], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def recommend(place, *more, timeout=600):
    return run_bench("recommend", *FAST, f"cache_dir={place / 'cache'}", f"reports_dir={place / 'reports'}", *SMALL, *more, timeout=timeout)


@pytest.mark.parametrize("bad, says", [
    ("slo.p99_ms=0", "slo.p99_ms must be a positive latency in ms"),
    ("accuracy.max_auc_drop=1.5", "accuracy.max_auc_drop must be an AUC drop between 0 and 1"),
    ("slo.qps=-3", "slo.qps must be a positive rate"),
    ("memory.max_model_mb=0", "memory.max_model_mb must be a positive size"),
    ("recommend.backends=[int8_tbe,nosuch]", "unknown backend 'nosuch'"),
    ("recommend.batch_sizes=[1024,999999]", "recommend.batch_sizes reaches 999999 rows, more than the eval split's 2048"),
    ("recommend.threads=[0]", "recommend.threads must be a non-empty list of positive thread counts"),
    ("recommend.budget_min=0", "recommend.budget_min must be positive"),
    ("recommend.confirm=0", "recommend.confirm must be a positive integer"),
    ("slo.p99ms=60", "slo.p99ms"),
    ("recommend.tune_map=/no/such/per_table.yaml", "recommend.tune_map='/no/such/per_table.yaml': no such file"),
    ("recommend.batch_sizes=32,64", "recommend takes one value a key, not a sweep: write recommend.batch_sizes=[32,64] for a list"),
    ("tune.trials=3", "tune is null in this run, so it has no options to set: +sweep=tune sets it"),
])
def test_bad_input_is_one_line_and_exit_2_before_any_work(tmp_path, bad, says):
    """Every range error is found before torch is imported (Python's import-time log names each module it loads), a
    missing tune map's file too (its contents are read by the TBE backend's reader, once the plug-ins load); the tune
    map's case has batcher sizes the tiny eval split holds, which are checked first."""
    tune_map = bad.startswith("recommend.tune_map=")
    result = run_bench("recommend", *FAST, f"cache_dir={tmp_path / 'cache'}", f"reports_dir={tmp_path / 'reports'}",
                       *(["recommend.batch_sizes=[1024]"] if tune_map else []), bad, timeout=120, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 2, result.stdout + result.stderr
    said = [x for x in result.stderr.splitlines() if not x.startswith("import time:")]
    loaded = {x.rsplit("|", 1)[1].strip() for x in result.stderr.splitlines() if x.startswith("import time:")}
    assert "bench.cli" in loaded and "torch" not in loaded, bad
    assert len(said) == 1 and says in said[0], said
    assert not (tmp_path / "reports").exists() and not (tmp_path / "cache").exists()


def test_a_pick_then_reuse_then_a_target_beyond_reach(place):
    first = recommend(place)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    out = first.stdout
    assert out.startswith("recommend: p99 <= 60 ms, ΔAUC budget 0.001; 3 backends (fp32, int8_tbe, uint4)")  # what it will run, first
    assert "stage 1 (accuracy): " in out and "\npick: " in out and "Server max QPS under 60 ms: " in out and "front (" in out
    folder = place / "reports" / "recommend" / "latest"
    for name in ("recommend.md", "recommend.json", "front.png"):
        assert (folder / name).is_file(), name
    answer = json.loads((folder / "recommend.json").read_text())
    pick = answer["pick"]
    assert pick["backend"] in ("fp32", "int8_tbe", "uint4") and pick["batch_size"] == 1024 and pick["threads"] == 1
    assert pick["server"]["max_qps"] > 0 and pick["server"]["fp32_max_qps"] > 0 and answer["front"]
    md = (folder / "recommend.md").read_text()
    through = [e["qps_through_ratio"] for e in answer["estimates"]]
    assert through and all(0 <= t["lo"] <= t["point"] <= t["hi"] and t["point"] > 0 for t in through)  # what stage 3 compares and orders by
    for heading in ("## The pick", "## Pareto front", "## Stage 3 estimates", "## Rejected", "## What would change the pick", "## Cost"):
        assert heading in md, heading
    unserved = [r for r in answer["rejected"] if r["stage"] == "4 Server confirmation" and (r["needs"] or "").startswith("recommend.confirm=")]
    changes = md.split("## What would change the pick")[1]
    for r in unserved:  # recommend.confirm=1 left them unserved: the answer names each, with the setting that serves it
        assert f"- with {r['needs']}, {r['what']} (" in changes and "would be served under LoadGen too" in changes, r
    assert not unserved or "nothing measured here would" not in changes
    records = (place / "reports" / "records.jsonl").read_text().splitlines()
    measured = answer["jobs"]["measured"]
    timed = [b for b in ("fp32", "int8_tbe", "uint4") if b not in {r["what"] for r in answer["rejected"]}]
    assert measured >= 2 * len(timed) + 1 and len(records) == measured  # 2 offline jobs per backend past stage 1, the Server jobs

    stored = [json.loads(x) for x in records]  # the facts and served times are records like every job's
    assert sorted(r["backend"] for r in stored if r["config"].get("measure") == "facts") == ["fp32", "int8_tbe", "uint4"]
    assert any(r["config"].get("measure") == "served" for r in stored)
    assert not (place / "cache" / "recommend").exists()  # no private cache beside the store

    again = recommend(place)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "(0 jobs measured, " in again.stdout and "3 of 3 backends' accuracy and " in again.stdout, again.stdout[-2000:]
    served = answer["served_times"]["timed"]
    assert served >= 1 and f"{served} of {served} served batch times read back" in again.stdout  # nothing timed again
    assert len((place / "reports" / "records.jsonl").read_text().splitlines()) == len(records)  # nothing measured twice
    second = json.loads((folder / "recommend.json").read_text())
    assert second["pick"]["backend"] == pick["backend"] and second["pick"]["server"] == pick["server"]  # the same stored records
    assert second["facts"] == answer["facts"] and second["estimates"] == answer["estimates"]  # read back, not measured again

    shown = report(place)  # the report reads what recommend measured from the same store
    assert shown.returncode == 0, shown.stderr[-3000:]
    md = (place / "reports" / "report.md").read_text()
    measured = md.split("## Measured for recommend")[1]
    for name in ("fp32", "int8_tbe", "uint4"):
        assert f"| synthetic | cpu | {name} | " in measured, name
    assert "nan" not in measured.split("\n## ")[0]  # every stored figure read back
    assert "| batcher rows | threads |" in measured and "| 1024 | 1 |" in measured

    beyond = recommend(place, "slo.qps=1000000")
    assert beyond.returncode == 1, beyond.stdout[-3000:] + beyond.stderr[-3000:]
    assert "no pick: no candidate meets p99 <= 60 ms at 1e+06 QPS" in beyond.stdout
    assert "nearest miss: " in beyond.stdout and "short of slo.qps=1e+06" in beyond.stdout
    miss = json.loads((folder / "recommend.json").read_text())
    assert miss["pick"] is None and miss["nearest_miss"].startswith("nearest miss: ")
    assert any(r["stage"] == "4 Server confirmation" for r in miss["rejected"])


def test_a_bound_no_load_can_meet_ends_before_loadgen(place):
    """`slo.p99_ms=0.001`: stage 3's served batch times put every candidate below the bound, so no LoadGen search
    starts; the answer names the nearest miss by its no-load p99 against the bound."""
    store = place / "reports" / "records.jsonl"
    before = len(store.read_text().splitlines()) if store.is_file() else 0
    out = recommend(place, "slo.p99_ms=0.001")
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    assert "stage 3: no candidate meets p99 <= 0.001 ms at any load by its served batch times: none is served under LoadGen" in out.stdout
    assert "stage 4: serving" not in out.stdout and "nanx" not in out.stdout and " nan" not in out.stdout
    assert "no pick: no candidate meets p99 <= 0.001 ms" in out.stdout and "front (" not in out.stdout
    miss = next(x for x in out.stdout.splitlines() if "nearest miss: " in x)
    assert "stage 3 estimates a p99 of " in miss and " ms against the 0.001 ms bound (" in miss and "it would need slo.p99_ms above " in miss
    answer = json.loads((place / "reports" / "recommend" / "latest" / "recommend.json").read_text())
    assert answer["pick"] is None and answer["confirmations"] == [] and answer["nearest_miss"] == miss.strip()
    assert answer["estimates"] and all(e["qps_hi"] == 0 and e["idle_p99_ms"] > 0.001 for e in answer["estimates"])
    new = [json.loads(x) for x in store.read_text().splitlines()[before:]]
    assert all(r["config"].get("serve") is None or r["config"].get("measure") == "served" for r in new)  # no Server job ran


def test_jobs_at_1_and_2_threads_are_two_rows_of_the_report(place):
    """Threads is an axis of the results key: a recommend that times the leading backend at 1 and 2 threads (a bound no
    load can meet, so no LoadGen search) leaves both in the store, and the report renders a row at each."""
    out = recommend(place, "slo.p99_ms=0.001", "recommend.threads=[1,2]")
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    answer = json.loads((place / "reports" / "recommend" / "latest" / "recommend.json").read_text())
    leader = next(e["backend"] for e in answer["estimates"] if e["threads"] == 2)
    shown = report(place)
    assert shown.returncode == 0, shown.stderr[-3000:]
    import pandas as pd

    csv = pd.read_csv(place / "reports" / "results.csv")
    rows = csv[(csv["backend"] == leader) & (csv["batch_size"] == 1024)]
    assert sorted(rows["threads"]) == [1, 2], rows[["backend", "batch_size", "threads"]]
    md = (place / "reports" / "report.md").read_text()
    assert "## synthetic on cpu, threads 1" in md and "## synthetic on cpu, threads 2" in md
    served = md.split("## Measured for recommend")[1]
    assert f"| {leader} | 1024 | 1 |" in served and f"| {leader} | 1024 | 2 |" in served


def test_help_and_the_sweep_form_refused(tmp_path):
    shown = run_bench("recommend", "--help", timeout=60)
    assert shown.returncode == 0 and "slo.p99_ms=60.0" in shown.stdout and "accuracy.max_auc_drop=null" in shown.stdout
    assert "recommend.budget_min=20.0" in shown.stdout and "Exit codes: 0 a pick; 1 no candidate" in shown.stdout
    refused = run_bench("+sweep=recommend", f"reports_dir={tmp_path / 'reports'}", timeout=60)
    assert refused.returncode == 2 and "recommend is a command, not a sweep: python -m bench recommend" in refused.stderr
    assert not (tmp_path / "reports").exists()
