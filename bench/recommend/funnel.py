"""`run_recommend(...) -> Outcome`: the funnel's stages in order, cheapest first.

0. runnable: a backend that cannot run here (a toolkit not installed) or cannot take the model (its NotApplicable: a
   toolkit's export on a sequential model's EmbeddingCollection) is out, with its reason.
1. accuracy: each backend's ΔAUC interval against fp32 from the cached eval scores, its `facts` job (bench.routes.facts);
   a backend whose interval is not inside the budget is out, with how far it reaches past it.
2. memory: its prepared model's MB against `memory.max_model_mb`.
3. offline speed: paired offline jobs at a query's rows and at each batcher size, every backend at the fewest
   threads and the best `recommend.confirm` backends at the other thread counts; then the serving function's own
   batch times at those sizes, the backend's and fp32's in turn (its `served` jobs, bench.routes.served), turned into a queue
   estimate of max QPS under the bound (bench.recommend.speed); a candidate dominated beyond
   both intervals is out. Before each backend, the time spent and the mean job's time project the stage's
   end: a backend whose jobs would take the funnel past `recommend.budget_min` (less what stage 4 needs) is
   not timed, and says so.
4. confirmation: the best `recommend.confirm` estimates served under LoadGen's Server scenario, each search
   interleaved with fp32's (bench.recommend.confirm); one whose Server runs fail the bound (or the target rate) is out.
   Where stage 3 put every candidate below the bound (no simulated rate meets it), nothing is served: no pick, and
   the nearest miss is the candidate whose no-load p99 comes closest.

The pick is the confirmed candidate with the highest low end of its Server QPS interval read through the paired
ratio to fp32 (with `slo.qps`: the fewest threads that hold it); one whose bracket or fp32's is open is "not
confirmed" and ranks below every closed one (bench.recommend.decide.ranked). Every job, the facts and served times
among them, goes through `run_job` with `resume=true` (bench.recommend.jobs): an interrupted recommend resumes, an
identical one reads every figure back from the store (bench.results.parts) and measures nothing.

`run_recommend` runs the stages in turn: `accuracy_and_memory` (1-2), `OfflineSpeed` (3), `confirm_best` (4) and
`decide_pick`.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from bench import registry
from bench.config import Config, auc_budget
from bench.recommend import decide
from bench.recommend.confirm import confirm as serve_beside_fp32
from bench.recommend.decide import (ACCURACY, CONFIRM, RUNNABLE, SPEED, Candidate, Confirmation, Estimate, Facts, Point,
                                    Rejection)
from bench.recommend.jobs import Jobs, facts_config, offline_config, served_config, server_config
from bench.recommend.speed import estimate, point, timed_sizes
from bench.record import NOT_APPLICABLE
from bench.registry import BASELINE_BACKEND
from bench.results.parts import facts_of, served_of, why_not
from bench.serve.path import ServedTimes
from bench.serve.queries import served_sizes

RESIDUE_NOTED = 1.25  # a served batch this much slower after the other module's than after its own is said
TUNED_BASE = "uint4"  # the TBE backend a tune's per-table map is served with (docs/tuning.md)
TUNED = "uint4+tune_map"  # the candidate name of the tune's map
SERVE_OVERHEAD_S = 20.0  # a serving job's time beyond its search: building, the warm-up, the queue estimate


def default_backends() -> list[str]:
    """Every backend of the default sweeps and of the toolkit sweep, fp32 first, each once."""
    names = [*registry.sweep_backends(), *registry.toolkit_sweep_backends()]
    return list(dict.fromkeys(names))


def tune_map(cfg: Config) -> Optional[Path]:
    """The per-table map that joins the candidates: `recommend.tune_map`, or where the candidates are the default
    ones, the map a tune sweep left in this reports_dir (`+sweep=tune`, docs/tuning.md); None without one."""
    if cfg.recommend.tune_map:
        return Path(cfg.recommend.tune_map)
    left = Path(cfg.reports_dir) / "tune" / "latest" / "per_table.yaml"
    return left if cfg.recommend.backends is None and left.is_file() else None


def candidate_overrides(cfg: Config, name: str) -> list[str]:
    """The command-line overrides that choose candidate backend `name` (the tune map's: uint4 with the map's types)."""
    if name == TUNED:
        return [f"backend={TUNED_BASE}", f"backend.per_table_file={tune_map(cfg)}"]
    return [f"backend={name}"]


def threads_axis(cfg: Config) -> list[int]:
    """`recommend.threads`, or 1 and the machine's cores where it has more than one."""
    if cfg.recommend.threads:
        return sorted(set(cfg.recommend.threads))
    cores = os.cpu_count() or 1
    return [1, cores] if cores > 1 else [1]


