"""The exported twin: a TorchRec-style model with dense tensors in place of its KeyedJaggedTensor.

Exporters (ONNX, torch.export, OpenVINO's converter) take tensors, not KJTs, and turn
`nn.EmbeddingBag` into a slow loop (ONNX: a `Loop` node) or leave it alone (NNCF neither quantizes
nor compresses it). The twin keeps the model's own weights and forward and changes two things:
- its inputs: `(dense, ids_1, ..., ids_F)`, one int64 matrix [B, L_f] of ids per sparse feature, in
  `Twin.features` order (`Twin.inputs(dense, kjt)` builds them, contiguous: torch.export fixes the
  example's strides);
- each EmbeddingBagCollection: every table becomes `F.embedding` (a gather) plus a sum over the bag,
  returning the same KeyedTensor, so the code around it runs as it is.

Multi-hot bags of varying length are padded to the batch's longest bag with the id of an extra zero
row appended to each table (its index is the table's row count). The cost: one row of D floats per
table in memory, and B x L_max gathered rows per feature instead of the ids' count (a batch whose
bags hold 1 to 100 ids gathers up to 100 rows for each). One-hot features pay nothing but the row.

What the twin cannot express raises `NotApplicable` (the job is `skipped` with the reason): a sequence
model's EmbeddingCollection (jagged, unpooled lookups: no runtime here takes jagged inputs, and no padded
export with a length mask is built), other embedding modules than EmbeddingBagCollections, per-id weights,
pooling other than SUM, and a forward that reads the KJT anywhere but in its EmbeddingBagCollections. `build_twin` checks the twin's scores
against the model's on a sample batch before returning it.

Two forms: `plain`, as above (`build_twin`), and `deploy`, the graph a deployer would ship (bench.backends.deploy):
one-hot features as one plain gather into a stacked table, the interaction's upper triangle without
transposes, and no KeyedTensor round trip where the model is torchrec's DLRM.
"""

from __future__ import annotations

import copy
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torchrec.modules.embedding_configs import PoolingType
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor, KeyedTensor

from bench.backends.backend import NotApplicable
from bench.backends.modules import (
    embedding_bag_collections,
    embedding_collections,
    foreign_embeddings,
    materialize_random_tables,
)
from bench.batch import Batch
from bench.errors import one_line
from bench.models.random_weights import unmaterialized

# The twin's scores must equal the model's to fp32 rounding (a gather-and-sum adds in another order
# than FBGEMM/EmbeddingBag's pooled kernel).
RTOL, ATOL = 1e-4, 1e-5


class DenseFeatures:
    """What the twin passes to the model's forward where the KJT was: the id matrices by feature.

    Only the twin's gather modules read it; any other use of the KJT fails on purpose (AttributeError)."""

    __slots__ = ("ids",)

    def __init__(self, ids: dict[str, torch.Tensor]) -> None:
        self.ids = ids


class GatherBags(nn.Module):
    """One EmbeddingBagCollection as gathers: each table's rows plus a zero row (the padding id)."""

    def __init__(self, ebc: EmbeddingBagCollection, keys: Sequence[str], length_per_key: Sequence[int]) -> None:
        super().__init__()
        self.tables = nn.ParameterDict()
        self.lookups: list[tuple[str, str]] = []  # (feature, table), in the order the EBC pools them
        for cfg in ebc.embedding_bag_configs():
            weight = ebc.embedding_bags[cfg.name].weight.detach()
            padded = torch.cat([weight, weight.new_zeros(1, weight.shape[1])])
            self.tables[cfg.name] = nn.Parameter(padded, requires_grad=False)
            self.lookups += [(feature, cfg.name) for feature in cfg.feature_names]
        self.keys, self.length_per_key = list(keys), list(length_per_key)

    def forward(self, features: DenseFeatures) -> KeyedTensor:
        pooled = [F.embedding(features.ids[feature], self.tables[table]).sum(dim=1) for feature, table in self.lookups]
        return KeyedTensor(keys=self.keys, length_per_key=self.length_per_key, values=torch.cat(pooled, dim=1))


