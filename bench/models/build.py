"""One way to build the fp32 model of a config: a built-in DLRM, the HSTU ranker, or the user's own factory."""

from __future__ import annotations

import torch
from torch import nn

from bench.config import HSTU_ARCH
from bench.models.custom import build_custom, is_custom
from bench.models.dlrm import build_dlrm
from bench.models.hstu import build_hstu
from bench.workloads.workload import Sequences, TableSpec


def build_model(cfg, tables: list[TableSpec], num_dense: int, table_device: torch.device | str = "cpu",
                sequences: Sequences | None = None) -> nn.Module:
    """`cfg` is a `bench.config.ModelConfig`. A custom model comes back as its factory returns it; the
    harness reads its outputs through `bench.models.custom.as_logits`. `sequences`: a sequential workload's
    history and candidate features (`Workload.sequences`), which model=hstu reads."""
    if is_custom(cfg):
        return build_custom(cfg, tables, num_dense, table_device)
    if cfg.arch == HSTU_ARCH:
        return build_hstu(cfg, tables, num_dense, sequences, table_device)
    return build_dlrm(cfg, tables, num_dense, table_device)
