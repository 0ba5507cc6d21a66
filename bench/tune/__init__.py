"""Accuracy-aware mixed precision: per-table precisions with the fewest embedding bytes inside an AUC budget.

`python -m bench +sweep=tune tune.max_auc_drop=0.001` runs, in one process:

    holdout.py      the eval split cut by sample index: a search half (plan and check quarters), a held-out half
    candidate.py    one copy of the fp32 model whose tables are swapped for quantize-dequantize rows
    sensitivity.py  every table alone at each lower precision, and the dense layers, on the plan quarter
    policy.py       the pure search policy: a knapsack over predicted losses, bisection over its candidates
    search.py       combined candidates measured on the check quarter, backed off until one passes
    validate.py     the chosen map and the uniform maps on the held-out half, with the real integer backends
    stored.py       every measured candidate a run record in reports/tune/records.jsonl; resume=true finds it there
    run.py          run_tune(cfg, work) -> TuneResult, the steps in order
    outputs.py      reports/tune/<timestamp>/: records.jsonl, and tune.md, per_table.yaml, tune.csv, frontier.png

The rows, budget, sizes and result live in bench.results.tune, and tune.md's renderer in bench.report.tune_files,
so `python -m bench.report reports/tune/latest` re-renders a tune folder from its records.jsonl.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.config import Config
from bench.errors import UserError
from bench.pipeline.shared import SharedWork
from bench.tune.tune_folder import write_tune
from bench.tune.run import NOTHING_COMPRESSED, TuneResult, nothing_compressed, run_tune

__all__ = ["TuneResult", "main", "run_tune", "write_tune"]


def summary(result: TuneResult, out: Path) -> str:
    lines = []
    if result.sizes_only:
        lines.append(f"tune: sizes only ({result.sizes_only})")
    else:
        chosen, uniform4 = result.chosen, next((r for r in result.holdout if r.candidate.startswith("uniform int4")), None)
        counts = {}
        for p in chosen.per_table.values():
            counts[p] = counts.get(p, 0) + 1
        vs = f" ({chosen.embedding_bytes / uniform4.embedding_bytes:.1%} of uniform int4's {uniform4.embedding_bytes / 1e6:.3f} MB)" if uniform4 else ""
        verdict = result.verdict
        if nothing_compressed(result):  # an all-fp32 map is within any budget: that says nothing of quantizing
            verdict += " only because nothing was compressed (every table stays fp32)"
        lines.append(f"tune: {verdict} on the held-out half ({result.n_holdout} samples): chosen map "
                     f"{', '.join(f'{n} {p}' for p, n in counts.items())} tables, {chosen.embedding_bytes / 1e6:.3f} MB{vs}")
        lines.append(f"  held-out ΔAUC {chosen.auc_delta:+.5f} [{chosen.auc_delta_lo:+.5f}, {chosen.auc_delta_hi:+.5f}] "
                     f"against a budget of {-result.budget.drop(chosen.auc_fp32):+.5f} ({result.budget.describe()})")
        if nothing_compressed(result):
            lines.append(f"  {NOTHING_COMPRESSED.format(n_check=result.n_check)}")
    lines.append(f"  took {result.seconds.get('total', 0):.1f} s; report: {out / 'tune.md'}")
    return "\n".join(lines)


def main(cfg: Config, work: SharedWork) -> int:
    """Run the tune and write its folder; exit code 0 when the held-out verdict is within budget (or sizes only),
    1 when it is not, 2 for bad input."""
    try:
        result = run_tune(cfg, work)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    out = write_tune(result, Path(cfg.reports_dir))
    print(summary(result, out))
    return 0 if result.sizes_only or result.verdict == "within budget" else 1
