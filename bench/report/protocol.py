"""The report's "What was measured" section: which model, how it was timed, what the fidelity gap
compares. Read from the stored records (their resolved config and metrics), never re-measured."""

from __future__ import annotations

import re

from collections import Counter
from typing import Any, Sequence

from bench.metrics import DENSE_PATH, THROUGHPUT_TRIALS
from bench.record import RunRecord, measure_of
from bench.report import fmt

FIDELITY_NOTE = (
    "**fidelity gap** = AUC(backend) − AUC(its fake_quant twin), on the same eval samples. The twin "
    "is `fake_quant` (fp32 kernels, quantize-dequantize of the weights) configured like the backend: "
    "the same table bits and per-table overrides, and the same dense-layer scheme (int8, or fp16/bf16 rounding). A gap near 0 means the "
    "emulation predicts the deployed model's accuracy; a clear gap means it does not."
)


def _ok(records: Sequence[RunRecord]) -> list[RunRecord]:
    """The whole jobs that ran (recommend's parts of jobs have their own section: bench.report.measured_parts)."""
    return [r for r in records if r.status == "ok" and measure_of(r) is None]


def _layers(sizes: Any) -> str:
    return "-".join(str(s) for s in sizes) if sizes else "?"


def model_lines(records: Sequence[RunRecord]) -> list[str]:
    """One line per distinct (workload, model) benchmarked."""
    seen: dict[str, str] = {}
    for r in _ok(records):
        model = (r.config or {}).get("model") or {}
        metrics = r.metrics or {}
        text = f"`{model.get('name', '?')}` on `{r.workload}`: {model.get('arch', 'dlrm')}, embedding dim {model.get('embedding_dim', '?')}"
        if model.get("arch") == "custom":  # the user's own module: its factory, not DLRM layer sizes
            text += f", `{model.get('factory')}` returning {model.get('output', 'logits')}"
        elif model.get("arch") == "hstu" and isinstance(model.get("hstu"), dict):  # the sequential ranker: its shape
            h = model["hstu"]
            text += (f", {h.get('num_layers')} STU layers of {h.get('num_heads')} heads (attention dim {h.get('attention_dim')}, "
                     f"linear dim {h.get('linear_dim')}), top MLP {_layers(h.get('over_arch_layer_sizes'))}")
        else:
            text += f", bottom MLP {_layers(model.get('dense_arch_layer_sizes'))}, top MLP {_layers(model.get('over_arch_layer_sizes'))}"
        if model.get("arch") == "dlrm_dcn":
            text += f", DCN {model.get('dcn_num_layers')} layers of low rank {model.get('dcn_low_rank_dim')}"
        rows = metrics.get("table_rows")
        if rows:
            text += f"; {len(rows)} tables, {fmt.count(sum(rows))} rows in all ({_table_sizes(rows)})"
        source = metrics.get("model_source")
        if model.get("checkpoint"):
            text += f"; weights from {model['checkpoint']}"
        elif source in ("trained", "cache"):
            train = model.get("train") or {}
            text += f"; trained by the harness on {fmt.count(train.get('samples'))} samples" if train.get("samples") else "; trained by the harness"
        seen.setdefault(f"{r.workload}/{model.get('name')}", text + ".")
    return [f"- Model: {t}" for t in seen.values()]


def _table_sizes(rows: list[int]) -> str:
    if len(set(rows)) == 1:
        return f"each {fmt.count(rows[0])}"
    if len(rows) <= 26:
        return "rows per table " + ", ".join(fmt.count(n) for n in rows)
    return f"{fmt.count(min(rows))} to {fmt.count(max(rows))} per table"


