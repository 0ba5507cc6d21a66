"""The contract hook `Backend.timed_inputs`: a candidate times on its own converted inputs, position for
position with the reference's batches, and the conversion happens before any clock starts."""

from __future__ import annotations

import torch
from torch import nn

from bench.backends.backend import Backend
from bench.measure.timing import time_paired


class Recorder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list = []

    def forward(self, *args):
        self.seen.append(args)
        return args[0]


def test_the_default_hook_keeps_the_batches():
    batches = [(torch.zeros(2, 3), None)]
    assert Backend(cfg=None).timed_inputs(nn.Identity(), batches) is batches
    assert Backend.timed_input_format is None


def test_paired_timing_feeds_each_side_its_own_form():
    inputs = [(torch.full((2,), float(i)),) for i in range(5)]
    converted = [(torch.full((2,), 100.0 + i), "runtime form") for i in range(5)]
    candidate, reference = Recorder(), Recorder()
    time_paired(candidate, reference, inputs, 2, torch.device("cpu"), warmup_batches=1, trials=2, batches_per_trial=3,
                candidate_inputs=converted)
    assert all(len(args) == 2 and args[1] == "runtime form" for args in candidate.seen)
    assert all(len(args) == 1 for args in reference.seen)
    # the same batches, in the same order, on both sides
    assert [int(a[0][0]) - 100 for a in candidate.seen] == [int(a[0][0]) for a in reference.seen]
