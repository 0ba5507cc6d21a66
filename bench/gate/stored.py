"""A report folder's gate: judged from its stored records with its stored config, so a verdict
never flips silently.

In a report folder:

    records.jsonl          the records, the gate's only input (results.csv is a rendered view)
    gate_config.yaml       the gate and compare configs the verdict was judged with
    gate.md, gate.xml      that verdict
    gate-<hash>.md/.xml    a verdict under another config (overrides, --config), written beside
    gate-<hash>.yaml       the stored one with what changed; <hash> names its config

`gate_sweep` (after a sweep) stores the config and judges. `rejudge`
(`python -m bench.gate DIR`) re-judges: with no overrides it uses the stored config and reproduces
gate.md (rewriting it only when identical); with overrides or another config it never touches
gate.md and writes gate-<hash>.* instead, listing the config keys and verdict rows that changed.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from omegaconf import OmegaConf

from bench.config import CompareConfig, GateConfig
from bench.errors import UserError
from bench.config.files import (
    as_compare_config,
    config_errors,
    load_compare_config,
    merged,
    validate_compare,
)
from bench.gate.thresholds import as_gate_config, load_gate_config, validate
from bench.gate.evaluate import GateResult, Verdict, evaluate_gate
from bench.gate.rules import VERDICTS
from bench.gate.writers import render_markdown, write_outputs
from bench.hashing import config_hash
from bench.io import write_text_atomic
from bench.record import RunRecord
from bench.results.assemble import Results, build_results
from bench.results.key import KEY
from bench.results.load import GATE_CONFIG, load_records, records_file

STORED = "gate"  # the stored verdict's file stem


@dataclass(frozen=True)
class GateSettings:
    """Everything a verdict depends on besides the records: the gate and the compare configs."""

    gate: GateConfig
    compare: CompareConfig

    def plain(self) -> dict[str, Any]:
        return {"gate": asdict(self.gate), "compare": asdict(self.compare)}

    @property
    def digest(self) -> str:
        return config_hash(self.plain(), length=8)

    def to_yaml(self) -> str:
        head = ("# The configs this report's gate verdict was judged with (bench.gate.stored).\n"
                "# `python -m bench.gate DIR` re-judges with this file; overrides write gate-<hash>.* instead.\n")
        return head + OmegaConf.to_yaml(OmegaConf.create(self.plain()))


def settings(gate_cfg: Any, compare_cfg: Any = None) -> GateSettings:
    return GateSettings(as_gate_config(gate_cfg), as_compare_config(compare_cfg if compare_cfg is not None else {}))


def read_settings(path: Path) -> GateSettings:
    """A stored `gate_config.yaml` (keys `gate` and `compare`), validated against the schemas."""
    with config_errors(f"bad stored gate config {path}"):
        node = OmegaConf.load(path)
        if not OmegaConf.is_dict(node):
            raise UserError(f"bad stored gate config {path}: not a mapping with the keys gate and compare")
        unknown = sorted(set(node) - {"gate", "compare"})
        if unknown:
            raise UserError(f"bad stored gate config {path}: unknown key(s) {', '.join(map(str, unknown))}; it holds only gate and compare")
        gate = merged(GateConfig, node.get("gate") or {}, validate=validate)
        compare = merged(CompareConfig, node.get("compare") or {}, validate=validate_compare)
    return GateSettings(gate, compare)


def results_for(records: Iterable[RunRecord], s: GateSettings) -> Results:
    """The results the gate judges `records` by: speedup intervals at compare.alpha."""
    return build_results(records, alpha=s.compare.alpha, budget=s.compare.max_auc_drop)


def judge_results(results: Results, s: GateSettings) -> GateResult:
    """The gate over built results: their results table and serving table, judged. They must have been
    built at the settings' compare.alpha (`results_for`), the level the verdict is stored with."""
    if results.alpha != s.compare.alpha:
        raise ValueError(f"results built at alpha {results.alpha} judged with compare.alpha {s.compare.alpha}")
    return evaluate_gate(results.jobs, s.gate, results.serving)


def judge(records: Iterable[RunRecord], s: GateSettings) -> GateResult:
    """The gate over stored records: their results table (speedup intervals at compare.alpha) and serving table, judged."""
    return judge_results(results_for(records, s), s)


