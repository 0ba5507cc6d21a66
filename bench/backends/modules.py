"""Find the parts a backend rewrites in any TorchRec-style model, by walking its modules.

Two kinds of torchrec table collection hold the tables the quantized backends store: the
EmbeddingBagCollection (pooled lookups: one vector per bag) and the EmbeddingCollection (unpooled lookups:
one vector per id, a sequence model's history). Both are found by their exact type, wherever they sit.
"""

from __future__ import annotations

import torch
from torch import nn
from torchrec.modules.embedding_modules import (
    EmbeddingBagCollection,
    EmbeddingCollection,
)
from torchrec.quant.embedding_modules import (
    EmbeddingBagCollection as QuantEmbeddingBagCollection,
)
from torchrec.quant.embedding_modules import (
    EmbeddingCollection as QuantEmbeddingCollection,
)

from bench.backends.backend import NotApplicable
from bench.errors import UserError
from bench.models.random_weights import (
    materialize_tables,
    random_weights_seed,
    unmaterialized,
)

EMBEDDING_TYPES = (EmbeddingBagCollection, QuantEmbeddingBagCollection, EmbeddingCollection, QuantEmbeddingCollection)
# The eager collections the table backends store (exact types: a subclass may look its rows up otherwise).
TABLE_COLLECTIONS = (EmbeddingBagCollection, EmbeddingCollection)


def embedding_bag_collections(model: nn.Module) -> list[tuple[str, EmbeddingBagCollection]]:
    """Every eager (fp32) EmbeddingBagCollection, with its qualified name."""
    return [(name, m) for name, m in model.named_modules() if type(m) is EmbeddingBagCollection]


def embedding_collections(model: nn.Module) -> list[tuple[str, EmbeddingCollection]]:
    """Every eager (fp32) EmbeddingCollection (unpooled sequence lookups), with its qualified name."""
    return [(name, m) for name, m in model.named_modules() if type(m) is EmbeddingCollection]


