"""Model-level suite: the forward pass of every registered backend at several batch sizes.

The path is the pipeline's (`bench.pipeline.SharedWork`): the config is composed from `conf/` with
`backend=<name>` (plus `--suites-overrides`); the workload, the fp32 model (trained on a small
budget and cached: speed does not depend on what the weights learnt), the calibration batches, the
prepared backend and the timing batch all come from the same SharedWork the runner uses. The
accuracy of each backend is the gate's business (`test_accuracy_gate.py`). A sample is one row
(user-item pair); `extra_info` holds batch_size and samples_per_s (batch_size / median).
"""

from __future__ import annotations

import shlex

import pytest
import torch

from bench import registry
from bench.backends.tables import embedding_bytes
from bench.measure.memory import model_bytes
from bench.pipeline.shared import SharedWork

BATCH_SIZES = [256, 1024, 4096]  # the quant sweep's (conf/sweep/quant.yaml)
QUICK_BATCH = 64
CALIBRATION_SAMPLES = 4096

# arg -> (full grid, quick grid, test id prefix); batch size varies fastest: one prepare per backend.
GRID = {
    "backend_name": (registry.names("backend"), registry.names("backend"), ""),
    "batch_size": (BATCH_SIZES, [QUICK_BATCH], "bs"),
}


@pytest.fixture(scope="module")
def setup(pytestconfig, compose_config, is_quick, tmp_path_factory):
    """Overrides and the pipeline's shared work (workload, model, batches), for every case of the module."""
    largest = QUICK_BATCH if is_quick else max(BATCH_SIZES)
    calibration = 512 if is_quick else CALIBRATION_SAMPLES
    overrides = [
        f"workload.eval_samples={largest}",
        f"workload.train_samples={calibration}",
        f"workload.calibration_samples={calibration}",
        f"model.train.samples={calibration}",
        "model.train.progress=false",
        f"calibration_batch_size={min(calibration, 1024)}",
        f"cache_dir={tmp_path_factory.mktemp('cache')}",
        *shlex.split(pytestconfig.getoption("--suites-overrides")),
    ]
    return {"overrides": overrides, "work": SharedWork(), "sizes": {}}


def _prepared(setup: dict, compose_config, name: str, batch_size: int, device: torch.device):
    """(cfg, prepared module or None, skip reason, sizes, timing input) through the pipeline's SharedWork."""
    cfg = compose_config([*setup["overrides"], f"backend={name}", f"batch_size={batch_size}"])
    backend = registry.get("backend", cfg.backend.name).factory(cfg.backend)
    reason = backend.unsupported_reason(device)
    if reason is not None:
        return cfg, None, reason, {}, None
    work: SharedWork = setup["work"]
    workload = work.workload(cfg)
    module = work.prepared(cfg, backend, work.model(cfg, workload), workload, device)  # one backend held at a time
    if name not in setup["sizes"]:  # once per backend
        setup["sizes"][name] = {"embedding_bytes": embedding_bytes(module), "model_bytes": model_bytes(module)}
    inputs = work.timing_inputs(cfg, workload, device)
    assert inputs, f"the eval split holds fewer than batch_size {batch_size} samples"
    return cfg, module, None, setup["sizes"][name], inputs[0]


def test_forward(benchmark, timed, device, setup, compose_config, backend_name, batch_size):
    cfg, prepared, reason, sizes, inputs = _prepared(setup, compose_config, backend_name, batch_size, device)
    if reason is not None:
        pytest.skip(reason)

    benchmark.group = f"forward bs={batch_size}"
    out, median = timed(prepared, *inputs)
    assert out.shape[0] == batch_size and bool(torch.isfinite(out).all())

    benchmark.extra_info.update(
        backend=backend_name,
        batch_size=batch_size,
        workload=cfg.workload.name,
        model=cfg.model.name,
        **sizes,
        threads=torch.get_num_threads(),
        sample="one row (user-item pair) of the workload",
    )
    if median:
        benchmark.extra_info["samples_per_s"] = batch_size / median