def judge_sweep(report_dir: Path, gate_cfg: Any, compare_cfg: Any, results: Optional[Results] = None) -> GateResult:
    """The sweep's gate: store the configs, judge the folder's records (`results`, built from its
    records.jsonl at compare.alpha; read and built here when not given), write gate.md and gate.xml."""
    s = settings(gate_cfg, compare_cfg)
    report_dir = Path(report_dir)
    write_text_atomic(report_dir / GATE_CONFIG, s.to_yaml())
    result = judge_results(results if results is not None else results_for(load_records(report_dir), s), s)
    write_outputs(result, report_dir, STORED)
    return result


def gate_sweep(report_dir: Path, gate_cfg: Any, compare_cfg: Any, results: Optional[Results] = None) -> int:
    """`judge_sweep`'s exit code. The history is the caller's next, separate stage."""
    return judge_sweep(report_dir, gate_cfg, compare_cfg, results).exit_code


def history_fields(report_dir: Path, result: Optional[GateResult] = None) -> dict[str, Any]:
    """What a judged report folder gives its history lines (`update_history`'s keywords): the folder,
    each row's gate verdict and the run's. Without `result`, the folder's stored verdict is re-judged
    from its records and its gate_config.yaml (the same verdict, see `rejudge`)."""
    if result is None:
        result = judge(load_records(report_dir), read_settings(Path(report_dir) / GATE_CONFIG))
    return {"report_dir": Path(report_dir), "gate": row_verdicts(result), "gate_passed": result.passed}


def row_verdicts(result: GateResult) -> dict[tuple, str]:
    """Row key (bench.results.key) -> the first of its rules' verdicts in VERDICTS order (fail first)."""
    worst: dict[tuple, str] = {}
    for v in result.verdicts:
        key = v.key
        if key not in worst or VERDICTS.index(v.verdict) < VERDICTS.index(worst[key]):
            worst[key] = v.verdict
    return worst


# ---------------------------------------------------------------------------- re-judging


@dataclass
class Rejudged:
    result: GateResult
    settings: GateSettings
    folder: Path  # the report folder judged
    md: Path
    xml: Path
    stored: bool  # True: this is the stored verdict (gate.md); False: a new verdict beside it
    changes: list[str] = field(default_factory=list)  # what differs from the stored verdict, one line each
    records: list[RunRecord] = field(default_factory=list)
    results: Optional[Results] = None  # the records' results at the verdict's compare.alpha (the history reads them)


def split_overrides(overrides: Iterable[str]) -> tuple[list[str], list[str]]:
    """(gate dotlist, compare dotlist): `compare.X=V` goes to compare; `gate.X=V` and bare `X=V` to the gate."""
    gate, compare = [], []
    for o in overrides:
        if o.startswith("compare."):
            compare.append(o[len("compare."):])
        else:
            gate.append(o[len("gate."):] if o.startswith("gate.") else o)
    return gate, compare


def resolve(stored: Optional[GateSettings], config: Optional[str], overrides: Iterable[str]) -> GateSettings:
    """The settings to judge with: the stored ones (else conf's defaults), `config` replacing the
    gate part (or both, for a stored-settings YAML), then the overrides."""
    if config is not None and _is_settings_file(Path(config)):
        base = read_settings(Path(config))
    else:
        gate = load_gate_config(config) if config is not None else (stored.gate if stored else load_gate_config())
        base = GateSettings(gate, stored.compare if stored else load_compare_config())
    gate_dl, compare_dl = split_overrides(overrides)
    if not gate_dl and not compare_dl:
        return base
    with config_errors("bad gate config or override"):
        gate = merged(GateConfig, asdict(base.gate), OmegaConf.from_dotlist(gate_dl), validate=validate)
        compare = merged(CompareConfig, asdict(base.compare), OmegaConf.from_dotlist(compare_dl), validate=validate_compare)
    return GateSettings(gate, compare)


def _is_settings_file(path: Path) -> bool:
    """A stored settings YAML (top-level `gate` and `compare`) rather than a `conf/gate/` file."""
    if path.suffix not in (".yaml", ".yml") or not path.is_file():
        return False
    with config_errors(f"bad gate config {path}"):
        node = OmegaConf.load(path)
    return OmegaConf.is_dict(node) and "gate" in node and "compare" in node


