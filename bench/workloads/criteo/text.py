"""Vectorized reader for Criteo click logs in text form (raw TSV and the CSV variants in the wild).

One parser covers: Kaggle `train.txt` / `test.txt`, the 1TB `day_N` files, plain or `.gz`, and
the CSV files people derived from them: a header row (`Label,I1,..` or `Id,Label,..`), a Kaggle
`Id` column, integers written by pandas as `1382.0`, comma or tab separators, no label (39 fields).

Parsing is column-wise numpy over chunks of bytes: field boundaries come from the positions of
separators and newlines, digits are gathered into small matrices and combined with vectorized
arithmetic. No Python code runs per row, which is what makes it >10x faster than torchrec's
`BinaryCriteoUtils.tsv_to_npys` (a `csv.reader` + per-row `int()` loop).

Malformed lines (wrong field count, label not 0/1, a dense value that is not an integer, a
categorical id that is not 1-8 hex digits) are skipped, counted by reason, and reported with
their 1-based line numbers and up to `max_examples` examples. Nothing is dropped silently.
Quoted CSV fields are not supported; a quoted field is reported as malformed.
"""

from __future__ import annotations

import gzip
import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np

from bench.errors import UserError

NUM_DENSE = 13
NUM_SPARSE = 26
DENSE_NAMES = [f"i{j}" for j in range(1, NUM_DENSE + 1)]
SPARSE_NAMES = [f"c{j}" for j in range(1, NUM_SPARSE + 1)]
MAX_INT_DIGITS = 18  # fits int64 (and PAD)
MAX_HEX_DIGITS = 8  # Criteo ids are 32-bit

