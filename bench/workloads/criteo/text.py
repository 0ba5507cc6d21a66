"""Vectorized reader for Criteo click logs in text form (raw TSV and the CSV variants in the wild).

One parser covers: Kaggle `train.txt` / `test.txt`, the 1TB `day_N` files, plain or `.gz`, and
the CSV files people derived from them: a header row (`Label,I1,..` or `Id,Label,..`), a Kaggle
`Id` column, integers written by pandas as `1382.0`, comma or tab separators, no label (39 fields).

Parsing is column-wise numpy over chunks of bytes: field boundaries come from the positions of
separators and newlines, digits are gathered into small matrices and combined with vectorized
arithmetic. No Python code runs per row, unlike torchrec's `BinaryCriteoUtils.tsv_to_npys` (a
`csv.reader` + per-row `int()` loop); `benchmarks/scripts/preprocess_bench.py` measures the two
against each other (docs/criteo.md has the figures).

Malformed lines (wrong field count, label not 0/1, a dense value that is not an integer, a
categorical id that is not 1-8 hex digits) are skipped, counted by reason, and reported with
their 1-based line numbers and up to `max_examples` examples. Nothing is dropped silently.
Quoted CSV fields are not supported; a quoted field is reported as malformed.
"""

from __future__ import annotations

import ctypes
import gzip
import io
import multiprocessing
import os
from collections import deque
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

import numpy as np

from bench import hardware
from bench.errors import UserError

NUM_DENSE = 13
NUM_SPARSE = 26
MAX_INT_DIGITS = 18  # fits int64 (and PAD)
MAX_HEX_DIGITS = 8  # Criteo ids are 32-bit

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

    def merge(self, other: "Malformed", line_offset: int) -> None:
        """Add the report of a later block whose line numbers start at 1 (`line_offset` lines before it)."""
        self.count += other.count
        for reason, n in other.by_reason.items():
            self.by_reason[reason] = self.by_reason.get(reason, 0) + n
        for e in other.examples[: max(0, self.max_examples - len(self.examples))]:
            self.examples.append({**e, "line": e["line"] + line_offset})

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
SLAB_BYTES = 1 << 19  # text parsed per vectorized pass: its (rows, 40) temporaries stay in cache


