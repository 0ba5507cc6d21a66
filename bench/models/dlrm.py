"""Build a TorchRec DLRM (or DLRM-v2 with DCN) from a model config and a workload's tables."""

from __future__ import annotations

import torch
from torch import nn
from torchrec.models.dlrm import DLRM, DLRM_DCN
from torchrec.modules.embedding_configs import EmbeddingBagConfig, EmbeddingConfig, PoolingType
from torchrec.modules.embedding_modules import EmbeddingBagCollection, EmbeddingCollection

from bench.config import check_model_config
from bench.errors import UserError
from bench.workloads.workload import TableSpec


def pooled(tables: list[TableSpec]) -> list[TableSpec]:
    return [t for t in tables if not t.sequence]


def sequence_tables(tables: list[TableSpec]) -> list[TableSpec]:
    return [t for t in tables if t.sequence]


def embedding_bag_collection(tables: list[TableSpec], embedding_dim: int, device: torch.device | str = "cpu") -> EmbeddingBagCollection:
    """The pooled tables (sum pooling), one per feature; a workload's sequence tables are left out."""
    tables = pooled(tables)
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


def embedding_collection(tables: list[TableSpec], embedding_dim: int, device: torch.device | str = "cpu") -> EmbeddingCollection:
    """The sequence tables, looked up unpooled (one embedding per id); specs that share a name share the table,
    as a history and its candidate share the item table."""
    features: dict[str, list[str]] = {}
    rows: dict[str, int] = {}
    for t in sequence_tables(tables):
        features.setdefault(t.name, []).append(t.feature)
        rows[t.name] = max(rows.get(t.name, 0), int(t.num_embeddings))
    configs = [EmbeddingConfig(name=name, embedding_dim=embedding_dim, num_embeddings=rows[name], feature_names=names)
               for name, names in features.items()]
    return EmbeddingCollection(tables=configs, device=torch.device(device))


def check_pooled_only(cfg, tables: list[TableSpec]) -> None:
    """A DLRM pools every feature: a workload with sequence features needs a sequential model."""
    seq = [t.feature for t in sequence_tables(tables)]
    if seq:
        raise UserError(f"model={cfg.name} pools every feature, but the workload's {seq} are sequences: "
                        "use model=hstu, or your own model=custom that takes embedding_collection= (docs/sequential.md)")


def build_dlrm(cfg, tables: list[TableSpec], num_dense: int, table_device: torch.device | str = "cpu") -> nn.Module:
    """`cfg` is a `bench.config.ModelConfig`; the model is built on CPU, its tables on `table_device`
    (meta: tables without memory, for untrained models whose backends build them themselves)."""
    check_model_config(cfg)
    check_pooled_only(cfg, tables)
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
