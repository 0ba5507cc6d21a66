"""A planted tune problem: a TorchRec-style model whose loud tables matter and whose quiet ones barely do.

logit = sum over tables of scale_t * sum(pooled embedding_t) + a small dense term. Embedding rows are
random normal; the label is drawn from sigmoid(logit) of the fp32 model itself, so the fp32 model is
the teacher and any quantization error in a table costs AUC in proportion to its scale. A quiet table
(scale 1e-3) can go to int2 for free; a loud one (scale 1) loses clearly at int4 and int2 and next to
nothing at int8. So, inside a budget that int8 fits and int4 does not, the fewest-bytes answer is known:
quiet tables int2, loud tables int8.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.modules.embedding_modules import EmbeddingBagCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

from bench.batch import Batch

SCALES = {"loud_0": 1.0, "loud_1": 1.0, "quiet_0": 1e-3, "quiet_1": 1e-3}
ROWS = {"loud_0": 4000, "loud_1": 3000, "quiet_0": 5000, "quiet_1": 2000}
DIM = 8
KNOWN_ANSWER = {"loud_0": "int8", "loud_1": "int8", "quiet_0": "int2", "quiet_1": "int2"}


class PlantedModel(nn.Module):
    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.ebc = EmbeddingBagCollection(
            tables=[EmbeddingBagConfig(name=t, embedding_dim=DIM, num_embeddings=ROWS[t], feature_names=[f"f_{t}"]) for t in SCALES],
            device=torch.device("cpu"),
        )
        with torch.no_grad():
            for t in SCALES:
                self.ebc.embedding_bags[t].weight.normal_(0.0, 1.0 / DIM**0.5)
        self.head = nn.Linear(len(SCALES) * DIM, 1)
        self.dense = nn.Linear(13, 1)
        with torch.no_grad():
            self.head.weight.copy_(torch.tensor([[SCALES[t]] * DIM for t in SCALES]).reshape(1, -1) * 4.0)
            self.head.bias.zero_()
            self.dense.weight.fill_(0.01)
            self.dense.bias.zero_()

    def forward(self, dense: torch.Tensor, sparse: KeyedJaggedTensor) -> torch.Tensor:
        return self.head(self.ebc(sparse).values()) + self.dense(dense)


def planted_batches(model: PlantedModel, n: int, batch_size: int, seed: int) -> list[Batch]:
    """One-hot uniform ids, labels drawn from the fp32 model's own probabilities."""
    rng = np.random.default_rng(seed)
    out = []
    for start in range(0, n, batch_size):
        b = min(batch_size, n - start)
        values = np.concatenate([rng.integers(0, ROWS[t], size=b) for t in SCALES])
        sparse = KeyedJaggedTensor.from_lengths_sync(
            keys=[f"f_{t}" for t in SCALES], values=torch.from_numpy(values), lengths=torch.ones(b * len(SCALES), dtype=torch.int64)
        )
        dense = torch.from_numpy(rng.standard_normal((b, 13)).astype(np.float32))
        with torch.no_grad():
            p = torch.sigmoid(model(dense, sparse)).reshape(-1).numpy()
        labels = torch.from_numpy((rng.random(b) < p).astype(np.float32))
        out.append(Batch(dense=dense, sparse=sparse, labels=labels))
    return out
