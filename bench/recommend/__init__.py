"""`python -m bench recommend`: for this model on this machine, under a p99 bound and an AUC budget, the deployment to ship.

    decide.py    the funnel's decisions as pure functions: budget, memory, dominance, pick, front, what would change
    facts.py     stages 1-2: a backend's ΔAUC interval from the cached eval scores, and its model MB (cached)
    speed.py     stage 3: served batch times (interval from the paired offline speedups) -> the queue estimate of max QPS under the bound
    serving_path.py  stage 3: a backend's and fp32's served batch times, on the session's prepared modules
    confirm.py   stage 4: LoadGen Server runs of a candidate beside fp32's (the one function stage 4 calls)
    jobs.py      the jobs of stages 3-4 through run_job with resume, stored as records
    run.py       run_recommend(...) -> Outcome: the stages in order, within the time budget
    outputs.py   reports/recommend/<timestamp>/: recommend.md, recommend.json, front.png; the console lines

Exit codes: 0 with a pick, 1 when no candidate meets the constraints (the nearest miss named, with what it
would need), 2 for bad input (one line, before any work, nothing stored), 130 interrupted (the jobs measured
so far keep their records; the same command measures only the rest).
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench import registry
from bench.backends.tbe import read_per_table_file
from bench.config import Config, check_objectives, check_recommend_config
from bench.config.compose import compose
from bench.console import quiet_library_noise
from bench.errors import EXIT_GATE_FAILED, EXIT_INTERRUPTED, EXIT_OK, UserError
from bench.recommend.jobs import Jobs
from bench.recommend.outputs import console_lines, write_recommend
from bench.recommend.run import Outcome, candidate_overrides, run_recommend
from bench.recommend.speed import timed_sizes
from bench.report.publish import fresh_report_dir, point_latest
from bench.runner import Session

COMMAND = "+sweep=recommend"  # the config node `python -m bench recommend` composes (conf/sweep/recommend.yaml)

__all__ = ["COMMAND", "Outcome", "check", "main", "run_recommend"]


def check(cfg: Config) -> None:
    """Bad input, one line before any work: the objectives, the candidate lists, sizes the eval split can hold."""
    check_objectives(cfg.slo, cfg.accuracy, cfg.memory)
    check_recommend_config(cfg.recommend)
    for name in cfg.recommend.backends or ():
        registry.get("backend", name)  # an unknown name: one line naming the choices
    if cfg.recommend.tune_map:  # a missing or malformed map: one line naming it
        read_per_table_file(cfg.recommend.tune_map, "recommend.tune_map")
    largest = max(timed_sizes(list(cfg.recommend.batch_sizes)))
    if largest > cfg.workload.eval_samples:
        raise UserError(f"recommend.batch_sizes reaches {largest} rows, more than the eval split's {cfg.workload.eval_samples} samples: "
                        "lower recommend.batch_sizes or raise workload.eval_samples")


def main(overrides: list[str]) -> int:
    """Compose, check, run the funnel, write the folder, print the pick; the exit code."""
    cfg = compose([COMMAND, *overrides])
    try:
        check(cfg)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    quiet_library_noise()
    folder = fresh_report_dir(Path(cfg.reports_dir), "recommend")
    jobs = Jobs(Session(), folder / "jobs")
    try:
        out = run_recommend(cfg, lambda name: compose([COMMAND, *overrides, *candidate_overrides(cfg, name)]), jobs)
    except KeyboardInterrupt:
        print("interrupted: the jobs measured so far keep their records; the same command reuses them and measures the rest",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    write_recommend(out, folder)
    point_latest(folder.parent, folder.name)
    for line in console_lines(out, folder):
        print(line)
    return EXIT_OK if out.chosen is not None else EXIT_GATE_FAILED
