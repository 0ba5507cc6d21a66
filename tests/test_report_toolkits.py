"""The toolkit ranking (bench.report.toolkits): first in the report once a toolkit backend ran; per batch size,
the rows whose ΔAUC is inside the margin ranked by speedup, the rest named with the reason."""

from __future__ import annotations

import copy
import re
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


def test_each_quantized_row_is_split_into_its_runtime_and_its_quantization(tmp_path):
    records = copy.deepcopy(read_records(FIXTURES / "sweep_a" / "records.jsonl"))
    for r in records:  # fp32_tbe stands in for a toolkit's fp32 runtime row, int8_tbe for its quantized row
        if r.backend == "fp32_tbe":
            r.metrics.update(toolkit="onnxruntime")
        if r.backend == "int8_tbe":
            r.metrics.update(toolkit="onnxruntime", runtime_reference="fp32_tbe")
    md = write_report(records, tmp_path).read_text()
    section = md[md.index("### synthetic on cpu, batch 256"):md.index("### synthetic on cpu, batch 2048")]
    assert "| backend | its fp32 runtime row | runtime's fp32 gain | quantization's part | the row's speedup |" in section
    row = re.search(r"\| int8_tbe \| `fp32_tbe` \| ([0-9.]+)× \| ([0-9.]+)× \| ([0-9.]+)× \|", section)
    fp32, part, total = map(float, row.groups())
    assert fp32 != total and abs(fp32 * part - total) <= 0.01 * total + 0.005  # the product of the two parts
    ranked = re.search(r"\| fp32_tbe \| onnxruntime \| [^|]+ \| [^|]+ \| ([0-9.]+)×", section)
    assert float(ranked.group(1)) == fp32  # the runtime's gain is its fp32 row's speedup in the ranking
