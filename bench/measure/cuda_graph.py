"""A model call captured once in a CUDA graph and replayed, as a GPU deployment runs a launch-bound model.

On a GPU a DLRM call is a few dozen small kernels; at the batch sizes served, launching them takes longer than
running them (docs/gpu.md). A CUDA graph records the kernels once and replays them with one launch. A graph
replays fixed shapes at fixed addresses, and a request's sparse input is not fixed: each feature's ids per
sample vary, so the ids' count does. `StaticInputs` therefore copies every call's inputs into buffers of one
shape, on the device and without a host sync (a sync is not allowed while a graph records, and would cost
what the graph saves):

- one spare sample after the batch (`B + 1` rows): each feature's ids are laid out in a segment of
  `capacity` ids, and the spare sample's bag takes the rest of the segment, so every feature's id count
  is `capacity`, whatever the request held; the spare sample's output is dropped. A DLRM scores each sample
  on its own (no layer mixes samples), so the batch's outputs are the same as without the spare one.
- the capacity per feature is fixed when the graph is recorded: the most ids a feature had in a sample
  of the batch seen then, times the batch size (exact for fixed multi-hot sizes, as the synthetic
  workloads' and MLPerf's), rounded up to 64. A later call with more ids than that sets an overflow flag
  on the device instead of writing past the segment; `GraphedModule.check()` reads it (one sync, after
  timing) and raises, so an overflowing call is never reported as measured.

torch's own tools do not cover this input: `torch.cuda.make_graphed_callables` takes tensors (not a
KeyedJaggedTensor) and records the backward too, and `torch.compile(mode="reduce-overhead")` records one
graph per input shape, i.e. per distinct id count, through dynamo's trace of torchrec's KJT code. So the
padding is written here; the recording and replay are torch's (`torch.cuda.graph`, `CUDAGraph.replay`).

On the CPU (`record=False`) the module runs the padded call eagerly: the tests check there that the padded
call scores every sample as the plain call does. Recording needs CUDA (the `cuda`-marked test).
"""

from __future__ import annotations

import torch
from torch import nn
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

ALIGN_IDS = 64  # a segment's capacity is rounded up to this many ids
WARMUP_CALLS = 3  # eager calls on a side stream before recording (torch's recipe: lazy inits happen outside the graph)


class CapacityExceeded(RuntimeError):
    """A call held more ids for a feature than the recorded graph's segment."""


