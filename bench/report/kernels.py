"""Kernel health in the report: a banner when a kernel the measured backends ran was degraded, and the
instruction sets torch and FBGEMM used (bench.devices says how each is judged)."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Sequence

from bench.record import RunRecord, degraded_kernels, kernel_verdict_text
from bench.stats import INCONCLUSIVE, practical_verdict


def probed_device(record: RunRecord) -> str:
    """Whose kernels judged a record: `cpu (the host)` or `cuda (<GPU name>)`, from its kernel health; a record
    from before the field was judged by the host CPU's probe."""
    health = (record.env or {}).get("kernel_health") or {}
    device = health.get("device") or "cpu"
    return f"{device} ({health['gpu']})" if health.get("gpu") else f"{device} (the host)" if device == "cpu" else device


def degraded_by_family(records: Iterable[RunRecord]) -> dict[tuple[str, str], tuple[dict, list[str]]]:
    """(probed device, degraded family) -> (its verdict, the backends whose own calls ran it), over ok records."""
    found: dict[tuple[str, str], tuple[dict, list[str]]] = {}
    users: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in records:
        device = probed_device(r)
        for v in degraded_kernels(r, reference=False):
            found.setdefault((device, v["family"]), (v, []))
            users[(device, v["family"])].add(r.backend)
        for v in degraded_kernels(r):  # the fp32 reference's kernels: every paired speedup rests on them
            found.setdefault((device, v["family"]), (v, []))
    return {key: (v, sorted(users[key]) or ["every paired speedup (the fp32 reference runs it)"])
            for key, (v, _) in found.items()}


def banner_lines(records: Sequence[RunRecord]) -> list[str]:
    """`Kernel health:` lines for the top of a report (none on a healthy stack), each naming the device whose
    probe judged it: a CUDA job by its GPU's probe, a CPU job by the host's; then a `Kernel probe:` line for
    families the probe read unstable."""
    degraded = degraded_by_family(records)
    if not degraded:
        return unstable_lines(records)
    devices = sorted({device for device, _ in degraded})
    lines = [f"> **Kernel health:** on {' and '.join(devices)}, kernels below what the device allows ran in this sweep; the speed "
             "figures of the backends that use them measure the fallback, not the backend, and their speed rules read "
             "inconclusive.", ">"]
    for (device, _), (v, backends) in degraded.items():
        where = f"{device}: " if len(devices) > 1 else ""
        lines.append(f"> - {where}{kernel_verdict_text(v)} (used by {', '.join(backends)})")
    return lines + [""] + unstable_lines(records)


def unstable_lines(records: Sequence[RunRecord]) -> list[str]:
    """One line for the kernel families the probe read unstable (its two probes disagreed, or could not decide):
    not counted as degraded, and probed again by the next run (bench.devices)."""
    found: dict[tuple[str, str], str] = {}
    for r in records:
        health = (r.env or {}).get("kernel_health") or {}
        if r.status != "ok":
            continue
        for family in health.get("unstable") or []:
            why = ((health.get("verdicts") or {}).get(family) or {}).get("why", "")
            found.setdefault((probed_device(r), family), why.removeprefix("unstable: ").split("; not counted")[0])
    if not found:
        return []
    each = "; ".join(f"{family} on {device}" + (f": {why}" if why else "") for (device, family), why in sorted(found.items()))
    return [f"> **Kernel probe:** read unstable, so not counted as degraded and probed again by the next run: {each}.", ""]


def inconclusive_note(backend: str, batch_size: int, ci: str, lo: float, hi: float, margin: float, kernel_degraded: object) -> str:
    """The reading note of a speed verdict that reads inconclusive: made so by degraded kernels (its interval
    may well be decided), or by an interval that straddles the margin."""
    head = f"**{backend}** (batch {batch_size}): speedup {ci}: inconclusive: "
    if isinstance(kernel_degraded, str) and kernel_degraded:
        alone = practical_verdict(lo, hi, margin, null=1.0, ratio=True)
        interval = (f"its interval [{lo:.2f}, {hi:.2f}] alone would read {alone} against the ±{margin:.0%} margin" if alone != INCONCLUSIVE else
                    f"its interval [{lo:.2f}, {hi:.2f}] also straddles the ±{margin:.0%} margin")
        return head + f"it was measured on degraded kernels ({kernel_degraded}; Kernel health, above); {interval}."
    return head + f"[{lo:.2f}, {hi:.2f}] straddles the ±{margin:.0%} margin."


def summary_line(record: RunRecord) -> str | None:
    """One line for the CLI summary of a job whose speed rests on a degraded kernel."""
    found = degraded_kernels(record)
    if not found:
        return None
    return f"Kernel health (on {probed_device(record)}): " + " | ".join(kernel_verdict_text(v) for v in found)


def isa_line(env: dict) -> str:
    """The instruction sets torch and FBGEMM used, for the environment block."""
    isa, best = env.get("fbgemm_isa"), env.get("fbgemm_isa_best")
    short = env.get("fbgemm_isa_shortfall") not in (None, "None")  # the environment block reads values as text
    fbgemm = f"{isa}" + (f" (the CPU allows {best})" if short else "") if isa not in (None, "None") else ""
    return (f"  ISA: torch {env.get('torch_cpu_capability')}, FBGEMM {fbgemm or 'not loaded'}; "
            f"cpuinfo fix {env.get('cpuinfo_fix')}")
