"""Model-level suite: the forward pass of every registered backend at several batch sizes.

The path is the runner's (`bench.runner`), less training: the config is composed from `conf/` with
`backend=<name>` (plus `--suites-overrides`), the workload comes from the registry, the DLRM from
`bench.models.dlrm.build_dlrm` on the workload's tables, and each backend is built by its registry
factory from `cfg.backend` and prepared with `prepare(model, calibration_batches, device)` on the
workload's calibration batches, after `torch.manual_seed(cfg.seed)`. The timing input is the first
full eval batch at the batch size, moved to the device before timing, as the runner times.

The model is untrained (seeded init): speed does not depend on what the weights learnt, and the
accuracy of each backend is the gate's business (`test_accuracy_gate.py`). A sample is one row
(user-item pair); `extra_info` holds batch_size and samples_per_s (batch_size / median).
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import torch

from bench import registry
from bench.measure.memory import model_bytes
from bench.measure.tables import embedding_bytes
from bench.models.dlrm import build_dlrm

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
    """Overrides, workload, fp32 model and calibration batches, shared by every case of the module."""
    largest = QUICK_BATCH if is_quick else max(BATCH_SIZES)
    calibration = 512 if is_quick else CALIBRATION_SAMPLES
    overrides = [
        f"workload.eval_samples={largest}",
        f"workload.train_samples={calibration}",
        f"workload.calibration_samples={calibration}",
        f"calibration_batch_size={min(calibration, 1024)}",
        f"cache_dir={tmp_path_factory.mktemp('cache')}",
        *shlex.split(pytestconfig.getoption("--suites-overrides")),
    ]
    cfg = compose_config(overrides)
    workload = registry.get("workload", cfg.workload.name).factory(cfg.workload, cfg.seed, Path(cfg.cache_dir))
    torch.manual_seed(cfg.seed)
    model = build_dlrm(cfg.model, workload.tables, workload.num_dense).eval()
    return {
        "overrides": overrides,
        "workload": workload,
        "model": model,
        "calibration": list(workload.batches("calibration", cfg.calibration_batch_size)),
        "prepared": {},  # (backend, device) -> (cfg, module or None, skip reason, sizes): one held at a time
    }


def _prepared(setup: dict, compose_config, name: str, device: torch.device):
    """The backend built and prepared as the runner does it: registry factory on cfg.backend, seeded prepare."""
    key = (name, str(device))
    if key not in setup["prepared"]:
        setup["prepared"].clear()  # batch size varies fastest: keep only the current backend alive
        cfg = compose_config([*setup["overrides"], f"backend={name}"])
        backend = registry.get("backend", cfg.backend.name).factory(cfg.backend)
        reason = backend.unsupported_reason(device)
        module, sizes = None, {}
        if reason is None:
            torch.manual_seed(cfg.seed)
            module = backend.prepare(setup["model"], setup["calibration"], device)
            sizes = {"embedding_bytes": embedding_bytes(module), "model_bytes": model_bytes(module)}  # once per backend
        setup["prepared"][key] = (cfg, module, reason, sizes)
    return setup["prepared"][key]


def test_forward(benchmark, timed, device, setup, compose_config, backend_name, batch_size):
    cfg, prepared, reason, sizes = _prepared(setup, compose_config, backend_name, device)
    if reason is not None:
        pytest.skip(reason)
    batch = next(iter(setup["workload"].batches("eval", batch_size)))
    assert len(batch) == batch_size, f"eval split holds {len(batch)} samples, fewer than batch_size {batch_size}"
    inputs = batch.to(device).model_inputs()

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
