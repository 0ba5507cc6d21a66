"""torchrec's experimental `DLRM_Transformer` (torchrec.models.experimental.transformerdlrm): a transformer
encoder over the dense and sparse embeddings as the interaction; returns logits. torchrec says it is for
benchmarking, not for model quality.

    python -m bench model=custom model.factory=examples.torchrec_models.transformer_dlrm:build

torchrec builds the encoder layers at PyTorch's default feed-forward width (2048) and gives no way to set
it; this factory rebuilds them, as torchrec does, at `dim_feedforward` (64 by default, so that it trains in
seconds like the other examples; `model.kwargs.dim_feedforward=2048` gives torchrec's own width).

Left as torchrec ships it: the encoder is sequence-first while it is handed a [B, F + 1, D] tensor, so its
attention runs across the B samples of a batch (a sample's score depends on the others in its batch, and
the cost grows with B squared). Built `batch_first=True` instead, PyTorch's encoder takes its fused fast
path in eval mode, which reads each Linear's `.weight`: on fake_quant's wrapped layers that fails, and
the harness skips fake_quant for that model with the reason (AttributeError: 'FakeQuantUnit' object has
no attribute 'weight').
"""

from __future__ import annotations

from typing import Sequence

from torch import nn
from torchrec.models.experimental.transformerdlrm import DLRM_Transformer
from torchrec.modules.embedding_modules import EmbeddingBagCollection

from examples.torchrec_models._sizes import embedding_dim


def build(embedding_bag_collection: EmbeddingBagCollection, dense_in_features: int, dense_hidden: Sequence[int] = (64,),
          over_arch_layer_sizes: Sequence[int] = (64, 32, 1), nhead: int = 4, ntransformer_layers: int = 1,
          dim_feedforward: int = 64) -> DLRM_Transformer:
    """`nhead` must divide the tables' width (model.embedding_dim)."""
    d = embedding_dim(embedding_bag_collection)
    model = DLRM_Transformer(embedding_bag_collection=embedding_bag_collection, dense_in_features=dense_in_features,
                             dense_arch_layer_sizes=[*dense_hidden, d], over_arch_layer_sizes=list(over_arch_layer_sizes),
                             nhead=nhead, ntransformer_layers=ntransformer_layers)
    # torchrec's InteractionTransformerArch encoder, at the feed-forward width asked for
    layer = nn.TransformerEncoderLayer(d_model=d, nhead=nhead, dim_feedforward=dim_feedforward)
    model.inter_arch.interarch_TE = nn.TransformerEncoder(layer, num_layers=ntransformer_layers)
    return model
