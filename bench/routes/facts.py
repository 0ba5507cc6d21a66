"""A backend's accuracy and size alone, nothing timed (`measure=facts`): recommend's stages 1 and 2 (bench.recommend).

The eval scores come from the score cache every job uses (bench.pipeline.job.backend_scores: scored once per
model, backend and workload), so a backend a sweep or an earlier job scored costs a read and a DeLong interval
here; the model's bytes need the prepared module, built as a job builds it. The record holds the paired ΔAUC
against fp32 with its interval, the paired ΔNE with its interval, fp32's AUC, and the model's and its tables' bytes;
for a workload served by request, also the grouped AUC and its paired delta (MLPerf DLRMv3's AUC).
"""

from __future__ import annotations

from typing import Any

import torch

from bench import registry
from bench.backends.backend import Backend
from bench.backends.tables import embedding_bytes
from bench.config import FACTS, Config
from bench.measure.memory import model_bytes
from bench.metrics import AUC_DELTA, AUC_FP32, EMBEDDING_BYTES, MODEL_BYTES, NE_DELTA, hi, lo
from bench.pipeline.job import backend_config, backend_scores, grouped_auc_figures
from bench.pipeline.shared import SharedWork
from bench.registry import BASELINE_BACKEND
from bench.routes.route import PartRoute
from bench.stats import paired_auc_delta, paired_ne_acc_delta



class FactsRoute(PartRoute):
    name = FACTS
    uncalibrated = "a facts job times nothing"

    def measure(self, cfg: Config, backend: Backend, device: torch.device, work: SharedWork,
                setting: dict[str, Any]) -> dict[str, Any]:
        workload = work.workload(cfg)
        model = work.model(cfg, workload)
        work.release_leftovers(cfg, backend, device)
        labels, logits = backend_scores(cfg, backend, model, workload, device, work)
        fp32 = registry.get("backend", BASELINE_BACKEND).factory(backend_config({"name": BASELINE_BACKEND}))
        _, base = backend_scores(cfg, fp32, model, workload, device, work)
        prepared = work.prepared(cfg, backend, model, workload, device)
        delta = paired_auc_delta(labels, base, logits)
        ne, _ = paired_ne_acc_delta(labels, base, logits)  # a sequential ranker's other accuracy figure (MLPerf DLRMv3)
        return {AUC_DELTA: float(delta.delta), lo(AUC_DELTA): float(delta.lo), hi(AUC_DELTA): float(delta.hi),
                NE_DELTA: float(ne.delta), lo(NE_DELTA): float(ne.lo), hi(NE_DELTA): float(ne.hi),
                AUC_FP32: float(delta.auc_base), MODEL_BYTES: int(model_bytes(prepared)),
                EMBEDDING_BYTES: int(embedding_bytes(prepared)),
                **grouped_auc_figures(cfg, workload, work, labels, base, logits)}  # a workload served by request: MLPerf DLRMv3's AUC
