"""The accuracy/speed gate: thresholds from `conf/gate/` -> verdicts, gate.md, gate.xml, exit code.

    result = evaluate_gate(results_df, gate_cfg)   # results_df: bench.report's results table
    code = run_gate(results_df, gate_cfg, out_dir) # writes gate.md + gate.xml, returns 0 or 1
    code = gate_sweep(report_dir, gate_cfg, compare_cfg)  # the sweep's gate, from stored records

`python -m bench.gate REPORT_DIR [overrides]` re-judges a report folder's records.jsonl with the
config stored beside it (`bench.gate.stored`). The gate may import `bench.report`; the report
never imports the gate.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from bench.config import GateConfig, RuleSet
from bench.gate.thresholds import as_gate_config, load_gate_config
from bench.gate.evaluate import JOB, GateResult, Verdict, evaluate_gate
from bench.gate.rules import FAIL, INCONCLUSIVE, PASS, RULES, SKIPPED
from bench.gate.stored import GATE_CONFIG, GateSettings, gate_sweep, rejudge
from bench.gate.writers import render_junit, render_markdown, write_outputs


def run_gate(results_df: pd.DataFrame, gate_cfg: Any, out_dir: Path) -> int:
    """Evaluate, write `out_dir/gate.md` and `out_dir/gate.xml` (and the CI step summary); exit code."""
    result = evaluate_gate(results_df, gate_cfg)
    write_outputs(result, Path(out_dir))
    return result.exit_code


__all__ = [
    "GateConfig", "RuleSet", "GateResult", "Verdict", "GateSettings", "RULES", "JOB", "PASS", "FAIL", "INCONCLUSIVE",
    "SKIPPED", "GATE_CONFIG", "as_gate_config", "load_gate_config", "evaluate_gate", "run_gate", "gate_sweep", "rejudge",
    "render_markdown", "render_junit", "write_outputs",
]
