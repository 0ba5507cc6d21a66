"""The accuracy gate as pytest tests, for teams that gate with pytest (one test per backend).

A small sweep goes through the one code path, `bench.pipeline.run_one`, for fp32 (the baseline every
rule is read against) and each backend of `--gate-backends` (default: every registered backend) at
one batch size; `bench.results.table.results_table` builds the table, and `bench.gate.evaluate_gate` judges
it with `conf/gate/default.yaml` (`bench.gate.thresholds.load_gate_config`). Each backend's test fails
when any of its verdicts fails, and the message names the failing rows, rules, values and thresholds.

    pytest benchmarks/suites/test_accuracy_gate.py                                   # all backends, as +sweep=nightly
    pytest benchmarks/suites/test_accuracy_gate.py --gate-backends=int8_tbe,uint4
    pytest benchmarks/suites/test_accuracy_gate.py --gate-overrides="gate.rules.uint4.max_auc_drop=0.0005 batch_size=2048"

`--gate-overrides` are Hydra overrides of the runs (workload size, model, batch size, cache_dir ...);
the `gate.*` ones also reach the gate config. The trained fp32 model is cached in the config's
cache_dir (`.cache/bench` by default), so a second run skips training. Quick mode
(`--suites-quick`) gates the same backends on the unit tests' tiny config in a temporary cache.
"""

from __future__ import annotations

import shlex

import pytest

from bench import registry
from bench.gate import FAIL, evaluate_gate, load_gate_config
from bench.runner import Session, run_one
from bench.results.table import results_table
from bench.config.quick import TINY_OVERRIDES

# The nightly sweep's configuration (`+sweep=nightly`: the default workload and model, batch 1024),
# so the pytest gate and the nightly gate judge the same numbers and share the trained checkpoint.
DEFAULT = ["batch_size=1024", "model.train.progress=false"]
# The unit tests' tiny config: seconds per backend.
QUICK = TINY_OVERRIDES


def gate_backends(config: pytest.Config) -> list[str]:
    text = config.getoption("--gate-backends").strip()
    if text:
        chosen = [b.strip() for b in text.split(",") if b.strip()]
    else:
        chosen = registry.names("backend")
    for name in chosen:
        registry.get("backend", name)  # an unknown name is a one-line error naming the known ones
    return chosen


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "gate_backend" in metafunc.fixturenames:
        metafunc.parametrize("gate_backend", gate_backends(metafunc.config))


@pytest.fixture(scope="module")
def gate(pytestconfig, compose_config, is_quick, tmp_path_factory):
    """Run the sweep once: fp32 first, then every gated backend; evaluate the gate over all rows."""
    user = shlex.split(pytestconfig.getoption("--gate-overrides"))
    base = list(QUICK if is_quick else DEFAULT)
    if is_quick:
        base.append(f"cache_dir={tmp_path_factory.mktemp('gate-cache')}")
    base.append(f"reports_dir={tmp_path_factory.mktemp('gate-reports')}")
    backends = ["fp32", *(b for b in gate_backends(pytestconfig) if b != "fp32")]
    session = Session()  # one process, as a sweep: the model and fp32 scores are built once
    records = {name: run_one(compose_config([*base, *user, f"backend={name}"]), session) for name in backends}
    gate_cfg = load_gate_config("default", [o for o in user if o.startswith("gate.")])
    result = evaluate_gate(results_table(records.values()), gate_cfg)
    return {"records": records, "result": result}


def test_gate(gate, gate_backend):
    # a backend may name its rows after its options (ps_redis: row precision and cache size)
    row_name = gate["records"][gate_backend].backend
    verdicts = [v for v in gate["result"].verdicts if v.backend == row_name]
    if not verdicts:
        pytest.fail(f"no gate verdicts for {gate_backend} (rows named {row_name}): its run left no row in the results table", pytrace=False)
    failing = [v for v in verdicts if v.verdict == FAIL]
    if failing:
        rows = "\n".join(f"  {v.where} [{v.rule}]: {v.reason}" for v in failing)
        pytest.fail(f"accuracy gate failed for {gate_backend} ({len(failing)} of {len(verdicts)} checks):\n{rows}", pytrace=False)