def budget_of(cfg: Config) -> float:
    """accuracy.max_auc_drop, else compare.max_auc_drop: resolved where every reader resolves it (`auc_budget`)."""
    return auc_budget(cfg)[1]


def stage4_seconds(cfg: Config) -> float:
    """What stage 4 may take at most: `confirm` paired Server jobs, each the candidate's search and fp32's interleaved."""
    search = cfg.serve.max_search_s if cfg.serve is not None else 90.0
    return cfg.recommend.confirm * (2 * search + SERVE_OVERHEAD_S)


@dataclass
class Outcome:
    cfg: Config
    budget: float
    backends: list[str]
    threads: list[int]
    facts: dict[str, Facts] = field(default_factory=dict)
    facts_reused: int = 0
    rejections: list[Rejection] = field(default_factory=list)
    estimates: dict[Candidate, Estimate] = field(default_factory=dict)
    confirmations: dict[Candidate, Confirmation] = field(default_factory=dict)
    chosen: Optional[Candidate] = None
    front: list[Point] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    miss: Optional[str] = None
    notes: list[str] = field(default_factory=list)
    why: list[str] = field(default_factory=list)  # why the pick beat the runner-up (decide.why_pick)
    seconds: dict[str, float] = field(default_factory=dict)
    jobs_measured: int = 0
    jobs_resumed: int = 0
    served_timed: int = 0  # backends (at a thread count) whose served batches stage 3 timed now
    served_reused: int = 0  # ... and whose served times it read back from the store (`served_times`)

    @property
    def through_ratio(self) -> dict[Candidate, tuple[float, float, float]]:
        """Each estimate's QPS read through its ratio to fp32 (decide.anchored_estimates), the measure stage 3 compares."""
        return decide.anchored_estimates([(c, e, self.facts[c.backend]) for c, e in self.estimates.items()])

    @property
    def survivors(self) -> dict[str, list[str]]:
        """Backends left after each of stages 1 and 2."""
        out_acc = {r.what for r in self.rejections if r.stage in (RUNNABLE, ACCURACY)}
        out_mem = out_acc | {r.what for r in self.rejections if r.stage == decide.MEMORY}
        return {"accuracy": [b for b in self.backends if b not in out_acc], "memory": [b for b in self.backends if b not in out_mem]}


def plan_text(cfg: Config, backends: list[str], threads: list[int]) -> str:
    """What the recommend will run, said as it starts."""
    sizes = timed_sizes(list(cfg.recommend.batch_sizes))
    jobs = len(backends) * len(sizes) + cfg.recommend.confirm * (len(threads) - 1) * len(sizes)
    qps = f", at least {cfg.slo.qps:g} QPS" if cfg.slo.qps is not None else ""
    mem = f", model at most {cfg.memory.max_model_mb:g} MB" if cfg.memory.max_model_mb is not None else ""
    tuned = f"; {TUNED}: {TUNED_BASE} with the per-table map {tune_map(cfg)}" if TUNED in backends else ""
    return (f"recommend: p99 <= {cfg.slo.p99_ms:g} ms{qps}, ΔAUC budget {budget_of(cfg):g}{mem}; {len(backends)} backends "
            f"({', '.join(backends)}{tuned}) x batcher sizes {list(cfg.recommend.batch_sizes)} x threads {threads}.\n"
            f"  stage 1-2: ΔAUC from the cached eval scores and model MB, per backend; stage 3: up to {jobs} paired offline jobs "
            f"(batch {', '.join(map(str, sizes))}) for the backends left at {threads[0]} thread{'s' if threads[0] > 1 else ''}"
            + (f", at {', '.join(map(str, threads[1:]))} for the best {cfg.recommend.confirm}" if threads[1:] else "")
            + f", then served batch times beside fp32's and a queue estimate each; stage 4: LoadGen Server searches of the best {cfg.recommend.confirm}, each paired "
            f"with fp32's (up to {stage4_seconds(cfg) / 60:.0f} min); "
            f"budget {cfg.recommend.budget_min:g} min; stored jobs are reused (resume)")


