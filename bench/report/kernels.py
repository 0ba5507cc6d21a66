"""Kernel health in the report: a banner when a kernel the measured backends ran was degraded, and the
instruction sets torch and FBGEMM used (bench.measure.kernel_health says how each is judged)."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable, Sequence

from bench.record import RunRecord, degraded_kernels, kernel_verdict_text


def degraded_by_family(records: Iterable[RunRecord]) -> dict[str, tuple[dict, list[str]]]:
    """Degraded family -> (its verdict, the backends whose own calls ran it), over ok records."""
    found: dict[str, tuple[dict, list[str]]] = {}
    users: dict[str, set[str]] = defaultdict(set)
    for r in records:
        for v in degraded_kernels(r, reference=False):
            found.setdefault(v["family"], (v, []))
            users[v["family"]].add(r.backend)
        for v in degraded_kernels(r):  # the fp32 reference's kernels: every paired speedup rests on them
            found.setdefault(v["family"], (v, []))
    return {family: (v, sorted(users[family]) or ["every paired speedup (the fp32 reference runs it)"])
            for family, (v, _) in found.items()}


def banner_lines(records: Sequence[RunRecord]) -> list[str]:
    """`Kernel health:` lines for the top of a report (none on a healthy stack)."""
    degraded = degraded_by_family(records)
    if not degraded:
        return []
    lines = ["> **Kernel health:** kernels below what this machine allows ran in this sweep; the speed figures "
             "of the backends that use them measure the fallback, not the backend, and their speed rules read "
             "inconclusive.", ">"]
    for family, (v, backends) in degraded.items():
        lines.append(f"> - {kernel_verdict_text(v)} (used by {', '.join(backends)})")
    return lines + [""]


def summary_line(record: RunRecord) -> str | None:
    """One line for the CLI summary of a job whose speed rests on a degraded kernel."""
    found = degraded_kernels(record)
    if not found:
        return None
    return "Kernel health: " + " | ".join(kernel_verdict_text(v) for v in found)


def isa_line(env: dict) -> str:
    """The instruction sets torch and FBGEMM used, for the environment block."""
    isa, best = env.get("fbgemm_isa"), env.get("fbgemm_isa_best")
    short = env.get("fbgemm_isa_shortfall") not in (None, "None")  # the environment block reads values as text
    fbgemm = f"{isa}" + (f" (the CPU allows {best})" if short else "") if isa not in (None, "None") else ""
    return (f"  ISA: torch {env.get('torch_cpu_capability')}, FBGEMM {fbgemm or 'not loaded'}; "
            f"cpuinfo fix {env.get('cpuinfo_fix')}")
