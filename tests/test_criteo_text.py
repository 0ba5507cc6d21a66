"""The Criteo text reader over every real sample file (read in place, never copied) and over
generated edge cases: malformed lines, .gz, CRLF, CSV variants."""

from __future__ import annotations

import gzip
import random
import re

import numpy as np
import pytest

from bench.errors import UserError
from bench.workloads.criteo.text import (
    Malformed,
    read_all,
    read_chunks,
    sniff,
    sniff_file,
)
from tests.support.criteo_files import checksums, criteo_data_dir, sha256
from tests.support.criteo_rows import format_rows, random_rows

DATA = criteo_data_dir()
SUMS = checksums(DATA)
needs_data = pytest.mark.skipif(not SUMS, reason=f"real Criteo samples not found at {DATA} (set BENCH_CRITEO_DIR)")

# file -> (rows, has_label, has_header, has_id, separator)
EXPECTED = {
    "criteo_kaggle_train_head10k.tsv": (10000, True, False, False, b"\t"),
    "criteo_kaggle_train_extra.tsv": (15136, True, False, False, b"\t"),
    "criteo_kaggle_test_head10k_unlabeled.tsv": (10000, False, False, False, b"\t"),
    "criteo_1tb_day0_head1000.tsv": (1000, True, False, False, b"\t"),
    "originals/cafpereira_train_sample_4K.csv": (4584, True, True, True, b","),
    "originals/deepctr_criteo_sample.txt": (200, True, True, False, b","),
    "originals/fuxictr_criteo_x4_test_sample.csv": (3999, True, True, False, b","),
    "originals/fuxictr_criteo_x4_valid_sample.csv": (3999, True, True, False, b","),
    "originals/paddlerec_part0.txt": (100, True, False, False, b"\t"),
    "originals/torchrechub_criteo_sample.csv": (115, True, True, False, b","),
    "originals/ycjuan_tr_r100000.csv": (403, True, True, True, b","),
    "originals/ycjuan_tr_rx_100.csv": (100, True, True, True, b","),
    "originals/ycjuan_tr_rx_1000.csv": (999, True, True, True, b","),
    "originals/ycjuan_tr_rx_2000.csv": (1999, True, True, True, b","),
    "originals/ycjuan_va_rx_100.csv": (100, True, True, True, b","),
    "originals/ycjuan_va_rx_1000.csv": (999, True, True, True, b","),
    "originals/ycjuan_va_rx_2000.csv": (1999, True, True, True, b","),
}


@needs_data
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_reads_every_sample_file(name):
    path = DATA / name
    assert sha256(path) == SUMS[name], f"{name} differs from SHA256SUMS"
    rows, labeled, header, has_id, sep = EXPECTED[name]
    fmt = sniff_file(path)
    assert (fmt.has_label, fmt.has_header, fmt.has_id, fmt.sep) == (labeled, header, has_id, sep)
    dense, sparse, labels, bad = read_all(path)
    assert bad.count == 0, bad.summary(name)
    assert dense.shape == (rows, 13) and sparse.shape == (rows, 26) and labels.shape == (rows,)
    assert set(np.unique(labels)) <= ({0, 1} if labeled else {-1})
    # cross-check a few rows against a plain Python parse of the same lines
    lines = path.read_bytes().split(b"\n")[int(header) :][:50]
    off = int(has_id) + int(labeled)
    for i, line in enumerate(lines):
        f = line.split(sep)
        assert dense[i].tolist() == [int(float(x)) if x else 0 for x in f[off : off + 13]]
        assert sparse[i].tolist() == [int(x, 16) if x else 0 for x in f[off + 13 :]]


@needs_data
def test_every_file_in_originals_is_covered():
    names = {f"originals/{p.name}" for p in (DATA / "originals").iterdir()}
    assert names <= set(EXPECTED)


def _lines(n, seed=0, sep="\t"):
    return format_rows(*random_rows(np.random.default_rng(seed), n), sep=sep).split(b"\n")[:-1]


def _replace_field(line, k, value):
    fields = line.split(b"\t")
    fields[k] = value
    return b"\t".join(fields)


def test_malformed_lines_are_counted_reported_and_skipped(tmp_path):
    good = _lines(20)
    bad = {
        3: good[3] + b"\textra",  # 41 fields
        6: b"0\t1\t2",  # 3 fields
        9: _replace_field(good[9], 2, b"1.5"),
        12: _replace_field(good[12], 19, b"zzzzzzzz"),
        15: b"2" + good[15][1:],  # label 2
        17: b"",  # blank line
    }
    lines = [bad.get(i, line) for i, line in enumerate(good)]
    path = tmp_path / "mixed.tsv"
    path.write_bytes(b"\n".join(lines) + b"\n")
    dense, sparse, labels, m = read_all(path, max_examples=3)
    assert dense.shape[0] == 20 - len(bad) and m.count == len(bad)
    assert [e["line"] for e in m.examples] == [4, 7, 10]
    reasons = m.by_reason
    assert reasons["wrong field count (41, expected 40)"] == 1
    assert reasons["wrong field count (3, expected 40)"] == 1
    assert reasons["wrong field count (1, expected 40)"] == 1
    assert reasons["non-integer dense value (I2)"] == 1
    assert reasons["non-hex categorical id (C6)"] == 1
    assert reasons["label is not 0 or 1"] == 1
    assert "line 4" in m.summary("mixed.tsv")