ServedTimesOf = Callable[[Config, list[int], int, Jobs], tuple[Optional[dict[int, ServedTimes]], Optional[str], bool]]


def served_times(backend_cfg: Config, sizes: list[int], threads: int, jobs: Jobs) -> tuple[Optional[dict[int, ServedTimes]], Optional[str], bool]:
    """Stage 3's served batch times of one backend at `threads`: its `served` job at each size (bench.routes.served),
    read back from the store where this machine ran it before. ({size: times}, None, whether every one was read back),
    or (None, why not, False) where one of them has none."""
    served, reused = {}, True
    for size in sizes:
        record = jobs.run(served_config(backend_cfg, size, threads), f"{backend_cfg.backend.name} served bs={size} threads={threads}")
        times = served_of(record)
        if times is None:
            return None, why_not(record) or "no served times in its record", False
        served[size], reused = times, reused and bool(record.resumed_from)
    return served, None, reused


def backend_facts(backend_cfg: Config, name: str, jobs: Jobs) -> tuple[Facts, bool]:
    """Stages 1-2's figures of candidate `name`: its `facts` job (bench.routes.facts), read back from the store where
    this machine ran it before; and whether it was."""
    record = jobs.run(facts_config(backend_cfg), f"{name} facts")
    return (Facts(name, **facts_of(record), skipped=why_not(record), not_applicable=record.error_kind == NOT_APPLICABLE),
            bool(record.resumed_from))


def run_recommend(cfg: Config, configs: Callable[[str], Config], jobs: Jobs, say: Callable[[str], None] = print,
                  confirm: Callable[[Config, Config, Jobs, str], Confirmation] = serve_beside_fp32,
                  clock: Callable[[], float] = time.perf_counter, time_served: ServedTimesOf = served_times) -> Outcome:
    """The funnel. `configs(backend)` is the recommend's config with that backend chosen (as the command line
    composes it); `confirm` is stage 4's seam (bench.recommend.confirm), `time_served` stage 3's served batch times
    (`served_times`)."""
    started = clock()
    names = list(dict.fromkeys([BASELINE_BACKEND, *(cfg.recommend.backends or default_backends()), *([TUNED] if tune_map(cfg) else [])]))
    out = Outcome(cfg, budget_of(cfg), names, threads_axis(cfg))
    say(plan_text(cfg, names, out.threads))
    backend_cfgs = {name: configs(name) for name in names}
    accuracy_and_memory(out, backend_cfgs, jobs, say)
    out.seconds["stages 1-2"] = clock() - started
    mark = clock()
    stage = OfflineSpeed(out, backend_cfgs, jobs, clock, started, time_served)
    alive = stage.run(say)
    out.seconds["stage 3"] = clock() - mark
    mark = clock()
    confirmed = confirm_best(out, alive, backend_cfgs, jobs, confirm, say)
    out.seconds["stage 4"] = clock() - mark
    decide_pick(out, confirmed, stage.serve.max_wait_ms)
    out.jobs_measured, out.jobs_resumed = len(jobs.seconds), jobs.resumed
    out.seconds["total"] = clock() - started
    return out


