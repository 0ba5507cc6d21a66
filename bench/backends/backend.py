"""The backend contract: everything the runner uses, declared here with its default.

A backend is a name plus `prepare(model, calibration_batches, device) -> nn.Module`. The returned
module keeps the model's forward signature (`module(dense, sparse) -> logits`). Backends find the
EmbeddingBagCollections, EmbeddingCollections (sequence tables) and Linear layers of any TorchRec-style model themselves; they never reach
into DLRM-specific attributes. They never modify the model they are given (it is shared and cached):
copy it first.

Besides `prepare`, the runner asks a backend:
- `check()`: bad options, as a one-line UserError; the validation pass calls it before any work;
- `not_shardable`: why its tables cannot be sharded (None: they can);
- `unsupported_reason(device)`: why it cannot run there (the job is `skipped`), or None;
- `stored_table_dtypes(tables)`: given table name -> rows, the weight type each table is stored in once prepared, for the
  memory guard (None: the backend keeps a copy of the fp32 tables); `tables` maps each table name
  to its rows;
- `emulation()`: the `fake_quant` backend config that emulates it with fp32 kernels, whose AUC gap
  is recorded as `fidelity_gap` (None: nothing to emulate);
- `scores_depend_on_batch()`: True when a sample's score depends on the other samples of its batch
  (activations quantized with scales taken from each batch), or when scores that tie often make the AUC
  move with the last-bit differences of fp32 arithmetic between batch shapes: serving then checks its
  accuracy-mode AUC within a tolerance instead of to 1e-9 (default False);
- `record_name()`: its name in records and reports; a backend with variants worth telling apart
  in one report (ps_redis: row precision and cache size) names them here;
- `before_timing(prepared, warmup_calls)`: called once before the timed calls (the first
  `warmup_calls` of them are the warm-up); a module that keeps state across calls (a cache)
  resets it here, so every job times from the same state;
- `timed_inputs(prepared, inputs)`: the timing batches (`(dense, KJT)` tuples, already on the device) in
  the form the timed calls hand `prepared`, converted once before any clock starts, as the KJTs are
  built beforehand for the torch backends. A runtime that takes other inputs (an exported model's
  dense id matrices) converts them here, and `prepared` accepts both forms; the default keeps the
  batches as they are. `timed_input_format` says what the converted form is, for the record (None: the batches as they are);
- `job_metrics(prepared)`: extra metrics for the record, read after timing (default none);
- `close()`: release what the backend holds outside the process (servers, files); called after
  every job whatever its outcome.

`prepare` raises `NotApplicable` where the backend cannot apply to the model it is given (an embedding
module it does not store, e.g. an EmbeddingCollection for a backend that stores EmbeddingBagCollections only,
no Linear layer for an int8 MLP): the job is `skipped`
with that reason, not failed.
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping, Sequence

import torch
from torch import nn

from bench.backends.layer_outputs import LayerOutput, module_outputs
from bench.batch import Batch


class NotApplicable(Exception):
    """This backend cannot apply to this model; the message says why (the job's `skipped` reason)."""


class Backend:
    # Device types this backend runs on; another device yields a `skipped` record.
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    not_shardable: ClassVar[str | None] = None
    # Why a call spends time off the calling thread's CPU (a server round trip), when it does: the
    # thread's CPU clock would leave that time out, so such a backend is timed on the wall clock.
    waits_off_cpu: ClassVar[str | None] = None
    # What `timed_inputs` turns the timing batches into (recorded as `timed_inputs`); None: (dense, KJT) as they are.
    timed_input_format: ClassVar[str | None] = None

    def __init__(self, cfg) -> None:
        self.cfg = cfg

    def check(self) -> None:
        pass

    def unsupported_reason(self, device: torch.device) -> str | None:
        if device.type not in self.devices:
            return f"backend {self.cfg.name!r} does not run on {device.type} (supports: {', '.join(self.devices)})"
        return None

    def prepare(self, model: nn.Module, calibration_batches: Sequence[Batch], device: torch.device) -> nn.Module:
        raise NotImplementedError

    def stored_table_dtypes(self, tables: Mapping[str, int]) -> dict[str, str] | None:
        return None

    def emulation(self) -> dict | None:
        return None

    def scores_depend_on_batch(self) -> bool:
        return False

    def record_name(self) -> str:
        return self.cfg.name

    def before_timing(self, prepared: nn.Module, warmup_calls: int) -> None:
        pass

    def timed_inputs(self, prepared: nn.Module, inputs: list[tuple]) -> list[tuple]:
        return inputs

    def job_metrics(self, prepared: nn.Module) -> dict[str, Any]:
        return {}

    def layer_outputs(self, prepared: nn.Module, fp32: nn.Module, calibration: Sequence[Batch],
                      batch: Batch) -> tuple[list[LayerOutput], list[LayerOutput]]:
        """Every layer's output on `batch` (on the job's device), the prepared module's and the fp32 model's, in the
        order computed: where a non-finite score starts (bench.pipeline.nonfinite). Torch modules: each submodule."""
        inputs = batch.model_inputs()
        return module_outputs(prepared, inputs), module_outputs(fp32, inputs)

    def close(self) -> None:
        pass
