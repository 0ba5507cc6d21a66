"""`python -m bench recommend`: compose the config, check it, run the funnel (bench.recommend.funnel), write its folder
(bench.recommend.recommend_folder) and print the pick; the exit codes are listed in bench.recommend's docstring."""

from __future__ import annotations

import sys
from pathlib import Path

from bench import registry
from bench.backends.tbe import read_per_table_file
from bench.config import Config
from bench.config.compose import compose
from bench.console import quiet_library_noise
from bench.errors import EXIT_GATE_FAILED, EXIT_INTERRUPTED, EXIT_OK, UserError
from bench.recommend.jobs import Jobs
from bench.recommend.recommend_folder import console_lines, write_recommend
from bench.recommend.ranges import check_ranges
from bench.recommend.funnel import candidate_overrides, run_recommend
from bench.report.publish import fresh_report_dir, point_latest
from bench.runner import Session

COMMAND = "+sweep=recommend"  # the config node `python -m bench recommend` composes (conf/sweep/recommend.yaml)

__all__ = ["COMMAND", "check", "main"]


def check(cfg: Config) -> None:
    """Bad input, one line before any work: the ranges again on the typed config (bench.cli checked them before torch
    loaded), the backends against the registry, and the tune's map (read by the TBE backend's reader)."""
    check_ranges(cfg)
    for name in cfg.recommend.backends or ():
        registry.get("backend", name)  # an unknown name: one line naming the choices
    if cfg.recommend.tune_map:  # a missing or malformed map: one line naming it
        read_per_table_file(cfg.recommend.tune_map, "recommend.tune_map")


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