def accuracy_and_memory(out: Outcome, backend_cfgs: dict[str, Config], jobs: Jobs, say: Callable[[str], None]) -> None:
    """Stages 1 and 2: each candidate's facts, and out the ones that cannot run here, reach past the ΔAUC budget or
    exceed the model MB limit."""
    cfg = out.cfg
    for name in out.backends:
        f, reused = backend_facts(backend_cfgs[name], name, jobs)
        out.facts[name], out.facts_reused = f, out.facts_reused + reused
        if f.skipped is not None:
            out.rejections.append(Rejection(name, RUNNABLE, f"{'cannot take this model' if f.not_applicable else 'cannot run here'}: {f.skipped}"))
            continue
        r = decide.inside_budget(f, out.budget) or decide.within_memory(f, cfg.memory.max_model_mb)
        if r is not None:
            out.rejections.append(r)
    left = out.survivors
    stage0 = [r for r in out.rejections if r.stage == RUNNABLE]
    if stage0:
        by_reason: dict[str, list[str]] = {}
        for r in stage0:
            by_reason.setdefault(r.reason, []).append(r.what)
        say(f"stage 0 (runnable): {len(stage0)} of {len(out.backends)} backends out: "
            + "; ".join(f"{', '.join(who)}: {why}" for why, who in by_reason.items()))
    equivalent = [b for b in left["accuracy"] if is_measured(out.facts[b]) and out.facts[b].fp32_equivalent]
    say(f"stage 1 (accuracy): {len(left['accuracy'])} of {len(out.backends)} backends inside the {out.budget:g} budget: {', '.join(left['accuracy']) or 'none'}"
        + (f" (only fp32-equivalent ones: ΔAUC within ±{decide.FP32_EQUIVALENT:g}, fp32's scores up to rounding)"
           if left["accuracy"] and len(equivalent) == len(left["accuracy"]) else ""))
    if cfg.memory.max_model_mb is not None:
        say(f"stage 2 (memory): {len(left['memory'])} within {cfg.memory.max_model_mb:g} MB: {', '.join(left['memory']) or 'none'}")


def is_measured(f: Facts) -> bool:
    return f.skipped is None and not math.isnan(f.auc_delta)


@dataclass
class OfflineSpeed:
    """Stage 3: each backend left after stage 2 timed by its paired offline jobs and its served batch times, turned into
    a queue estimate per batcher size; every backend at the fewest threads, the best `recommend.confirm` at the others."""

    out: Outcome
    backend_cfgs: dict[str, Config]
    jobs: Jobs
    clock: Callable[[], float]
    started: float
    time_served: ServedTimesOf
    rows: list[tuple[Candidate, Estimate, Facts]] = field(default_factory=list)

    def __post_init__(self) -> None:
        cfg = self.out.cfg
        self.sizes = timed_sizes(list(cfg.recommend.batch_sizes))
        served_cfg = server_config(self.backend_cfgs[BASELINE_BACKEND], cfg.recommend.batch_sizes[0], 1, cfg.slo.p99_ms)
        self.serve = served_cfg.serve
        self.query_sizes = served_sizes(served_cfg, self.jobs.session.work)  # a sequential workload's: its requests' candidates
        self.limit_s = cfg.recommend.budget_min * 60 - stage4_seconds(cfg)

    def run(self, say: Callable[[str], None]) -> list[tuple[Candidate, Estimate, Facts]]:
        """Time the backends, reject the dominated; the candidates left, for stage 4."""
        out, cfg, jobs = self.out, self.out.cfg, self.jobs
        order = sorted(out.survivors["memory"], key=lambda b: (b != BASELINE_BACKEND, out.facts[b].model_mb))
        first, more = out.threads[0], out.threads[1:]
        for name in order:
            self.time(name, first)
        if more:  # the other thread counts for the backends of the best estimates only
            by_rank = list(dict.fromkeys(c.backend for c, e, _ in decide.confirm_order(self.rows, cfg.slo.qps)))
            leaders = by_rank[:cfg.recommend.confirm]
            for name in order:
                for threads in more:
                    if name in leaders:
                        self.time(name, threads)
                    elif name in by_rank:
                        out.rejections.append(Rejection(f"{name} threads={threads}", SPEED,
                                                        f"not timed at {threads} threads: at {first} its estimates rank below the best "
                                                        f"{cfg.recommend.confirm} backends' (recommend.confirm)",
                                                        needs=f"recommend.confirm={by_rank.index(name) + 1}"))
        for c, r in decide.dominated(self.rows).items():
            out.rejections.append(r)
        out.jobs_measured, out.jobs_resumed = len(jobs.seconds), jobs.resumed
        dominated = {r.what for r in out.rejections if r.stage == SPEED}
        alive = [row for row in self.rows if row[0].label() not in dominated]
        say(f"stage 3 (offline speed): {len(self.rows)} candidates estimated, {len(alive)} not dominated"
            f" ({jobs.count} jobs: {len(jobs.seconds)} measured, {jobs.resumed} reused; served batch times: {out.served_timed} timed, "
            f"{out.served_reused} read back)")
        return alive

    def over_budget(self, name: str, threads: int) -> bool:
        """Whether this backend's jobs would take the funnel past the budget (fp32 is timed whatever it says); says so."""
        per_job, cfg = self.jobs.per_job(), self.out.cfg
        if per_job is None or name == BASELINE_BACKEND or (self.clock() - self.started) + per_job * len(self.sizes) <= self.limit_s:
            return False
        self.out.rejections.append(Rejection(f"{name} threads={threads}", SPEED,
                                             f"not timed: its {len(self.sizes)} jobs (about {per_job * len(self.sizes):.0f} s) would take the funnel "
                                             f"past recommend.budget_min={cfg.recommend.budget_min:g} less stage 4's share"))
        return True

    def time(self, name: str, threads: int) -> None:
        """Time one backend at one thread count (its offline jobs at every size, then its served batches) unless the
        budget says no; its candidates' estimates."""
        if self.over_budget(name, threads):
            return
        points, failed = {}, None
        for size in self.sizes:
            record = self.jobs.run(offline_config(self.backend_cfgs[name], size, threads), f"{name} bs={size} threads={threads}")
            p = point(record)
            if p is None:
                why = (record.error or "").splitlines()[0] if record.error else "no throughput"
                failed = failed or f"its offline job at bs={size} threads={threads} is {record.status}: {why}"
                continue
            points[size] = p
        served = self.served(name, threads) if points else None
        out, cfg = self.out, self.out.cfg
        for m in cfg.recommend.batch_sizes:
            c = Candidate(name, m, threads)
            e = estimate(points, self.query_sizes, m, self.serve.max_wait_ms / 1000, cfg.slo.p99_ms, served) if points else None
            if e is None:
                out.rejections.append(Rejection(c.label(), SPEED, failed or "no offline figure"))
                continue
            out.estimates[c] = e
            self.rows.append((c, e, out.facts[name]))

    def served(self, name: str, threads: int) -> Optional[dict[int, ServedTimes]]:
        """The serving function's own batch times, the backend's and fp32's in turn (bench.routes.served); None, said,
        where they could not be timed."""
        out = self.out
        served, why, reused = self.time_served(self.backend_cfgs[name], self.sizes, threads, self.jobs)
        if served is None:
            out.notes.append(f"{name} threads={threads}: served batches not timed ({why}); its estimate is from offline times alone")
            return None
        out.served_reused += reused
        out.served_timed += not reused
        size, worst = max(((r, t.residue()) for r, t in served.items()), key=lambda x: x[1])
        if worst > RESIDUE_NOTED:
            out.notes.append(f"{name} threads={threads}: at {size} rows a served batch ran {worst:.2f}x slower right after the "
                             "other module's than after its own (work left running between calls); each module's times are "
                             "its own-order batches (bench.serve.path)")
        return served


