"""Serving a sequential model as MLPerf's DLRMv3 counts a sample: one request, a user's history and all its
candidates. The real commands in a subprocess, on a tiny HSTU and synthetic_seq: the serving sweep through the real
LoadGen (its query set, the samples it sent, the accuracy log it wrote), and `recommend` on the sequential model (the
toolkits refused at stage 0 with their reason, a pick named with its Server QPS, its ratio to fp32, ΔAUC and ΔNE)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.serve.accuracy_log import read_accuracy_log
from bench.serve.queries import QuerySet
from bench.serve.response import DLRMV3
from bench.serve.scenario import alone_sample
from tests.conftest import run_bench
from tests.test_recommend import SHORT_SERVE

CANDIDATES = 4
# A tiny HSTU on a small catalogue (docs/sequential.md: it reads the history at this size), 256 requests of 4 rows
SEQ = ["model=hstu", "workload=synthetic_seq", "+preset=tiny", "workload.num_items=100", "workload.train_samples=4096",
       "model.train.samples=4096", "model.train.batch_size=128", "workload.eval_samples=1024", "workload.calibration_samples=512",
       f"workload.candidates={CANDIDATES}", "workload.history_length=24", "workload.min_history=2", "eval_batch_size=300"]
TINY_SERVE = ["serve.min_duration_s=0.3", "serve.min_query_count=10", "serve.max_steps=2", "serve.judgments=1",
              "serve.step_late_share=null", "serve.max_steal=null", "serve.max_slowdown=null", "serve.min_rounds=4", "serve.track_rounds=4"]


def test_the_alone_timing_takes_a_request_at_the_p99_history():
    """The warm-up's floor (the p99 of each query's time alone) reads the one request it times as the p99: among
    requests of one size, the one at the 99th percentile of their history lengths; groups of pairs take the first."""
    sizes = np.full(200, 4)
    history = np.arange(200)[::-1] % 50  # lengths 0..49, four times each, in no order
    requests = QuerySet(batch=None, sizes=sizes, starts=np.arange(200) * 4, history=history)
    assert history[alone_sample(requests, 4)] == np.sort(history)[int(0.99 * 200)]
    pairs = QuerySet(batch=None, sizes=np.array([100, 200, 100]), starts=np.array([0, 100, 300]))
    assert alone_sample(pairs, 100) == 0 and alone_sample(pairs, 200) == 1


@pytest.mark.slow
def test_a_serving_sweep_of_hstu_sends_one_request_per_loadgen_sample(tmp_path):
    result = run_bench("+sweep=serve", *SEQ, *TINY_SERVE, "backend=fp32,int8_tbe", "serve.bound_ms=80", "batch_size=64",
                       f"cache_dir={tmp_path / 'cache'}", f"reports_dir={tmp_path / 'reports'}", f"hydra.sweep.dir={tmp_path / 'multirun'}",
                       timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "reports" / "records.jsonl").read_text().splitlines()]
    assert {(r["backend"], r["metrics"]["scenario"], r["status"]) for r in records} == {
        (b, s, "ok") for b in ("fp32", "int8_tbe") for s in ("server", "offline")}
    for r in records:
        m = r["metrics"]
        q = m["query_set"]
        # one sample per request: the eval split's 256 requests of 4 candidates, with the histories the workload drew
        assert (q["sizes"], q["samples"], q["pairs"], q["pairs_mean"]) == ("requests", 1024 // CANDIDATES, 1024, CANDIDATES)
        assert 2 <= q["history_min"] < q["history_p50"] < q["history_max"] <= 24 and q["history_distinct"] >= 15
        assert m["sample"].startswith("one LoadGen sample is one request")
        assert list(m["warm_up"]["query_alone_ms"]) == [str(CANDIDATES)]
        for step in m["steps"]:  # LoadGen held the whole query set, one sample a request
            assert step["performance_sample_count"] == 256
            assert step["pairs_per_s"] == pytest.approx(step["samples_per_s"] * CANDIDATES, rel=1e-3)
        if m["scenario"] == "server":
            assert all(s["samples_per_query"] == 1 for s in m["steps"])
        else:  # the accuracy run: every request came back once, whole, with its candidates' labels, and the AUC agrees
            assert q["response_layout"] == m["response_layout"] == DLRMV3
            responses = read_accuracy_log(Path(m["accuracy_log"]), DLRMV3)
            assert sorted(responses) == list(range(256)) and {v.shape for v in responses.values()} == {(CANDIDATES, 2)}
            assert m["auc_check"] == "pass" and m["pairs"] == 1024
            assert 0 < m["ne_loadgen"] < 2 and 0 < m["accuracy_loadgen"] <= 1 and 0 < m["gauc_loadgen"] <= 1
            # each entry as MLPerf's recommendation/dlrm_v3/accuracy.py reads it: float32, the candidate count last,
            # 3 + 3 x count values, then predictions, labels and weights after ts_idx and query_idx
            for e in json.loads(Path(m["accuracy_log"]).read_text()):
                data = np.frombuffer(bytes.fromhex(e["data"]), np.float32)
                count = int(data[-1])
                assert count == CANDIDATES and len(data) == 3 + count * 3 and data[1] == e["qsl_idx"]
                assert np.all((data[2:2 + count] >= 0) & (data[2:2 + count] <= 1)) and np.all(data[2 + 2 * count:-1] == 1)
    served = pd.read_csv(next((tmp_path / "reports" / "serve").glob("2*/serve.csv")))  # the sweep's table says the same
    offline = served[served["scenario"] == "offline"]
    assert set(offline["response_layout"]) == {DLRMV3} and offline["ne_loadgen"].between(0, 2).all()


@pytest.mark.slow
def test_recommend_on_hstu_rejects_the_toolkits_at_stage_0_and_names_a_pick(tmp_path):
    result = run_bench("recommend", *SEQ, "slo.p99_ms=80", "accuracy.max_auc_drop=0.05",
                       "recommend.backends=[int8_tbe,onnxruntime_int8_dynamic,ao_embeddingbag]", "recommend.batch_sizes=[256]",
                       "recommend.threads=[1]", "recommend.confirm=1", "timing.max_rounds=2", *SHORT_SERVE,
                       f"cache_dir={tmp_path / 'cache'}", f"reports_dir={tmp_path / 'reports'}", timeout=900)
    said = result.stdout
    assert result.returncode in (0, 1), said[-3000:] + result.stderr[-3000:]
    stage0 = next(line for line in said.splitlines() if line.startswith("stage 0 (runnable)"))
    assert "2 of 4 backends out" in stage0  # fp32 always joins and "onnxruntime_int8_dynamic" in stage0 and "ao_embeddingbag" in stage0
    assert "EmbeddingCollection" in stage0  # the reason: what in the model the backend cannot take
    out = json.loads((tmp_path / "reports" / "recommend" / "latest" / "recommend.json").read_text())
    refused = {r["what"]: r for r in out["rejected"] if r["stage"] == "0 runnable"}
    assert set(refused) == {"onnxruntime_int8_dynamic", "ao_embeddingbag"}
    assert all(r["reason"].startswith("cannot take this model: ") for r in refused.values())
    # ΔNE beside ΔAUC for every backend stage 1 measured
    assert np.isfinite(out["facts"]["int8_tbe"]["ne_delta"]) and out["facts"]["fp32"]["ne_delta"] == 0
    # and MLPerf DLRMv3's AUC, the grouped one (each request's own AUC, averaged), beside them
    assert np.isfinite(out["facts"]["int8_tbe"]["gauc_delta"]) and out["facts"]["fp32"]["gauc_delta"] == 0
    if result.returncode == 0:  # a pick: its Server QPS, its paired ratio to fp32, ΔAUC and ΔNE
        pick = out["pick"]
        assert pick["backend"] in ("fp32", "int8_tbe") and pick["server"]["max_qps"] > 0
        lines = said[said.index("pick: "):].splitlines()
        assert "Server max QPS under 80 ms" in lines[1] and "fp32's" in lines[1]
        assert "ΔAUC" in lines[2] and "ΔNE" in lines[2] and "ΔGAUC" in lines[2]
    else:  # none: it says why
        assert "no pick: " in said and "nearest miss" in said
