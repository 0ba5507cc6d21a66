"""The zoo matrix at tiny shapes: every model family of conf/zoo/ through every registered backend.

`+sweep=zoo` runs the same pairs at the sweep's shapes (docs/backends.md publishes its matrix). Here each family is
one test: its model is trained once, and every backend runs on it in one Session. Each pair must be `ok` with finite
scores and a ΔAUC the gate passes (its AUC rules for the backend, judged on the records as `+sweep=zoo` judges
them), or `skipped` with a one-line reason; never `error`. The families and backends are discovered (conf/zoo/,
bench.registry), so a family or backend added later is in the matrix without an edit here. AMD Quark lives in its
own environment (its own smoke in .ci/run): here it is skipped with the reason that says so.

What keeps it short: tiny tables, 2k eval rows, one timed call, one thread; the roofline's limits and the job's
machine-speed probe (bench.measure.noise.reference_speed, timed at each job's start and end) stand in, since no
timing is checked here; `compiled_fp32` and `inc_int8_static`, which compile the model through inductor, run on the
built-in DLRM alone (on every family in +sweep=zoo), so the test stays within its time.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from pathlib import Path

import pytest
import torch

from bench import registry
from bench.config import CONF_DIR, group_options, zoo_families
from bench.config.compose import compose, compose_dictconfig
from bench.gate.rules import FAIL, RULES
from bench.gate.stored import judge, settings
from bench.devices import cpu
from bench.pipeline import job
from bench.runner import Session, run_one

REPO = Path(__file__).resolve().parents[1]
FAMILIES = zoo_families()
BACKENDS = registry.every_backend()
# Inductor compiles the model (seconds a family on 2 cores): these run on one family here, on every one in +sweep=zoo.
COMPILED, COMPILED_ON = ("compiled_fp32", "inc_int8_static"), "dlrm"
TINY = [
    "+preset=tiny", "workload.train_samples=16384", "workload.eval_samples=2048", "workload.calibration_samples=512",
    "model.train.samples=16384", "model.train.batch_size=512", "model.train.dense_lr=0.01", "batch_size=256",
    "eval_batch_size=256", "calibration_batch_size=256", "threads=1", "timing.trials=1", "timing.max_rounds=1",
    "timing.batches_per_trial=1", "timing.warmup_batches=0", "timing.pool_samples=0", "timing.paired=false",
]  # fmt: skip
FAMILY = {  # what a family needs beyond TINY to learn (DeepFM learns slowest)
    "deepfm": ["model.train.samples=65536"],  # at 32,768 its int4 tables cost onnxruntime_w4 -0.0047 (docs/toolkits.md)
}
WORKLOAD = {  # each workload's own knobs, tiny
    "synthetic": ["workload.cardinalities=[2000,1000,500,200,100,50,20,10]"],
    "synthetic_seq": ["workload.num_items=100", "workload.num_users=200", "workload.history_length=8"],
}


def family_overrides(family: str) -> list[str]:
    workload = compose_dictconfig([f"+zoo={family}"]).workload.name
    return [f"+zoo={family}", *TINY, *WORKLOAD[workload], *FAMILY.get(family, [])]


def pair_configs(family: str, dirs: list[str], backends: dict) -> list:
    """The family's config with each backend's. Composed once per family and once per backend (`backends`, shared
    by the families), where composing every pair would take a third of the test's time; `backend=` is the one group
    they differ in, as Hydra would compose it (no override here touches a backend's keys)."""
    cfg = compose([*family_overrides(family), *dirs])
    for b in backends_for(family):
        if b not in backends:
            backends[b] = compose([*TINY, f"backend={b}"]).backend
    return [dataclasses.replace(cfg, backend=copy.deepcopy(backends[b])) for b in backends_for(family)]


def backends_for(family: str) -> list[str]:
    return [b for b in BACKENDS if b not in COMPILED or family == COMPILED_ON]


def test_every_zoo_family_composes_and_names_itself():
    assert FAMILIES == group_options("zoo") and len(FAMILIES) >= 9
    for family in FAMILIES:
        assert compose([f"+zoo={family}"]).family == family, f"conf/zoo/{family}.yaml must set family: {family}"
    for family in FAMILIES:  # each family's workload has its tiny knobs here
        assert compose_dictconfig([f"+zoo={family}"]).workload.name in WORKLOAD, family


def test_the_zoo_sweep_takes_every_family_and_every_backend():
    cfg = compose_dictconfig(["+sweep=zoo"], with_hydra=True)
    params = cfg.hydra.sweeper.params
    assert params["+zoo"].split(",") == FAMILIES and params["backend"].split(",") == BACKENDS
    assert BACKENDS[0] == "fp32" and set(BACKENDS) == set(registry.names("backend"))
    assert (CONF_DIR / "zoo").is_dir()


def test_the_published_matrix_names_families_of_the_zoo():
    """docs/backends.md publishes a sweep's matrix: its columns are families of conf/zoo/ (a family added later joins
    the next published sweep)."""
    text = (REPO / "docs" / "backends.md").read_text(encoding="utf-8")
    header = next(line for line in text.splitlines() if line.startswith("| backend |") and "dlrm_dcn" in line)
    columns = [c.strip() for c in header.strip("|").split("|")][1:]
    assert len(columns) >= 9 and set(columns) <= set(FAMILIES), set(columns) - set(FAMILIES)


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """One Session and one cache for every family; the roofline's limits and the machine-speed probe stand in."""
    threads = torch.get_num_threads()
    root = tmp_path_factory.mktemp("zoo")
    probe = {f"{k}_{c}_us": 1.0 for k in ("gemm", "gather") for c in ("wall", "cpu")}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cpu, "gather_bandwidth", lambda row_bytes, total_bytes, buffer=None: 10e9)
        mp.setattr(cpu.CpuDevice, "buffer_bytes", lambda self, device: 1 << 20)  # the shared buffer the stand-in never reads
        mp.setattr(cpu, "gemm_flops", lambda: {"fp32": 100e9, "int8": 200e9})
        mp.setattr(job, "reference_speed", lambda: dict(probe), raising=False)
        yield Session(), [f"cache_dir={root / 'cache'}", f"reports_dir={root / 'reports'}"], {}
    torch.set_num_threads(threads)


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_every_backend_on_the_family_is_ok_inside_the_margin_or_skipped(family, shared):
    session, dirs, backends = shared
    records, seconds = [], []
    for cfg in pair_configs(family, dirs, backends):
        start = time.perf_counter()
        records.append(run_one(cfg, session))
        seconds.append(time.perf_counter() - start)
    cells = {r.backend: (f"{r.metrics['auc_delta']:+.4f}" if r.status == "ok" else r.status) + f" {s:.1f}s" for r, s in zip(records, seconds)}
    print(f"{family}: " + ", ".join(f"{b} {c}" for b, c in cells.items()))  # the row of the matrix (pytest -s)
    errors = [f"{r.backend}: {r.error}" for r in records if r.status == "error"]
    assert not errors, f"{family}: " + "; ".join(errors)
    for r in records:
        if r.status == "skipped":
            assert r.error and "\n" not in r.error.strip(), (family, r.backend, r.error)
        else:
            assert r.status == "ok" and all(math.isfinite(r.metrics[m]) for m in ("auc", "auc_delta")), (family, r.backend)
    quark = next(r for r in records if r.backend == "quark_w8a8")
    assert quark.status == "ok" or "own environment" in quark.error, quark.error  # skipped outside .venv-quark
    verdicts = judge(records, settings(records[0].config["gate"], records[0].config["compare"])).verdicts
    failed = [f"{v.named}: {v.reason}" for v in verdicts if v.verdict == FAIL and wholly_past(v)]
    assert not failed, f"{family}: " + "; ".join(failed)


def wholly_past(v) -> bool:
    """A gate rule's failure whose whole 95% interval lies past the threshold. With 2,048 eval rows a ΔAUC's interval
    spans about ±0.005, five times the 0.001 margin: a point past the margin inside such an interval is noise here
    (+sweep=zoo's gate, at its shapes, fails it on the point)."""
    if v.interval is None or v.threshold is None:
        return True
    lo, hi = v.interval
    return lo > v.threshold if RULES[v.rule].bound == "max" else hi < v.threshold
