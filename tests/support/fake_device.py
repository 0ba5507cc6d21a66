"""A test plug-in: `fake`, a device added as one module and its registration, nothing else.

Its tensors live on the host CPU, but the harness reads everything else from it: its clock (every call reads
CALL_MS), its limits (GATHER_BYTES_PER_S at every row width, GEMM_FLOPS), its kernel health (one family,
timed on its clock and judged against its limits) and its memory (a peak of PEAK_BYTES of its own). So a record
of a job on it shows each of them came from the device, not from the CPU's code. `python -m
tests.support.fake_device ARGS` runs `python -m bench ARGS` with it registered (`device.type=fake`); only that
process sees it (tests/test_devices.py).
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from bench.batch import fresh_inputs
from bench.config import DeviceConfig
from bench.devices.device import Device
from bench.devices.health import Health, Verdict
from bench.registry import register

NAME = "fake"
CALL_MS = 2.5  # what every timed call reads on its clock
GATHER_BYTES_PER_S = 3e9
WRITE_BYTES_PER_S = 5e9
GEMM_FLOPS = {"fp32": 7e10, "int8": 9e10}
PEAK_BYTES = 12345
PROBE_ROWS = 50_000  # rows its probe gathers in one call: CALL_MS / PROBE_ROWS a row (50 ns) on its clock, within 4x its roofline (85 ns)
PROBE_WIDTH = 64


@register("device", NAME, config=DeviceConfig)
class FakeDevice(Device):
    name = NAME
    uncalibrated = "fake: timed on its own clock"
    limits_suffix = "-fake"
    probe_words = "its jobs are not judged by it"

    def torch_device(self) -> torch.device:
        return torch.device("cpu")

    def call_timer(self, clock, test_delay=0.0, second=None):
        def timed(module, trial_inputs, device):
            out = []
            for args in trial_inputs:
                module(*fresh_inputs(args))
                out.append(CALL_MS)
            return out

        return timed

    def gather_bandwidth(self, row_bytes: int, total_bytes: int, device: torch.device, buffer=None) -> float:
        return GATHER_BYTES_PER_S

    def write_bandwidth(self, total_bytes: int, device: torch.device, buffer=None) -> float:
        return WRITE_BYTES_PER_S

    def gemm_flops(self, device: torch.device) -> dict[str, float]:
        return dict(GEMM_FLOPS)

    def buffer_bytes(self, device: torch.device) -> int:
        return 1 << 20  # nothing is allocated: its gathers are given, not timed

    def probe_row_widths(self) -> list[int]:
        return [PROBE_WIDTH]

    def health(self, cache_dir, limits, device: torch.device, env: dict[str, Any]) -> Health:
        table = torch.ones(PROBE_ROWS, PROBE_WIDTH, dtype=torch.uint8)
        ms = self.call_timer(None)(lambda ids: torch.index_select(table, 0, ids), [(torch.arange(PROBE_ROWS),)], device)[0]
        measured = ms * 1e6 / PROBE_ROWS
        bound = 4 * PROBE_WIDTH / limits.gather(PROBE_WIDTH) * 1e9  # at least a quarter of its gather roofline
        verdict = Verdict("gather_fake", measured <= bound, measured, bound, "ns/row")
        return Health([verdict], {}, probed=True, device=NAME)

    def reset_peak(self, device: torch.device) -> None:
        self.peak = PEAK_BYTES

    def peak_bytes(self, device: torch.device) -> Optional[int]:
        return self.peak


def main() -> None:
    from bench import cli

    cli.main()


if __name__ == "__main__":
    main()