class Buffer:
    """A block of text as bytes (`arr`) and as overlapping little-endian 8-byte words (`words`),
    so a field's last 8 bytes are gathered with one index instead of eight.

    `arr` is a uint8 array with PAD zero bytes in front of the text and 8 bytes of room after it."""

    def __init__(self, arr: np.ndarray) -> None:
        self.arr = arr
        self.words = np.ndarray(shape=(self.arr.shape[0] - 7,), dtype="<u8", buffer=self.arr, strides=(1,))

    def right(self, fe: np.ndarray, width: int) -> np.ndarray:
        """(n, width) uint8: the `width` bytes ending at each `fe` (width <= PAD)."""
        nw = -(-width // 8)
        w = np.stack([self.words[fe - 8 * (nw - i)] for i in range(nw)], axis=1)
        return w.view(np.uint8).reshape(fe.shape[0], nw * 8)[:, nw * 8 - width :]


_POW10 = 10 ** np.arange(MAX_INT_DIGITS - 1, -1, -1, dtype=np.int64)


def parse_ints(buf: Buffer, fs: np.ndarray, fe: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Signed decimal integers in arr[fs:fe] (empty -> 0; a trailing `.0` as pandas writes is accepted).

    The fallback for the fields `_decimal_fields` leaves (a sign, `.0`, over 8 digits, junk): fields
    of up to 8 digits once the sign and `.0` are off go through `_decimal_fields` again, longer ones
    through a digit matrix. Returns (values int64, ok bool)."""
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
        values, dok = _decimal_fields(buf.words[fe - 8], np.maximum(length, 0))
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
_MASKS = np.array([0] + [(2**64 - 1) << (64 - 8 * k) & (2**64 - 1) for k in range(1, 9)], dtype=np.uint64)
_U8 = {k: np.uint64(k) for k in (4, 6, 8, 16, 32)}
_BYTE_LANES = np.uint64(0x00FF00FF00FF00FF)
_SHORT_LANES = np.uint64(0x0000FFFF0000FFFF)
_LOW_WORD = np.uint64(0xFFFFFFFF)


def _invalid_bytes(valid: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per-byte validity (n, k, 8) bool -> (n, k) bool: some byte inside the field is invalid."""
    return (~valid.view(np.uint64)[..., 0] & mask & _LOW_BITS) != 0


def _hex_fields(w: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hex ids from the last 8 bytes `w` (uint64 words) of fields of `length` bytes.

    Returns (values uint32, ok bool); empty -> 0; over 8 digits or a non-hex byte -> not ok.
    SWAR: nibble = (b & 15) + 9 * bit 6 of b, bytes outside the field masked off, then pairs of
    nibbles, bytes and shorts are packed (first character most significant)."""
    mask = _MASKS[np.minimum(length, 8)]
    b = w.view(np.uint8).reshape(*w.shape, 8)
    valid = ((b - np.uint8(0x30)) < 10) | (((b | np.uint8(0x20)) - np.uint8(0x61)) < 6)
    ok = (length <= MAX_HEX_DIGITS) & ~_invalid_bytes(valid, mask)
    x = ((w >> _U8[6]) & _LOW_BITS) * np.uint64(9)
    x += w & _LOW_NIBBLES
    x &= mask
    x = ((x << _U8[4]) | (x >> _U8[8])) & _BYTE_LANES
    x = ((x << _U8[8]) | (x >> _U8[16])) & _SHORT_LANES
    x = ((x << _U8[16]) | (x >> _U8[32])) & _LOW_WORD
    return x.astype(np.uint32), ok


def _decimal_fields(w: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unsigned decimals of 0-8 digits from the last 8 bytes `w` of fields of `length` bytes.

    Returns (values int64, fast bool); where `fast` is False (a sign, `.0`, over 8 digits, junk)
    the value is left for `parse_ints`."""
    mask = _MASKS[np.minimum(length, 8)]
    b = w.view(np.uint8).reshape(*w.shape, 8)
    fast = (length <= 8) & ~_invalid_bytes((b - np.uint8(0x30)) < 10, mask)
    x = w & mask
    x &= _LOW_NIBBLES
    x = ((x * np.uint64(10)) + (x >> _U8[8])) & _BYTE_LANES
    x = ((x * np.uint64(100)) + (x >> _U8[16])) & _SHORT_LANES
    x = ((x * np.uint64(10000)) + (x >> _U8[32])) & _LOW_WORD
    return x.view(np.int64), fast


@dataclass
class _Parsed:
    dense: np.ndarray
    sparse: np.ndarray
    labels: np.ndarray
    n_lines: int
    bad: list  # (line index in the block, reason, start, end) of skipped lines, in line order


def _parse_lines(text: Buffer, lo: int, hi: int, fmt: TextFormat) -> _Parsed:
    """Parse the complete lines in text.arr[lo:hi] (the last byte is a newline): one vectorized
    pass over a (lines, fields) matrix of field boundaries, no Python loop over fields."""
    arr = text.arr
    seg = arr[lo:hi]
    sep = fmt.sep[0]
    if sep < 10:  # tab: one comparison finds separators and newlines (drop the rare bytes 0-8)
        b = np.flatnonzero(seg <= 10)
        v = seg[b]
        if sep == 9 and not (v >= 9).all():
            keep = v >= 9
            b, v = b[keep], v[keep]
    else:
        b = np.flatnonzero((seg == sep) | (seg == 10))
        v = seg[b]
    b += lo
    isnl = v == 10
    nf = fmt.num_fields
    n_lines = int(np.count_nonzero(isnl))
    bad: list = []
    if b.size == n_lines * nf and isnl[nf - 1 :: nf].all():  # every line has nf fields
        # a field starts just after the previous boundary (the previous line's newline for the first)
        length = np.diff(b, prepend=lo - 1)
        length -= 1
        last, last_len = b[nf - 1 :: nf], length[nf - 1 :: nf]
        cr = (last_len > 0) & (arr[last - 1] == 13)
        if cr.any():
            last -= cr
            last_len -= cr
        fe, length = b.reshape(n_lines, nf), length.reshape(n_lines, nf)
        rows = None
    else:
        nl_idx = np.flatnonzero(isnl)
        counts = np.diff(nl_idx, prepend=-1)
        good = counts == nf
        rows = np.flatnonzero(good)
        ends = b[nl_idx]
        starts = np.empty_like(ends)
        starts[:1] = lo
        starts[1:] = ends[:-1] + 1
        for i in np.flatnonzero(~good):
            bad.append((int(i), f"wrong field count ({int(counts[i])}, expected {nf})", int(starts[i]), int(ends[i])))
        fe = b[nl_idx[rows][:, None] + np.arange(1 - nf, 1)]
        fs = np.empty_like(fe)
        fs[:, 0] = starts[rows]
        fs[:, 1:] = fe[:, :-1] + 1
        last = fe[:, -1]
        cr = (last > fs[:, -1]) & (arr[last - 1] == 13)
        if cr.any():
            last -= cr
        length = fe - fs

    n = fe.shape[0]
    i0, h0 = fmt.dense_col - int(fmt.has_label), fmt.sparse_col  # integer columns (label, I1..13), hex columns
    line_len0, length = length[:, 0], length[:, i0:]
    w = text.words[fe[:, i0:] - 8]
    ints, ok_int = _decimal_fields(w[:, : h0 - i0], length[:, : h0 - i0])
    slow = ~ok_int
    if slow.any():
        r, c = np.nonzero(slow)
        fe_slow = fe[r, c + i0]
        ints[r, c], ok_int[r, c] = parse_ints(text, fe_slow - length[r, c], fe_slow)
    sparse, ok_hex = _hex_fields(w[:, h0 - i0 :], length[:, h0 - i0 :])
    if fmt.has_label:
        labels = ints[:, 0]
        ok_int[:, 0] &= (labels >= 0) & (labels <= 1) & (length[:, 0] == 1)  # exactly "0" or "1"
        labels = labels.astype(np.int8)
        dense = ints[:, 1:]
    else:
        labels = np.full(n, -1, dtype=np.int8)
        dense = ints
    if not (ok_int.all() and ok_hex.all()):
        ok = ok_int.all(axis=1) & ok_hex.all(axis=1)
        for i in np.flatnonzero(~ok):
            col_ok = np.concatenate([[True] if not fmt.has_label else [], ok_int[i], ok_hex[i]]).astype(bool)
            k = int(np.argmin(col_ok))  # first failing column
            if k == 0:
                reason = "label is not 0 or 1"
            elif k <= NUM_DENSE:
                reason = f"non-integer dense value (I{k})"
            else:
                reason = f"non-hex categorical id (C{k - NUM_DENSE})"
            line = int(i) if rows is None else int(rows[i])
            bad.append((line, reason, int(fe[i, 0] - line_len0[i]), int(fe[i, -1] + cr[i])))  # the line up to its newline
        bad.sort()
        dense, sparse, labels = dense[ok], sparse[ok], labels[ok]
    else:
        dense = np.ascontiguousarray(dense)
    return _Parsed(dense, sparse, labels, n_lines, bad)


NOT_UTF8 = "not UTF-8 text"


def _report(text: Buffer, parsed: _Parsed, first_line_no: int, malformed: Malformed) -> None:
    for i, reason, start, end in parsed.bad:
        if end > start and text.arr[end - 1] == 13:
            end -= 1  # the report shows the line without its CR
        line = bytes(text.arr[start:end])
        malformed.add(first_line_no + i, _kind(line, reason), line)


def _kind(line: bytes, reason: str) -> str:
    """A line that is not UTF-8 is a bad line of its own kind (a byte above 0x7f never parses in any
    Criteo field, so such a line is already bad: only its reason changes)."""
    if line.isascii():
        return reason
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return NOT_UTF8
    return reason


def _next_newline(arr: np.ndarray, pos: int, hi: int) -> int:
    """Position of the first newline in arr[pos:hi] (there is one at hi - 1)."""
    step = 4096
    while True:
        window = arr[pos : min(hi, pos + step)]
        k = int(np.argmax(window == 10))
        if window[k] == 10:
            return pos + k
        pos += step
        step *= 2


def _parse_region(text: Buffer, lo: int, hi: int, fmt: TextFormat, first_line_no: int, malformed: Malformed, slab_bytes: int = SLAB_BYTES):
    """Parse text.arr[lo:hi] (complete lines) slab by slab. Returns (dense, sparse, labels, n_lines)."""
    data = text.arr
    parts = []
    n_lines = 0
    while lo < hi:
        cut = hi
        if hi - lo > slab_bytes:
            cut = _next_newline(data, lo + slab_bytes - 1, hi) + 1
        parsed = _parse_lines(text, lo, cut, fmt)
        _report(text, parsed, first_line_no + n_lines, malformed)
        n_lines += parsed.n_lines
        parts.append(parsed)
        lo = cut
    if len(parts) == 1:
        p = parts[0]
        return p.dense, p.sparse, p.labels, n_lines
    if not parts:
        return np.zeros((0, NUM_DENSE), np.int64), np.zeros((0, NUM_SPARSE), np.uint32), np.zeros(0, np.int8), 0
    return (
        np.concatenate([p.dense for p in parts]),
        np.concatenate([p.sparse for p in parts]),
        np.concatenate([p.labels for p in parts]),
        n_lines,
    )


def default_workers() -> int:
    """Parsing threads: one per CPU this process may run on, at most 8."""
    return max(1, min(hardware.cpu_count(), 8))


def _parse_task(buf: bytearray, cut: int, fmt: TextFormat, max_examples: int, transform: Callable | None):
    """Parse buf[PAD:cut] (complete lines); line numbers in the returned report start at 1."""
    text = Buffer(np.frombuffer(buf, dtype=np.uint8))
    local = Malformed(max_examples)
    dense, sparse, labels, n = _parse_region(text, PAD, cut, fmt, 1, local)
    del text
    if transform is not None:
        dense, sparse, labels = transform(dense, sparse, labels)
    return dense, sparse, labels, n, local


_FDS: dict[str, int] = {}  # per worker process: open file descriptors by path
_BUF: list[bytearray] = []  # per worker process: the text buffer, reused


def _worker_init() -> None:
    """Keep freed memory in the worker's heap: numpy's temporaries of every slab are then reused
    instead of being mapped and page-faulted afresh (glibc only; a worker process is ours)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 64 << 20)  # M_MMAP_THRESHOLD: heap up to 64 MB blocks
        libc.mallopt(-1, 256 << 20)  # M_TRIM_THRESHOLD: do not give back the top 256 MB
    except (OSError, AttributeError):
        pass


def _parse_range_task(path: str, pos: int, end: int, fmt: TextFormat, max_examples: int, transform: Callable | None):
    """In a worker process: read and parse the complete lines in bytes [pos, end) of a plain file
    (the last chunk may lack its final newline: one is added)."""
    fd = _FDS.get(path)
    if fd is None:
        fd = _FDS[path] = os.open(path, os.O_RDONLY)
    n = end - pos
    buf = _BUF.pop() if _BUF else bytearray()
    if len(buf) < PAD + n + 9:
        buf = bytearray(PAD + n + 9)
    with memoryview(buf) as view:
        done = 0
        while done < n:
            got = os.preadv(fd, [view[PAD + done : PAD + n]], pos + done)
            if not got:
                raise UserError(f"{path}: file shrank while it was being read")
            done += got
    cut = PAD + n
    if buf[cut - 1] != 10:
        buf[cut] = 10
        cut += 1
    try:
        return _parse_task(buf, cut, fmt, max_examples, transform)
    finally:
        _BUF.append(buf)


def _chunk_ends(fd: int, pos: int, size: int, chunk_bytes: int) -> Iterator[tuple[int, int]]:
    """Line-aligned ranges [pos, end) of a plain file, cut where the reading thread cuts: at the last
    newline of the next `chunk_bytes` (more while a line is longer than that), or at the end."""
    read_end = pos
    while pos < size:
        read_end = min(size, max(read_end, pos) + chunk_bytes)
        hi = read_end
        cut = -1
        while hi > pos and cut < 0:  # the last newline before read_end, looking back in windows
            lo = max(pos, hi - (1 << 16))
            cut = os.pread(fd, hi - lo, lo).rfind(b"\n")
            if cut >= 0:
                cut += lo
            hi = lo
        if cut < 0:
            if read_end >= size:  # a last line without a newline
                yield pos, size
                return
            continue  # no newline yet: read another chunk
        yield pos, cut + 1
        pos = cut + 1


def _read_chunks_processes(path: Path, malformed: Malformed, chunk_bytes: int, offset: int, line_no: int, fmt: TextFormat, workers: int, transform):
    """read_chunks for a plain file with worker processes: each reads and parses its own byte range
    (no text crosses a pipe); the parsed arrays come back in file order."""
    ctx = multiprocessing.get_context("fork")
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        ranges = _chunk_ends(fd, offset, size, chunk_bytes)
        with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_init) as pool:
            pending: deque = deque()
            try:
                while True:
                    while len(pending) < workers + 1:
                        r = next(ranges, None)
                        if r is None:
                            break
                        pending.append((pool.submit(_parse_range_task, str(path), r[0], r[1], fmt, malformed.max_examples, transform), r[1] - r[0]))
                    if not pending:
                        return
                    fut, consumed = pending.popleft()
                    dense, sparse, labels, n, local = fut.result()
                    malformed.merge(local, line_no)
                    offset += consumed
                    line_no += n
                    yield Chunk(dense, sparse, labels, line_no, offset)
            finally:
                for fut, _ in pending:
                    fut.cancel()
    finally:
        os.close(fd)


class _Done:
    """A finished `Future` look-alike, for parsing in the calling thread."""

    def __init__(self, value) -> None:
        self.value = value

    def result(self):
        return self.value


def read_chunks(
    path: Path,
    malformed: Malformed,
    chunk_bytes: int = 8 << 20,
    start_offset: int = 0,
    start_line: int = 0,
    fmt: TextFormat | None = None,
    workers: int = 1,
    transform: Callable | None = None,
    processes: bool = True,
) -> Iterator[Chunk]:
    """Stream a text file as parsed chunks, in file order, resuming at (start_offset, start_line).

    `start_line` is the number of lines already consumed (header included); line numbers in the
    malformed report are 1-based file lines. With `workers` > 1, chunks are parsed in parallel,
    at most `workers + 1` in flight (memory stays bounded), and yielded in file order: by forked
    worker processes that each read their own byte range of a plain file (`processes`, where fork
    exists), else (`.gz`) by threads while this thread decompresses ahead (numpy releases the GIL
    inside its loops). Chunk boundaries do not depend on the mode. `transform(dense, sparse,
    labels)` runs where the chunk is parsed and its three arrays replace the chunk's."""
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
        parallel = workers > 1 and (isinstance(f, gzip.GzipFile) or os.fstat(f.fileno()).st_size - offset > chunk_bytes)
        if not parallel:
            workers = 1  # one chunk: no pool
        elif processes and not isinstance(f, gzip.GzipFile) and "fork" in multiprocessing.get_all_start_methods():
            yield from _read_chunks_processes(path, malformed, chunk_bytes, offset, line_no, fmt, workers, transform)
            return
        pool = ThreadPoolExecutor(workers, thread_name_prefix="criteo-parse") if workers > 1 else None
        pending: deque = deque()  # (future, buffer, text bytes consumed)
        spare: list[bytearray] = []  # buffers of finished chunks, reused
        carry = b""  # an unfinished line, to go in front of the next chunk
        eof = False
        try:
            while True:
                while not eof and len(pending) < (workers + 1 if pool else 1):
                    buf = spare.pop() if spare else bytearray(PAD + chunk_bytes + 8)
                    buf, cut, carry, eof, added = _fill(f, buf, carry, chunk_bytes)
                    if cut == PAD:  # nothing left
                        break
                    if pool is None:
                        fut = _Done(_parse_task(buf, cut, fmt, malformed.max_examples, transform))
                    else:
                        fut = pool.submit(_parse_task, buf, cut, fmt, malformed.max_examples, transform)
                    pending.append((fut, buf, cut - PAD - added))  # an added final newline is not in the file
                if not pending:
                    return
                fut, buf, consumed = pending.popleft()
                dense, sparse, labels, n, local = fut.result()
                spare.append(buf)
                malformed.merge(local, line_no)
                offset += consumed
                line_no += n
                yield Chunk(dense, sparse, labels, line_no, offset)
        finally:
            if pool is not None:
                for fut, _, _ in pending:
                    fut.cancel()
                pool.shutdown(wait=True)


def _fill(f: BinaryIO, buf: bytearray, carry: bytes, chunk_bytes: int) -> tuple[bytearray, int, bytes, bool, bool]:
    """Read the next complete lines into buf[PAD:cut], `carry` (an unfinished line) first.

    Returns (buf, possibly a bigger new one; cut; the next carry; eof; whether a final newline
    missing from the file was added). cut == PAD: nothing left."""
    if len(buf) < PAD + len(carry) + chunk_bytes + 8:
        buf = bytearray(PAD + len(carry) + chunk_bytes + 8)
    end = PAD + len(carry)
    buf[PAD:end] = carry
    while True:
        with memoryview(buf) as view:
            got = f.readinto(view[end : end + chunk_bytes]) or 0
        if not got:
            if end > PAD and buf[end - 1] != 10:
                buf[end] = 10
                return buf, end + 1, b"", True, True
            return buf, end, b"", True, False
        end += got
        cut = buf.rfind(b"\n", PAD, end) + 1
        if cut:
            return buf, cut, bytes(buf[cut:end]), False, False
        if len(buf) < end + chunk_bytes + 8:  # a line longer than a chunk: read on
            grown = bytearray(end + chunk_bytes + 8)
            grown[:end] = buf[:end]
            buf = grown


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