def confirm_best(out: Outcome, alive: list[tuple[Candidate, Estimate, Facts]], backend_cfgs: dict[str, Config], jobs: Jobs,
                 confirm: Callable[[Config, Config, Jobs, str], Confirmation], say: Callable[[str], None]
                 ) -> list[tuple[Candidate, Confirmation, Facts]]:
    """Stage 4, unless stage 3 put every candidate below the bound (then no Server search could meet it either): the
    best `recommend.confirm` estimates served beside fp32; the ones whose Server runs hold."""
    cfg = out.cfg
    ranked = decide.confirm_order(alive, cfg.slo.qps)
    confirmed = []
    if decide.below_the_bound(out.estimates):
        say(f"stage 3: no candidate meets p99 <= {cfg.slo.p99_ms:g} ms at any load by its served batch times: none is served "
            "under LoadGen")
        for c, e in out.estimates.items():
            out.rejections.append(Rejection(c.label(), SPEED, f"no load meets the {cfg.slo.p99_ms:g} ms bound by its served batch "
                                            f"times: at no load, each query alone, a p99 of {e.idle_p99_ms:.3g} ms"))
        ranked = []
    served: dict[Candidate, tuple[Config, Config]] = {}  # each served candidate's Server config and fp32's beside it
    for k, (c, e, f) in enumerate(ranked):
        if k >= cfg.recommend.confirm:
            out.rejections.append(Rejection(c.label(), CONFIRM, f"not confirmed: its estimate ranks {k + 1}, below the best "
                                            f"{cfg.recommend.confirm} (recommend.confirm)", needs=f"recommend.confirm={k + 1}"))
            continue
        say(f"stage 4: serving {c.label()} beside fp32 under LoadGen's Server scenario (estimate {e.qps:,.0f} QPS, "
            f"{decide.times(e.relative)} fp32)")
        served[c] = (server_config(backend_cfgs[c.backend], c.batch_size, c.threads, cfg.slo.p99_ms),
                     server_config(backend_cfgs[BASELINE_BACKEND], c.batch_size, c.threads, cfg.slo.p99_ms))
        out.confirmations[c] = confirm(*served[c], jobs, c.label())
    serve_again(out, served, jobs, confirm, say)
    for c, _, f in ranked:
        if c not in served:
            continue
        conf = out.confirmations[c]
        why = decide.confirmation_fails(conf, cfg.slo.qps, cfg.slo.p99_ms)
        if why is not None:
            out.rejections.append(Rejection(c.label(), CONFIRM, why))
        else:
            confirmed.append((c, conf, f))
            why_open = decide.open_bracket(conf)
            if why_open is not None:
                out.notes.append(f"{c.label()} not confirmed: {why_open}; it ranks below every closed candidate")
    return confirmed


