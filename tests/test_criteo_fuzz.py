"""Fuzz the Criteo text reader: whatever the lines hold, it never crashes, every line is either a
row or a counted malformed line, and every row it returns matches a plain Python parse."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
import pytest

from bench.workloads.criteo.text import read_all

DENSE = st.one_of(st.just(""), st.integers(-(10**6), 10**9).map(str))
HEX_ID = st.one_of(st.just(""), st.integers(0, 2**32 - 1).map(lambda v: format(v, "08x")))
VALID_ROW = st.tuples(st.sampled_from(["0", "1"]), st.lists(DENSE, min_size=13, max_size=13), st.lists(HEX_ID, min_size=26, max_size=26)).map(
    lambda t: "\t".join([t[0], *t[1], *t[2]])
)
# Junk a field can hold: floats, words, non-hex ids, overlong numbers, stray separators, bytes.
JUNK = st.one_of(
    st.text(alphabet="0123456789abcdefxyzXYZ.-+ ,\t\"'", max_size=12),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(10**18, 10**30).map(str),
)


@st.composite
def corrupted_row(draw):
    fields = draw(VALID_ROW).split("\t")
    kind = draw(st.sampled_from(["replace", "drop", "add", "raw"]))
    if kind == "replace":
        fields[draw(st.integers(0, len(fields) - 1))] = draw(JUNK)
    elif kind == "drop":
        del fields[draw(st.integers(0, len(fields) - 1))]
    elif kind == "add":
        fields.insert(draw(st.integers(0, len(fields))), draw(JUNK))
    else:
        return draw(st.text(alphabet=st.characters(blacklist_characters="\n\r", max_codepoint=0x2FF), max_size=60))
    return "\t".join(fields)


def reference_parse(line: str):
    """The row a correct reader returns for a line, or None for a malformed line."""
    fields = line.split("\t")
    if len(fields) != 40 or fields[0] not in ("0", "1"):
        return None
    dense, ids = fields[1:14], fields[14:]
    if not all(re.fullmatch(r"-?\d{1,18}(\.0)?", d) or d == "" for d in dense):
        return None
    if not all(re.fullmatch(r"[0-9a-fA-F]{1,8}", c) or c == "" for c in ids):
        return None
    return int(fields[0]), [int(float(d)) if d else 0 for d in dense], [int(c, 16) if c else 0 for c in ids]


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=VALID_ROW, rest=st.lists(st.one_of(VALID_ROW, corrupted_row()), max_size=25))
def test_reader_never_crashes_and_accounts_for_every_line(tmp_path, first, rest):
    lines = [first, *rest]
    path = tmp_path / "fuzz.tsv"
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    dense, sparse, labels, malformed = read_all(path, max_examples=5)
    assert len(labels) + malformed.count == len(lines)
    expected = [r for r in map(reference_parse, lines) if r is not None]
    got = [(int(l), d.tolist(), s.tolist()) for l, d, s in zip(labels, dense, sparse)]
    assert got == [(l, d, s) for l, d, s in expected]
    assert len(malformed.examples) == min(5, malformed.count)
    assert all(1 <= e["line"] <= len(lines) for e in malformed.examples)
