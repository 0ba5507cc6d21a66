"""`python -m bench --help`: what the tool does, its main commands, the groups and options, where
reports go. Built from the sources of truth without importing torch: the group options are the
files in `conf/<group>/` (the same names as the registry, `bench.registry`), a plug-in's line is the
first sentence of its module docstring, other options' lines are the first comment of their YAML,
and the plain options with their defaults and notes come from the schema in `bench/config/schema.py`.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import re
import tokenize
from pathlib import Path


from bench import config as schemas
from bench import metrics
from bench.config import CONF_DIR, config_groups, default_choices, group_key, group_options
from bench.registry import KINDS, PACKAGES

ROOT = CONF_DIR.parent

COMMANDS = """\
  python -m bench                                    one run: fp32, synthetic workload, CPU, batch 2048
  python -m bench backend=int8_tbe batch_size=4096   one backend, one batch size
  python -m bench +sweep=quant                       every backend x batch 256,1024,4096 x cpu,cuda, then the report
  python -m bench +sweep=quant batch_size=2048 device=cpu   command-line values replace the sweep's
  python -m bench +sweep=quant resume=true           finish an interrupted sweep (measured jobs are kept)
  python -m bench +sweep=nightly                     the nightly sweep, then the accuracy gate (exit 1 when it fails)
  python -m bench +sweep=serve                       max QPS under a p99 bound per backend, through MLPerf LoadGen (docs/serving.md)
  python -m bench recommend slo.p99_ms=60 accuracy.max_auc_drop=0.001   the deployment to ship, with its evidence (docs/recommend.md)
  python -m bench -m backend=fp32,uint4 batch_size=256,1024   a sweep of your own (Hydra multirun)
  python -m bench model.checkpoint=model.pt          your own weights (a state dict, or a facebookresearch/dlrm file)
  python -m bench backend=fake_quant --cfg job       print the composed config: every key of that choice
  python -m bench.report DIR [--baseline DIR]        report and compare stored sweeps
  python -m bench.gate DIR                           re-run the gate on a stored report
  python -m bench dashboard REPORTS_DIR              a self-contained web page of the nightly history (trends, steps)
  python -m bench store check DIR                    check a record store: whole records, damage named by line
  python -m bench store repair DIR                   move a store's damaged lines aside (records.jsonl.damaged), keep every record
  python -m bench timing show|reset [--all]          the machine's timing caches: calibration, re-run log, kernel probe"""

FIRST_RUN = """\
The first plain run on a machine does two things once, then caches them: it calibrates the timing
setting (about a minute on an idle machine, longer when other work shares the cores) and trains the
default model (a few minutes on 2 busy cores). Later runs reuse both; +preset=tiny runs a job in seconds."""

OUTPUTS = """\
  One run: record.json in its Hydra run folder (outputs/<date>/<time>-<pid>/), and one line appended to
    <reports_dir>/records.jsonl (reports_dir=reports).
  A sweep: <reports_dir>/<sweep>/<timestamp>/ with report.md, results.csv, records.jsonl and plots;
    <reports_dir>/<sweep>/latest points to the sweep's newest run (latest-<overrides>: that variant's newest).
  The nightly sweep adds gate.md and gate.xml (JUnit) and keeps <reports_dir>/history.jsonl.
  Caches (trained models, eval scores, preprocessed data): cache_dir=.cache/bench."""


