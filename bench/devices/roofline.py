"""The roofline: what a device can do at most, and what share of it a job reached.

Two limits, measured once per machine fingerprint (CPU, GPU, threads) and device, and cached in
`<cache_dir>/roofline/<fingerprint><device's suffix>.json` (`<fingerprint>.json` for the CPU,
`<fingerprint>-cuda.json` for a GPU); each device measures them its own way (bench.devices.cpu,
bench.devices.cuda), on its own clock:
- random-row gather bandwidth, per stored row width: rows drawn uniformly from a buffer far larger
  than the device's last cache (so from its memory), best of several calls. It is measured per width
  because a 36-byte INT4 row costs a whole cache line or two where a 256-byte fp32 row costs four: bytes
  per second fall with the width.
- write bandwidth: the same buffer written from end to end (`write_bytes_per_s`). An unpooled lookup
  (an EmbeddingCollection's: one output row per id) writes each row out dequantized, 2,048 bytes for a
  512-wide row in fp32 however few bytes it stores: its floor is the gather of its stored row plus
  that write (`lookup_ns_per_row`), not the gather alone (docs/sequential.md).
- GEMM throughput per kind of dense kernel (fp32, and the device's int8 or fp16).

A job's share of the embedding limit is the time its embedding traffic would take at the measured
gather bandwidth (each table's lookups per sample x stored row bytes / the bandwidth at that row
width) over the time it took per sample. Above 100% means some rows came from cache, not DRAM:
a skewed (Zipf) access pattern does that. The dense share does the same for the matrix products'
FLOPs against the GEMM limit of the kernel type (fp32, int8 or fp16) that ran them.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch

from bench.io import write_json_atomic
from bench.progress import once_per_machine

log = logging.getLogger(__name__)


class Limits:
    """The cached limits of one machine fingerprint on one device; missing row widths are measured on demand."""

    def __init__(self, cache_dir: Path | str, fingerprint: str, device: Any, where: torch.device | None = None) -> None:
        """`device`: the bench.devices.device.Device that measures them (`Device.limits` makes them), on `where`."""
        self.device = device
        self.where = where if where is not None else device.torch_device()  # the torch device they are measured on
        self.path = Path(cache_dir) / "roofline" / f"{fingerprint}{device.limits_suffix}.json"
        self.fingerprint = fingerprint
        self.data = self._read()

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
            if data.get("version") == self.device.limits_version:
                return data
        except (OSError, ValueError):
            pass
        about = {"device": self.device.name} if self.device.limits_suffix else {}  # the CPU's file kept its first format
        return {"version": self.device.limits_version, "fingerprint": self.fingerprint, **about, "gather_bytes_per_s": {}, "gemm_flops": None}

    def ensure(self, row_widths: Iterable[int], total_bytes: int | None = None) -> "Limits":
        """Measure what is missing (gather bandwidth at new row widths, GEMM throughput) and store it."""
        missing = sorted({int(w) for w in row_widths} - {int(w) for w in self.data["gather_bytes_per_s"]})
        if not missing and self.data["gemm_flops"] and self.data.get("write_bytes_per_s"):  # a file from before the write limit lacks it
            return self
        total = total_bytes or self.device.buffer_bytes(self.where)
        log.info("roofline (%s): measuring gather bandwidth at row widths %s over %.1f GiB, write bandwidth and GEMM throughput (what is missing)",
                 self.device.name, missing, total / 2**30)
        with once_per_machine("roofline"):
            with torch.inference_mode():
                write = not self.data.get("write_bytes_per_s")
                buffer = self.device.gather_buffer(total, self.where) if missing or write else None  # one for every width, and the write
                for width in missing:
                    self.data["gather_bytes_per_s"][str(width)] = self.device.gather_bandwidth(width, total, self.where, buffer)
                if write:
                    self.data["write_bytes_per_s"] = self.device.write_bandwidth(total, self.where, buffer)
                del buffer
            self.data["gather_buffer_bytes"] = total
            if not self.data["gemm_flops"]:
                self.data["gemm_flops"] = self.device.gemm_flops(self.where)
        self.data.update(self.device.limits_stamp(self.where))
        write_json_atomic(self.path, self.data)
        return self

    def raise_gemm(self) -> "Limits":
        """Measure GEMM throughput again and keep the faster figure of each kind.

        A limit measured while other work shared the cores is too low, and nothing dense can run faster
        than the machine's GEMM: a job past 100% of it shows the cached figure was such a one.
        """
        again = self.device.gemm_flops(self.where)
        self.data["gemm_flops"] = {k: max(float(v), again.get(k, 0.0)) for k, v in self.data["gemm_flops"].items()}
        write_json_atomic(self.path, self.data)
        return self

    def gather(self, row_bytes: int) -> float:
        return float(self.data["gather_bytes_per_s"][str(int(row_bytes))])

    def write(self) -> float:
        return float(self.data["write_bytes_per_s"])

    def lookup_ns_per_row(self, row_bytes: int, output_row_bytes: int = 0) -> float:
        """The floor of one row's lookup: its stored `row_bytes` gathered from memory, plus `output_row_bytes` written
        out at the write bandwidth (an unpooled lookup's dequantized row; 0 for a pooled one, whose output is per bag)."""
        return (row_bytes / self.gather(row_bytes) + output_row_bytes / self.write()) * 1e9

    def gemm(self, kind: str) -> float:
        return float(self.data["gemm_flops"][kind])


def roofline_metrics(throughput: float, lookups: Mapping[str, float], row_bytes: Mapping[str, int], dense_flops: float,
                     int8_fraction: float, limits: Limits, half_fraction: float = 0.0) -> dict:
    """Shares of the limits a job reached at `throughput` samples/s.

    `lookups`: table -> rows looked up per sample; `row_bytes`: table -> stored row bytes;
    `dense_flops`: matrix-product FLOPs per sample, `int8_fraction` of them in int8 kernels, `half_fraction`
    in fp16/bf16 ones (read against the fp16 GEMM limit where one was measured: a GPU's; the fp32 one on CPU),
    the rest in fp32. `limits`: the job's device's (Limits).
    """
    per_sample = sum(lookups[t] * row_bytes[t] for t in lookups)
    at_limit = sum(lookups[t] * row_bytes[t] / limits.gather(row_bytes[t]) for t in lookups)  # seconds per sample
    half_kind = "fp16" if "fp16" in (limits.data.get("gemm_flops") or {}) else "fp32"
    dense_at_limit = dense_flops * ((1 - int8_fraction - half_fraction) / limits.gemm("fp32")
                                    + (int8_fraction / limits.gemm("int8") if int8_fraction else 0.0)
                                    + (half_fraction / limits.gemm(half_kind) if half_fraction else 0.0))
    return {
        "embedding_bytes_per_sample": per_sample,
        "embedding_bytes_per_s": throughput * per_sample,
        "embedding_share": throughput * at_limit,
        "gather_limit_bytes_per_s": per_sample / at_limit if at_limit else None,  # traffic-weighted over the row widths
        "dense_share": throughput * dense_at_limit,
        "row_widths": sorted({int(w) for w in row_bytes.values()}),
        "dense_half_fraction": half_fraction,
        "limits": {"fingerprint": limits.fingerprint, "gather_bytes_per_s": {str(w): limits.gather(w) for w in sorted(set(row_bytes.values()))},
                   "write_bytes_per_s": limits.data.get("write_bytes_per_s"), "gemm_flops": limits.data["gemm_flops"]},
    }

