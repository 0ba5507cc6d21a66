"""One way to build the fp32 model of a config: a built-in DLRM, or the user's own factory."""

from __future__ import annotations

import torch
from torch import nn

from bench.models.custom import build_custom, is_custom
from bench.models.dlrm import build_dlrm
from bench.workloads.workload import TableSpec


def build_model(cfg, tables: list[TableSpec], num_dense: int, table_device: torch.device | str = "cpu") -> nn.Module:
    """`cfg` is a `bench.config.ModelConfig`. A custom model comes back as its factory returns it; the
    harness reads its outputs through `bench.models.custom.as_logits`."""
    if is_custom(cfg):
        return build_custom(cfg, tables, num_dense, table_device)
    return build_dlrm(cfg, tables, num_dense, table_device)
