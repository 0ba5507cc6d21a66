"""`python -m bench.report DIR [DIR...] [--baseline DIR] [--out DIR]`: re-render from stored records.

`python -m bench.report F.json [--out DIR]` renders a pytest-benchmark JSON file (`pytest suites/
--benchmark-json=F.json`) into benchmarks.md next to F (`bench.report.benchmark_json`).

A tune folder (`+sweep=tune`, `reports/tune/<timestamp>/`) re-renders its tune.md, tune.csv,
per_table.yaml and frontier.png from its records.jsonl alone (`bench.report.tune_files`).

Each DIR holds a records.jsonl (or `latest/records.jsonl`), or is such a file. Without --out a
single DIR is re-rendered in place (its records.jsonl left as it is). With --baseline the
sweep is compared row by row with the baseline sweep by the comparison engine: compare.md in the
output folder and a summary on stdout. Tolerances and alpha come from `conf/compare/default.yaml`
(or `--compare NAME|PATH`; a single gated folder re-rendered without either reads the compare config its
gate was judged with, its gate_config.yaml, so its intervals are the gate's); `--auc-tolerance`, `--throughput-tolerance` and `--alpha` override
them; `--max-auc-drop` overrides compare.max_auc_drop, the accuracy budget report.md's verdicts and
bottom line are read against. Bad input is one line on stderr and exit code 2. Flagged changes do not
change the exit code: gates decide pass or fail. A comparison that compares no row (the two runs
share no workload, device, backend and batch size) says why and exits 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.config.files import load_compare_config
from bench.errors import EXIT_GATE_FAILED, EXIT_HARNESS_ERROR, UserError, internal_error
from bench.report import benchmark_json
from bench.report.baseline import nothing_compared, summary, write_compare
from bench.results.load import load_many, load_records, records_file, stored_compare
from bench.report.publish import write_report
from bench.report.tune_files import rerender as rerender_tune
from bench.results.tune import is_tune, is_tune_store

PROG = "python -m bench.report"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="sweep folder or records.jsonl file (or one pytest-benchmark .json)")
    p.add_argument("--baseline", type=Path, metavar="DIR", help="sweep to compare against, row by row")
    p.add_argument("--out", type=Path, metavar="DIR", help="output folder (default: the single DIR)")
    p.add_argument("--title", default=None, help="report title")
    p.add_argument("--compare", default=None, metavar="NAME|PATH",
                   help="comparison config: a name in conf/compare/ or a YAML path (default: a gated folder's stored one, else default)")  # fmt: skip
    p.add_argument("--auc-tolerance", "--auc-threshold", dest="auc_tolerance", type=float, default=None,
                   help="override compare.auc_tolerance: flag AUC moves only beyond the noise and this")  # fmt: skip
    p.add_argument("--throughput-tolerance", type=float, default=None,
                   help="override compare.throughput_tolerance: flag throughput only when it moved by more than this fraction too")  # fmt: skip
    p.add_argument("--alpha", type=float, default=None, help="override compare.alpha (0.05: 95%% intervals)")
    p.add_argument("--max-auc-drop", type=float, default=None,
                   help="override compare.max_auc_drop: the accuracy budget report.md's verdicts and bottom line are read against (default 0.001)")  # fmt: skip
    return p.parse_args(argv)


def compare_overrides(args: argparse.Namespace) -> list[str]:
    """The command line's tolerance flags as `compare` overrides (only those given)."""
    given = {k: getattr(args, k) for k in ("auc_tolerance", "throughput_tolerance", "alpha", "max_auc_drop")}
    return [f"{k}={v!r}" for k, v in given.items() if v is not None]


def _default_out(dirs: list[Path]) -> Path:
    if len(dirs) != 1:
        raise UserError("several DIRs combined: give --out DIR for the merged report")
    return records_file(dirs[0]).parent


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if any(benchmark_json.is_benchmark_json(d) for d in args.dirs):
            print(f"benchmarks: {benchmark_json.render_cli(args.dirs, args.out, args.title, args.baseline)}")
            return 0
        records = load_many(args.dirs)
        if is_tune(records):  # a tune folder (`+sweep=tune`): its tune.md and files again, from its records
            if len(args.dirs) != 1 or args.baseline is not None:
                raise UserError("a tune folder re-renders on its own: give one tune folder, without --baseline")
            out = args.out if args.out is not None else _default_out(args.dirs)
            in_place = (Path(out) / "records.jsonl").resolve() == records_file(args.dirs[0]).resolve()
            print(f"tune: {rerender_tune(records, out, write_records_file=not in_place)}")
            return 0
        if is_tune_store(records):
            raise UserError(f"{args.dirs[0]} holds the tune's stored candidates, not a tune: give a tune folder, "
                            "e.g. reports/tune/latest")
        baseline = load_records(args.baseline) if args.baseline is not None else None
        stored = stored_compare(records_file(args.dirs[0]).parent) if len(args.dirs) == 1 else None
        if stored is not None and args.compare is None and not compare_overrides(args):
            compare_cfg = stored  # the folder's gate was judged at these settings: its re-render reads the same intervals
        else:
            compare_cfg = load_compare_config(args.compare or "default", compare_overrides(args))
        out = args.out if args.out is not None else _default_out(args.dirs)
        inputs = {records_file(d).resolve() for d in args.dirs}
        in_place = (Path(out) / "records.jsonl").resolve() in inputs
        title = args.title or f"Benchmark report: {', '.join(str(d) for d in args.dirs)}"
        report = write_report(records, out, title=title, write_records_file=not in_place, budget=compare_cfg.max_auc_drop,
                              alpha=compare_cfg.alpha)
        print(f"report: {report}")
        if baseline is not None:
            df, path = write_compare(
                records, baseline, out, current_name=", ".join(map(str, args.dirs)),
                baseline_name=str(args.baseline), cfg=compare_cfg,
            )  # fmt: skip
            print(f"compare: {summary(df)}")
            print(f"compare: {path}")
            nothing = nothing_compared(df)
            if nothing:
                print(f"{PROG}: error: {nothing}", file=sys.stderr)
                return EXIT_GATE_FAILED
    except UserError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - the harness itself failed: one line, exit 3
        print(f"{PROG}: error: the harness failed: {internal_error(exc)}", file=sys.stderr)
        return EXIT_HARNESS_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
