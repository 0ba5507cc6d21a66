"""Gate output: `gate.md` for people (and the CI summary page), `gate.xml` (JUnit) for CI tools."""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from bench.gate.evaluate import JOB, GateResult, Verdict
from bench.gate.rules import FAIL, INCONCLUSIVE, PASS, RULES, SKIPPED
from bench.io import write_text_atomic

_MD_REASON_CHARS = 300
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_MARK = {FAIL: "❌ fail", INCONCLUSIVE: "❔ inconclusive", SKIPPED: "⏭ skipped", PASS: "✅ pass"}


def verdict_line(result: GateResult) -> str:
    c = result.counts
    tally = f"{c[FAIL]} failed, {c[INCONCLUSIVE]} inconclusive, {c[SKIPPED]} skipped, {c[PASS]} passed of {len(result.verdicts)} checks"
    if result.passed:
        return f"**Gate: PASS** ({tally})"
    failing = list(dict.fromkeys(f"{v.where}: {v.rule}" for v in result.failures))  # distinct, in order
    named = "; ".join(failing[:10]) + ("; ..." if len(failing) > 10 else "")
    return f"**Gate: FAIL** ({tally}). Failing: {named}"


def _fmt(v: Verdict, x: float | None) -> str:
    if x is None:
        return ""
    rule = RULES.get(v.rule)
    return rule.fmt(x) if rule else f"{x:g}"


def _md_cell(text: str) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= _MD_REASON_CHARS else text[: _MD_REASON_CHARS - 3] + "..."


def render_markdown(result: GateResult, preface: str = "") -> str:
    """The verdict line, then `preface` (if any), then one table row per verdict."""
    mode = "inconclusive checks fail" if result.inconclusive_fails else "inconclusive checks pass (a CI straddles a threshold)"
    lines = [
        "# Accuracy/speed gate",
        "",
        verdict_line(result),
        "",
        *([preface, ""] if preface else []),
        f"Mode: {mode}. Intervals are 95% (paired over the same eval samples for AUC, NE and accuracy).",
        "",
    ]
    serving = any(v.scenario for v in result.verdicts)  # serving rows add their scenario column
    lines += [
        "| verdict | backend |" + (" scenario |" if serving else "") + " workload | device | batch | rule | threshold | value | interval | reason |",
        "| --- | --- |" + (" --- |" if serving else "") + " --- | --- | ---: | --- | ---: | ---: | --- | --- |",
    ]
    for v in result.sorted():
        interval = f"{_fmt(v, v.interval[0])} .. {_fmt(v, v.interval[1])}" if v.interval else ""
        cells = [_MARK[v.verdict], v.named, *([v.scenario or ""] if serving else []), v.workload, v.device, str(v.batch_size),
                 v.rule, _fmt(v, v.threshold), _fmt(v, v.value), interval, v.reason]
        lines.append("| " + " | ".join(_md_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _xml_text(text: str) -> str:
    return _XML_BAD.sub("?", str(text))


def render_junit(result: GateResult) -> bytes:
    """One testsuite per backend, one testcase per (row, rule)."""
    root = ET.Element("testsuites", name="bench gate")
    suites: dict[str, ET.Element] = {}
    for v in result.sorted():
        suite = suites.get(v.named)
        if suite is None:
            suite = suites[v.named] = ET.SubElement(root, "testsuite", name=f"gate.{v.named}")
        serving = f".{v.scenario}" if v.scenario else ""
        case = ET.SubElement(suite, "testcase", classname=_xml_text(f"gate.{v.named}{serving}.{v.workload}.{v.device}.bs{v.batch_size}"),
                             name=v.rule, time="0")
        message = _xml_text(v.reason)
        if v.verdict == FAIL:
            kind = "job-error" if v.rule == JOB else "threshold"
            ET.SubElement(case, "failure", message=message, type=kind).text = _xml_text(f"{v.where}: {v.reason}")
        elif v.verdict == SKIPPED:
            ET.SubElement(case, "skipped", message=message)
        elif v.verdict == INCONCLUSIVE:
            ET.SubElement(case, "system-out").text = f"inconclusive: {message}"
    for suite in [*suites.values(), root]:
        c = Counter()
        for case in suite.iter("testcase"):
            c["tests"] += 1
            c["failures"] += case.find("failure") is not None
            c["skipped"] += case.find("skipped") is not None
        for k in ("tests", "failures", "skipped"):
            suite.set(k, str(c[k]))
        suite.set("errors", "0")
        suite.set("time", "0")
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def write_outputs(result: GateResult, out_dir: Path, stem: str = "gate", md: str | None = None) -> tuple[Path, Path]:
    """Write `<stem>.md` (`md`, default the rendered verdict) and `<stem>.xml`; append the
    markdown to $GITHUB_STEP_SUMMARY when that is set."""
    out_dir = Path(out_dir)
    md = render_markdown(result) if md is None else md
    write_text_atomic(out_dir / f"{stem}.md", md)
    write_text_atomic(out_dir / f"{stem}.xml", render_junit(result))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(md + "\n")
    return out_dir / f"{stem}.md", out_dir / f"{stem}.xml"