class InputLayout:
    """How a batch becomes a twin's inputs: `(dense, *matrices)`, each matrix either the bags of one feature
    padded to the batch's longest (`("bag", name, [feature], [pad])`) or one column per one-hot feature
    (`("one_hot", name, features, pads)`: each bag holds at most one id; an empty one gets its pad).
    Small and free of weights: what a runtime that keeps no twin needs to convert batches."""

    def __init__(self, inputs: Sequence[tuple[str, str, list[str], list[int]]]) -> None:
        self.specs = [(kind, name, list(features), list(pads)) for kind, name, features, pads in inputs]

    @classmethod
    def plain(cls, pads: dict[str, int]) -> "InputLayout":
        return cls([("bag", feature, [feature], [pad]) for feature, pad in pads.items()])

    def names(self) -> list[str]:
        return ["dense", *(name for _, name, _, _ in self.specs)]

    def dynamic_width(self) -> list[bool]:
        """Per id matrix: whether its width follows the batch (a bag matrix) or is fixed (one-hot columns)."""
        return [kind == "bag" for kind, _, _, _ in self.specs]

    def __call__(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> tuple[torch.Tensor, ...]:
        jts = sparse.to_dict()
        out = []
        for kind, name, features, pads in self.specs:
            if kind == "bag":
                jt = jts[features[0]]
                width = max(1, int(jt.lengths().max())) if jt.lengths().numel() else 1
                out.append(jt.to_padded_dense(desired_length=width, padding_value=pads[0]).long().contiguous())
                continue
            columns = []
            for feature, pad in zip(features, pads):
                jt = jts[feature]
                if jt.lengths().numel() and int(jt.lengths().max()) > 1:
                    raise ValueError(f"feature {feature!r} was exported one-hot (its calibration bags held at most one id) and a "
                                     f"batch holds a bag of {int(jt.lengths().max())} ids: export it with backend.export=plain")
                columns.append(jt.to_padded_dense(desired_length=1, padding_value=pad))
            out.append(torch.cat(columns, dim=1).long().contiguous())
        return (dense.float().contiguous(), *out)


class Twin(nn.Module):
    """`twin(dense, *ids)`: the model's scores from dense id matrices, as `layout` builds them."""

    def __init__(self, model: nn.Module, pads: dict[str, int], layout: InputLayout | None = None, details: dict | None = None) -> None:
        super().__init__()
        self.model = model
        self.pads = pads  # feature -> the id of its table's zero row (plain form)
        self.layout = layout or InputLayout.plain(pads)
        self.features = self.layout.names()[1:]  # the order of the id inputs
        self.details = details or {"export_form": "plain"}  # what the export did, for the record

    def forward(self, dense: torch.Tensor, *ids: torch.Tensor) -> torch.Tensor:
        return self.model(dense, DenseFeatures(dict(zip(self.features, ids))))

    def input_names(self) -> list[str]:
        return self.layout.names()

    def inputs(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> tuple[torch.Tensor, ...]:
        """`(dense, *id matrices)` of a batch (plain form: each feature's bags padded to its longest, at least one id)."""
        return self.layout(dense, sparse)


def build_twin(model: nn.Module, sample: Batch) -> Twin:
    """The exported twin of `model` (its weights copied, the model left alone), checked on `sample`
    against the model's own scores; NotApplicable when it cannot express the model. The deploy form:
    bench.backends.deploy.export_twin."""
    model, found = expressible(model)
    pads: dict[str, int] = {}
    stand_ins = {}
    with torch.inference_mode():
        for _, ebc in found:
            pooled = ebc(sample.sparse)  # the keys and widths the model's code expects back
            stand_ins[id(ebc)] = GatherBags(ebc, pooled.keys(), pooled.length_per_key())
            for cfg in ebc.embedding_bag_configs():
                pads.update({feature: cfg.num_embeddings for feature in cfg.feature_names})
    twin = Twin(copy.deepcopy(model, memo=dict(stand_ins)), pads).eval()
    check_scores(twin, model, sample)
    return twin


def expressible(model: nn.Module) -> tuple[nn.Module, list[tuple[str, EmbeddingBagCollection]]]:
    """The model (with its tables' rows, where it has random weights: a copy) and its EmbeddingBagCollections;
    NotApplicable when a twin cannot express it."""
    sequences = embedding_collections(model)
    if sequences:  # a toolkit takes dense tensors; jagged sequences would need a padded export with a length mask
        raise NotApplicable(f"the exported twin takes dense id matrices, and {sequences[0][0] or 'the model'} (EmbeddingCollection) looks "
                            "up jagged sequences unpooled: the toolkits' runtimes take no jagged inputs, and a padded export with a "
                            "length mask is not built")
    found = embedding_bag_collections(model)
    if not found:
        raise NotApplicable(f"the exported twin needs torchrec EmbeddingBagCollections; {type(model).__name__} has none")
    others = foreign_embeddings(model)
    if others:
        raise NotApplicable(f"the exported twin turns EmbeddingBagCollections into gathers only, and the model also holds {', '.join(others[:3])}")
    for name, ebc in found:
        if ebc.is_weighted():
            raise NotApplicable(f"the exported twin takes no per-id weights, and {name or 'the model'} is a weighted EmbeddingBagCollection")
        pooling = {cfg.pooling for cfg in ebc.embedding_bag_configs()} - {PoolingType.SUM}
        if pooling:
            raise NotApplicable(f"the exported twin sums bags, and {name or 'the model'} pools with {sorted(p.name for p in pooling)}")
    if any(unmaterialized(ebc) for _, ebc in found):  # random weights: give the tables their rows first
        model = materialize_random_tables(copy.deepcopy(model))
        found = embedding_bag_collections(model)
    return model, found


def check_scores(twin: Twin, model: nn.Module, sample: Batch) -> None:
    try:
        with torch.inference_mode():
            want = model(sample.dense, sample.sparse)
            got = twin(*twin.inputs(sample.dense, sample.sparse))
    except Exception as exc:  # noqa: BLE001 - the model's forward uses the KJT in a way the twin cannot stand in for
        raise NotApplicable(f"the exported twin cannot run {type(model).__name__}'s forward on dense ids: {one_line(exc)}") from exc
    if not isinstance(got, torch.Tensor) or got.shape != want.shape or not torch.allclose(got, want, rtol=RTOL, atol=ATOL):
        raise NotApplicable(f"the exported twin of {type(model).__name__} does not reproduce its scores on a sample batch")
