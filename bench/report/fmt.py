"""Number formatting for reading, and a markdown table renderer (no tabulate). What counts as missing
or unreadable is the results' rule (`bench.results.readable`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from bench.results.readable import missing, too_short, unreadable

MINUS = "\u2212"
DASH = "\u2014"
MB = 1e6  # reports use decimal megabytes: 1 MB = 10^6 bytes


def signed(x: float, digits: int = 4) -> str:
    """+0.0012, −0.0003 (a true minus sign), — when missing; a non-zero value that would round to
    zero at `digits` decimals is shown in scientific notation (−6.2e-07), so a printed 0.0000 is
    exactly zero and never carries a verdict."""
    if missing(x):
        return DASH
    x = float(x)
    text = f"{x:+.{digits}f}"
    if float(text) == 0:
        text = f"{x:+.1e}" if x != 0 else f"{0:.{digits}f}"
    return text.replace("-", MINUS)


def delta_ci(delta: float, lo: float, hi: float, digits: int = 4) -> str:
    """+0.0012 [−0.0003, +0.0027]; the interval is left out when missing."""
    if missing(delta):
        return DASH
    if missing(lo) or missing(hi):
        return signed(delta, digits)
    return f"{signed(delta, digits)} [{signed(lo, digits)}, {signed(hi, digits)}]"


def ratio_ci(ratio: float, lo: float, hi: float, calls: Any = None) -> str:
    """1.84× [1.80, 1.88]; "too short to judge (N calls)" for an interval too wide to read (`unreadable`)."""
    if missing(ratio):
        return DASH
    if unreadable(ratio, lo, hi):
        return too_short(calls)
    if missing(lo) or missing(hi):
        return f"{ratio:.2f}×"
    return f"{ratio:.2f}× [{lo:.2f}, {hi:.2f}]"


def megabytes(n: float) -> str:
    if missing(n):
        return DASH
    mb = float(n) / MB
    if mb >= 100:
        return f"{mb:,.0f}"
    if mb >= 10:
        return f"{mb:.1f}"
    if mb >= 1:
        return f"{mb:.2f}"
    return f"{mb:.3g}"


def number(x: float, digits: int = 4) -> str:
    """0.8062; a non-zero value that would print as 0.0000 in scientific notation instead."""
    if missing(x):
        return DASH
    x = float(x)
    text = f"{x:.{digits}f}"
    return f"{x:.1e}" if x != 0 and float(text) == 0 else text


def count(x: float) -> str:
    """123,456 (rounded to a whole number)."""
    return DASH if missing(x) else f"{float(x):,.0f}"


def ms(x: float) -> str:
    if missing(x):
        return DASH
    x = float(x)
    return f"{x:.3f}" if x < 1 else f"{x:.2f}" if x < 100 else f"{x:,.0f}"


def p_value(p: float) -> str:
    if missing(p):
        return DASH
    return "< 0.0001" if p < 1e-4 else f"{p:.2g}" if p < 0.01 else f"{p:.2f}"


def first_line(text: Any, limit: int = 200) -> str:
    if missing(text) or text == "":
        return ""
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "\u2026"


def word(x: Any) -> str:
    """A text cell: — when absent."""
    return DASH if x is None or (isinstance(x, float) and math.isnan(x)) else cell(x)


def cell(x: Any) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None) -> str:
    """GitHub markdown table; `align` is one letter per column, l or r (default: l)."""
    align = align or "l" * len(headers)
    rule = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


@dataclass(frozen=True)
class Column:
    """One column of a markdown table: its name, its unit (the header reads `name unit`) and its
    alignment (l or r)."""

    name: str
    unit: str | None = None
    align: str = "l"

    @property
    def header(self) -> str:
        return f"{self.name} {self.unit}" if self.unit else self.name


def table(columns: Sequence[Column], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table from column specs: headers and alignment from each `Column`."""
    return markdown_table([c.header for c in columns], rows, "".join(c.align for c in columns))
