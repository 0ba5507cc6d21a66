"""The exported twin in the form a deployer ships (`backend.export=deploy`): the graph without the handicaps
that a line-by-line export of torchrec's code brings into a runtime.

What changes against the plain twin (bench.backends.twin), each only where it keeps the model's function:
- **stacked tables**: the tables of one dim in an EmbeddingBagCollection are one weight (their rows one after
  another, one zero row at the end), read by one gather with per-feature row offsets added to the ids;
- **one-hot features as a plain gather**: a feature whose bags hold at most one id (every calibration bag;
  the workload's `pooling` of 1 gives exactly that) is one column of one `[B, F]` id matrix per stack and is
  gathered with no sum over a bag axis of length 1. Multi-hot features keep a `[B, L]` matrix of their own
  and a sum over the bag. A later batch with a longer bag for a one-hot feature fails with a clear line;
- **no KeyedTensor round trip**: torchrec's `SparseArch` (DLRM, DLRM_DCN, DLRM_Projection) gets the gathered
  `[B, F, D]` block directly, where the plain twin concatenates, splits and concatenates again. Other models
  read the KeyedTensor the stacked gather returns, with their own code;
- **the interaction's upper triangle** (torchrec's `InteractionArch`) without the Transposes that the
  exporter writes for `interactions[:, triu0, triu1]`: `gather` takes it with one Gather on axis 1 of the
  flattened `[B, (F+1)^2]` products; `fold` passes all `(F+1)^2` products on and widens the first top Linear
  with zero weights off the triangle (exact: zero times a finite product adds nothing), which needs the
  DLRM's own forward and its `OverArch` (elsewhere it falls back to `gather`, and the record says why).

A quantizer that scales per tensor sees a stacked table as one tensor: one scale for all its tables where
the plain twin had one per table. Per-row (per-channel on the row axis) schemes, the ones the harness's
toolkit backends use for tables, give every row its own scale either way, so their results are unchanged.
"""

from __future__ import annotations

import copy
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torchrec.models.dlrm import DLRM, InteractionArch, OverArch, SparseArch
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.sparse.jagged_tensor import KeyedTensor

from bench.backends.twin import DenseFeatures, InputLayout, Twin, build_twin, check_scores, expressible
from bench.batch import Batch

TRIANGLES = ("gather", "fold")
FORMS = ("deploy", "plain")
# the deploy form's tables: one weight per dim (stacked) or one per table (per_table: a per-tensor scale per table)
STACKINGS = ("stacked", "per_table")


def export_twin(model: nn.Module, sample: Batch, form: str = "deploy", triangle: str = "gather", calibration: Sequence[Batch] = (),
                stacking: str = "stacked") -> Twin:
    """The exported twin of `model` in `form` (`plain`: bench.backends.twin.build_twin), checked on `sample`
    against the model's scores; the deploy form judges one-hot features on `sample` and `calibration`, and stacks the
    tables of one dim (`stacking=stacked`) or gathers each table from its own weight (`per_table`)."""
    if form == "plain":
        return build_twin(model, sample)
    if form not in FORMS:
        raise ValueError(f"export form {form!r}: choose one of {', '.join(FORMS)}")
    if stacking not in STACKINGS:
        raise ValueError(f"stacking {stacking!r}: choose one of {', '.join(STACKINGS)}")
    model, found = expressible(model)
    twin = deploy_twin(model, found, [sample, *calibration], triangle, per_table=stacking == "per_table")
    check_scores(twin, model, sample)
    return twin


def one_hot_features(batches: Sequence[Batch]) -> set[str]:
    """The features whose bags hold at most one id in every batch given."""
    longest: dict[str, int] = {}
    for batch in batches:
        for feature, jt in batch.sparse.to_dict().items():
            n = int(jt.lengths().max()) if jt.lengths().numel() else 0
            longest[feature] = max(longest.get(feature, 0), n)
    return {feature for feature, n in longest.items() if n <= 1}