def timing_lines(records: Sequence[RunRecord]) -> list[str]:
    """How the speed columns were measured (one line per distinct timing config)."""
    out = []
    by_config: dict[tuple, list[RunRecord]] = {}
    for r in _ok(records):
        timing = (r.config or {}).get("timing") or {}
        key = tuple(sorted(timing.items()))
        by_config.setdefault(key, []).append(r)
    for key, recs in by_config.items():
        t = dict(key)
        calls = sorted({n for n in (_calls_per_trial(r.metrics or {}) for r in recs) if n})
        distinct = sorted({(r.metrics or {}).get("timing_distinct_batches") for r in recs} - {None})
        paired = any(str((r.metrics or {}).get("speedup_method", "")).startswith("paired") for r in recs)
        text = f"- Timing: {_setting_words(recs)}{t.get('warmup_batches', '?')} warm-up calls, then {t.get('trials', '?')} "
        if paired and t.get("max_rounds", 0) > t.get("trials", 0):
            rounds = sorted({len((r.metrics or {}).get("speedup_rounds") or []) for r in recs} - {0})
            text += (f"to {t['max_rounds']} rounds per job, each timing fp32 and the backend in turn (ABBA order) over the same "
                     "batches, until the speedup's 95% interval decides its verdict (and any speed threshold), spans at most "
                     f"{t.get('target_spread', 0):.0%} of it, or more rounds could not narrow it much")
            text += f" ({rounds[0]}-{rounds[-1]} rounds here)" if len(rounds) > 1 else (f" ({rounds[0]} rounds here)" if rounds else "")
        else:
            text += "rounds per job, each timing fp32 and the backend in turn (ABBA order) over the same batches" if paired else "trials per job"
        text += f"; each trial makes at least {t.get('batches_per_trial', '?')} calls"
        if t.get("min_trial_seconds"):
            text += f" and lasts at least {t['min_trial_seconds']} s"
        if calls:
            text += f" ({calls[0]}-{calls[-1]} calls per trial here)" if len(calls) > 1 else f" ({calls[0]} calls per trial here)"
        text += ", walking on through "
        text += distinct_words(distinct)
        text += " of the job's batch size (never restarting at the first), built and moved to the device beforehand: only the model call is timed."
        out.append(text)
        if paired:
            out.append(f"  {_interval_words(recs)}")
    return out


def _calls_per_trial(m: dict[str, Any]) -> int | None:
    """Timed calls per trial: `latency_samples_ms` is [trial][call] (a flat list in records that kept one
    list of calls, divided by their trials)."""
    samples = m.get("latency_samples_ms")
    if not samples:
        return None
    if all(isinstance(trial, list) for trial in samples):
        return round(sum(map(len, samples)) / len(samples))
    trials = m.get(THROUGHPUT_TRIALS)
    return round(len(samples) / len(trials)) if trials else None


def _setting_words(recs: Sequence[RunRecord]) -> str:
    """`1 thread on the thread_cpu clock (picked by measurement on this machine), `, or nothing for older records."""
    setting = next((s for s in ((r.metrics or {}).get("timing_setting") for r in recs) if isinstance(s, dict)), None)
    if not setting or setting.get("threads") is None:
        return ""
    threads = setting["threads"]
    return f"{threads} thread{'s' if threads != 1 else ''} on the {setting.get('clock', 'wall')} clock ({setting.get('how', 'given')}), "


def _interval_words(recs: Sequence[RunRecord]) -> str:
    """What the paired speedup's interval covers: the job's rounds, and the between-process spread when carried."""
    sds = sorted({round(float(sd), 4) for sd in ((r.metrics or {}).get("speedup_process_sd") for r in recs) if sd})
    if not sds:
        return ("The speedup's 95% interval covers the rounds in the job's own process only: a re-run in a new process "
                "may land outside it.")
    settings = [s for s in ((r.metrics or {}).get("timing_setting") for r in recs) if isinstance(s, dict)]
    calibration = (settings[0] if settings else {}).get("calibration") or {}
    where = f" ({calibration.get('processes')} processes x {calibration.get('rounds')} rounds, {calibration.get('path')})" if calibration else ""
    spread = f"{sds[0]:.1%}" if len(sds) == 1 else f"{sds[0]:.1%} to {sds[-1]:.1%}"
    learned = _sources_words([s["process_sd_from"] for s in settings if s.get("process_sd_from")])
    return ("The speedup's 95% interval covers the rounds in the job's own process and the spread between processes "
            f"measured on this machine{where}: a standard deviation of {spread} of the speedup{learned}, added to every "
            "interval with Student's t for the evidence behind both, so a re-run of the sweep should land inside it.")


