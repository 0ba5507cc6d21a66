"""The batch every workload yields and every model consumes."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor


@dataclass
class Batch:
    """`dense` [B, num_dense] float32, `sparse` a KJT with one key per table, `labels` [B] float32."""

    dense: torch.Tensor
    sparse: KeyedJaggedTensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Batch":
        return Batch(
            dense=self.dense.to(device, non_blocking=non_blocking),
            sparse=self.sparse.to(torch.device(device), non_blocking=non_blocking),
            labels=self.labels.to(device, non_blocking=non_blocking),
        )

    def model_inputs(self) -> tuple[torch.Tensor, KeyedJaggedTensor]:
        """Positional arguments of a TorchRec DLRM-style forward: `model(dense, sparse)`."""
        return self.dense, self.sparse