def table_collections(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Every eager EmbeddingBagCollection and EmbeddingCollection, with its qualified name, in module order."""
    return [(name, m) for name, m in model.named_modules() if type(m) in TABLE_COLLECTIONS]


def on_meta(collection: nn.Module) -> bool:
    """True for an eager EmbeddingBagCollection or EmbeddingCollection whose tables live on the meta device
    (random weights: `bench.models.random_weights`)."""
    return type(collection) in TABLE_COLLECTIONS and any(p.is_meta for p in collection.parameters())


def configs_of(collection: nn.Module) -> list:
    """The table configs of an EmbeddingBagCollection or EmbeddingCollection, eager or quantized."""
    return collection.embedding_bag_configs() if hasattr(collection, "embedding_bag_configs") else collection.embedding_configs()


def holders_of(collection: nn.Module) -> nn.ModuleDict:
    """Table name -> the module that holds its rows (`.weight`): the bags of an EBC, the embeddings of an EC."""
    return collection.embedding_bags if hasattr(collection, "embedding_bags") else collection.embeddings


def table_tensors(model: nn.Module) -> list[torch.Tensor]:
    """The tensors that hold the rows of every table of `model`'s collections, eager or quantized (an INT4 or INT2
    table's packed bytes: the UIntXTensor's), on a real device (none on the meta device)."""
    out = []
    for module in model.modules():
        if isinstance(module, EMBEDDING_TYPES):
            for cfg in configs_of(module):
                weight = holders_of(module)[cfg.name].weight
                weight = getattr(weight, "elem", weight)  # torchrec's UIntXTensor keeps the bytes in .elem
                if isinstance(weight, torch.Tensor) and not weight.is_meta:
                    out.append(weight)
    return out


def table_weights(model: nn.Module) -> dict[str, tuple[nn.Parameter, object]]:
    """Table name -> (its fp32 weight, its config), over every eager table collection of `model`."""
    return {c.name: (holders_of(m)[c.name].weight, c) for _, m in table_collections(model) for c in configs_of(m)}


def require_embedding_bag_collections(model: nn.Module, backend: str) -> list[tuple[str, EmbeddingBagCollection]]:
    """Every eager EmbeddingBagCollection of the model; NotApplicable when it also looks rows up in
    modules the backend would leave in fp32 (it would be measured as if it were quantized)."""
    found = embedding_bag_collections(model)
    if not found:
        raise UserError(
            f"backend {backend!r} found no torchrec EmbeddingBagCollection in {type(model).__name__}: "
            "it quantizes the embedding tables of TorchRec-style models"
        )
    others = foreign_embeddings(model)
    if others:
        raise NotApplicable(
            f"backend {backend!r} quantizes torchrec EmbeddingBagCollections only, and the model also holds "
            f"{', '.join(others[:3])}{' ...' if len(others) > 3 else ''}"
        )
    return found


def require_table_collections(model: nn.Module, backend: str) -> list[tuple[str, nn.Module]]:
    """Every eager EmbeddingBagCollection and EmbeddingCollection of the model (the backends that store both);
    NotApplicable when it also looks rows up in other modules the backend would leave in fp32."""
    found = table_collections(model)
    if not found:
        raise UserError(
            f"backend {backend!r} found no torchrec EmbeddingBagCollection or EmbeddingCollection in {type(model).__name__}: "
            "it quantizes the embedding tables of TorchRec-style models"
        )
    others = foreign_embeddings(model, TABLE_COLLECTIONS)
    if others:
        raise NotApplicable(
            f"backend {backend!r} quantizes torchrec EmbeddingBagCollections and EmbeddingCollections only, and the model "
            f"also holds {', '.join(others[:3])}{' ...' if len(others) > 3 else ''}"
        )
    for name, ec in embedding_collections(model):
        dims = sorted({c.embedding_dim for c in ec.embedding_configs()})
        if len(dims) > 1:  # torchrec's own EC refuses this when built; a collection changed afterwards would fail deep in FBGEMM
            raise NotApplicable(f"backend {backend!r}: torchrec's quantized EmbeddingCollection holds tables of one dim, and "
                                f"{name or 'the model'} mixes dims {dims}: split it into one EmbeddingCollection per dim")
    return found


def foreign_embeddings(model: nn.Module, accepted: tuple[type, ...] = (EmbeddingBagCollection,)) -> list[str]:
    """`name (type)` of every embedding module outside the eager collections of the `accepted` types (by
    default the EmbeddingBagCollections): a torch Embedding or EmbeddingBag of its own, a torchrec
    EmbeddingCollection (unless accepted), a subclass of either."""
    inside = {id(m) for _, c in model.named_modules() if type(c) in accepted for m in c.modules()}
    kinds = (nn.Embedding, nn.EmbeddingBag, EmbeddingCollection, EmbeddingBagCollection)
    return [f"{name} ({type(m).__name__})" for name, m in model.named_modules()
            if isinstance(m, kinds) and id(m) not in inside and not _under_foreign(name, model)]


def _under_foreign(name: str, model: nn.Module) -> bool:
    """True when a parent of `name` is itself a foreign embedding module (name only the outermost)."""
    parts = name.split(".")
    kinds = (EmbeddingCollection, EmbeddingBagCollection)
    return any(isinstance(model.get_submodule(".".join(parts[:i])), kinds) for i in range(1, len(parts)))


def table_dims(model: nn.Module) -> dict[str, int]:
    """Table name -> embedding dim, over every eager EmbeddingBagCollection and EmbeddingCollection."""
    return {cfg.name: cfg.embedding_dim for _, m in table_collections(model) for cfg in configs_of(m)}


def table_rows(model: nn.Module) -> dict[str, int]:
    """Table name -> rows, over every eager EmbeddingBagCollection and EmbeddingCollection."""
    return {cfg.name: cfg.num_embeddings for _, m in table_collections(model) for cfg in configs_of(m)}


def materialize_random_tables(model: nn.Module) -> nn.Module:
    """Give the meta-device tables of a random-weights model their fp32 rows (in place), for the backends
    that compute with fp32 tables; the TBE backends build their stored rows directly instead."""
    for _, ebc in [*embedding_bag_collections(model), *embedding_collections(model)]:
        if unmaterialized(ebc):
            materialize_tables(ebc, random_weights_seed(model))
    return model


def child_slots(model: nn.Module, kinds: tuple[type[nn.Module], ...]) -> list[tuple[nn.Module, str]]:
    """(parent, attribute) of every submodule whose exact type is one of `kinds` (not searched inside), outside embedding modules."""
    slots = []

    def visit(module: nn.Module) -> None:
        for name, child in module.named_children():
            if isinstance(child, EMBEDDING_TYPES):
                continue
            if type(child) in kinds:
                slots.append((module, name))
            else:
                visit(child)

    visit(model)
    return slots