def help_text() -> str:
    defaults = default_choices()
    lines = [
        "python -m bench: measure what each quantization backend of a DLRM costs and buys (TorchRec + FBGEMM):",
        "throughput, latency, memory, and AUC against the fp32 model with confidence intervals; records and reports.",
        "",
        f"Usage: python -m bench [GROUP=OPTION ...] [KEY=VALUE ...] [+sweep={'|'.join(SWEEPS())}]",
        "",
        FIRST_RUN,
        "",
        "Main commands:",
        COMMANDS,
        "",
        "Groups (GROUP=OPTION; * the default):",
    ]
    for group in config_groups():
        options, families = _families(group, SWEEPS() if group == "sweep" else group_options(group))
        if group == "ps_case":  # the parameter-server sweep's cases on one line: the help stays within its screens
            lines.append(f"  {group_key(group)}=  {', '.join(options)}: the cases of +sweep=ps (conf/ps_case/, docs/backends.md)")
            continue
        if group == "zoo":  # the model families on one line, as the cases above
            lines.append(f"  {group_key(group)}=  {', '.join(options)}: the model families of +sweep=zoo (conf/zoo/, docs/backends.md)")
            continue
        width = max(len(o) for o in options) + 2
        lines.append(f"  {group_key(group)}=")
        for option in options:
            mark = "*" if defaults.get(group) == option else " "
            lines.append(f"   {mark}{option:<{width}}{describe(group, option)}")
        if families:  # the toolkits' backends on one line: the help stays within its screens
            lines.append(f"    {', '.join(families)}  the quantization toolkits' backends (docs/toolkits.md, +sweep=toolkits)")
    lines += ["", "Options (KEY=VALUE, with their defaults; a group's own keys: GROUP=OPTION --cfg job):"]
    for key, default, note in plain_options():
        lines.append(f"  {key}={default}" + (f"  ({note})" if note else ""))
    lines += [
        "  +backend.per_table={TABLE: TYPE}  per-table overrides (uint4 and the other TBE backends: int8/int4/...; fake_quant: bits)",
        "",
        "Metrics (bench/metrics.py, docs/metrics.md): name± has a 95% interval; (unit ↑) higher is better, (unit ↓) lower:",
        *metrics.describe(),
        "",
        "Outputs:",
        OUTPUTS,
        "",
        "Exit codes: 0 ok; 1 a gate rule failed or a job errored (skipped jobs are not errors); 2 bad input (an unknown",
        "key or option, a value out of range, a missing data file, a folder that cannot be written), one line before any",
        "work; 3 the harness itself failed, one line naming the stage; 130 interrupted (Ctrl-C): the running job left no",
        "record, re-run the same command with resume=true to finish. Hydra's own flags: python -m bench --hydra-help.",
    ]
    return "\n".join(lines)



def SWEEPS() -> list[str]:  # noqa: N802 - the sweeps of conf/sweep/, less the node a command composes
    return [s for s in group_options("sweep") if s != "recommend"]


# The config nodes `python -m bench recommend` adds (conf/sweep/recommend.yaml), each with its schema.
RECOMMEND_NODES = {"slo": schemas.SloConfig, "accuracy": schemas.AccuracyBudgetConfig, "memory": schemas.MemoryLimitConfig,
                   "recommend": schemas.RecommendConfig}


def recommend_help() -> str:
    """`python -m bench recommend --help`: what it answers, its options with their defaults, its outputs and exit codes."""
    lines = [
        "python -m bench recommend [KEY=VALUE ...]: for this model on this machine, the deployment to ship under a p99",
        "latency bound and an AUC budget: backend, batcher size and threads, with its max QPS under the bound (absolute and",
        "against fp32), its ΔAUC and model MB, the Pareto front it was picked from, and every rejected candidate with why.",
        "",
        "  python -m bench recommend slo.p99_ms=60 accuracy.max_auc_drop=0.001",
        "  python -m bench recommend slo.qps=2000 memory.max_model_mb=50 recommend.backends=[fp32,int8_tbe,uint4]",
        "",
        "A funnel, cheapest stage first: (1) ΔAUC from the cached eval scores, (2) model MB, (3) paired offline speed",
        "and a queue estimate of max QPS under the bound, (4) LoadGen Server runs of the best few beside fp32's.",
        "Model, workload, device and every other key of `python -m bench --help` apply as in a job.",
        "",
        "Options (KEY=VALUE, with their defaults):",
    ]
    for node, cls in RECOMMEND_NODES.items():
        notes = field_notes(cls)
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            lines.append(f"  {node}.{f.name}={'null' if default is None else default}" + (f"  ({notes[f.name]})" if notes.get(f.name) else ""))
    lines += [
        "  serve.KEY=VALUE  the Server searches of stage 4 (serve.max_search_s, serve.max_wait_ms, ...: docs/serving.md)",
        "",
        "Outputs: <reports_dir>/recommend/<timestamp>/ (recommend.md, recommend.json, front.png, jobs/), <reports_dir>/recommend/latest;",
        "  every job's record in <reports_dir>/records.jsonl: a second identical recommend reuses them.",
        "Exit codes: 0 a pick; 1 no candidate meets the constraints (the nearest miss and what it would need);",
        "  2 bad input, one line before any work; 130 interrupted (the same command resumes).",
    ]
    return "\n".join(lines)