class StackedBags(nn.Module):
    """One EmbeddingBagCollection as stacked gathers, returning the KeyedTensor the collection would."""

    def __init__(self, ebc: EmbeddingBagCollection, keys: Sequence[str], length_per_key: Sequence[int], one_hot: set[str],
                 prefix: str, per_table: bool = False) -> None:
        super().__init__()
        cfgs = ebc.embedding_bag_configs()
        stack_of = (lambda c: c.name) if per_table else (lambda c: c.embedding_dim)  # a stack per table, or per dim
        dims = list(dict.fromkeys(stack_of(c) for c in cfgs))
        self.stacks = nn.ParameterList()
        where: dict[str, tuple[int, int]] = {}  # table -> (stack, first row)
        self.stacked_tables: list[list[str]] = []
        for k, key in enumerate(dims):
            members = [c for c in cfgs if stack_of(c) == key]
            dim = members[0].embedding_dim
            start, parts = 0, []
            for c in members:
                where[c.name] = (k, start)
                start += c.num_embeddings
                parts.append(ebc.embedding_bags[c.name].weight.detach())
            parts.append(parts[0].new_zeros(1, dim))
            self.stacks.append(nn.Parameter(torch.cat(parts), requires_grad=False))
            self.stacked_tables.append([c.name for c in members])
        order = [(feature, c.name) for c in cfgs for feature in c.feature_names]  # the order the EBC pools them
        self.keys, self.length_per_key = list(keys), list(length_per_key)
        self.inputs: list[tuple[str, str, list[str], list[int]]] = []  # InputLayout's specs
        self.groups: list[tuple[str, int, list[str]]] = []  # (input, stack, features): one-hot columns
        self.bags: list[tuple[str, int, str, int]] = []  # (input, stack, feature, offset): multi-hot
        for k in range(len(dims)):
            zero_row = int(self.stacks[k].shape[0]) - 1
            columns = [(f, t) for f, t in order if where[t][0] == k and f in one_hot]
            if columns:
                name = f"{prefix}ids_{k}"
                offsets = [where[t][1] for _, t in columns]
                self.register_buffer(f"offsets_{k}", torch.tensor(offsets, dtype=torch.int64))
                self.groups.append((name, k, [f for f, _ in columns]))
                self.inputs.append(("one_hot", name, [f for f, _ in columns], [zero_row - o for o in offsets]))
            for f, t in order:
                if where[t][0] == k and f not in one_hot:
                    self.bags.append((f"{prefix}{f}", k, f, where[t][1]))
                    self.inputs.append(("bag", f"{prefix}{f}", [f], [zero_row - where[t][1]]))
        self.one_block = not self.bags and len(self.groups) == 1 and self.groups[0][2] == self.keys

    def block(self, features: DenseFeatures) -> torch.Tensor:
        """`[B, F, D]`, the features in the collection's order: the one stacked gather (only when `one_block`)."""
        name, k, _ = self.groups[0]
        return F.embedding(features.ids[name] + getattr(self, f"offsets_{k}"), self.stacks[k])

    def forward(self, features: DenseFeatures) -> KeyedTensor:
        if self.one_block:
            values = self.block(features).flatten(1)
        else:
            pieces: dict[str, torch.Tensor] = {}
            for name, k, group in self.groups:
                rows = F.embedding(features.ids[name] + getattr(self, f"offsets_{k}"), self.stacks[k])
                pieces.update({f: rows[:, j] for j, f in enumerate(group)})
            for name, k, f, offset in self.bags:
                pieces[f] = F.embedding(features.ids[name] + offset, self.stacks[k]).sum(dim=1)
            values = torch.cat([pieces[f] for f in self.keys], dim=1)
        return KeyedTensor(keys=self.keys, length_per_key=self.length_per_key, values=values)


class BlockSparseArch(nn.Module):
    """torchrec's SparseArch without its KeyedTensor round trip: the stacked gather's `[B, F, D]` as it is."""

    def __init__(self, bags: StackedBags) -> None:
        super().__init__()
        self.embedding_bag_collection = bags

    def forward(self, features: DenseFeatures) -> torch.Tensor:
        return self.embedding_bag_collection.block(features)


class TriangleInteraction(nn.Module):
    """torchrec's InteractionArch with its upper triangle taken on the flattened products: one Gather on axis 1
    (`gather`), or every product passed on for a first top Linear widened with zeros (`fold`)."""

    def __init__(self, arch: InteractionArch, fold: bool) -> None:
        super().__init__()
        self.F, self.fold = arch.F, fold
        rows, cols = arch.triu_indices
        self.register_buffer("flat", (rows * (self.F + 1) + cols).long())

    def forward(self, dense_features: torch.Tensor, sparse_features: torch.Tensor) -> torch.Tensor:
        combined = torch.cat((dense_features.unsqueeze(1), sparse_features), dim=1)
        products = torch.bmm(combined, combined.transpose(1, 2)).flatten(1)
        if not self.fold:
            products = products.index_select(1, self.flat)
        return torch.cat((dense_features, products), dim=1)


