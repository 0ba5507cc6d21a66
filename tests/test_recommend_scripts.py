"""The benchmark scripts docs/recommend.md reads from, run as a user runs them on a tiny model in their short mode:
benchmarks/scripts/serve_batch_breakdown.py (a served batch's time stage by stage, per backend and batcher size) and
benchmarks/scripts/stage3_vs_server.py (stage 3's estimate beside LoadGen's Server max QPS, from a records file a
tiny `python -m bench recommend` leaves). Each prints the rows it promises, with numbers where numbers belong."""

from __future__ import annotations

import importlib.util
import json
import os
import math
import re
import runpy
import subprocess
import sys

import pytest

from bench.recommend.speed import timed_sizes
from tests.conftest import REPO, run_bench
from tests.support.models import FAST, trained_place
from tests.test_recommend import SHORT_SERVE

pytestmark = pytest.mark.slow

BATCHER = 1024
# A recommend of fp32 and uint4 at one batcher size that serves both under LoadGen's Server scenario (a loose
# accuracy budget lets both past stage 1, two confirmations serve both where neither dominates the other).
RECOMMEND = ["recommend.backends=[uint4]", f"recommend.batch_sizes=[{BATCHER}]", "recommend.threads=[1]", "recommend.confirm=2",
             "accuracy.max_auc_drop=0.5", "timing.max_rounds=2", *SHORT_SERVE]
NUMBER = r"(-?\d+(?:\.\d+)?|nan|inf)"  # as the scripts print them: 12.34, 5227, nan


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    return trained_place(tmp_path_factory.mktemp("recommend-scripts"), FAST)


def where(place) -> list[str]:
    return [f"cache_dir={place / 'cache'}", f"reports_dir={place / 'reports'}"]


