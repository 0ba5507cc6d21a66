"""The zoo matrix in report.md (bench.report.zoo) from stored records of two families: each family keeps its own
rows (the results' `family` axis), and each cell says what its pair did."""

from __future__ import annotations

import sys
from pathlib import Path

from bench.report import write_report
from bench.report.zoo import console_lines
from bench.results.table import results_table

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "gate"))
from gate_frames import record, row  # noqa: E402

GATE = {"default_rules": {"max_auc_drop": 0.001}, "rules": {"int2_tbe": {"max_auc_drop": 0.008}}}


def pair(family: str, backend: str, **kw) -> dict:
    r = record(row(backend, batch_size=1024, **kw))
    r.update(record_id=f"{family}-{backend}", config_hash=f"h-{family}-{backend}",
             config={"family": family, "gate": GATE, "backend": {"name": backend}})
    return r


RECORDS = [
    pair("dlrm", "fp32"), pair("dlrm", "int8_tbe", delta=-0.0002, half=0.0002), pair("dlrm", "int2_tbe", delta=-0.004, half=0.001),
    pair("dlrm", "uint4", delta=-0.0012, half=0.001),  # its interval holds the 0.001 margin: neither inside nor past
    pair("dlrm", "quark_w8a8", status="skipped", error="backend 'quark_w8a8' needs AMD Quark, not installed here"),
    pair("hstu", "fp32", delta=-0.1), pair("hstu", "int8_tbe", delta=-0.003, half=0.001),
    pair("hstu", "openvino_int8", status="skipped", error="the exported twin takes dense id matrices\nsecond line"),
    pair("hstu", "quark_w8a8", status="error", error="RuntimeError: boom"),
]
# by the one accuracy rule (bench.stats.budget_verdict) on each pair's ΔAUC interval against its margin
COUNTS = ("9 pairs: 4 ok inside the gate's margin, 1 ok but past it, 1 ok but straddling it (the interval holds the margin: "
          "more eval rows would decide), 2 skipped with a reason, 1 error.")


def test_the_matrix_has_a_column_per_family_and_a_cell_per_pair(tmp_path):
    report = write_report(RECORDS, tmp_path).read_text(encoding="utf-8")
    matrix = report[report.index("## The zoo"):]
    assert COUNTS in matrix
    assert "| backend | dlrm | hstu |" in matrix
    assert "| `fp32` | AUC 0.8031 | AUC 0.7031 |" in matrix  # each family's own reference
    assert "| `int8_tbe` | −0.0002 | **−0.0030** past 0.0010 |" in matrix  # the backend's own margin; the whole interval past
    assert "| `uint4` | −0.0012 straddles 0.0010 [−0.0022, −0.0002] | — |" in matrix
    assert "| `int2_tbe` | −0.0040 | — |" in matrix  # int2_tbe's rule allows 0.008; hstu ran no such pair
    assert "| `openvino_int8` | — | skipped (1) |" in matrix and "| `quark_w8a8` | skipped (2) | **error** (3) |" in matrix
    assert "1. the exported twin takes dense id matrices\n" in matrix and "second line" not in matrix  # its first line
    assert "2. backend 'quark_w8a8' needs AMD Quark, not installed here" in matrix
    assert "3. RuntimeError: boom" in matrix


def test_families_keep_their_own_rows_and_the_console_counts_them():
    df = results_table(RECORDS)
    assert len(df) == len(RECORDS) and sorted(set(df["family"])) == ["dlrm", "hstu"]
    assert console_lines(df) == [f"zoo matrix (cpu, batch 1024): {COUNTS}"]


def test_a_report_without_families_has_no_matrix(tmp_path):
    plain = [record(row("fp32", batch_size=1024)), record(row("int8_tbe", batch_size=1024, delta=-0.0002))]
    assert "## The zoo" not in write_report(plain, tmp_path).read_text(encoding="utf-8")
    assert console_lines(results_table(plain)) == []
