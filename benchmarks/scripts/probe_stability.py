"""Does the kernel probe (bench.devices.cpu_probe) hold its verdicts on a busy machine, and still catch a fallback?

N probe decisions, each what a cold run does (PROBES probes of ROUNDS interleaved rounds, judged; no cache), in three
cases: idle; beside a one-thread CPU hog (a busy-loop process this script starts and stops); and in a child process
with FBGEMM_NO_ASMJIT=1 in its environment (FBGEMM's reference kernels; torch's own copy of FBGEMM reads it too).
Prints, per decision and kernel family, its median time, each probe's median ratio to its reference with its
interval, and the verdict; per case, the count of false fallback verdicts (a family judged degraded on this healthy
stack; single probes that read degraded and were not confirmed are counted apart); and, under FBGEMM_NO_ASMJIT=1,
the affected families (over AFFECTED x slower per row than idle) and any that was not flagged in every decision.

    python benchmarks/scripts/probe_stability.py [--probes 6] [--rounds 9] [--tiny] [--check]

--tiny probes tiny tables and GEMMs (CI runs it with --probes 1); --check exits 1 on a false fallback verdict or an
affected family missed. The fp32 GEMM's roofline check is left out here (it needs the machine's cached roofline).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from bench import cpuinfo_fix
from bench.devices import cpu_probe as kh

TINY = kh.Shape(tables=4, rows=20_000, batch=256, gemm=(256, 256, 256))  # 20 MB of fp32 rows
AFFECTED = 3.0  # a family this much slower per row than idle is affected by the switch
SWITCH = {"FBGEMM_NO_ASMJIT": "1"}


def decisions(case: str, n: int, pairs: list[kh.Pair], rounds: int) -> list[list[kh.Verdict]]:
    """`n` probe decisions on the same tables, each printed as it is made."""
    isa, env = cpuinfo_fix.summary(), cpuinfo_fix.kernel_env()
    print(f"== {case}: {n} decisions of {kh.PROBES} probes x {rounds} rounds; FBGEMM {isa.get('fbgemm_isa')}"
          f"{', ' + isa['fbgemm_isa_shortfall'] if isa.get('fbgemm_isa_shortfall') else ''}; kernel env {env or 'none'}", flush=True)
    found = []
    for i in range(n):
        start = time.perf_counter()
        timed = [kh.probe(pairs, rounds) for _ in range(kh.PROBES)]
        verdicts = kh.judge(timed, None, isa, env)
        print(f"decision {i + 1} ({time.perf_counter() - start:.1f} s):")
        for v in verdicts:
            probes = " | ".join(" ".join(f"{ref.removeprefix(kh.GATHER).replace(v.family, 'gather')} {c[0]:.2f}x [{c[1]:.2f}, {c[2]:.2f}]"
                                         f" (<= {c[3]:g})" for ref, c in p["checks"].items()) + f" {p['outcome']}" for p in v.probes)
            verdict = "DEGRADED" if not v.healthy else "healthy" if v.stable else "unstable"
            print(f"  {v.family:19s} {v.measured_ns:8.2f} {v.unit:8s} {verdict:9s} {probes}", flush=True)
        found.append(verdicts)
    return found


def tables(shape: kh.Shape) -> list[kh.Pair]:
    """Every family's kernel and reference, built once per process."""
    start = time.perf_counter()
    pairs = kh.pairs_for(kh.FAMILIES, shape)
    print(f"tables and GEMMs built in {time.perf_counter() - start:.1f} s", flush=True)
    return pairs


