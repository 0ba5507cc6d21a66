"""`fp32`: the eager fp32 model, the baseline every other backend is compared with."""

from __future__ import annotations

import copy
from dataclasses import dataclass

from bench.backends.backend import Backend
from bench.backends.modules import materialize_random_tables
from bench.config import BackendConfig
from bench.registry import register


@dataclass
class Fp32Config(BackendConfig):
    name: str = "fp32"


@register("backend", "fp32", config=Fp32Config)
class Fp32Backend(Backend):
    def prepare(self, model, calibration_batches, device):
        return materialize_random_tables(copy.deepcopy(model)).to(device).eval()
