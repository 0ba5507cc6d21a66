"""Progress of long steps: a bar in a terminal, periodic one-line reports in CI logs and pipes.

In a terminal (stderr is a TTY) tqdm draws the bar, and log lines printed while it is up are
written above it (tqdm's `logging_redirect_tqdm`) instead of breaking it. Without a terminal a
line goes to the `bench.progress` logger at most every `interval` seconds, and one when the step
ends, so a CI log is never silent for minutes while a model trains:

    train: 120/488 batch (25%), 46 s, about 2 min 20 s left, loss=0.4712
"""

from __future__ import annotations

import logging
import sys
import time
from contextlib import ExitStack
from typing import Any, Callable

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

log = logging.getLogger("bench.progress")
PLAIN_INTERVAL_S = 30.0


def progress(total: int | None, desc: str, enabled: bool = True, unit: str = "batch", interval: float = PLAIN_INTERVAL_S):
    """A progress object with tqdm's `update`, `set_postfix`, `set_postfix_str` and `close`, usable with `with`."""
    if not enabled:
        return tqdm(total=total, disable=True)
    if sys.stderr.isatty():
        return TerminalBar(total=total, desc=desc, unit=unit)
    return PlainProgress(total, desc, unit, interval)


class TerminalBar(tqdm):
    """tqdm's bar, with log lines routed above it while it is shown."""

    def __init__(self, **kwargs: Any) -> None:
        root = logging.getLogger()
        filters = [f for h in root.handlers if _is_console(h) for f in h.filters]
        self._redirect = ExitStack()
        self._redirect.enter_context(logging_redirect_tqdm())
        for handler in root.handlers:  # tqdm's stand-in handler keeps the console's filters (bench.console)
            if _is_console(handler):
                for f in filters:
                    handler.addFilter(f)
        super().__init__(leave=False, dynamic_ncols=True, **kwargs)

    def close(self) -> None:
        super().close()
        redirect = getattr(self, "_redirect", None)
        if redirect is not None:
            self._redirect = None
            redirect.close()


def _is_console(handler: logging.Handler) -> bool:
    return isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)


class PlainProgress:
    """Periodic one-line reports for logs without a terminal."""

    def __init__(self, total: int | None, desc: str, unit: str, interval: float, clock: Callable[[], float] = time.monotonic, emit: Callable[[str], None] | None = None) -> None:
        self.total, self.desc, self.unit, self.interval = total, desc, unit, interval
        self.clock = clock
        self.emit = emit or log.info
        self.n = 0
        self.postfix = ""
        self.start = self.last = clock()
        self.closed = False

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self.last >= self.interval:
            self.last = now
            self.emit(self.line(now))

    def set_postfix(self, **values: Any) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text

    def line(self, now: float) -> str:
        elapsed = now - self.start
        text = f"{self.desc}: {self.n}"
        if self.total:
            text += f"/{self.total} {self.unit} ({100 * self.n / self.total:.0f}%), {duration(elapsed)}"
            if 0 < self.n < self.total:
                text += f", about {duration(elapsed * (self.total - self.n) / self.n)} left"
        else:
            text += f" {self.unit}, {duration(elapsed)}"
        return text + (f", {self.postfix}" if self.postfix else "")

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            now = self.clock()
            if self.n and self.interval > 0 and now - self.start >= self.interval:  # a long step says it ended
                self.emit(f"{self.desc}: done, {self.n} {self.unit} in {duration(now - self.start)}" + (f", {self.postfix}" if self.postfix else ""))

    def __enter__(self) -> "PlainProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"