def describe(group: str, option: str) -> str:
    if group in KINDS:
        return _plugin_line(group, option)
    return _yaml_line(CONF_DIR / group / f"{option}.yaml")


def _families(group: str, options: list[str]) -> tuple[list[str], dict[str, str]]:
    """The options to list one by one, and each toolkit's backends folded into one name (`onnxruntime_{fp32,w4}`)
    -> its toolkit, read from their `register(..., toolkit=...)` calls without importing them."""
    if group not in KINDS:
        return options, {}
    by_toolkit: dict[str, list[str]] = {}
    for option in options:
        toolkit = _registered_toolkit(group, option)
        if toolkit:
            by_toolkit.setdefault(toolkit, []).append(option)
    folded = {o for names in by_toolkit.values() for o in names}
    families = {}
    for toolkit, names in by_toolkit.items():
        prefix = f"{toolkit}_"
        if len(names) > 1 and all(n.startswith(prefix) for n in names):
            families[f"{prefix}{{{','.join(n.removeprefix(prefix) for n in names)}}}"] = toolkit
        else:  # one name, or names that share no `<toolkit>_` prefix (torch.ao's ao_embeddingbag): as they are
            families.update((n, toolkit) for n in names)
    return [o for o in options if o not in folded], families


def _registered_toolkit(kind: str, name: str) -> str | None:
    path = ROOT / PACKAGES[kind].replace(".", "/") / f"{name}.py"
    if not path.exists():
        return None
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "register":
            for keyword in node.keywords:
                if keyword.arg == "toolkit" and isinstance(keyword.value, ast.Constant):
                    return keyword.value.value
    return None


def _plugin_line(kind: str, name: str) -> str:
    """First sentence of the plug-in module's docstring, read without importing it."""
    path = ROOT / PACKAGES[kind].replace(".", "/") / f"{name}.py"
    if not path.exists():
        return ""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    paragraph = " ".join(doc.split("\n\n")[0].split())
    paragraph = re.sub(rf"^`{re.escape(name)}`:\s*", "", paragraph)
    return _first_sentence(paragraph)


def _yaml_line(path: Path) -> str:
    """The first comment of a YAML file (its `# @package` line skipped)."""
    comments = []
    for line in path.read_text().splitlines():
        if line.startswith("#") and "@package" not in line:
            comments.append(line.lstrip("# ").strip())
        elif comments:
            break
    return _first_sentence(" ".join(comments))


def _first_sentence(text: str) -> str:
    text = re.sub(r"^`[^`]*`:\s*", "", text)
    m = re.search(r"(?<![.])[.]\s", text)  # a full stop, not the ".." of a range
    return (text[: m.start()] if m else text).rstrip(".")


def plain_options() -> list[tuple[str, str, str]]:
    """(key, default, note) for the options that are not groups: top-level and timing.*."""
    out = []
    for cls, prefix in ((schemas.Config, ""), (schemas.TimingConfig, "timing.")):
        notes = field_notes(cls)
        for f in dataclasses.fields(cls):
            if f.name in config_groups() or f.name in ("timing", "sweep_name", "run_gate", "family", *RECOMMEND_NODES):
                continue
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            out.append((prefix + f.name, "null" if default is None else str(default).lower() if isinstance(default, bool) else str(default), notes.get(f.name, "")))
    return out


def field_notes(cls: type) -> dict[str, str]:
    """The comment on a dataclass field's line, else the comment block right above it."""
    source = inspect.getsource(cls)
    trailing: dict[int, str] = {}
    whole_line: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            text = tok.string.lstrip("# ").strip()
            (whole_line if tok.line.lstrip().startswith("#") else trailing)[tok.start[0]] = text
    notes = {}
    for node in ast.parse(source).body[0].body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            line = node.lineno
            above = []
            k = line - 1
            while k in whole_line:
                above.insert(0, whole_line[k])
                k -= 1
            notes[node.target.id] = trailing.get(line) or _first_sentence(" ".join(above))
    return notes