_RERUNS = re.compile(r"^(?P<calibration>.*?) and (?P<runs>\d+) re-runs of (?P<jobs>\d+) jobs on this machine$")


def _sources_words(sources: list[str]) -> str:
    """Where the between-process spread came from, said once for the whole sweep: the calibration, and the
    range of re-runs that refined it (bench.pipeline.reruns.combined writes each job's phrase)."""
    if not sources:
        return ""
    found = [_RERUNS.match(s) for s in sources]
    calibrations = sorted({match["calibration"] if match else s for match, s in zip(found, sources)})
    runs = sorted(int(match["runs"]) for match in found if match)
    text = f", estimated from {'; '.join(calibrations)}"
    if runs:
        count = f"{runs[0]}" if runs[0] == runs[-1] else f"{runs[0]}-{runs[-1]}"
        text += f", refined for {len(runs)} of {len(sources)} jobs by {count} re-runs of identical jobs on this machine"
    return text


def fidelity_lines(records: Sequence[RunRecord]) -> list[str]:
    """What the fidelity gap means, and the twin each backend was compared against."""
    twins: dict[str, Counter] = {}
    for r in _ok(records):
        twin = (r.metrics or {}).get("fidelity_twin")
        if twin:
            twins.setdefault(r.backend, Counter())[_twin_text(twin)] += 1
    if not twins:
        return []
    sweep_fq = sorted({_twin_text((r.config or {}).get("backend") or {}) for r in _ok(records) if r.backend == "fake_quant"})
    lines = [f"- {FIDELITY_NOTE}"]
    for backend, texts in twins.items():
        twin = ", ".join(texts)
        differs = sweep_fq and twin not in sweep_fq
        note = f" (differs from this report's `fake_quant` row: {'; '.join(sweep_fq)})" if differs else ""
        lines.append(f"  - `{backend}` against fake_quant {twin}{note}")
    return lines


def _twin_text(cfg: dict) -> str:
    parts = [f"bits={cfg.get('bits')}", f"mlp={cfg.get('mlp')}"]
    if cfg.get("mlp") == "int8":
        parts.append(f"activations={cfg.get('activations')}")
    if cfg.get("per_table"):
        parts.append("per_table={" + ", ".join(f"{k}: {v}" for k, v in sorted(cfg["per_table"].items())) + "}")
    return " ".join(parts)


def dense_lines(records: Sequence[RunRecord]) -> list[str]:
    """The dense layers' path each backend ran, per device (a record before the metric names none)."""
    paths: dict[tuple[str, str], list[str]] = {}
    for r in _ok(records):
        path = (r.metrics or {}).get(DENSE_PATH)
        if path and r.backend not in paths.setdefault((str(path), r.device), []):
            paths[(str(path), r.device)].append(r.backend)
    if not paths:
        return []
    parts = [f"{', '.join(f'`{b}`' for b in backends)} {path} on {device}" for (path, device), backends in sorted(paths.items(), key=lambda kv: (kv[0][1], kv[0][0]))]
    return [f"- Dense layers (MLP): {'; '.join(parts)}."]


def measured_section(records: Sequence[RunRecord]) -> list[str]:
    lines = model_lines(records) + timing_lines(records) + dense_lines(records) + fidelity_lines(records)
    return ["## What was measured", "", *lines, ""] if lines else []


def distinct_words(distinct: list) -> str:
    """`48, 195 and 781 distinct eval batches (one count per batch size)`: counts that are not a range read as a list."""
    if not distinct:
        return "distinct eval batches"
    if len(distinct) == 1:
        return f"{distinct[0]} distinct eval batches"
    listed = ", ".join(str(d) for d in distinct[:-1]) + f" and {distinct[-1]}"
    return f"{listed} distinct eval batches (one count per batch size)"
