"""The device interface: what the harness asks of the device a job runs on, in one object.

A device (`device.type=NAME`) is a class registered with `@register("device", NAME, config=DeviceConfig)`
(bench.registry) and made from the job's `device` config. It answers four things, and nothing outside
bench.devices branches on a device's name to get them:

- its **clock**: how a timed call is read (`call_timer`: the CPU's wall or thread clock, CUDA events on a
  GPU; its limits and probe are timed on the same), and whether the machine's timing calibration
  (bench.pipeline.calibrate) applies to it (`calibrated_timing`, else `uncalibrated` says why);
- its **measured limits** (`limits`: bench.devices.roofline.Limits, cached per machine fingerprint): the
  gather bandwidth per stored row width, the write bandwidth and the GEMM throughput, measured by the device's
  own `gather_bandwidth`, `write_bandwidth` and `gemm_flops` over a buffer far larger than its last cache
  (`buffer_bytes`);
- its **kernel health** (`kernel_health`): its probe's verdicts (`health`), cached once per machine and stack,
  or what stands without the probe (`unprobed`);
- its **memory**: the peak it held over a measured step (`reset_peak`, `peak_bytes`), and what is free on it
  beside the host's memory (`free_bytes`) for the memory guard.

The CPU (bench.devices.cpu) and CUDA (bench.devices.cuda) are its two implementations; a new device is one
module like them, and its registration.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from bench import hardware
from bench.devices.roofline import Limits
from bench.errors import one_line
from bench.progress import once_per_machine

log = logging.getLogger(__name__)

Clock = Callable[[], int]  # nanoseconds
# `timed(module, inputs, device) -> ms per call` (with a second clock: (ms, ms on it) per call)
CallTimer = Callable[[Any, list, torch.device], list]
MIN_BUFFER = 1 << 30  # a limit's gather buffer: at least 1 GiB, and 32x the device's last cache
CACHE_MULTIPLE = 32


class Device:
    """One kind of device; an instance is the job's, made from its `device` config (type, index)."""

    name = ""  # its `device.type`, set at registration
    calibrated_timing = False  # the machine's timing calibration picks its clock and threads (the CPU's)
    uncalibrated = ""  # why a job on it is timed without the calibration, when `calibrated_timing` is False
    clock_name = "wall"  # what its limits and probe were timed on, as their caches say it
    limits_suffix = ""  # its limits' file: `<cache_dir>/roofline/<fingerprint><suffix>.json`
    limits_version = 1  # their format's version: a cache of another version is measured again
    tables_on_host = True  # a backend's tables live in host memory (the memory guard counts them there)
    memory_name = "device"  # its own memory, in the memory guard's words, where it has some (`free_bytes`)
    process_group = "gloo"  # torch.distributed's backend for a sharded job's ranks
    probe_words = ""  # what stands when its probe fails, for the warning

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg

    # ------------------------------------------------------------------------------ where it is
    def torch_device(self) -> torch.device:
        """The torch device the job's tensors and modules live on."""
        raise NotImplementedError

    def missing(self) -> Optional[str]:
        """Why the device is not here (a job on it is skipped with this reason), or None."""
        return None

    def resolve(self) -> tuple[torch.device, Optional[str]]:
        return self.torch_device(), self.missing()

    def rank_device(self, device: torch.device, local_rank: int) -> torch.device:
        """The device one rank of a sharded job computes on."""
        return device

    def select(self, device: torch.device) -> None:
        """Make `device` this process's current one (a rank's, before its process group starts)."""

    # ----------------------------------------------------------------------------------- clock
    def call_timer(self, clock: Clock, test_delay: float = 0.0, second: Optional[Clock] = None) -> CallTimer:
        """How a job's timed calls are read: `timed(module, inputs, device) -> ms per call`; `clock` is the
        configured one (`timing.clock`), which a device with a clock of its own does not use."""
        raise NotImplementedError

    # ---------------------------------------------------------------------------------- limits
    def cache_bytes(self, device: torch.device) -> Optional[int]:
        """The device's last cache (bytes), which the limits' gather buffer must far exceed."""
        return None

    def buffer_bytes(self, device: torch.device) -> int:
        """The gather buffer: CACHE_MULTIPLE x the last cache and at least MIN_BUFFER, at most a quarter of the free memory."""
        want = max(MIN_BUFFER, CACHE_MULTIPLE * int(self.cache_bytes(device) or 0))
        free = self.buffer_free_bytes(device)
        return min(want, free // 4) if free else want

    def buffer_free_bytes(self, device: torch.device) -> Optional[int]:
        """Free memory where the gather buffer lives (the host's, unless the device has its own)."""
        return hardware.mem_available_bytes()

    def gather_buffer(self, total_bytes: int, device: torch.device) -> Optional[torch.Tensor]:
        """`total_bytes` written once and shared by every row width the limits measure, or None where each
        measurement makes its own (writing 1 GiB anew per width was most of the CPU roofline's cost)."""
        return None

    def gather_bandwidth(self, row_bytes: int, total_bytes: int, device: torch.device,
                         buffer: Optional[torch.Tensor] = None) -> float:
        """Bytes per second of `row_bytes`-wide rows gathered at random from a `total_bytes` buffer on the device
        (`buffer`: the one `gather_buffer` gave, where it gives one)."""
        raise NotImplementedError

    def write_bandwidth(self, total_bytes: int, device: torch.device, buffer: Optional[torch.Tensor] = None) -> float:
        """Bytes per second of writing a `total_bytes` buffer on the device from start to end: the rate at which a
        kernel's output that does not stay in cache reaches memory (an unpooled lookup writes a row per id)."""
        raise NotImplementedError

    def gemm_flops(self, device: torch.device) -> dict[str, float]:
        """FLOP/s of the device's dense GEMM per kind (fp32, and int8 or fp16)."""
        raise NotImplementedError

    def limits_stamp(self, device: torch.device) -> dict[str, Any]:
        """What a limits file says of how it was measured, beside the figures."""
        return {"clock": self.clock_name}

    def limits(self, cache_dir: str | Path, fingerprint: str, device: torch.device):
        """This machine's cached limits on this device (measured on demand: `Limits.ensure`)."""
        return Limits(cache_dir, fingerprint, self, device)

    # ---------------------------------------------------------------------------------- health
    def probe_row_widths(self) -> list[int]:
        """The stored row widths its probe's lookups read (their limits are measured before it is judged)."""
        return []

    def health(self, cache_dir: str | Path, limits: Any, device: torch.device, env: dict[str, Any]):
        """Its kernel health (bench.devices.health.Health) from the cache, or probed now and cached;
        `env` is the environment a record keeps (bench.measure.environment), which names the stack."""
        raise NotImplementedError

    def unprobed(self, why: str) -> dict[str, Any]:
        """What a record keeps of the kernel health when the probe did not run (`why`)."""
        return {"device": self.name, "probed": False, "degraded": [], "verdicts": {}, "why_not_probed": why}

    def available(self) -> bool:
        """Whether its kernels can be probed here."""
        return self.missing() is None

    def kernel_health(self, cache_dir: str | Path, probe: bool, device: torch.device, env: dict[str, Any]) -> dict[str, Any]:
        """What a record keeps of the kernel health of this device: the probe's verdicts (`probe`: kernel_health=true;
        once per machine and stack, cached), or what stands without them. A failed probe says why; the job goes on."""
        if not self.available():
            return self.unprobed(f"no {self.name} device here")
        if not probe:
            return self.unprobed("kernel_health=false")
        try:
            limits = self.limits(cache_dir, env["fingerprint"], device).ensure(self.probe_row_widths())
            with once_per_machine("kernel probe"):  # read from its cache in milliseconds after the first run
                return self.health(cache_dir, limits, device, env).as_env()
        except Exception as exc:  # noqa: BLE001 - the check is extra: the jobs go on
            log.warning("%s kernel health probe failed, %s: %s", self.name, self.probe_words, one_line(exc))
            return self.unprobed(f"the probe failed ({one_line(exc)})")

    # ---------------------------------------------------------------------------------- memory
    def reset_peak(self, device: torch.device) -> None:
        """Start a peak reading of the device's own memory (none beside the host's: nothing to do)."""

    def peak_bytes(self, device: torch.device) -> Optional[int]:
        """The device memory's peak since `reset_peak` (None: the device has none beside the host's)."""
        return None

    def free_bytes(self, device: torch.device) -> Optional[int]:
        """Free memory on the device beside the host's (None: it has none of its own)."""
        return None
