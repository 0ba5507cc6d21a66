"""Non-finite scores, root-caused (bench.pipeline.nonfinite): the error record names the first layer whose output
goes NaN or infinite, found by comparing the backend's layer outputs with fp32's on the failing batch. A test model
plants a layer that is finite in fp32 and -inf once its Linear is int8 (tests.support.custom_models.NanWhenInt8)."""

import importlib.util
import json

import numpy as np
import pytest
import torch

from bench.backends.layer_outputs import LayerOutput, first_non_finite, module_outputs
from bench.batch import Batch
from bench.pipeline.nonfinite import failing_batch, where_it_starts
from tests.conftest import run_bench
from tests.support.custom_models import NanWhenInt8


def out(name, bad=0, inputs_finite=True, op="Linear", max_abs=1.0):
    return LayerOutput(name, op, bad, 8, inputs_finite, max_abs)


def test_the_layer_named_is_the_first_whose_inputs_were_finite():
    outputs = [out("a"), out("b", bad=8, inputs_finite=False), out("c", bad=3, op="Log"), out("d", bad=8, inputs_finite=False)]
    assert first_non_finite(outputs).name == "c"
    assert first_non_finite([out("a")]) is None
    line = where_it_starts(outputs, [out("c", max_abs=3.25)], 2)
    assert line == "it starts at `c` (Log) on eval batch 2: 3 of 8 values non-finite, its inputs finite; fp32's output there is finite (largest |value| 3.25)"
    assert "the model itself" in where_it_starts(outputs, [out("c", bad=1)], 0)
    assert "fp32 has no layer of that name" in where_it_starts(outputs, [], 0)


def test_the_failing_batch_is_the_first_with_a_non_finite_score():
    batches = [Batch(torch.zeros(n, 1), None, torch.zeros(n)) for n in (4, 4, 2)]
    logits = np.zeros(10, dtype=np.float32)
    logits[9] = np.nan
    assert failing_batch(batches, logits)[0] == 2


def test_hooks_see_the_planted_layer_finite_in_fp32():
    layers = module_outputs(NanWhenInt8(), (1.0 + torch.rand(4, 1),))
    assert [o.name for o in layers] == ["linear", "(the model)"] and not any(o.bad for o in layers)


@pytest.mark.slow
def test_a_planted_nan_layer_is_named_in_the_error_record(tmp_path):
    toolkit = importlib.util.find_spec("onnxruntime") is not None  # `make setup` installs it; the int8_tbe check runs anyway
    backends = "fp32,int8_tbe" + (",onnxruntime_int8_static" if toolkit else "")
    result = run_bench("-m", "+preset=tiny", "threads=1", f"backend={backends}", "model=custom",
                       "model.factory=tests.support.custom_models:planted_nan", f"cache_dir={tmp_path / 'cache'}",
                       f"reports_dir={tmp_path / 'reports'}", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    assert result.returncode == 1, result.stderr[-2000:]  # a job errored
    records = {r["backend"]: r for r in map(json.loads, (tmp_path / "reports" / "records.jsonl").read_text().splitlines())}
    assert records["fp32"]["status"] == "ok"
    int8 = records["int8_tbe"]
    assert int8["status"] == "error" and "non-finite scores (NaN or inf)" in int8["error"]
    assert "it starts at `planted` (NanWhenInt8)" in int8["error"] and "its inputs finite" in int8["error"], int8["error"]
    assert "fp32's output there is finite" in int8["error"]
    if toolkit:  # the runtime's graph, op by op: the Log node of the planted module
        ort = records["onnxruntime_int8_static"]
        assert ort["status"] == "error" and "it starts at `/model/planted/Log` (Log)" in ort["error"], ort["error"]
        assert "fp32's output there is finite" in ort["error"]