def serve_again(out: Outcome, served: dict[Candidate, tuple[Config, Config]], jobs: Jobs,
                confirm: Callable[[Config, Config, Jobs, str], Confirmation], say: Callable[[str], None]) -> None:
    """Stage 4's Server jobs whose answer the host withheld (their paired rounds set aside as slow or stolen, so no ratio),
    served again once the other candidates are served, up to `measure_again` times, as a sweep measures its withheld jobs
    again once its jobs are done (bench.cli.measure_again). The same config again: the runner finds the withheld record
    in the store and measures the job anew, the new record naming it (bench.runner, resume); the confirmation then
    reads the new measurement and names both records."""
    for n in range(1, out.cfg.measure_again + 1):
        left = [c for c in served if out.confirmations[c].withheld]
        if not left:
            return
        for c in left:
            before = out.confirmations[c]
            say(f"stage 4: serving {c.label()} again ({n} of {out.cfg.measure_again}, measure_again): the host left it "
                f"without an answer ({before.withheld})")
            again = confirm(*served[c], jobs, f"{c.label()} again {n}")
            again.records = [*before.records, *again.records]
            again.method += f"; served again after record {before.records[-1]}, which the host left without an answer"
            out.confirmations[c] = again


def decide_pick(out: Outcome, confirmed: list[tuple[Candidate, Confirmation, Facts]], max_wait_ms: float) -> None:
    """The pick among the confirmed, the front, why it won, what would change it; the nearest miss without a pick."""
    cfg = out.cfg
    chosen = decide.pick(confirmed, cfg.slo.qps)
    out.chosen = chosen[0] if chosen else None
    points = front_points(out)
    out.front = decide.pareto_front(points)
    chosen_point = next((p for p in points if p.candidate == out.chosen), None)
    out.why = decide.why_pick(confirmed, cfg.slo.qps)
    out.changes = (decide.runner_up_lines(chosen, confirmed) if chosen else []) + decide.what_would_change(
        chosen_point, out.rejections, out.front, out.facts, points)
    if out.chosen is None:
        out.miss = decide.nearest_miss(out.rejections, out.confirmations, cfg.slo.qps, out.facts, out.budget, out.estimates,
                                       cfg.slo.p99_ms, max_wait_ms)


def front_points(out: Outcome) -> list[Point]:
    """Every estimated candidate as a point at stage 3's estimate of its QPS under the bound, read through its ratio to
    fp32 (decide.anchored_estimates; one measure for all of them: Server's figures exist for the confirmed few only), and at 0 where LoadGen's Server runs met the bound at
    no load."""
    anchored = out.through_ratio

    def qps(c: Candidate) -> float:
        conf = out.confirmations.get(c)
        return 0.0 if conf is not None and not conf.max_qps > 0 else anchored[c][0]
    return [Point(c, qps(c), out.facts[c.backend].auc_delta, out.facts[c.backend].model_mb, c in out.confirmations)
            for c in out.estimates]
