"""Find the parts a backend rewrites in any TorchRec-style model, by walking its modules."""

from __future__ import annotations

from torch import nn
from torchrec.modules.embedding_modules import (
    EmbeddingBagCollection,
    EmbeddingCollection,
)
from torchrec.quant.embedding_modules import (
    EmbeddingBagCollection as QuantEmbeddingBagCollection,
)

from bench.backends.backend import NotApplicable
from bench.errors import UserError
from bench.models.random_weights import (
    materialize_tables,
    random_weights_seed,
    unmaterialized,
)

EMBEDDING_TYPES = (EmbeddingBagCollection, QuantEmbeddingBagCollection)


def embedding_bag_collections(model: nn.Module) -> list[tuple[str, EmbeddingBagCollection]]:
    """Every eager (fp32) EmbeddingBagCollection, with its qualified name."""
    return [(name, m) for name, m in model.named_modules() if type(m) is EmbeddingBagCollection]


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


def foreign_embeddings(model: nn.Module) -> list[str]:
    """`name (type)` of every embedding module outside the eager EmbeddingBagCollections: a torch
    Embedding or EmbeddingBag of its own, a torchrec EmbeddingCollection, a subclass of the EBC."""
    inside = {id(m) for _, ebc in embedding_bag_collections(model) for m in ebc.modules()}
    kinds = (nn.Embedding, nn.EmbeddingBag, EmbeddingCollection, EmbeddingBagCollection)
    return [f"{name} ({type(m).__name__})" for name, m in model.named_modules()
            if isinstance(m, kinds) and id(m) not in inside and not _under_foreign(name, model)]


def _under_foreign(name: str, model: nn.Module) -> bool:
    """True when a parent of `name` is itself a foreign embedding module (name only the outermost)."""
    parts = name.split(".")
    kinds = (EmbeddingCollection, EmbeddingBagCollection)
    return any(isinstance(model.get_submodule(".".join(parts[:i])), kinds) for i in range(1, len(parts)))


def table_dims(model: nn.Module) -> dict[str, int]:
    """Table name -> embedding dim, over every eager EmbeddingBagCollection."""
    return {cfg.name: cfg.embedding_dim for _, ebc in embedding_bag_collections(model) for cfg in ebc.embedding_bag_configs()}


def table_rows(model: nn.Module) -> dict[str, int]:
    """Table name -> rows, over every eager EmbeddingBagCollection."""
    return {cfg.name: cfg.num_embeddings for _, ebc in embedding_bag_collections(model) for cfg in ebc.embedding_bag_configs()}


def materialize_random_tables(model: nn.Module) -> nn.Module:
    """Give the meta-device tables of a random-weights model their fp32 rows (in place), for the backends
    that compute with fp32 tables; the TBE backends build their stored rows directly instead."""
    for _, ebc in embedding_bag_collections(model):
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
