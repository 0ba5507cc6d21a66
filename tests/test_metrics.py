"""The metric vocabulary: every metric declared once, its docs table equal to the declarations, and
the names it declares spelled nowhere else in the package."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import metrics
from bench.metrics import METRICS, THROUGHPUT, hi, lo, metric, with_interval
from tests.support.load_file import load_file

REPO = Path(__file__).resolve().parents[1]


def docs_table() -> str:
    """docs/metrics.md as the site shows it: its marker replaced by docs/hooks.py's table."""
    hooks = load_file("docs_hooks", REPO / "docs" / "hooks.py")
    page = hooks.on_page_markdown((REPO / "docs" / "metrics.md").read_text(), None, None, None)
    assert hooks.MARKER not in page
    return page[page.index("| metric | unit |"):].split("\n\n")[0]


def test_the_docs_table_says_what_the_declarations_say():
    rows = docs_table().splitlines()[2:]
    assert len(rows) == len(METRICS)
    for row, m in zip(rows, METRICS.values()):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[0].startswith(f"`{m.name}`") and cells[1:4] == [m.unit, m.better or "—", m.stage] and cells[4] == m.description


def test_a_metric_is_declared_once_and_its_interval_has_two_bounds():
    with pytest.raises(ValueError, match="declared twice"):
        metric(THROUGHPUT, "", "", "", "", "")
    assert with_interval(THROUGHPUT) == (THROUGHPUT, lo(THROUGHPUT), hi(THROUGHPUT)) == ("throughput", "throughput_lo", "throughput_hi")
    assert all(m.better in (metrics.HIGHER, metrics.LOWER, metrics.NEITHER) for m in METRICS.values())


@pytest.mark.parametrize("name", ["throughput", "auc_delta", "embedding_bytes", "speedup", "auc"])
def test_a_declared_name_is_spelled_only_in_the_vocabulary(name):
    spelled = [p.relative_to(REPO).as_posix() for p in (REPO / "bench").rglob("*.py")
               if re.search(rf"[\"']{name}[\"']|\b{name}=", p.read_text())]  # fmt: skip
    assert spelled == ["bench/metrics.py"]


def test_formatting_follows_the_declaration():
    assert METRICS["speedup"].format(1.4234) == "1.42x"
    assert METRICS["throughput"].format(3450.2) == "3,450 samples/s"
    assert METRICS["auc"].format(None) == ""


READERS = ("bench/results", "bench/report", "bench/gate")
METRICS_READ = re.compile(r"(?:\bm|\bmetrics|\w+\.metrics|\(\w+\.metrics or \{\}\))(?:\.get\(|\[)\"([a-z0-9_]+)\"")


def test_every_record_key_the_readers_spell_is_declared():
    """The results, the report and the gate read a record's metrics only by keys declared in bench/metrics.py:
    a figure of the vocabulary, or one of RECORD_KEYS beside it."""
    read = {key: path for folder in READERS for path in sorted((REPO / folder).glob("*.py"))
            for key in METRICS_READ.findall(path.read_text(encoding="utf-8"))}
    assert len(read) > 40  # the pattern does find the readers' keys
    undeclared = {k: str(p.relative_to(REPO)) for k, p in read.items() if k not in METRICS and k not in metrics.RECORD_KEYS}
    assert not undeclared, f"declare these in bench/metrics.py RECORD_KEYS: {undeclared}"
    assert not set(metrics.RECORD_KEYS) & set(METRICS)  # a key is a figure or a structure, not both