def tally(case: str, found: list[list[kh.Verdict]], healthy_stack: bool) -> dict:
    """Per family: how often degraded and the median time; printed as the case's counts (on a healthy stack every
    degraded verdict is a false one)."""
    families = [v.family for v in found[0]]
    flagged = {f: sum(not v.healthy for d in found for v in d if v.family == f) for f in families}
    single = sum(p["outcome"] == kh.DEGRADED for d in found for v in d if v.healthy for p in v.probes)
    unstable = sum(not v.stable for d in found for v in d)
    ns = {f: float(np.median([v.measured_ns for d in found for v in d if v.family == f])) for f in families}
    what = "false fallback verdicts" if healthy_stack else "degraded verdicts"
    print(f"-- {case}: {what}: {sum(flagged.values())} of {len(found) * len(families)}"
          + (f" ({', '.join(f'{f} {k}x' for f, k in flagged.items() if k)})" if any(flagged.values()) else "")
          + f"; single probes that read degraded, not confirmed: {single}; unstable verdicts: {unstable}", flush=True)
    return {"flagged": flagged, "ns": ns, "decisions": len(found)}


def child(args: argparse.Namespace) -> None:
    """The FBGEMM_NO_ASMJIT=1 case, in its own process (FBGEMM reads the switch when it loads)."""
    found = decisions("FBGEMM_NO_ASMJIT=1", args.probes, tables(TINY if args.tiny else kh.DEFAULT), args.rounds)
    print("SUMMARY " + json.dumps(tally("FBGEMM_NO_ASMJIT=1", found, healthy_stack=False)), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probes", type=int, default=6, help="probe decisions per case (each: PROBES probes)")
    parser.add_argument("--rounds", type=int, default=kh.ROUNDS)
    parser.add_argument("--tiny", action="store_true", help="tiny tables and GEMMs (a smoke run, not a measurement)")
    parser.add_argument("--check", action="store_true", help="exit 1 on a false fallback verdict or a missed affected family")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probes < 1 or args.rounds < 2:
        parser.error("--probes must be at least 1 and --rounds at least 2")
    if args.child:
        child(args)
        return 0
    if any(os.environ.get(k) for k in kh.JIT_SWITCHES):
        parser.error(f"unset {', '.join(k for k in kh.JIT_SWITCHES if os.environ.get(k))}: the idle and hog cases need FBGEMM's JIT")
    pairs = tables(TINY if args.tiny else kh.DEFAULT)
    idle = tally("idle", decisions("idle", args.probes, pairs, args.rounds), healthy_stack=True)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    print(f"hog pid {hog.pid} started (one busy-loop thread)", flush=True)
    try:
        busy = tally("beside a one-thread CPU hog", decisions("beside a one-thread CPU hog", args.probes, pairs, args.rounds),
                     healthy_stack=True)
    finally:
        hog.terminate()
        hog.wait()
        print(f"hog pid {hog.pid} stopped", flush=True)
    argv = [sys.executable, __file__, "--child", "--probes", str(args.probes), "--rounds", str(args.rounds)] + (["--tiny"] if args.tiny else [])
    done = subprocess.run(argv, env={**os.environ, **SWITCH}, capture_output=True, text=True)
    summary = None
    for line in done.stdout.splitlines():
        if line.startswith("SUMMARY "):
            summary = json.loads(line.removeprefix("SUMMARY "))
        else:
            print(line)
    if done.returncode != 0 or summary is None:
        print(done.stderr[-3000:], file=sys.stderr)
        return 1
    affected = sorted(f for f, ns in summary["ns"].items() if ns > AFFECTED * idle["ns"][f])
    missed = [f for f in affected if summary["flagged"][f] < summary["decisions"]]
    print(f"-- FBGEMM_NO_ASMJIT=1: affected (over {AFFECTED:g}x idle's time): "
          + ", ".join(f"{f} {summary['ns'][f] / idle['ns'][f]:.1f}x" for f in affected)
          + f"; flagged in every decision: {', '.join(f for f in affected if f not in missed) or 'none'}; missed: {', '.join(missed) or 'none'}")
    false = sum(idle["flagged"].values()) + sum(busy["flagged"].values())
    print(f"== false fallback verdicts, idle and beside the hog: {false}; affected families missed under FBGEMM_NO_ASMJIT=1: {len(missed)}")
    return 1 if args.check and (false or missed) else 0


if __name__ == "__main__":
    sys.exit(main())