def script(name: str, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python benchmarks/scripts/NAME.py ARGS` from the repository root, as docs/recommend.md runs it."""
    return subprocess.run([sys.executable, f"benchmarks/scripts/{name}.py", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_serve_batch_breakdown_prints_every_stage_for_each_backend_and_size(place):
    backends, sizes = ["fp32", "int8_tbe"], [256, BATCHER]
    done = script("serve_batch_breakdown", *FAST, *where(place), "--backends", *backends, "--sizes", *map(str, sizes), "--batches", "2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert re.match(r"2 batches per cell, torch threads 1, query set \d+ samples; median ms per batch \(ms per 1000 pairs\)$", lines[0]), lines[0]
    stages = ["rows", "gather", "model", "scores", "predict", "again", "offline"]
    assert lines[1].split() == ["backend", "size", "pairs", *stages, "predict/offline"], lines[1]
    row = re.compile(r"(\S+)\s+(\d+)\s+(\d+)" + rf"\s+{NUMBER} \(\s*{NUMBER}\)" * len(stages) + rf"\s+{NUMBER}x$")
    found = {}
    for line in lines[2:]:
        m = row.match(line)
        assert m, f"not a row of the table: {line!r}"
        name, size, pairs, *cells = m.groups()
        numbers = [float(c) for c in cells]
        ms = dict(zip(stages, numbers[0:-1:2]))
        found[(name, int(size))] = (int(pairs), ms, numbers[-1])
    assert sorted(found) == sorted((b, s) for b in backends for s in sizes), sorted(found)
    for (name, size), (pairs, ms, ratio) in found.items():
        assert pairs > 0 and all(v >= 0 and math.isfinite(v) for v in ms.values()), (name, size, ms)
        assert ms["model"] > 0 and ms["predict"] > 0 and ms["offline"] > 0, (name, size, ms)
        # the last column is predict over offline (both printed to 0.01 ms)
        assert ratio == pytest.approx(ms["predict"] / ms["offline"], rel=0.1, abs=0.02), (name, size, ms, ratio)


def test_stage3_vs_server_prints_the_estimates_beside_the_server_records(place):
    made = run_bench("recommend", *FAST, *where(place), *RECOMMEND, timeout=600)
    assert made.returncode in (0, 1), made.stdout[-3000:] + made.stderr[-3000:]
    records = place / "reports" / "records.jsonl"
    served = set()
    for line in records.read_text().splitlines():
        d = json.loads(line)
        if d["status"] == "ok" and d["config"].get("serve") and d["config"]["serve"]["scenario"] == "server" and not d["config"].get("measure"):
            served.add((d["backend"], d["batch_size"]))
    assert served and {b for b, _ in served} <= {"fp32", "uint4"}, served  # what the table must hold a row for

    backends = ["fp32", "uint4"]
    done = script("stage3_vs_server", str(records), *FAST, *where(place), *RECOMMEND, "--backends", *backends)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    sizes = timed_sizes([BATCHER])
    for name, line in zip(backends, lines):  # the served times, timed now: candidate / fp32 per size
        assert line.startswith(f"{name} ") and " served ms (candidate, fp32) by size: " in line, line
        timed = re.findall(rf"(\d+): (\d+) pairs {NUMBER} / {NUMBER}", line.split(" by size: ")[1])
        assert [int(s) for s, *_ in timed] == sizes, line
        assert all(int(p) > 0 and float(a) > 0 and float(b) > 0 for _, p, a, b in timed), line
    assert lines[2].split() == ["candidate", "bare", "est", "x", "fp32", "new", "est", "x", "fp32", "Server", "fp32", "Srv", "x", "fp32",
                                "new/Srv"], lines[2]
    row = re.compile(r"(\S+) bs=(\d+)\s+" + r"\s+".join([NUMBER] * 8) + "$")
    rows = {}
    for line in lines[3:]:
        m = row.match(line)
        assert m, f"not a row of the table: {line!r}"
        rows[(m.group(1), int(m.group(2)))] = [float(v) for v in m.groups()[2:]]
    assert sorted(rows) == sorted(served), (sorted(rows), sorted(served))
    for (name, size), (bare, bare_x, new, new_x, qps, fp32_qps, qps_x, new_over) in rows.items():
        assert min(bare, bare_x, new, new_x, qps, fp32_qps, qps_x, new_over) > 0, (name, size, rows[(name, size)])
        assert all(math.isfinite(v) for v in rows[(name, size)]), (name, size, rows[(name, size)])
        if name == "fp32":  # served alone: its own reference
            assert fp32_qps == qps and qps_x == 1.0, (name, size, rows[(name, size)])


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None, reason="onnxruntime is not installed: pip install -e '.[toolkits]'")
def test_spin_residue_times_each_backend_after_its_own_batch_and_after_the_other_s(place):
    done = script("spin_residue", *FAST, *where(place), "--backends", "onnxruntime_fp32", "int8_tbe", "--sizes", "256",
                  "--batches", "2", "--rounds", "1", "--threads", "1")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("1 threads, 2 batches x 1 rounds; median ms per served batch after its own batch"), lines[0]
    assert lines[1].split() == ["candidate", "own", "after", "fp32", "after", "residue", "ratio", "pooled"], lines[1]
    assert lines[2] == "batcher 256 rows", lines[2]
    ends = lines.index("back to back, 4 blocks of calls: median ms per call, stopped / spinning")
    rows = {}
    for line in lines[3:ends]:
        label, cells = line[:40].strip(), line[40:].split()
        assert len(cells) == 7 and all(c.endswith("x") for c in cells[4:]), f"not a row of the table: {line!r}"
        rows[label] = [float(c.rstrip("x")) for c in cells]
    assert list(rows) == ["onnxruntime_fp32", "onnxruntime_fp32 (spinning on)", "onnxruntime_fp32 alone",
                          "onnxruntime_fp32 alone, spinning on", "int8_tbe"], list(rows)
    for label, (own, after, fp32, fp32_after, residue, ratio, pooled) in rows.items():
        assert min(own, after, fp32, fp32_after, residue, ratio, pooled) > 0, (label, rows[label])
        assert ratio == pytest.approx(fp32 / own, rel=0.05, abs=0.02), (label, rows[label])  # printed to 0.001 ms
        assert residue == pytest.approx(max(after / own, fp32_after / fp32), rel=0.05, abs=0.02), (label, rows[label])
    m = re.match(rf"onnxruntime_fp32\s+256 rows\s+{NUMBER}\s+{NUMBER}  stopped/spinning {NUMBER}x$", lines[ends + 1])
    assert m and len(lines) == ends + 2, lines[ends:]  # the ONNX Runtime backend alone, back to back
    stopped, spun, ratio = map(float, m.groups())
    assert min(stopped, spun) > 0 and ratio == pytest.approx(stopped / spun, rel=0.05, abs=0.01), lines[ends + 1]


def test_served_beside_bursts_prints_each_backend_alone_and_beside_the_bursts(place):
    done = script("served_beside_bursts", *FAST, *where(place), "--backends", "fp32", "int8_tbe", "--size", "256",
                  "--batches", "2", "--rounds", "1", "--threads", "1")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == ("batcher 256 rows, 1 threads, 2 batches x 1 rounds; bursts of 0.3 ms every 1.0 ms; median ms per "
                        "served batch"), lines[0]
    assert lines[1].split() == ["backend", "alone", "bursts", "ratio"], lines[1]
    found = {}
    for line in lines[2:]:
        m = re.match(rf"(\S+)\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}x$", line)
        assert m, f"not a row of the table: {line!r}"
        found[m.group(1)] = [float(v) for v in m.groups()[1:]]
    assert list(found) == ["fp32", "int8_tbe"], lines
    for name, (alone, beside, ratio) in found.items():
        assert min(alone, beside) > 0 and ratio == pytest.approx(beside / alone, rel=0.05, abs=0.02), (name, found[name])


@pytest.mark.parametrize("name, first", [("serve_batch_breakdown", []), ("stage3_vs_server", ["records.jsonl"]), ("spin_residue", []),
                                         ("served_beside_bursts", [])])
def test_an_override_after_backends_is_refused_before_any_work(tmp_path, monkeypatch, capsys, name, first):
    # --backends takes every word after it; in this process (bench already imported), as `python SCRIPT ARGS` runs it
    monkeypatch.setattr(sys, "argv", [f"{name}.py", *first, "--backends", "fp32", f"cache_dir={tmp_path / 'cache'}"])
    with pytest.raises(SystemExit) as exited:
        runpy.run_path(str(REPO / "benchmarks" / "scripts" / f"{name}.py"), run_name="__main__")
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert f"unknown backend 'cache_dir={tmp_path / 'cache'}': name backends after --backends and overrides (key=value) before it" in said
    assert not (tmp_path / "cache").exists()
