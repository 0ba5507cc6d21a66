"""A kernel probe's verdicts, whatever device's probe made them: one `Verdict` per kernel family and the
`Health` a record keeps of them (`as_env`). Each device judges its own kernels against its own limits
(bench.devices.cpu_probe on the CPU, bench.devices.cuda on a GPU); the report reads them alike."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

EAGER = "embedding_bag_fp32"  # torch's fp32 EmbeddingBag (torchrec's eager EBC): the quantized lookups' reference
MIN_GEMM_SHARE = 0.25  # the fp32 GEMM at least this share of the device's GEMM roofline


def tbe_family(dtype: str) -> str:
    return f"tbe_{dtype}"


@dataclass
class Verdict:
    """One kernel family's timing and judgment (per row for lookups, per multiply-add pair for GEMMs)."""

    family: str
    healthy: bool
    measured_ns: float  # per row (lookups) or per 1000 FLOPs (GEMMs): the median over the last probe's rounds
    expected_ns: Optional[float]  # the most it should take here (None: nothing to judge against)
    unit: str
    why: str = ""  # what it fell short of, or why its verdict is unstable
    cause: str = ""  # the likely cause, where one is known
    fix: str = ""
    stable: bool = True  # the probes agreed (only a stable verdict is cached; an unstable one is re-probed next run)
    # per probe: {"ns": median time, "outcome": ..., "checks": {reference: [median ratio, lo, hi, bound]}}
    probes: list = field(default_factory=list)


@dataclass
class Health:
    """The probe's verdicts (or the instruction-set check alone, when the probe is off) and where they are cached."""

    verdicts: list[Verdict]
    isa: dict[str, Any]
    probed: bool
    path: Optional[str] = None
    device: str = "cpu"  # the device whose kernels were judged (its `Device.name`)

    def degraded(self) -> list[Verdict]:
        return [v for v in self.verdicts if not v.healthy]

    def unstable(self) -> list[Verdict]:
        return [v for v in self.verdicts if not v.stable]

    def as_env(self) -> dict[str, Any]:
        """What a record's environment keeps."""
        return {"device": self.device, **({"gpu": self.isa["gpu"]} if self.isa.get("gpu") else {}),
                "probed": self.probed, "path": self.path, "degraded": [v.family for v in self.degraded()],
                "unstable": [v.family for v in self.unstable()],
                "verdicts": {v.family: {k: val for k, val in asdict(v).items() if k != "family"} for v in self.verdicts}}