_HEX_LUT = np.full(256, 255, dtype=np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX_LUT[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX_LUT[_c] = 10 + _i


@dataclass(frozen=True)
class TextFormat:
    """What the first line of a file says about its layout."""

    sep: bytes  # b"\t" or b","
    has_header: bool
    has_id: bool  # a leading Kaggle `Id` column (ignored)
    has_label: bool

    @property
    def num_fields(self) -> int:
        return int(self.has_id) + int(self.has_label) + NUM_DENSE + NUM_SPARSE

    @property
    def label_col(self) -> int | None:
        return int(self.has_id) if self.has_label else None

    @property
    def dense_col(self) -> int:
        return int(self.has_id) + int(self.has_label)

    @property
    def sparse_col(self) -> int:
        return self.dense_col + NUM_DENSE


@dataclass
class Chunk:
    """Parsed rows of one chunk. `labels` is int8, -1 where the file has no label column."""

    dense: np.ndarray  # (n, 13) int64 raw integers, missing -> 0
    sparse: np.ndarray  # (n, 26) uint32 raw hex ids, missing -> 0
    labels: np.ndarray  # (n,) int8
    lines: int  # lines consumed (good + malformed + header)
    end_offset: int  # uncompressed byte offset just after the last consumed line


@dataclass
class Malformed:
    """Counts by reason and the first examples (line number, reason, text)."""

    max_examples: int = 10
    count: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)
    examples: list[dict] = field(default_factory=list)

    def add(self, line_no: int, reason: str, text: bytes) -> None:
        self.count += 1
        self.by_reason[reason] = self.by_reason.get(reason, 0) + 1
        if len(self.examples) < self.max_examples:
            shown = text[:200].decode("utf-8", "replace") + ("..." if len(text) > 200 else "")
            self.examples.append({"line": line_no, "reason": reason, "text": shown})

    def to_dict(self) -> dict:
        return {"count": self.count, "by_reason": dict(self.by_reason), "examples": list(self.examples)}

    @classmethod
    def from_dict(cls, data: dict, max_examples: int) -> "Malformed":
        return cls(max_examples, data["count"], dict(data["by_reason"]), list(data["examples"]))

    def summary(self, name: str) -> str:
        if not self.count:
            return f"{name}: no malformed lines"
        reasons = ", ".join(f"{r}: {n}" for r, n in sorted(self.by_reason.items()))
        lines = [f"{name}: {self.count} malformed lines skipped ({reasons})"]
        lines += [f"  line {e['line']}: {e['reason']}: {e['text']}" for e in self.examples]
        return "\n".join(lines)


def open_binary(path: Path) -> BinaryIO:
    path = Path(path)
    if path.suffix == ".gz":
        return gzip.open(path, "rb")
    return open(path, "rb", buffering=0)


def _is_number(text: bytes) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def sniff(first_line: bytes, path: Path | str = "<input>") -> TextFormat:
    """Separator, header, Id and label columns from the first line of a file."""
    line = first_line.rstrip(b"\r\n")
    sep = b"\t" if b"\t" in line else b","
    fields = line.split(sep)
    n = len(fields)
    header = not _is_number(fields[0].strip()) and fields[0].strip() != b""
    if header:
        names = [f.strip().strip(b'"').decode("utf-8", "replace").lower() for f in fields]
        has_id = names[0] == "id"
        has_label = "label" in names or "clicked" in names
    else:
        has_id = n == 41
        has_label = n in (40, 41)
    fmt = TextFormat(sep=sep, has_header=header, has_id=has_id, has_label=has_label)
    if n != fmt.num_fields:
        raise UserError(
            f"{path}: first line has {n} fields; a Criteo text file has 39 (no label), 40 (label) or 41 (Id, label): "
            "is it a Criteo file?"
        )
    return fmt


PAD = 24  # bytes in front of every parsed block, so that right-aligned reads never start before it


class Buffer:
    """A block of text as bytes (`arr`) and as overlapping little-endian 8-byte words (`words`),
    so a field's last 8 bytes are gathered with one index instead of eight."""

    def __init__(self, data: bytes) -> None:
        padded = b"".join((bytes(PAD), data, bytes(8)))
        self.arr = np.frombuffer(padded, dtype=np.uint8)
        self.words = np.ndarray(shape=(len(padded) - 7,), dtype="<u8", buffer=padded, strides=(1,))

    def right(self, fe: np.ndarray, width: int) -> np.ndarray:
        """(n, width) uint8: the `width` bytes ending at each `fe` (width <= PAD)."""
        nw = -(-width // 8)
        w = np.stack([self.words[fe - 8 * (nw - i)] for i in range(nw)], axis=1)
        return w.view(np.uint8).reshape(fe.shape[0], nw * 8)[:, nw * 8 - width :]


_POW10 = 10 ** np.arange(MAX_INT_DIGITS - 1, -1, -1, dtype=np.int64)


def parse_ints(buf: Buffer, fs: np.ndarray, fe: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Signed decimal integers in arr[fs:fe] (empty -> 0; a trailing `.0` as pandas writes is accepted).

    Returns (values int64, ok bool)."""
    arr = buf.arr
    last = arr.shape[0] - 1
    length = fe - fs
    # "1382.0" -> "1382" (pandas writes integer columns holding NaN as floats)
    dot0 = (length >= 3) & (arr[np.maximum(fe - 2, 0)] == ord(".")) & (arr[np.maximum(fe - 1, 0)] == ord("0"))
    fe = np.where(dot0, fe - 2, fe)
    neg = (fe > fs) & (arr[np.minimum(fs, last)] == ord("-"))
    length = fe - fs - neg
    ok = (length <= MAX_INT_DIGITS) & ~((neg | dot0) & (length <= 0))
    width = int(min(max(int(length.max(initial=0)), 1), MAX_INT_DIGITS))
    if width <= 8:
        values, dok = _swar_decimal(buf, fe, np.maximum(length, 0))
        ok &= dok
        values = np.where(neg, -values, values)
        values[~ok] = 0
        return values, ok
    digits = buf.right(fe, width).astype(np.int64) - ord("0")
    inside = np.arange(width - 1, -1, -1)[None, :] < length[:, None]
    ok &= ~np.any(inside & ((digits < 0) | (digits > 9)), axis=1)
    digits[~inside] = 0
    values = digits @ _POW10[MAX_INT_DIGITS - width :]
    values = np.where(neg, -values, values)
    values[~ok] = 0
    return values, ok


_LOW_NIBBLES = np.uint64(0x0F0F0F0F0F0F0F0F)
_LOW_BITS = np.uint64(0x0101010101010101)


def _field_mask(length: np.ndarray) -> np.ndarray:
    """uint64 masks keeping the last min(length, 8) bytes of a right-aligned word (its high bytes)."""
    keep = np.minimum(length, 8).astype(np.uint64) * np.uint64(8)
    return np.where(keep == 0, np.uint64(0), ~np.uint64(0) << (np.uint64(64) - np.maximum(keep, np.uint64(8))))


def _swar_decimal(buf: Buffer, fe: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Up to 8 decimal digits ending at fe: (values int64, all digits valid)."""
    w = buf.words[fe - 8]
    b = w.view(np.uint8).reshape(-1, 8)
    mask = _field_mask(length)
    valid = ((b - np.uint8(0x30)) < 10).view(np.uint64).reshape(-1)
    ok = (~valid & mask & _LOW_BITS) == 0
    x = w & mask & _LOW_NIBBLES  # digits in memory order, leading bytes zero
    x = ((x * np.uint64(10)) + (x >> np.uint64(8))) & np.uint64(0x00FF00FF00FF00FF)
    x = ((x * np.uint64(100)) + (x >> np.uint64(16))) & np.uint64(0x0000FFFF0000FFFF)
    x = (x * np.uint64(10000)) + (x >> np.uint64(32))
    return (x & np.uint64(0xFFFFFFFF)).astype(np.int64), ok


def parse_hex(buf: Buffer, fs: np.ndarray, fe: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """1-8 hex digits in arr[fs:fe] (empty -> 0). Returns (values uint32, ok bool).

    SWAR on the field's last 8 bytes as one uint64: nibble = (b & 15) + 9 * bit 6 of b, then the
    bytes outside the field are masked off and the nibbles packed into 32 bits."""
    length = fe - fs
    ok = length <= MAX_HEX_DIGITS
    w = buf.words[fe - 8]
    b = w.view(np.uint8).reshape(-1, 8)
    valid = ((b - np.uint8(0x30)) < 10) | (((b | np.uint8(0x20)) - np.uint8(0x61)) < 6)
    mask = _field_mask(length)
    ok &= (~valid.view(np.uint64).reshape(-1) & mask & _LOW_BITS) == 0
    nib = (w & _LOW_NIBBLES) + ((w >> np.uint64(6)) & _LOW_BITS) * np.uint64(9)
    x = (nib & mask).byteswap()  # first character in the highest byte
    x = (x | (x >> np.uint64(4))) & np.uint64(0x00FF00FF00FF00FF)
    x = (x | (x >> np.uint64(8))) & np.uint64(0x0000FFFF0000FFFF)
    x = (x | (x >> np.uint64(16))) & np.uint64(0x00000000FFFFFFFF)
    values = x.astype(np.uint32)
    values[~ok] = 0
    return values, ok


def parse_block(buf: bytes, fmt: TextFormat, first_line_no: int, malformed: Malformed):
    """Parse complete lines (buf ends with b"\\n"). Returns (dense, sparse, labels, n_lines)."""
    text = Buffer(buf)
    arr = text.arr
    nl = np.flatnonzero(arr == 10)
    n_lines = nl.shape[0]
    starts = np.empty(n_lines, dtype=np.int64)
    starts[0:1] = PAD
    starts[1:] = nl[:-1] + 1
    ends = nl.astype(np.int64)
    cr = (ends > starts) & (arr[np.maximum(ends - 1, 0)] == 13)
    ends[cr] -= 1
    seps = np.flatnonzero(arr == fmt.sep[0])
    first_sep = np.searchsorted(seps, starts)
    counts = np.searchsorted(seps, ends) - first_sep
    nf = fmt.num_fields
    good = counts == nf - 1
    bad_reason: dict[int, str] = {}
    for i in np.flatnonzero(~good):
        bad_reason[int(i)] = f"wrong field count ({int(counts[i]) + 1}, expected {nf})"

    rows = np.flatnonzero(good) if bad_reason else None
    sel = slice(None) if rows is None else rows
    n = n_lines if rows is None else rows.size
    # separator positions, one contiguous row per separator: field c spans (sep[c-1], sep[c])
    sep_pos = seps[first_sep[sel][None, :] + np.arange(nf - 1)[:, None]]
    line_start, line_end = starts[sel] - 1, ends[sel]

    def bounds(c: int) -> tuple[np.ndarray, np.ndarray]:
        fs = (line_start if c == 0 else sep_pos[c - 1]) + 1
        fe = line_end if c == nf - 1 else sep_pos[c]
        return fs, fe

    col_ok = np.empty((1 + NUM_DENSE + NUM_SPARSE, n), dtype=bool)
    if fmt.label_col is not None:
        fs, fe = bounds(fmt.label_col)
        lab, lok = parse_ints(text, fs, fe)
        col_ok[0] = lok & ((lab == 0) | (lab == 1)) & (fe > fs)
        labels = lab.astype(np.int8)
    else:
        col_ok[0] = True
        labels = np.full(n, -1, dtype=np.int8)
    dense = np.empty((NUM_DENSE, n), dtype=np.int64)
    for j in range(NUM_DENSE):
        dense[j], col_ok[1 + j] = parse_ints(text, *bounds(fmt.dense_col + j))
    sparse = np.empty((NUM_SPARSE, n), dtype=np.uint32)
    for j in range(NUM_SPARSE):
        sparse[j], col_ok[1 + NUM_DENSE + j] = parse_hex(text, *bounds(fmt.sparse_col + j))
    ok = col_ok.all(axis=0)
    for i in np.flatnonzero(~ok):
        r = int(np.argmin(col_ok[:, i]))  # first failing column
        if r == 0:
            reason = "label is not 0 or 1"
        elif r <= NUM_DENSE:
            reason = f"non-integer dense value (I{r})"
        else:
            reason = f"non-hex categorical id (C{r - NUM_DENSE})"
        bad_reason[int(i if rows is None else rows[i])] = reason
    for i in sorted(bad_reason):
        malformed.add(first_line_no + i, bad_reason[i], bytes(arr[starts[i] : ends[i]]))
    if len(bad_reason):
        return dense.T[ok].copy(), sparse.T[ok].copy(), labels[ok], n_lines
    return np.ascontiguousarray(dense.T), np.ascontiguousarray(sparse.T), labels, n_lines


def read_chunks(
    path: Path,
    malformed: Malformed,
    chunk_bytes: int = 16 << 20,
    start_offset: int = 0,
    start_line: int = 0,
    fmt: TextFormat | None = None,
) -> Iterator[Chunk]:
    """Stream a text file as parsed chunks, resuming at (start_offset, start_line) if given.

    `start_line` is the number of lines already consumed (header included); line numbers in the
    malformed report are 1-based file lines."""
    path = Path(path)
    with open_binary(path) as f:
        if fmt is None:
            fmt = sniff_file(path)
        if start_offset:
            _skip(f, start_offset)
        offset, line_no = start_offset, start_line
        if start_offset == 0 and fmt.has_header:
            header = f.readline()
            offset += len(header)
            line_no += 1
        tail = b""
        while True:
            data = f.read(chunk_bytes)
            eof = not data
            buf = tail + data
            if eof:
                if not buf:
                    return
                if not buf.endswith(b"\n"):
                    buf += b"\n"
                    offset -= 1  # the added newline is not in the file
                tail = b""
            else:
                cut = buf.rfind(b"\n")
                if cut < 0:
                    tail = buf
                    continue
                buf, tail = buf[: cut + 1], buf[cut + 1 :]
            dense, sparse, labels, n = parse_block(buf, fmt, line_no + 1, malformed)
            offset += len(buf)
            line_no += n
            yield Chunk(dense, sparse, labels, line_no, offset)
            if eof:
                return


def _skip(f: BinaryIO, n: int) -> None:
    if isinstance(f, gzip.GzipFile):
        while n > 0:
            got = len(f.read(min(n, 64 << 20)))
            if not got:
                break
            n -= got
    else:
        f.seek(n, io.SEEK_SET)


def sniff_file(path: Path) -> TextFormat:
    with open_binary(path) as f:
        first = f.readline()
    if not first.strip():
        raise UserError(f"{path}: empty first line; not a Criteo text file")
    return sniff(first, path)


def read_all(path: Path, max_examples: int = 10) -> tuple[np.ndarray, np.ndarray, np.ndarray, Malformed]:
    """Parse a whole (small) file into memory: (dense int64, sparse uint32, labels int8, malformed)."""
    malformed = Malformed(max_examples)
    parts = list(read_chunks(path, malformed))
    if not parts:
        empty = np.zeros((0, NUM_DENSE), np.int64), np.zeros((0, NUM_SPARSE), np.uint32), np.zeros(0, np.int8)
        return (*empty, malformed)
    return (
        np.concatenate([c.dense for c in parts]),
        np.concatenate([c.sparse for c in parts]),
        np.concatenate([c.labels for c in parts]),
        malformed,
    )
