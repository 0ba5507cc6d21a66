"""Read a pytest-benchmark JSON file (`pytest benchmarks/suites/ --benchmark-json=F`) into a markdown report.

    python -m bench.report F.json     # writes benchmarks.md next to F (or into --out DIR)

One table per benchmark group (the suites group the cases that compare: the weight types of one
table size and pooling, the backends of one batch size): name, params, median and IQR per call,
pytest-benchmark's ops/s (1 / mean), rounds, and the headline `extra_info` the suites record
(batch size, effective GB/s of the embedding rows read, samples/s, GFLOP/s, int8 error). The header
names the stack the suites put in `machine_info` (torch, torchrec, fbgemm_gpu, threads, fingerprint)
and the commit. Files saved by `--benchmark-autosave` / `--benchmark-save` have the same format.

Like the rest of `bench.report`, this only reads what was measured; bad input is a one-line UserError.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable

from bench.errors import UserError
from bench.io import write_text_atomic
from bench.metrics import EMBEDDING_BYTES, SAMPLES_PER_S
from bench.report.fmt import DASH, count, markdown_table, megabytes, missing

OUTPUT = "benchmarks.md"


def _fixed(digits: int) -> Callable[[Any], str]:
    return lambda x: DASH if missing(x) else f"{float(x):,.{digits}f}"


def _sci(x: Any) -> str:
    return DASH if missing(x) else f"{float(x):.2e}"


# extra_info key -> (column header, formatter); shown when any row of a group has it.
EXTRA_COLUMNS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "batch_size": ("batch", count),
    "gbps": ("GB/s", _fixed(2)),
    SAMPLES_PER_S: ("samples/s", count),
    "gflops": ("GFLOP/s", _fixed(1)),
    "rel_error_vs_fp32": ("rel. error vs fp32", _sci),
    EMBEDDING_BYTES: ("embeddings MB", megabytes),
}
MACHINE_FIELDS = ("torch", "torchrec", "fbgemm_gpu", "cpu", "threads", "gpu", "fingerprint")
UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))


def is_benchmark_json(path: Path) -> bool:
    return Path(path).suffix == ".json"


def load_benchmark_json(path: Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: no such file (give the file written by --benchmark-json)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list) or "machine_info" not in data:
        raise UserError(f"{path}: not a pytest-benchmark file (no 'benchmarks' list and 'machine_info'): write one with --benchmark-json")
    if not data["benchmarks"]:
        raise UserError(f"{path}: holds no benchmarks (was the run made with --benchmark-disable or --benchmark-skip?)")
    return data


def benchmark_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat row per benchmark, in the file's order; times in seconds; derived rates filled in."""
    rows = []
    for b in data["benchmarks"]:
        stats = b.get("stats") or {}
        extra = dict(b.get("extra_info") or {})
        median = stats.get("median")
        if median:  # rates the suites derive from per-call amounts, for files written without them
            if "gbps" not in extra and "bytes_read" in extra:
                extra["gbps"] = extra["bytes_read"] / median / 1e9
            if SAMPLES_PER_S not in extra and "batch_size" in extra:
                extra[SAMPLES_PER_S] = extra["batch_size"] / median
        rows.append(
            {
                "group": b.get("group") or "(no group)",
                "name": str(b.get("name", "")).split("[", 1)[0],
                "fullname": b.get("fullname", b.get("name", "")),
                "params": b.get("params") or {},
                "median": median,
                "iqr": stats.get("iqr"),
                "ops": stats.get("ops"),
                "rounds": stats.get("rounds"),
                "extra_info": extra,
            }
        )
    return rows


def _unit(seconds: Iterable[float | None]) -> tuple[float, str]:
    known = [s for s in seconds if not missing(s) and s > 0]
    smallest = min(known) if known else 1.0
    return next(((scale, name) for scale, name in UNITS if smallest >= scale), UNITS[-1])


def _params(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items()) or DASH


def group_table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of one group's rows, in one time unit."""
    scale, unit = _unit(r["median"] for r in rows)
    extras = [k for k in EXTRA_COLUMNS if any(k in r["extra_info"] for r in rows)]
    headers = ["name", "params", f"median ({unit})", f"IQR ({unit})", "ops/s", "rounds", *(EXTRA_COLUMNS[k][0] for k in extras)]
    time = _fixed(3)
    body = [
        [
            r["name"],
            _params(r["params"]),
            DASH if missing(r["median"]) else time(r["median"] / scale),
            DASH if missing(r["iqr"]) else time(r["iqr"] / scale),
            _fixed(1)(r["ops"]),
            DASH if missing(r["rounds"]) else int(r["rounds"]),
            *(EXTRA_COLUMNS[k][1](r["extra_info"].get(k)) for k in extras),
        ]
        for r in rows
    ]
    return markdown_table(headers, body, "ll" + "r" * (len(headers) - 2))


def _header(data: dict[str, Any]) -> list[str]:
    machine = data.get("machine_info") or {}
    stack = machine.get("bench") or {k: machine.get(k) for k in ("torch", "torchrec", "fbgemm_gpu")}
    stack_text = ", ".join(f"{k} {stack[k]}" for k in MACHINE_FIELDS if not missing(stack.get(k)))
    commit = data.get("commit_info") or {}
    commit_text = DASH
    if commit.get("id"):
        commit_text = f"`{str(commit['id'])[:12]}`" + (f" ({commit['branch']})" if commit.get("branch") else "")
        commit_text += ", dirty tree" if commit.get("dirty") else ""
    return [
        f"- Run: {data.get('datetime', DASH)}, pytest-benchmark {data.get('version', DASH)}",
        f"- Commit: {commit_text}",
        f"- Machine: {stack_text or 'no stack recorded (run the suites with benchmarks/suites/conftest.py)'}",
    ]


def render_benchmarks_markdown(data: dict[str, Any], title: str = "Benchmarks") -> str:
    rows = benchmark_rows(data)
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    parts = [
        f"# {title}",
        "\n".join(_header(data)),
        "Median and IQR are per call; ops/s is pytest-benchmark's 1 / mean. GB/s is the bytes of embedding rows "
        "read (lookups x stored row bytes) per second at the median; samples/s is batch size / median; a sample is "
        "one row (user-item pair).",
    ]
    for group, members in groups.items():
        parts += [f"## {group}", group_table(members)]
    return "\n\n".join(parts) + "\n"


def write_benchmarks_md(path: Path, out_dir: Path | None = None, title: str | None = None) -> Path:
    """Render `path` (a pytest-benchmark JSON) into `out_dir/benchmarks.md` (default: next to `path`)."""
    data = load_benchmark_json(path)
    target = (Path(out_dir) if out_dir is not None else Path(path).parent) / OUTPUT
    write_text_atomic(target, render_benchmarks_markdown(data, title or f"Benchmarks: {Path(path).name}"))
    return target


def render_cli(paths: list[Path], out: Path | None, title: str | None, baseline: Path | None) -> Path:
    """`python -m bench.report F.json [--out DIR] [--title T]`: one JSON file, no --baseline."""
    if len(paths) != 1 or not all(is_benchmark_json(p) for p in paths):
        raise UserError("give one pytest-benchmark JSON file, alone (sweep folders and JSON files do not mix)")
    if baseline is not None:
        raise UserError("--baseline compares sweeps; to compare benchmark runs use pytest's --benchmark-compare")
    return write_benchmarks_md(paths[0], out, title)