def test_gz_crlf_missing_final_newline_and_chunk_boundaries(tmp_path):
    lines = _lines(500, seed=1)
    plain = tmp_path / "day_0"
    plain.write_bytes(b"\n".join(lines) + b"\n")
    ref = read_all(plain)
    gz = tmp_path / "day_0.gz"
    with gzip.open(gz, "wb") as f:
        f.write(b"\r\n".join(lines))  # CRLF, no final newline
    got = []
    m = Malformed()
    for chunk in read_chunks(gz, m, chunk_bytes=4096):  # many chunks, lines cut across reads
        got.append(chunk)
    assert m.count == 0
    assert np.array_equal(np.concatenate([c.dense for c in got]), ref[0])
    assert np.array_equal(np.concatenate([c.sparse for c in got]), ref[1])
    assert got[-1].lines == 500


def test_csv_variants_pandas_floats_header_and_id(tmp_path):
    lines = _lines(30, seed=2, sep=",")
    header = b"Id,Label," + b",".join(b"I%d" % i for i in range(1, 14)) + b"," + b",".join(b"C%d" % i for i in range(1, 27))
    floats = [b"%d," % (10_000_000 + i) + b",".join(f + b".0" if 0 < k < 14 and f else f for k, f in enumerate(line.split(b","))) for i, line in enumerate(lines)]
    path = tmp_path / "kaggle.csv"
    path.write_bytes(header + b"\n" + b"\n".join(floats) + b"\n")
    fmt = sniff_file(path)
    assert fmt.has_header and fmt.has_id and fmt.has_label and fmt.sep == b","
    plain = tmp_path / "plain.csv"
    plain.write_bytes(b"\n".join(lines) + b"\n")
    a, b = read_all(path), read_all(plain)
    assert a[3].count == 0 and np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and np.array_equal(a[2], b[2])


def test_lines_that_are_not_utf8_are_counted_as_their_own_kind(tmp_path):
    lines = _lines(40, seed=3)
    broken = {5, 17, 30}
    for i in broken:  # a Latin-1 byte inside a field, as a file re-encoded by some tool would hold
        f = lines[i].split(b"\t")
        f[20] = f[20][:3] + b"\xe9" + f[20][3:]
        lines[i] = b"\t".join(f)
    lines[8] = lines[8].replace(b"\t", b"\tcaf\xc3\xa9", 1)  # valid UTF-8, still not a number: its field's reason
    path = tmp_path / "mixed.tsv"
    path.write_bytes(b"\n".join(lines) + b"\n")
    dense, sparse, labels, malformed = read_all(path)
    assert len(dense) == 40 - 4 and malformed.count == 4
    assert malformed.by_reason == {"not UTF-8 text": 3, "non-integer dense value (I1)": 1}
    assert sorted(e["line"] for e in malformed.examples if e["reason"] == "not UTF-8 text") == [i + 1 for i in sorted(broken)]


def test_not_a_criteo_file_is_one_line_error():
    with pytest.raises(UserError, match="first line has 3 fields"):
        sniff(b"a,b,c\n")


def _reference_rows(lines: list[bytes], first_line_no: int = 1):
    """A plain Python parse with the reader's rules: (rows, {reason: count}, [(line, reason)])."""
    rows, reasons, bad = [], {}, []
    dec = re.compile(rb"-?\d{1,18}(\.0)?")
    for i, line in enumerate(lines):
        line = line[:-1] if line.endswith(b"\r") else line
        f = line.split(b"\t")
        reason = None
        if len(f) != 40:
            reason = f"wrong field count ({len(f)}, expected 40)"
        elif f[0] not in (b"0", b"1"):
            reason = "label is not 0 or 1"
        else:
            for j, d in enumerate(f[1:14]):
                if d and not dec.fullmatch(d):
                    reason = f"non-integer dense value (I{j + 1})"
                    break
            else:
                for j, c in enumerate(f[14:]):
                    if c and not re.fullmatch(rb"[0-9a-fA-F]{1,8}", c):
                        reason = f"non-hex categorical id (C{j + 1})"
                        break
        if reason:
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                reason = "not UTF-8 text"  # a kind of its own, whatever else is wrong with the line
            reasons[reason] = reasons.get(reason, 0) + 1
            bad.append((first_line_no + i, reason))
            continue
        rows.append((int(f[0]), [int(d.removesuffix(b".0")) if d else 0 for d in f[1:14]], [int(c, 16) if c else 0 for c in f[14:]]))
    return rows, reasons, bad


