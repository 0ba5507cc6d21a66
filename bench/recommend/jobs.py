"""The plan's jobs, run the way a sweep runs them: `run_job` with `resume=true`, each record appended to
`<reports_dir>/records.jsonl` and written to its folder under the recommend's report folder. A job this
machine already measured (an interrupted recommend's, an identical earlier one's, a sweep's) is handed back
from the store instead of measured again.

Stages 1-2 run each backend's `facts` job (its ΔAUC and model size, bench.routes.facts), stage 3 its paired
offline jobs and its `served` jobs (served batch times beside fp32's, bench.routes.served), stage 4 its paired
Server jobs (bench.serve).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Callable, Optional

from bench.config import FACTS, SERVED, Config, ServeConfig
from bench.record import RunRecord
from bench.runner import Session, run_job
from bench.store import save_record


def offline_config(cfg: Config, batch_size: int, threads: int) -> Config:
    """The backend's paired offline job at `batch_size` rows with `threads` torch threads (timed with as many)."""
    return dataclasses.replace(cfg, batch_size=batch_size, threads=threads, serve=None, resume=True,
                               timing=dataclasses.replace(cfg.timing, threads=threads))


def facts_config(cfg: Config) -> Config:
    """The backend's accuracy and size alone (`measure=facts`): nothing timed, so neither batcher nor threads matter."""
    return dataclasses.replace(cfg, serve=None, resume=True, measure=FACTS)


def served_config(cfg: Config, batch_size: int, threads: int) -> Config:
    """The backend's served batch times beside fp32's (`measure=served`) at `batch_size` rows with `threads` torch
    threads, on the query set a serving job of `cfg` would cut (its serve keys as composed)."""
    serve = cfg.serve if cfg.serve is not None else ServeConfig()
    return dataclasses.replace(offline_config(cfg, batch_size, threads), serve=serve, measure=SERVED)


def server_config(cfg: Config, batch_size: int, threads: int, bound_ms: float) -> Config:
    """The backend served under LoadGen's Server scenario: the batcher's most rows `batch_size`, `threads`
    torch threads, the p99 bound `bound_ms`; no accuracy run (stage 1 judged the accuracy)."""
    serve = cfg.serve if cfg.serve is not None else ServeConfig()
    serve = dataclasses.replace(serve, scenario="server", bound_ms=bound_ms, accuracy_scenarios=[])
    return dataclasses.replace(cfg, batch_size=batch_size, threads=threads, serve=serve, resume=True,
                               timing=dataclasses.replace(cfg.timing, threads=threads))


@dataclasses.dataclass
class Jobs:
    """Runs jobs into one folder (`<report folder>/jobs/<n>-<label>/record.json`) and the store; `seconds` holds
    each measured (not resumed) job's time, and `offline_seconds` those of the paired offline jobs alone, from which
    the budget projects the rest of stage 3."""

    session: Session
    folder: Path
    clock: Callable[[], float] = time.perf_counter
    seconds: list[float] = dataclasses.field(default_factory=list)
    offline_seconds: list[float] = dataclasses.field(default_factory=list)
    resumed: int = 0
    count: int = 0

    def run(self, cfg: Config, label: str) -> RunRecord:
        self.count += 1
        start = self.clock()
        with self.session.claims:  # held until the record is stored: a concurrent identical recommend waits, then reuses it
            record, _ = run_job(cfg, self.session)
            run_dir = self.folder / f"{self.count:03d}-{label.replace(' ', '_').replace('=', '')}"
            save_record(record, run_dir, Path(cfg.reports_dir), store=record.resumed_from is None)
        if record.resumed_from:
            self.resumed += 1
        else:
            self.seconds.append(self.clock() - start)
            if cfg.measure is None and cfg.serve is None:
                self.offline_seconds.append(self.seconds[-1])
        return record

    def per_job(self) -> Optional[float]:
        """The mean time of the paired offline jobs measured so far (None before the first)."""
        return sum(self.offline_seconds) / len(self.offline_seconds) if self.offline_seconds else None
