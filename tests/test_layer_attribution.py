"""A ΔAUC that names its layer (`attribute_layers=true`, bench.pipeline.layers): a planted bad layer (one int8
Linear's weight scales given the wrong sign (times -1), through the test-only BENCH_TEST_BAD_INT8_LAYER) is named first, with
most of the loss; without the key, or within the gate's margin, nothing extra is measured."""

import json

import pytest

from bench.backends.linear import PLANT_ENV
from bench.gate import evaluate_gate, load_gate_config, render_markdown
from bench.results.table import results_table
from bench.store import read_records
from bench.pipeline.layers import attribution_line
from tests.conftest import run_bench

BAD = "over_arch.model.0._mlp.0._linear"  # model=small's first over-arch Linear (64 wide after the tiny preset)


def test_the_line_names_the_largest_shares_of_the_loss_first():
    rows = [{"layer": "a", "what": "Linear 64→1", "scheme": "int8 dynamic", "auc_delta": -0.294},
            {"layer": "t_cat_0", "what": "table 10×16", "scheme": "int8 rows", "auc_delta": -0.003},
            {"layer": "b", "what": "Linear 8→4", "scheme": "int8 dynamic", "auc_delta": 0.001}]
    assert attribution_line(-0.297, rows) == "-0.2970: 99% from `a` (Linear 64→1), int8 dynamic; 1% from `t_cat_0` (table 10×16), int8 rows"


def _records(reports):
    return [json.loads(line) for line in (reports / "records.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_planted_bad_layer_is_named_by_the_attribution(tmp_path):
    args = ["-m", "+preset=tiny", "threads=1", "backend=fp32,int8_tbe", "attribute_layers=true",
            f"cache_dir={tmp_path / 'cache'}", f"reports_dir={tmp_path / 'reports'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    result = run_bench(*args, env={PLANT_ENV: f"{BAD}:-1"})
    int8 = next(r for r in _records(tmp_path / "reports") if r["backend"] == "int8_tbe")
    line = int8["metrics"].get("auc_delta_layers_line")
    print(line)
    first = int8["metrics"]["auc_delta_layers"][0]
    assert first["layer"] == BAD and first["auc_delta"] / int8["metrics"]["auc_delta"] > 0.5, int8["metrics"]["auc_delta_layers"]
    assert f"from `{BAD}` (Linear" in line.split(";")[0], line
    assert result.returncode == 0, result.stderr[-2000:]
    # the failure report: gate.md's failing AUC rows name the layers
    table = results_table(read_records(tmp_path / "reports" / "records.jsonl"))
    md = render_markdown(evaluate_gate(table, load_gate_config()))
    failing = [row for row in md.splitlines() if row.startswith("| ❌ fail | int8_tbe") and "auc" in row]
    assert failing and all(f"by layer: {line}" in row for row in failing), md


@pytest.mark.slow
def test_without_the_key_nothing_extra_is_measured(tmp_path):
    result = run_bench("+preset=tiny", "threads=1", "backend=int8_tbe", f"cache_dir={tmp_path / 'cache'}",
                       f"reports_dir={tmp_path / 'reports'}", env={PLANT_ENV: f"{BAD}:-1"})
    assert result.returncode == 0, result.stderr[-2000:]
    metrics = _records(tmp_path / "reports")[-1]["metrics"]
    assert metrics["auc_delta"] < -0.001 and "auc_delta_layers" not in metrics