def _folded(linear: nn.Linear, dense_width: int, flat: torch.Tensor, full: int) -> nn.Linear:
    """`linear` widened to read all `full` products: its triangle weights at their flat positions, zeros elsewhere."""
    wide = nn.Linear(dense_width + full, linear.out_features, bias=linear.bias is not None)
    with torch.no_grad():
        weight = linear.weight.new_zeros(linear.out_features, dense_width + full)
        weight[:, :dense_width] = linear.weight[:, :dense_width]
        weight[:, dense_width + flat] = linear.weight[:, dense_width:]
        wide.weight.copy_(weight)
        if linear.bias is not None:
            wide.bias.copy_(linear.bias)
    return wide.requires_grad_(False)


def _fold_target(model: nn.Module, arch: InteractionArch) -> tuple[nn.Linear | None, str]:
    """The first top Linear the interaction feeds, or None and why the fold does not apply."""
    if not isinstance(model, DLRM) or type(model).forward is not DLRM.forward or model.inter_arch is not arch:
        return None, "fold needs torchrec's DLRM forward (the interaction straight into its OverArch)"
    if type(model.over_arch) is not OverArch:
        return None, "fold needs torchrec's OverArch after the interaction"
    first = next((m for m in model.over_arch.modules() if isinstance(m, nn.Linear)), None)
    triangle = arch.F * (arch.F + 1) // 2
    if type(first) is not nn.Linear or first.in_features <= triangle:
        return None, "fold needs a Linear first in the OverArch, reading the interaction"
    return first, ""


def deploy_twin(model: nn.Module, found: list[tuple[str, EmbeddingBagCollection]], samples: Sequence[Batch], triangle: str,
                per_table: bool = False) -> Twin:
    """The deploy-form twin of `model` (its EBCs `found`; one-hot features judged on `samples`; `per_table`: each table
    gathered from its own weight)."""
    if triangle not in TRIANGLES:
        raise ValueError(f"triangle {triangle!r}: choose one of {', '.join(TRIANGLES)}")
    one_hot = one_hot_features(samples)
    memo: dict[int, nn.Module] = {}
    specs: list = []
    pads: dict[str, int] = {}
    details: dict = {"export_form": "deploy", "stacking": "per_table" if per_table else "stacked", "one_hot_features": 0,
                     "multi_hot_features": 0, "stacked_tables": []}
    stand_ins: dict[int, StackedBags] = {}
    with torch.inference_mode(False), torch.no_grad():
        for n, (_, ebc) in enumerate(found):
            pooled = ebc(samples[0].sparse)
            bags = StackedBags(ebc, pooled.keys(), pooled.length_per_key(), one_hot, prefix="" if len(found) == 1 else f"ebc{n}_",
                               per_table=per_table)
            stand_ins[id(ebc)] = memo[id(ebc)] = bags
            specs += bags.inputs
            details["stacked_tables"] += [len(tables) for tables in bags.stacked_tables]
            details["one_hot_features"] += sum(len(g[2]) for g in bags.groups)
            details["multi_hot_features"] += len(bags.bags)
            for kind, _, features, feature_pads in bags.inputs:
                pads.update(zip(features, feature_pads))
        sparse_arches = [m for m in model.modules() if type(m) is SparseArch]
        direct = [m for m in sparse_arches if stand_ins[id(m.embedding_bag_collection)].one_block]
        for arch in direct:
            memo[id(arch)] = BlockSparseArch(stand_ins[id(arch.embedding_bag_collection)])
        details["keyed_tensor"] = ("bypassed: torchrec's SparseArch reads the stacked gather's [B, F, D]" if direct and len(direct) == len(sparse_arches)
                                   else "kept: the model reads the collection's KeyedTensor with its own code" if not sparse_arches
                                   else "kept: a SparseArch's features are not one block of one-hot columns")
        interactions = [m for m in model.modules() if type(m) is InteractionArch]
        details["triangle"] = "none: no torchrec InteractionArch in the model"
        for arch in interactions:
            fold = triangle == "fold"
            if fold:
                first, why = _fold_target(model, arch)
                if first is None:
                    fold, details["triangle_fallback"] = False, why
                else:
                    full = (arch.F + 1) ** 2
                    dense_width = first.in_features - arch.F * (arch.F + 1) // 2
                    memo[id(first)] = _folded(first, dense_width, TriangleInteraction(arch, True).flat, full)
            memo[id(arch)] = TriangleInteraction(arch, fold)
            details["triangle"] = "fold" if fold else "gather"
        twin_model = copy.deepcopy(model, memo=memo)
    return Twin(twin_model, pads, InputLayout(specs), details).eval()
