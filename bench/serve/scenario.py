"""`measure_serving(cfg, backend, device, work) -> metrics`: one serving job, the way MLPerf measures it.

The job's workload, trained model and prepared backend come from the shared work, as in every other
job. The eval split becomes LoadGen's query set; a warm-up times the model (full batches, and one query
of each size alone) to pick the first target; then, in the Server scenario, a bracketed search for the
highest target QPS LoadGen judges VALID under the p99 bound (each target near the bound judged by the
majority of up to `serve.judgments` runs, each run's late queries named by cause, and the search's
measured batch times turned into a queue estimate to compare it with), or, in Offline, one run with every query
at once (run again, once, with LoadGen's measured rate when the first fell short of the minimum
duration). Scenarios listed in `serve.accuracy_scenarios` end with an AccuracyOnly run whose AUC is
checked against the offline AUC of the same rows. LoadGen's logs stay in the job's folder, one folder
per run.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn

from bench.backends.backend import Backend
from bench.backends.tables import embedding_bytes
from bench.config import Config, check_serve_config
from bench.config.job_folder import current_job_folder
from bench.measure.figures import Held, JobFigures
from bench.measure.memory import model_bytes
from bench.measure.noise import LoadWatch, reference_speed
from bench.metrics import LATENCY_MS, MEASURE_AGAIN, PAIRS_PER_S, SAMPLES_PER_S
from bench.models.random_weights import RANDOM
from bench.measure.environment import kernel_path
from bench.pipeline.calibrate import rerun_log
from bench.pipeline.job import PERFORMANCE_ONLY, backend_config, backend_scores, reference_module
from bench.pipeline.reruns import serve_spread
from bench.registry import BASELINE_BACKEND
from bench.pipeline.shared import SharedWork
from bench.serve import late, loadgen, timeline
from bench.serve.accuracy_log import accuracy_check
from bench.serve.early_stopping import queries_for_share, what_a_step_tells
from bench.serve.pace import Pace, log_path, setup_key
from bench.serve.paired import CANDIDATE, SEARCH, Evidence, interleave
from bench.serve.qps_search import Plan, Search, disturbed, drive, search_plan
from bench.serve.queries import QuerySet
from bench.serve.queue import ServiceModel, max_rate
from bench.serve.sut import ServingSystem, predict

SAMPLE = "one LoadGen sample is one user's group of candidate pairs (rows); pairs/s = samples/s x the pairs per sample served"
REQUEST_SAMPLE = ("one LoadGen sample is one request: a user's history and all its candidates (rows); "
                  "pairs/s = samples/s x the candidates per request served")
OFFLINE_RETRY_MARGIN = 1.2  # the second Offline run asks for this much more than LoadGen measured
ALONE_PASSES = 2  # passes over the query sizes timing one query alone. A single pass once read 264 ms for the
# smallest query (7.5 ms for the next size) right after the full batches at 2 threads: that one stall made the
# p99 floor exceed a 60 ms bound, the search called the bound unreachable, started at a fifth of the capacity,
# and its 90 s budget ended two VALID targets later, far below what the model serves (see docs/recommend.md)
LIGHT_LOAD = 0.2  # share of the capacity where queueing adds little to a query's own time
# The first target, as a share of the full-batch capacity: lower steps run longer (min_query_count / QPS),
# so the search starts low and climbs; serving small batches under a bound reaches well below capacity.
FIRST_LOAD = 0.25
# With a queue estimate from the warm-up (optimistic: it leaves out the spread of service times), the first
# target is this share of it: one step up by qps_factor then lands near the estimate.
FIRST_OF_ESTIMATE = 0.6


def measure_serving(cfg: Config, backend: Backend, device: torch.device, work: SharedWork,
                    rerun: tuple[float, str] | None = None) -> dict[str, Any]:
    """One serving job's metrics. `rerun`: the run-to-run spread a paired ratio's interval carries and where it came
    from (serve.rerun_spread weighed with this machine's re-runs: bench.pipeline.reruns.serve_spread); None:
    serve.rerun_spread alone."""
    serve = cfg.serve
    check_serve_config(serve)
    workload = work.workload(cfg)
    model = work.model(cfg, workload)
    work.release_leftovers(cfg, backend, device)
    prepared = work.prepared(cfg, backend, model, workload, device)
    queries = QuerySet.from_eval(work.split_batches(cfg, workload, "eval"), serve, cfg.seed, workload.sequences)
    runs = serving_runs(cfg, prepared, queries, device, job_dir(cfg) / "loadgen", planted_stall=True, pace_of=backend.cfg)
    reference, unpaired = fp32_reference(cfg, backend, model, workload, device, work)
    reference_start = reference_speed()
    with LoadWatch() as load:
        warm = warm_up(prepared, queries, device, cfg.batch_size)
        pair = None
        if reference is not None:  # fp32's side of the paired search: its own SUT and log folder, warmed up beside this one
            pair = Pair(serving_runs(cfg, reference, queries, device, runs.logs / BASELINE_BACKEND, pace_of=FP32),
                        warm_up(reference, queries, device, cfg.batch_size))
        metrics = _measure(cfg, backend, model, workload, device, work, runs, warm, pair, rerun)
    if unpaired is not None:
        metrics["unpaired"] = unpaired
    # The machine's own speed at both ends of the job and its load over it: a figure that moved between
    # runs with these moves with the machine, not the backend (serve.md's machine section).
    metrics["machine"] = {**load.figures, "reference_start": reference_start, "reference_end": reference_speed()}
    metrics.update(JobFigures(
        held=Held(embedding_bytes(prepared), model_bytes(prepared)),
        threads=torch.get_num_threads(),
        model_source=model.info.get("source"),
        workload_info=workload.describe(),
        extra={"log_root": str(runs.logs)},
    ).metrics())
    metrics.update(backend.job_metrics(prepared))  # what the backend says of its prepared form (its dense path, the layers kept fp32)
    return metrics


FP32 = backend_config({"name": BASELINE_BACKEND})  # the reference side's backend section: its serving setup's pace key


def serving_runs(cfg: Config, module: nn.Module, queries: QuerySet, device: torch.device, logs: Path, planted_stall: bool = False,
                 pace_of: Any = None) -> "Runs":
    """LoadGen runs over `module` behind its own dynamic batcher, logged under `logs`; `planted_stall` takes
    serve.test_stall_ms (test-only) into its SUT. With `pace_of` (the side's backend section), each Server run is
    judged against that serving setup's usual batch times here (bench.serve.pace)."""
    serve = cfg.serve
    stall_s = serve.test_stall_ms / 1000 if planted_stall and serve.test_stall_ms is not None else None
    pace = None if pace_of is None else Pace.read(log_path(cfg.cache_dir), setup_key(cfg, pace_of), serve.max_slowdown)
    return Runs(cfg, ServingSystem(module, queries, device, cfg.batch_size, serve.max_wait_ms / 1000, serve.workers, stall_s), queries, logs, pace)


def fp32_reference(cfg: Config, backend: Backend, model: Any, workload: Any, device: torch.device,
                   work: SharedWork) -> tuple[nn.Module | None, str | None]:
    """The prepared fp32 module a Server job pairs its search with (serve.paired), or None and why not: the
    same reference, and the same reasons, as a paired offline timing's (bench.pipeline.job.reference_module)."""
    if cfg.serve.scenario != "server":
        return None, None
    return reference_module(cfg, backend, model, workload, device, work, cfg.serve.paired, "serve.paired=false")


def paired_max_qps(cfg: Config, candidate: nn.Module, reference: nn.Module, device: torch.device, work: SharedWork,
                   logs: Path | None = None) -> dict[str, Any]:
    """The candidate's Server max QPS and fp32's, from their two searches interleaved run by run in ABBA order
    in this process, then tracked by paired staircases (bench.serve.paired), and the ratio with its interval.

    `candidate` and `reference` are prepared modules (a backend's `prepare` output; fp32's, for instance from
    `SharedWork.reference`); `cfg` is the candidate's job config with `serve` set (the Server scenario is
    used whatever serve.scenario says; every other serve.* key applies to both searches); the query set is
    cut from the eval split of cfg's workload. LoadGen's logs go under `logs` (default: the job's folder),
    fp32's in its `fp32` subfolder. Returns:

    - `max_qps`, `max_qps_lo`, `max_qps_hi`, `evidence`, `judgments`, `steps`: the candidate's search
      (steps: each LoadGen run with its verdict, percentiles, late-query causes and steal);
    - `paired.reference_max_qps` and `paired.reference`: fp32's search, the same keys;
    - `paired.qps_ratio`, `paired.qps_ratio_lo`, `paired.qps_ratio_hi`: candidate / fp32 capacity from the two sides' staircases tracked
      in the same rounds after their searches (read as serve.ratio_fit says: the fitted limits' ratio, or the levels'
      geometric mean, and where a re-run's should fall; None when either side met no load, `paired.no_load` says which, or when serve.max_search_s came
      before the evidence serve.min_rounds / serve.min_reversals ask, `paired.not_enough_runs` says what was
      short); `paired.side_runs`, `paired.reversals`: each side's runs and staircase reversals; `paired.qps_ratio_bracket_lo`/`_hi`: what
      the two search brackets allow; `paired.tracked_qps` / `reference_tracked_qps`: each side's tracked level;
    - `paired.runs`: every run in the order it ran (round, side, role search|track, target, verdict), and
      `paired.track_candidate` / `track_reference`: each side's staircase in words, `paired.round_ratios` the joint rounds' ratios;
    - `queue_estimate` (the candidate's), `warm_up` (both: the candidate's, and `paired.reference.warm_up`).

    The ratio's interval carries the run-to-run spread a serving job's would: serve.rerun_spread weighed with this
    machine's re-runs of paired Server jobs under cfg.cache_dir (bench.pipeline.reruns.serve_spread; `paired.rerun_spread`
    and `paired.rerun_spread_from`). A call makes no record, so it adds no re-run to that log.
    """
    serve = dataclasses.replace(cfg.serve, scenario="server")
    cfg = dataclasses.replace(cfg, serve=serve)
    check_serve_config(serve)
    workload = work.workload(cfg)
    queries = QuerySet.from_eval(work.split_batches(cfg, workload, "eval"), serve, cfg.seed, workload.sequences)
    logs = Path(logs) if logs is not None else job_dir(cfg) / "loadgen"
    runs = serving_runs(cfg, candidate, queries, device, logs, planted_stall=True, pace_of=cfg.backend)
    warm = warm_up(candidate, queries, device, cfg.batch_size)
    pair = Pair(serving_runs(cfg, reference, queries, device, logs / BASELINE_BACKEND, pace_of=FP32),
                warm_up(reference, queries, device, cfg.batch_size))
    metrics: dict[str, Any] = {"warm_up": warm}
    server(runs, warm, metrics, pair, serve_spread(rerun_log(cfg.cache_dir), kernel_path(), serve.rerun_spread, cfg.batch_size))
    return metrics


def _measure(cfg: Config, backend: Backend, model: nn.Module, workload: Any, device: torch.device, work: SharedWork, runs: "Runs",
             warm: dict[str, Any], pair: "Pair | None" = None, rerun: tuple[float, str] | None = None) -> dict[str, Any]:
    """The scenario's runs after the warm-up: the Server search or the Offline run, then the accuracy run."""
    serve, queries = cfg.serve, runs.queries
    metrics: dict[str, Any] = {
        "scenario": serve.scenario,
        "bound_ms": serve.bound_ms if serve.scenario == "server" else None,
        "batcher": {"max_rows": cfg.batch_size, "max_wait_ms": serve.max_wait_ms, "workers": serve.workers},
        "query_set": {"sizes": "fixed" if serve.fixed_pairs is not None else "quantiles", **queries.describe()},
        "warm_up": warm,
        "sample": SAMPLE if queries.history is None else REQUEST_SAMPLE,
    }
    accuracy_qps = server(runs, warm, metrics, pair, rerun) if serve.scenario == "server" else offline(runs, warm, metrics)
    metrics["validity"] = [s["validity"] for s in metrics["steps"]]
    metrics["loadgen_version"] = metrics["steps"][0].get("loadgen_version")
    if model.info.get("source") == RANDOM:
        metrics["accuracy"] = PERFORMANCE_ONLY
    elif serve.scenario in serve.accuracy_scenarios:
        step = runs.run("accuracy", round_qps(accuracy_qps), f"{serve.scenario}_accuracy")
        _, logits = backend_scores(cfg, backend, model, workload, device, work)
        check = accuracy_check(Path(step["log_dir"]) / loadgen.ACCURACY, queries, logits, backend.scores_depend_on_batch(),
                               serve.batch_dependent_auc_tolerance)
        metrics.update(check, accuracy_step=step)
    return metrics


class Runs:
    """LoadGen runs of one job over its serving system, each logged into its own folder under `logs`."""

    def __init__(self, cfg: Config, system: ServingSystem, queries: QuerySet, logs: Path, pace: Pace | None = None) -> None:
        self.cfg, self.system, self.queries, self.logs, self.pace = cfg, system, queries, logs, pace

    def run(self, mode: str, qps: float, name: str, draw: int = 0, min_queries: int | None = None) -> dict[str, Any]:
        """One run; the step as LoadGen's log tells it, with pairs/s (samples/s x the pairs per sample served);
        `draw` and `min_queries` as in loadgen.settings."""
        log_dir = self.logs / name
        log_dir.mkdir(parents=True, exist_ok=True)
        test = loadgen.settings(self.cfg.serve, mode, qps, len(self.queries), self.cfg.seed, draw, min_queries)
        step = loadgen.run(self.system, self.queries, test, log_dir)
        rows = step["batching"]
        pairs_per_sample = (rows["rows_per_batch"] / rows["samples_per_batch"]) if rows["batches"] else None
        step[PAIRS_PER_S] = step[SAMPLES_PER_S] * pairs_per_sample if step[SAMPLES_PER_S] and pairs_per_sample else None
        if step["scenario"] == "Server" and mode == "performance":
            step["draw"] = draw
            step["late"] = late.explain(self.system.timeline.frame(), self.cfg.serve.bound_ms, step["overlatency_queries"])
            if self.pace is not None:  # a run the host served slower than its usual is set aside (bench.serve.pace)
                self.pace.judge(step)
        return step

    def store_pace(self) -> dict[str, Any] | None:
        """Append the side's runs to the pace log (the next jobs' usual, bench.serve.pace); its pace over the job."""
        if self.pace is None:
            return None
        self.pace.store(log_path(self.cfg.cache_dir))
        return self.pace.summary()


def server(runs: Runs, warm: dict[str, Any], metrics: dict[str, Any], pair: "Pair | None" = None,
           rerun: tuple[float, str] | None = None) -> float:
    """The Server search into `metrics`; the target the accuracy run (if any) uses. With `pair` (fp32's runs and
    warm-up), fp32's search runs interleaved with this one, run by run in ABBA order (bench.serve.paired), and
    `metrics` gets the ratio to fp32's max QPS with its interval (carrying `rerun`'s run-to-run spread, as
    measure_serving's), and fp32's search under `paired`."""
    serve = runs.cfg.serve
    # A paired search judges each target by fewer runs: the tracking after it re-runs the limit (bench.serve.paired).
    judgments = None if pair is None else serve.paired_judgments
    plan, run = server_plan(runs, warm, metrics, judgments)
    if pair is None:
        search = drive(plan, run)
    else:
        reference: dict[str, Any] = {}
        ref_plan, ref_run = server_plan(pair.runs, pair.warm, reference, judgments)

        made: dict[tuple[str, str], int] = {}

        def run_paired(side: str, qps: float, draw: int, role: str) -> dict[str, Any]:
            if role == SEARCH:
                return (run if side == CANDIDATE else ref_run)(qps, draw)
            on = runs if side == CANDIDATE else pair.runs
            n = made[side, role] = made.get((side, role), 0) + 1
            return on.run("performance", qps, f"{role}{n}_{qps:g}qps", draw, metrics["step_queries"])

        seconds = run_seconds(serve, metrics["step_queries"])
        spread, source = rerun or (serve.rerun_spread, "serve.rerun_spread")
        evidence = Evidence(serve.min_rounds, serve.min_reversals, spread, source)
        paired = interleave(plan, ref_plan, run_paired, (serve.max_search_s, seconds), serve.track_step, serve.track_rounds, round_qps,
                            serve.max_steal, evidence, time.monotonic, serve.ratio_fit)
        search = paired.candidate
        server_finish(pair.runs, pair.warm, reference, paired.reference)
        reference["warm_up"] = pair.warm
        metrics["paired"] = {**paired.as_metrics(), "reference_backend": BASELINE_BACKEND, "reference": reference}  # stored once, here
        withheld = paired.withheld()
        if withheld:  # the host, not the backends, left it without a ratio: a resumed sweep measures it again
            metrics[MEASURE_AGAIN] = withheld
    return server_finish(runs, warm, metrics, search)


@dataclass
class Pair:
    """fp32's side of a paired Server job: its runs (its own serving system and log folder) and its warm-up."""

    runs: "Runs"
    warm: dict[str, Any]


def server_plan(runs: Runs, warm: dict[str, Any], metrics: dict[str, Any],
                judgments: int | None = None) -> tuple[Plan, Callable[[float, int], dict[str, Any]]]:
    """The Server search's plan (its first target from the warm-up, its budget and rules from serve.*, the most runs
    per target `judgments` when given, else serve.judgments) and the function that makes each run it asks for; what it
    decided before any run goes into `metrics`."""
    serve, queries = runs.cfg.serve, runs.queries
    floor = service_floor_ms(warm, queries)
    metrics["service_p99_ms"] = floor
    hopeless = None
    if floor > serve.bound_ms:  # the slowest queries alone take longer than the bound
        largest = int(queries.sizes.max())
        largest_ms = warm['query_alone_ms'][str(largest)]
        hopeless = (f"no load can meet the bound: one query at a time, the p99 of the service times is {floor:.1f} ms "
                    + (f"(the largest query, {largest} pairs, takes {largest_ms:.1f} ms)" if queries.history is None else
                       f"(a request of {largest} candidates and a {int(queries.history[alone_sample(queries, largest)])}-event history "
                       f"takes {largest_ms:.1f} ms)"))
    step_queries = max(serve.min_query_count or 0, queries_for_share(serve.step_late_share) if serve.step_late_share is not None else 0)
    metrics["step_queries"] = step_queries or None
    metrics["step_tells"] = what_a_step_tells(step_queries) if step_queries else None
    estimate = None if serve.qps_start or hopeless else warm_up_queue_qps(warm, queries, runs)  # only to pick the start
    metrics["queue_qps_warm_up"] = estimate
    if serve.qps_start:
        start = serve.qps_start
    elif hopeless or not estimate:
        start = round_qps(warm["capacity_samples_per_s"] * (LIGHT_LOAD if hopeless else FIRST_LOAD))
    else:  # not below the capacity share either: a warm-up on a busy core can guess far too low, and low targets run long
        start = round_qps(max(estimate * FIRST_OF_ESTIMATE, warm["capacity_samples_per_s"] * FIRST_LOAD))
    metrics["first_target_qps"] = start
    numbers = iter(range(1, 10_000))

    def run(qps: float, draw: int) -> dict[str, Any]:
        name = f"server_step{next(numbers)}_{qps:g}qps" + (f"_run{draw + 1}" if draw else "")
        return runs.run("performance", qps, name, draw, step_queries or None)

    plan = plan_from(serve, start, serve.max_steps, hopeless, (serve.max_search_s, run_seconds(serve, step_queries)), judgments)
    return plan, run


def run_seconds(serve: Any, step_queries: int | None) -> Callable[[float], float]:
    """How long LoadGen runs at a target, as the search's budget counts it: min_duration_s, or the step's queries at that rate."""
    return lambda qps: max(serve.min_duration_s, (step_queries or 0) / qps)


def plan_from(serve: Any, start: float, max_steps: int, hopeless: str | None, budget: tuple[float, Callable[[float], float]] | None,
              judgments: int | None = None) -> Plan:
    """A Server search plan with the rules from serve.* (factor, resolution, steal, and judgments unless given), from `start`."""
    return search_plan(start, serve.qps_factor, serve.qps_resolution, max_steps, serve.min_qps, round_qps, hopeless, budget,
                       judgments or serve.judgments, max_steal=serve.max_steal)


def server_finish(runs: Runs, warm: dict[str, Any], metrics: dict[str, Any], search: Search) -> float:
    """A finished search's figures into `metrics`; the target an accuracy run uses."""
    metrics.update(search.as_metrics())
    metrics["pace"] = runs.store_pace()
    at = search.at_max() or search.steps[0]
    metrics["threads_used"] = at["threads"]  # at the max (or the lowest load tried)
    metrics["queue_estimate"] = measured_queue(search.steps, warm, runs.queries, runs)
    return search.highest_valid or metrics["first_target_qps"]


def warm_up_queue_qps(warm: dict[str, Any], queries: QuerySet, runs: Runs) -> float | None:
    """The queue estimate from the warm-up's times alone (each query size alone, full batches), no spread:
    an optimistic first guess the search starts below."""
    pairs, ms = warm_up_points(warm, queries)
    serve = runs.cfg.serve
    model = ServiceModel.fit(pairs, ms, with_spread=False)
    return round_qps(max_rate(queries.sizes, model, runs.cfg.batch_size, serve.max_wait_ms / 1000, serve.bound_ms)) or None


def warm_up_points(warm: dict[str, Any], queries: QuerySet) -> tuple[np.ndarray, np.ndarray]:
    """(pairs, ms) of the warm-up's timings: each query size alone, and its full batches on average."""
    alone = warm["query_alone_ms"]
    pairs = [float(k) for k in alone]
    ms = [float(v) for v in alone.values()]
    full = warm.get("full_batch")
    if full:
        pairs.append(full["pairs"])
        ms.append(full["ms"])
    return np.asarray(pairs), np.asarray(ms)


def measured_queue(steps: list[dict[str, Any]], warm: dict[str, Any], queries: QuerySet, runs: Runs) -> dict[str, Any] | None:
    """The queue estimate from every batch the search's runs served (their sizes and times, spread and
    tail included), with the warm-up's full batches to anchor the large sizes."""
    pairs, ms = [], []
    for s in steps:
        path = Path(s.get("timeline") or "")
        if not path.is_file():
            continue
        b = late.batches(timeline.read(path))
        pairs.append(b["pairs"])
        ms.append(b["ms"])
    if not pairs:
        return None
    anchor = warm_up_points(warm, queries)
    pairs.append(anchor[0])
    ms.append(anchor[1])
    model = ServiceModel.fit(np.concatenate(pairs), np.concatenate(ms))
    serve = runs.cfg.serve
    qps = max_rate(queries.sizes, model, runs.cfg.batch_size, serve.max_wait_ms / 1000, serve.bound_ms)
    return {"qps": round_qps(qps), "service": model.as_metrics(),
            "method": "the SUT's batcher and one worker on Poisson arrivals, batch times from the search's measured batches"}


def offline(runs: Runs, warm: dict[str, Any], metrics: dict[str, Any]) -> float:
    """The Offline run (and its retry, when it fell short of the minimum duration or the host stole over
    `serve.max_steal` of the CPU during it: `disturbed`) into `metrics`; its samples/s, from the last run that was neither."""
    max_steal = runs.cfg.serve.max_steal
    steps = [runs.run("performance", round_qps(warm["capacity_samples_per_s"]), "offline")]
    first = steps[0]
    if (first["min_duration_met"] is False or disturbed(first, max_steal)) and first[SAMPLES_PER_S]:
        steps.append(runs.run("performance", round_qps(first[SAMPLES_PER_S] * OFFLINE_RETRY_MARGIN), "offline_retry"))
    sound = [s for s in steps if not disturbed(s, max_steal) and s["min_duration_met"] is not False]
    step = sound[-1] if sound else steps[-1]
    metrics.update({"offline_samples_per_s": step[SAMPLES_PER_S], "offline_pairs_per_s": step[PAIRS_PER_S],
                    LATENCY_MS: step[LATENCY_MS], "steps": steps})
    return step[SAMPLES_PER_S] or warm["capacity_samples_per_s"]


def accuracy_error(metrics: dict[str, Any]) -> str | None:
    """The job's error when its accuracy-mode AUC disagrees with the offline AUC beyond the tolerance."""
    if metrics.get("auc_check") != "fail":
        return None
    return (f"accuracy-mode AUC {metrics['auc_loadgen']:.10f} differs from the offline AUC {metrics['auc_offline']:.10f} "
            f"on the same {metrics['pairs']} pairs by {metrics['auc_shift']:+.3g} (allowed {metrics['auc_tolerance']:g})")


def service_floor_ms(warm: dict[str, Any], queries: QuerySet) -> float:
    """The p99 over the query set of each query's time alone: no load gives a lower p99 latency."""
    alone = warm["query_alone_ms"]
    return float(np.percentile([alone[str(size)] for size in queries.sizes], 99))


def job_dir(cfg: Config) -> Path:
    """The job's folder, where its record goes (bench.config.job_folder: Hydra's output folder, or the one named for a job
    measured again); outside both, a fresh folder under reports_dir."""
    folder = current_job_folder()
    if folder is not None:
        return folder
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return Path(cfg.reports_dir) / "serve_logs" / f"{stamp}-{uuid.uuid4().hex[:6]}"


def round_qps(qps: float) -> float:
    """Three significant digits: targets that read well in tables and logs."""
    if qps <= 0:
        return qps
    digits = 2 - int(np.floor(np.log10(qps)))
    return float(round(qps, digits))


def warm_up(module: nn.Module, queries: QuerySet, device: torch.device, max_rows: int, seconds: float = 1.0) -> dict[str, Any]:
    """Full batches through the model (the first untimed) until `seconds` passed: the capacity in samples/s,
    and their mean pairs and time; and one query of each size alone (ms by size, as text keys for JSON), the
    floor under any latency."""
    batches = _full_batches(queries, max_rows)
    predict(module, queries, batches[0], device, max_rows)
    samples, pairs, calls, start = 0, 0, 0, time.perf_counter()
    for indices in batches[1:] or batches:
        predict(module, queries, indices, device, max_rows)
        samples, pairs, calls = samples + len(indices), pairs + int(queries.sizes[indices].sum()), calls + 1
        if time.perf_counter() - start > seconds:
            break
    elapsed = time.perf_counter() - start
    alone: dict[str, float] = {}
    for _ in range(ALONE_PASSES):  # a size's lower median over the passes: one stalled pass does not set the floor
        for size in sorted(set(int(s) for s in queries.sizes)):
            index = alone_sample(queries, size)
            ms = _median_ms(lambda: predict(module, queries, [index], device, max_rows))
            alone[str(size)] = min(ms, alone.get(str(size), ms))
    full = {"pairs": pairs / calls, "ms": elapsed * 1000 / calls}  # the full batches' mean size and time
    return {"capacity_samples_per_s": samples / elapsed, "capacity_batches": max(1, len(batches) - 1),
            "query_alone_ms": alone, "full_batch": full}


def alone_sample(queries: QuerySet, size: int) -> int:
    """The sample of `size` pairs timed alone: the first; among requests, the one at the 99th percentile of that size's
    history lengths, since a request's time grows with its history and the floor is read as a p99."""
    of_size = np.flatnonzero(queries.sizes == size)
    if queries.history is None:
        return int(of_size[0])
    order = of_size[np.argsort(queries.history[of_size], kind="stable")]
    return int(order[min(len(order) - 1, int(0.99 * len(order)))])


def _full_batches(queries: QuerySet, max_rows: int, limit: int = 64) -> list[list[int]]:
    """Consecutive samples packed up to max_rows rows each, as the batcher packs them under load."""
    out, current, rows = [], [], 0
    for i, size in enumerate(queries.sizes):
        if current and rows + size > max_rows:
            out.append(current)
            current, rows = [], 0
            if len(out) == limit:
                return out
        current.append(i)
        rows += int(size)
    return out + ([current] if current else [])


def _median_ms(call: Callable[[], Any], repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return float(np.median(times))
