"""`python -m bench.gate REPORT_DIR [overrides]`: gate a report folder's results.csv.

Exit codes: 0 the gate passes, 1 a rule fails or a job errored, 2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from bench.errors import UserError
from bench.gate import evaluate_gate, load_gate_config, write_outputs
from bench.gate.writers import verdict_line


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.gate", description="Gate a report folder's results.csv against conf/gate thresholds.")
    p.add_argument("report_dir", type=Path, help="folder holding results.csv; gate.md and gate.xml are written there")
    p.add_argument("overrides", nargs="*", help="dotlist overrides, e.g. gate.rules.int8_tbe.min_speedup=100 or inconclusive_fails=true")
    p.add_argument("--config", default="default", help="gate config: a name in conf/gate/ or a YAML path (default: default)")
    p.add_argument("--out", type=Path, default=None, help="write gate.md/gate.xml here instead of REPORT_DIR")
    p.add_argument("--history", action="store_true", help="also append the rows to the history file and rewrite history.md")
    p.add_argument("--run-id", default=None, help="history run id (default: $GITHUB_RUN_ID.$GITHUB_RUN_ATTEMPT or a UTC timestamp)")
    return p.parse_args(argv)


def read_results(report_dir: Path) -> pd.DataFrame:
    path = Path(report_dir) / "results.csv"
    if not path.is_file():
        raise UserError(f"no results table at {path}: run the sweep and its report first")
    try:
        return pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not a readable CSV ({' '.join(str(exc).split())})") from None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cfg = load_gate_config(args.config, args.overrides)
        results = read_results(args.report_dir)
        result = evaluate_gate(results, cfg)
        out_dir = args.out or args.report_dir
        md, xml = write_outputs(result, out_dir)
        if args.history:
            from bench.history import update_history

            history_md = update_history(results, cfg, args.report_dir, run_id=args.run_id)
    except UserError as exc:
        print(f"bench.gate: error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(verdict_line(result).replace("**", ""))
    print(f"wrote {md} and {xml}" + (f" and {history_md}" if args.history else ""))
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