def rejudge(report_dir: Path, overrides: Iterable[str] = (), config: Optional[str] = None,
            out_dir: Optional[Path] = None) -> Rejudged:
    folder = records_file(report_dir).parent
    records = load_records(folder)
    stored_path = folder / GATE_CONFIG
    stored = read_settings(stored_path) if stored_path.is_file() else None
    s = resolve(stored, config, overrides)
    results = results_for(records, s)
    result = judge_results(results, s)
    md = render_markdown(result)
    out = Path(out_dir) if out_dir is not None else folder
    stored_md = folder / f"{STORED}.md"
    old_md = stored_md.read_text(encoding="utf-8") if stored_md.is_file() else None
    fresh = stored is None and old_md is None  # nothing judged here yet: this verdict becomes the stored one
    if fresh or (stored is not None and s.digest == stored.digest and old_md in (None, md)):
        if fresh:
            write_text_atomic(out / GATE_CONFIG, s.to_yaml())
        paths = write_outputs(result, out, STORED, md)
        return Rejudged(result, s, folder, *paths, stored=True, records=records, results=results)
    stem = f"{STORED}-{s.digest}"
    changes = describe_changes(stored, s, records, result, old_md, md, stored_path)
    preface = (f"Not the stored verdict (`{STORED}.md`, left as it is): judged with `{stem}.yaml`. "
               "What changed is listed at the end.")
    text = render_markdown(result, preface) + "\n## Changes against the stored verdict\n\n" + "\n".join(f"- {c}" for c in changes) + "\n"
    write_text_atomic(out / f"{stem}.yaml", s.to_yaml())
    paths = write_outputs(result, out, stem, text)
    return Rejudged(result, s, folder, *paths, stored=False, changes=changes, records=records, results=results)


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: data}


def config_changes(old: GateSettings, new: GateSettings) -> list[str]:
    a, b = flatten(old.plain()), flatten(new.plain())
    return [f"config `{k}`: {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def _key(v: Verdict) -> tuple:
    return (*(x for k, x in zip(KEY, v.key) if k != "batch_size"), v.scenario or "", v.batch_size, v.rule)


def verdict_changes(old: GateResult, new: GateResult) -> list[str]:
    before, after = {_key(v): v for v in old.verdicts}, {_key(v): v for v in new.verdicts}
    out = []
    for k in sorted(set(before) | set(after)):
        b, a = before.get(k), after.get(k)
        if b is not None and a is not None and b.verdict == a.verdict:
            continue
        v = a or b
        shown = f"{b.verdict if b else 'absent'} -> {a.verdict if a else 'absent'}"
        out.append(f"verdict {v.where} `{v.rule}`: {shown}" + (f" ({a.reason})" if a else ""))
    return out


def describe_changes(stored: Optional[GateSettings], s: GateSettings, records: list[RunRecord], result: GateResult,
                     old_md: Optional[str], md: str, stored_path: Path) -> list[str]:
    if stored is None:
        return [f"no stored gate config ({stored_path.name}) beside {STORED}.md: it was written before configs were "
                "stored, so its config and verdict rows cannot be re-derived; it is left as it is"]
    old = judge(records, stored)
    changes = config_changes(stored, s) + (verdict_changes(old, result) or ["no verdict row changed"])
    if old_md is not None and old_md != render_markdown(old):
        diff = difflib.unified_diff(old_md.splitlines(), render_markdown(old).splitlines(), lineterm="", n=0)
        changed = [line for line in diff if line[:1] in "+-" and not line.startswith(("+++", "---"))]
        changes.append(f"{STORED}.md differs from re-judging with its own stored config ({len(changed)} lines): "
                       "this harness judges the same records differently from the one that wrote it")
    return changes


__all__ = ["GATE_CONFIG", "GateSettings", "Rejudged", "settings", "read_settings", "judge", "judge_results", "judge_sweep",
           "results_for", "gate_sweep", "rejudge",
           "resolve", "split_overrides", "config_changes", "verdict_changes"]
