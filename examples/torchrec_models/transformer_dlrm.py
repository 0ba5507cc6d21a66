"""torchrec's experimental `DLRM_Transformer` (torchrec.models.experimental.transformerdlrm): a transformer
encoder over the dense and sparse embeddings as the interaction; returns logits. torchrec says it is for
benchmarking, not for model quality.

    python -m bench model=custom model.factory=examples.torchrec_models.transformer_dlrm:build

torchrec builds the encoder layers at PyTorch's default feed-forward width (2048) and gives no way to set
it; this factory rebuilds them, as torchrec does, at `dim_feedforward` (64 by default, so that it trains in
seconds like the other examples; `model.kwargs.dim_feedforward=2048` gives torchrec's own width).

The encoder attends across each sample's F + 1 feature tokens (`attend_across="features"`), as the model's
description says. torchrec ships its encoder sequence-first while it hands it a [B, F + 1, D] tensor, so there
the attention runs across the B samples of a batch: a sample's score depends on the others in its batch, and
a layer costs B² per feature and head (at the training batch of 2048 a step took 14.7 s on 2 busy cores, 97%
of it in the [B, B] attention; over the features, tenths of a second). `attend_across="batch"` keeps
torchrec's form. The encoder stays sequence-first, fed the tokens as [F + 1, B, D]: built `batch_first=True`
instead, PyTorch's encoder takes its fused fast path in eval mode, which reads each Linear's `.weight`, and
fake_quant's wrapped layers have none.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn
from torchrec.models.experimental.transformerdlrm import DLRM_Transformer
from torchrec.modules.embedding_modules import EmbeddingBagCollection

from examples.torchrec_models._sizes import embedding_dim

ACROSS = ("features", "batch")


class AcrossFeatures(nn.Module):
    """A sequence-first encoder run over the feature tokens of each sample: [B, T, D] in, [B, T, D] out."""

    def __init__(self, encoder: nn.TransformerEncoder) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.encoder(tokens.transpose(0, 1)).transpose(0, 1)


def build(embedding_bag_collection: EmbeddingBagCollection, dense_in_features: int, dense_hidden: Sequence[int] = (64,),
          over_arch_layer_sizes: Sequence[int] = (64, 32, 1), nhead: int = 4, ntransformer_layers: int = 1,
          dim_feedforward: int = 64, attend_across: str = "features") -> DLRM_Transformer:
    """`nhead` must divide the tables' width (model.embedding_dim); `attend_across` is one of ACROSS."""
    if attend_across not in ACROSS:
        raise ValueError(f"attend_across={attend_across!r} is not one of {', '.join(ACROSS)}")
    d = embedding_dim(embedding_bag_collection)
    model = DLRM_Transformer(embedding_bag_collection=embedding_bag_collection, dense_in_features=dense_in_features,
                             dense_arch_layer_sizes=[*dense_hidden, d], over_arch_layer_sizes=list(over_arch_layer_sizes),
                             nhead=nhead, ntransformer_layers=ntransformer_layers)
    # torchrec's InteractionTransformerArch encoder, at the feed-forward width asked for (sequence-first, as torchrec's:
    # no nested-tensor fast path to ask for)
    layer = nn.TransformerEncoderLayer(d_model=d, nhead=nhead, dim_feedforward=dim_feedforward)
    encoder = nn.TransformerEncoder(layer, num_layers=ntransformer_layers, enable_nested_tensor=False)
    model.inter_arch.interarch_TE = AcrossFeatures(encoder) if attend_across == "features" else encoder
    return model
