"""Build a TorchRec DLRM (or DLRM-v2 with DCN) from a model config and a workload's tables."""

from __future__ import annotations

import torch
from torch import nn
from torchrec.models.dlrm import DLRM, DLRM_DCN
from torchrec.modules.embedding_configs import EmbeddingBagConfig, PoolingType
from torchrec.modules.embedding_modules import EmbeddingBagCollection

from bench.config import check_model_config
from bench.workloads.workload import TableSpec


def embedding_bag_collection(tables: list[TableSpec], embedding_dim: int, device: torch.device | str = "cpu") -> EmbeddingBagCollection:
    configs = [
        EmbeddingBagConfig(
            name=t.name,
            embedding_dim=embedding_dim,
            num_embeddings=t.num_embeddings,
            feature_names=[t.feature],
            pooling=PoolingType.SUM,
        )
        for t in tables
    ]
    return EmbeddingBagCollection(tables=configs, device=torch.device(device))


def build_dlrm(cfg, tables: list[TableSpec], num_dense: int, table_device: torch.device | str = "cpu") -> nn.Module:
    """`cfg` is a `bench.config.ModelConfig`; the model is built on CPU, its tables on `table_device`
    (meta: tables without memory, for untrained models whose backends build them themselves)."""
    check_model_config(cfg)
    ebc = embedding_bag_collection(tables, cfg.embedding_dim, table_device)
    common = dict(
        embedding_bag_collection=ebc,
        dense_in_features=num_dense,
        dense_arch_layer_sizes=list(cfg.dense_arch_layer_sizes),
        over_arch_layer_sizes=list(cfg.over_arch_layer_sizes),
    )
    if cfg.arch == "dlrm":
        return DLRM(**common)
    return DLRM_DCN(**common, dcn_num_layers=cfg.dcn_num_layers, dcn_low_rank_dim=cfg.dcn_low_rank_dim)
