"""The bytes each table of a prepared model's quantized EmbeddingBagCollection holds, as its kernel stores them."""

import torch


def stored_tables(model):
    """Table name -> a copy of its stored rows (uint8 for the integer types: fp16 scale and bias first, then the codes)."""
    qebc = model.sparse_arch.embedding_bag_collection
    out = {}
    for cfg in qebc.embedding_bag_configs():
        w = qebc.embedding_bags[cfg.name].weight
        out[cfg.name] = (w.view(torch.uint8) if w.dtype == torch.uint8 and hasattr(w, "elem") else w).clone()
    return out
