"""Embedding rows in Redis: one key per row, `<prefix>:<table>:<id>`, plus a manifest.

The manifest (`<prefix>:manifest`, JSON) says what the harness wrote under the prefix: the writer, the
row precision, every table's shape and a digest of the source weights. Before writing anything, a
store at a user's server checks the prefix: a manifest of the same tables means the rows are there
already (reused, not reloaded); another manifest, or keys without one, mean someone else's data and
the job is refused with one line, nothing written. Rows of a load that was interrupted (manifest
still `loading`) belong to the harness and are written again.

Reads go through one pipelined round trip per batch (one MGET per table). Client timeouts bound every
call, and a failed call is not retried: a dead server ends the job within `timeout_s`.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
import torch
from redis.backoff import NoBackoff
from redis.retry import Retry

from bench.errors import UserError
from bench.backends.paramserver.rows import decode, encode, row_bytes

WRITER = "bench ps_redis"
FORMAT = 1
DEFAULT_PREFIX = "bench"
PREFIX_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
LOAD_CHUNK_ROWS = 8192


@dataclass(frozen=True)
class Location:
    """Where the rows live: a Redis URL (without the prefix) and the key prefix."""

    url: str
    prefix: str = DEFAULT_PREFIX

    @classmethod
    def parse(cls, url: str) -> "Location":
        """`redis://host:port/db?prefix=NAME` (also rediss:// and unix://); prefix defaults to `bench`."""
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss", "unix"):
            raise UserError(f"backend.url={url!r} is not a Redis URL: use redis://host:port/db?prefix=NAME")
        query = parse_qsl(parts.query, keep_blank_values=True)
        prefixes = [v for k, v in query if k == "prefix"]
        prefix = prefixes[-1] if prefixes else DEFAULT_PREFIX
        if not PREFIX_RE.match(prefix):
            raise UserError(f"prefix {prefix!r} in backend.url: use letters, digits, '_', '.', '-' only (?prefix=NAME)")
        rest = urlencode([(k, v) for k, v in query if k != "prefix"])
        return cls(urlunsplit(parts._replace(query=rest)), prefix)

    def shown(self) -> str:
        """The URL for messages and records: any password is masked."""
        parts = urlsplit(self.url)
        netloc = parts.netloc
        if "@" in netloc:
            netloc = "***@" + netloc.rsplit("@", 1)[1]
        return urlunsplit(parts._replace(netloc=netloc)) + f"?prefix={self.prefix}"


@dataclass
class TableRows:
    """One table as the store holds it."""

    name: str
    rows: int
    dim: int
    precision: str

    @property
    def width(self) -> int:
        return row_bytes(self.precision, self.dim)


def weights_digest(weights: dict[str, torch.Tensor]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for name in sorted(weights):
        w = weights[name].detach().float().contiguous()
        h.update(f"{name}:{tuple(w.shape)}".encode())
        h.update(w.view(torch.uint8).numpy().data)
    return h.hexdigest()


def manifest_for(tables: list[TableRows], digest: str) -> dict:
    return {
        "writer": WRITER,
        "format": FORMAT,
        "precision": sorted({t.precision for t in tables}),
        "tables": {t.name: {"rows": t.rows, "dim": t.dim, "row_bytes": t.width, "precision": t.precision} for t in tables},
        "weights": digest,
    }


def _describe(manifest: dict) -> str:
    tables = manifest.get("tables") or {}
    rows = sum(int(t.get("rows", 0)) for t in tables.values())
    return f"{len(tables)} tables, {rows:,} rows, {'/'.join(manifest.get('precision') or ['?'])} rows, weights {manifest.get('weights', '?')[:8]}"


@dataclass
class LoadReport:
    loaded: bool  # False: the rows were already there (same manifest) and were reused
    rows: int
    payload_bytes: int
    seconds: float


@dataclass
class RowStore:
    """A connection to the rows of one model under one prefix."""

    location: Location
    timeout_s: float = 10.0
    client: redis.Redis = field(init=False)

    def __post_init__(self) -> None:
        self.client = redis.Redis.from_url(
            self.location.url,
            socket_timeout=self.timeout_s,
            socket_connect_timeout=self.timeout_s,
            retry=Retry(NoBackoff(), 0),  # a dead server fails the call at once, not after backoffs
        )
        self.manifest_key = f"{self.location.prefix}:manifest"

    def ping(self) -> None:
        try:
            self.client.ping()
        except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
            raise UserError(
                f"cannot reach the Redis server at {self.location.shown()} ({exc}): start it, or leave backend.url unset for a private server"
            ) from None
        except redis.ResponseError as exc:  # e.g. authentication required
            raise UserError(f"the Redis server at {self.location.shown()} refused the connection ({exc}): fix backend.url") from None

    def key(self, table: str, row: int) -> str:
        return f"{self.location.prefix}:{table}:{row}"

    # ------------------------------------------------------------------------------------ loading

    def _claim(self, manifest: dict) -> bool:
        """True when the rows must be written; raises when the prefix holds data that is not this model's."""
        where = f"{self.location.shown()}"
        text = json.dumps(manifest, sort_keys=True)
        stored = self.client.get(self.manifest_key)
        if stored is None:
            foreign = next(iter(self.client.scan_iter(match=f"{self.location.prefix}:*", count=1000)), None)
            if foreign is not None:
                raise UserError(
                    f"{where} already holds keys that bench did not write (e.g. {foreign.decode(errors='replace')!r}): "
                    "choose an unused prefix (?prefix=NAME); nothing was changed"
                )
            if self.client.set(self.manifest_key, json.dumps({**manifest, "status": "loading"}, sort_keys=True), nx=True):
                return True
            stored = self.client.get(self.manifest_key)  # another job claimed it meanwhile: compare with theirs
        try:
            theirs = json.loads(stored)
        except (ValueError, TypeError):
            theirs = None
        if not isinstance(theirs, dict) or theirs.get("writer") != WRITER:
            raise UserError(f"{where}: the key {self.manifest_key!r} was not written by bench: choose an unused prefix (?prefix=NAME); nothing was changed")
        status = theirs.pop("status", None)
        if json.dumps(theirs, sort_keys=True) != text:
            raise UserError(
                f"{where} holds another model's rows ({_describe(theirs)}; this job: {_describe(manifest)}): "
                "use another prefix (?prefix=NAME); nothing was changed"
            )
        return status != "complete"  # an interrupted load of these very rows is written again

    def load(self, tables: list[TableRows], weights: dict[str, torch.Tensor], digest: str) -> LoadReport:
        """Write every row (unless this prefix already holds exactly these rows), then mark the manifest complete."""
        start = time.perf_counter()
        manifest = manifest_for(tables, digest)
        rows = sum(t.rows for t in tables)
        payload = sum(t.rows * t.width for t in tables)
        if not self._claim(manifest):
            return LoadReport(False, rows, payload, time.perf_counter() - start)
        for t in tables:
            for keys, values in self._encoded_chunks(t, weights[t.name]):
                self.client.mset(dict(zip(keys, values)))
        self.client.set(self.manifest_key, json.dumps({**manifest, "status": "complete"}, sort_keys=True))
        return LoadReport(True, rows, payload, time.perf_counter() - start)

    def _encoded_chunks(self, table: TableRows, weight: torch.Tensor) -> Iterator[tuple[list[str], list[bytes]]]:
        for lo in range(0, table.rows, LOAD_CHUNK_ROWS):
            hi = min(lo + LOAD_CHUNK_ROWS, table.rows)
            data = encode(weight[lo:hi], table.precision).numpy()
            yield [self.key(table.name, i) for i in range(lo, hi)], [r.tobytes() for r in data]

    # ------------------------------------------------------------------------------------ reading

    def pull(self, requests: Iterable[tuple[TableRows, list[int]]]) -> list[torch.Tensor]:
        """Rows of every (table, ids) request in ONE pipelined round trip: uint8 [len(ids), width] each."""
        requests = list(requests)
        pipe = self.client.pipeline(transaction=False)
        for table, ids in requests:
            head = f"{self.location.prefix}:{table.name}:"
            pipe.mget([head + str(i) for i in ids])  # the client's cost per row: kept to one concatenation
        replies = pipe.execute()
        out = []
        for (table, ids), values in zip(requests, replies):
            rows = decode(values, table.width)
            if rows is None:
                bad = next(i for i, v in zip(ids, values) if v is None or len(v) != table.width)
                raise RuntimeError(
                    f"row {self.key(table.name, bad)} is missing or has the wrong size on the parameter server "
                    f"{self.location.shown()}: its data changed during the job"
                )
            out.append(rows)
        return out

    def used_memory(self) -> int:
        return int(self.client.info("memory")["used_memory"])

    def server_version(self) -> str:
        return str(self.client.info("server").get("redis_version"))

    def close(self) -> None:
        self.client.close()