def _torture_lines(n: int, seed: int) -> list[bytes]:
    """Generated rows with every kind of damage and oddity the reader handles."""
    rng = random.Random(seed)
    junk = [b"", b"1.5", b"zz", b"-", b"-0", b"00", b"01", b"1.0", b"123456789012", b"1234567890123456789", b"-12345678901", b"ABCDEF", b"aBcD",
            b"123456789", b"0x1", b" 1", b"+3", b".0", b"-.0", b"9.0", b"\xff", b"\r", b"12345678.0", b"123456789.0", b"\x05", b"\x00"]
    out = []
    for line in _lines(n, seed=seed):
        f = line.split(b"\t")
        r = rng.random()
        if r < 0.05:
            f[rng.randrange(40)] = rng.choice(junk)
        elif r < 0.06:
            del f[rng.randrange(40)]
        elif r < 0.07:
            f.insert(rng.randrange(41), rng.choice(junk))
        elif r < 0.08:
            out.append(bytes(rng.randrange(1, 256) for _ in range(rng.randrange(0, 80))).replace(b"\n", b""))
            continue
        elif r < 0.10:
            k = rng.randrange(1, 14)
            f[k] = f[k] + b".0" if f[k] else f[k]
        elif r < 0.12:
            f[rng.randrange(1, 14)] = str(rng.randrange(-(10**17), 10**18)).encode()
        elif r < 0.13:
            k = rng.randrange(14, 40)
            f[k] = f[k].upper()
        elif r < 0.14:
            k = rng.randrange(14, 40)
            f[k] = f[k][: rng.randrange(0, 9)]
        out.append(b"\t".join(f) + (b"\r" if rng.random() < 0.05 else b""))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("workers,processes", [(1, True), (3, False), (2, True)])
def test_damaged_file_matches_a_python_parse_in_every_mode(tmp_path, workers, processes):
    lines = _torture_lines(3000, seed=5)
    path = tmp_path / "torture.tsv"
    path.write_bytes(b"\n".join(lines))  # no final newline
    rows, reasons, bad = _reference_rows(lines)
    assert len(bad) > 150 and len(rows) > 2000
    m = Malformed(max_examples=len(lines))
    chunks = list(read_chunks(path, m, chunk_bytes=20_000, workers=workers, processes=processes))
    dense = np.concatenate([c.dense for c in chunks])
    sparse = np.concatenate([c.sparse for c in chunks])
    labels = np.concatenate([c.labels for c in chunks])
    got = [(int(l), d.tolist(), s.tolist()) for l, d, s in zip(labels, dense, sparse)]
    assert got == rows
    assert m.by_reason == reasons and m.count == len(bad)
    assert [(e["line"], e["reason"]) for e in m.examples] == bad
    assert chunks[-1].lines == len(lines) and chunks[-1].end_offset == path.stat().st_size
    offsets = [c.end_offset for c in chunks]
    assert offsets == sorted(offsets) and len(chunks) > 10


def test_chunks_do_not_depend_on_the_mode(tmp_path):
    lines = _torture_lines(2000, seed=6)
    path = tmp_path / "t.tsv"
    path.write_bytes(b"\n".join(lines) + b"\n")
    runs = []
    for workers, processes in [(1, True), (2, False), (2, True)]:
        m = Malformed(3)
        chunks = list(read_chunks(path, m, chunk_bytes=7_000, workers=workers, processes=processes))
        runs.append(([(c.dense.tobytes(), c.sparse.tobytes(), c.labels.tobytes(), c.lines, c.end_offset) for c in chunks], m.to_dict()))
    assert runs[0] == runs[1] == runs[2]


def test_label_must_be_exactly_0_or_1(tmp_path):
    good = _lines(4)
    path = tmp_path / "labels.tsv"
    path.write_bytes(b"\n".join([good[0], b"00" + good[1][1:], b"1.0" + good[2][1:], b"-0" + good[3][1:]]) + b"\n")
    _, _, labels, m = read_all(path)
    assert labels.size == 1 and m.by_reason == {"label is not 0 or 1": 3}


def test_malformed_merge_keeps_file_line_numbers_and_the_first_examples():
    a, b = Malformed(3), Malformed(3)
    a.add(2, "x", b"l2")
    b.add(1, "y", b"l1")
    b.add(5, "x", b"l5")
    b.add(6, "x", b"l6")
    a.merge(b, line_offset=10)
    assert a.count == 4 and a.by_reason == {"x": 3, "y": 1}
    assert [e["line"] for e in a.examples] == [2, 11, 15]
