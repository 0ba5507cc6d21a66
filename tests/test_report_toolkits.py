"""The toolkit ranking (bench.report.toolkits): first in the report once a toolkit backend ran; per batch size,
the rows whose ΔAUC is inside the margin ranked by speedup, the rest named with the reason."""

from __future__ import annotations

import copy
from pathlib import Path

from bench.report import write_report
from bench.store import read_records

FIXTURES = Path(__file__).parent / "fixtures" / "records"


def test_no_toolkit_row_no_ranking(tmp_path):
    md = write_report(read_records(FIXTURES / "sweep_a" / "records.jsonl"), tmp_path).read_text()
    assert "## Ranking" not in md


def test_the_ranking_comes_first_fastest_inside_the_margin(tmp_path):
    records = copy.deepcopy(read_records(FIXTURES / "sweep_a" / "records.jsonl"))
    for r in records:  # fp32_tbe stands in for a toolkit backend
        if r.backend == "fp32_tbe":
            r.metrics.update(toolkit="onnxruntime", timed_inputs="dense id matrices, built before timing")
    md = write_report(records, tmp_path).read_text()
    assert md.index("## Ranking") < md.index("How to read this")
    assert "its timed calls took dense id matrices, built before timing" in md
    section = md[md.index("### synthetic on cpu, batch 256"):md.index("### synthetic on cpu, batch 2048")]
    rows = [line for line in section.splitlines() if line.startswith("| 1") or line.startswith("| 2")]
    # fp32_tbe (equivalent, 1.28x) before fp32; fake_quant and int8_tbe inconclusive, uint4 a loss: not ranked
    assert rows[0].startswith("| 1 | fp32_tbe | onnxruntime | ") and rows[1].startswith("| 2 | fp32 | harness | 0 (reference)")
    assert "| 3 |" not in section
    assert "Not ranked: `fake_quant` (ΔAUC" in section and "`uint4` (ΔAUC −0.0019 [" in section and "loss against a margin of 0.0005" in section
