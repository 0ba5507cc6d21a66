"""`python -m bench.gate REPORT_DIR [overrides]`: re-judge a report folder from its stored records.

The gate reads `REPORT_DIR/records.jsonl` (or `REPORT_DIR/latest/records.jsonl`) and the config
the sweep stored beside it (`gate_config.yaml`). With no overrides it reproduces the stored
verdict (gate.md, gate.xml). With overrides (`gate.rules.int8_tbe.min_speedup=100`,
`compare.alpha=0.1`) or `--config`, it writes `gate-<hash>.md/.xml/.yaml` beside the stored
verdict, never over it, and prints what changed.

Exit codes: 0 the gate passes, 1 a rule fails or a job errored, 2 bad input, 3 the harness failed
(one line on stderr each).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.errors import EXIT_HARNESS_ERROR, UserError, internal_error
from bench.gate.stored import rejudge
from bench.gate.writers import verdict_line


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.gate", description="Re-judge a report folder's stored records against its stored gate config.")
    p.add_argument("report_dir", type=Path, help="report folder holding records.jsonl (or its sweep folder, for latest/)")
    p.add_argument("overrides", nargs="*", help="dotlist overrides, e.g. gate.rules.int8_tbe.min_speedup=100, inconclusive_fails=true or compare.alpha=0.1")
    p.add_argument("--config", default=None, help="gate config instead of the stored one: a name in conf/gate/, a YAML path, or a stored gate_config.yaml / gate-<hash>.yaml")
    p.add_argument("--out", type=Path, default=None, help="write the verdict files here instead of the report folder")
    p.add_argument("--history", action="store_true", help="also append the records to the history the nightly keeps (<reports_dir>/history.jsonl, "
                   "history-tiny.jsonl for a +preset=tiny run, or gate.history_file) and rewrite history.md beside it")
    p.add_argument("--run-id", default=None, help="history run id (default: $GITHUB_RUN_ID.$GITHUB_RUN_ATTEMPT or a UTC timestamp)")
    return p.parse_intermixed_args(argv)  # overrides before or after the options


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        done = rejudge(args.report_dir, args.overrides, args.config, args.out)
        if args.history:
            from bench.gate.stored import history_fields
            from bench.report.history import history_path, reports_dir_of, update_history

            s = done.settings  # the same history file the nightly appends to: <reports_dir>/history.jsonl or gate.history_file
            history_md = update_history(done.records, history_path(s.gate.history_file, reports_dir_of(done.folder), s.gate.history_name), s.compare,
                                        runs=s.gate.history_runs, run_id=args.run_id, results=done.results,
                                        **history_fields(done.folder, done.result))
    except UserError as exc:
        print(f"bench.gate: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - the harness itself failed: one line, exit 3
        print(f"bench.gate: error: the harness failed: {internal_error(exc)}", file=sys.stderr)
        return EXIT_HARNESS_ERROR
    print(verdict_line(done.result).replace("**", ""))
    if not done.stored:
        print("not the stored verdict (gate.md left as it is); changes against it:")
        for line in done.changes:
            print(f"  {line.replace('`', '')}")
    print(f"wrote {done.md} and {done.xml}" + (f" and {history_md}" if args.history else ""))
    return done.result.exit_code


if __name__ == "__main__":
    sys.exit(main())