def capacity_for(lengths: torch.Tensor, num_keys: int, batch_size: int) -> int:
    """Ids per feature segment for a batch whose per-sample lengths are `lengths` (key-major, [keys * batch])."""
    most = int(lengths.view(num_keys, batch_size).max()) if lengths.numel() else 0
    need = max(1, most) * batch_size + 1  # +1: the spare sample always holds at least one id
    return -(-need // ALIGN_IDS) * ALIGN_IDS


class StaticInputs:
    """Fixed-shape buffers on `device` for `model(dense, kjt)` calls of `batch_size` samples over `keys`."""

    def __init__(self, keys: list[str], batch_size: int, dense_shape: tuple[int, ...], dense_dtype: torch.dtype,
                 capacity: int, device: torch.device) -> None:
        self.keys, self.batch_size, self.capacity = list(keys), batch_size, capacity
        k, rows = len(keys), batch_size + 1
        self.dense = torch.zeros((rows, *dense_shape[1:]), dtype=dense_dtype, device=device)
        self.lengths = torch.zeros(k * rows, dtype=torch.int64, device=device)
        # one slot past the segments takes the ids of an overflowing call, so nothing is written out of place
        self.values = torch.zeros(k * capacity + 1, dtype=torch.int64, device=device)
        self.overflow = torch.zeros((), dtype=torch.bool, device=device)
        self.key_ids = torch.arange(k, device=device)

    def kjt(self) -> KeyedJaggedTensor:
        """A new KJT over the buffers. A KJT keeps the offsets it computes from its lengths on first use, so a
        reused one would hand every later call (and a graph recorded after the warm-up) the first call's offsets."""
        k, cap = len(self.keys), self.capacity
        return KeyedJaggedTensor(
            keys=self.keys, values=self.values[: k * cap], lengths=self.lengths, stride=self.batch_size + 1,
            length_per_key=[cap] * k, offset_per_key=[i * cap for i in range(k + 1)],
        )

    def fill(self, dense: torch.Tensor, kjt: KeyedJaggedTensor) -> None:
        """Copy one call's inputs into the buffers (device ops only: no host sync)."""
        k, b, cap = len(self.keys), self.batch_size, self.capacity
        if list(kjt.keys()) != self.keys or dense.shape[0] != b:
            raise ValueError(f"a graph recorded for {b} samples over {self.keys} was given {dense.shape[0]} over {list(kjt.keys())}")
        self.dense[:b].copy_(dense)
        lengths = kjt.lengths().view(k, b).to(torch.int64)
        per_key = lengths.sum(dim=1)
        # an overflowing feature keeps the bags that fit (the ids past its segment are dropped below), so its
        # lengths always sum to the segment and no kernel reads past it; the flag makes the call count as failed
        kept = torch.cumsum(lengths, dim=1).clamp(max=cap)
        rows = self.lengths.view(k, b + 1)
        rows[:, :b].copy_(torch.diff(kept, dim=1, prepend=torch.zeros_like(kept[:, :1])))
        rows[:, b].copy_(cap - kept[:, -1])
        self.overflow |= (per_key > cap).any()
        values = kjt.values()
        n = values.numel()  # known on the host: no sync
        key_of = torch.repeat_interleave(self.key_ids, per_key, output_size=n)
        starts = torch.cumsum(per_key, 0) - per_key
        within = torch.arange(n, device=values.device) - starts[key_of]
        dest = torch.where(within < cap, key_of * cap + within, torch.full_like(within, k * cap))
        self.values.index_copy_(0, dest, values.to(torch.int64))


class GraphedModule(nn.Module):
    """`module(dense, kjt)` through `StaticInputs`, recorded in a CUDA graph on first call (`record=True`) and
    replayed after; with `record=False` the padded call runs eagerly (the CPU's check of the padding)."""

    def __init__(self, module: nn.Module, record: bool = True) -> None:
        super().__init__()
        self.module, self.record = module, record
        self.static: StaticInputs | None = None
        self.graph: torch.cuda.CUDAGraph | None = None
        self.output: torch.Tensor | None = None

    def _setup(self, dense: torch.Tensor, kjt: KeyedJaggedTensor) -> None:
        b = dense.shape[0]
        capacity = capacity_for(kjt.lengths(), len(kjt.keys()), b)  # one sync, before anything is recorded
        self.static = StaticInputs(kjt.keys(), b, tuple(dense.shape), dense.dtype, capacity, dense.device)
        self.static.fill(dense, kjt)
        if not self.record:
            return
        side = torch.cuda.Stream(device=dense.device)
        side.wait_stream(torch.cuda.current_stream(dense.device))
        with torch.cuda.stream(side):
            for _ in range(WARMUP_CALLS):
                self.module(self.static.dense, self.static.kjt())
        torch.cuda.current_stream(dense.device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.output = self.module(self.static.dense, self.static.kjt())

    def forward(self, dense: torch.Tensor, kjt: KeyedJaggedTensor) -> torch.Tensor:
        if self.static is None:
            self._setup(dense, kjt)
        else:
            self.static.fill(dense, kjt)
        if self.graph is None:
            out = self.module(self.static.dense, self.static.kjt())
        else:
            self.graph.replay()
            out = self.output
        return out[: self.static.batch_size].clone()  # the spare sample dropped; the graph's buffer is reused by the next call

    def check(self) -> None:
        """Raise if any call since recording held more ids than its segments (one host sync)."""
        if self.static is not None and bool(self.static.overflow):
            raise CapacityExceeded(f"a call held more than {self.static.capacity:,} ids for a feature, the capacity the CUDA "
                                   "graph was recorded with from its first batch: its timing is not kept")
