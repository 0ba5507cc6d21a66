"""The Criteo text reader over every real sample file (read in place, never copied) and over
generated edge cases: malformed lines, .gz, CRLF, CSV variants."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from bench.errors import UserError
from bench.workloads.criteo.generate import format_rows, random_rows
from bench.workloads.criteo.testdata import checksums, criteo_data_dir, sha256
from bench.workloads.criteo.text import Malformed, read_all, read_chunks, sniff, sniff_file

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


def test_not_a_criteo_file_is_one_line_error():
    with pytest.raises(UserError, match="first line has 3 fields"):
        sniff(b"a,b,c\n")
