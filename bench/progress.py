"""Progress of long steps: a bar in a terminal, periodic one-line reports in CI logs and pipes.

In a terminal (stderr is a TTY) tqdm draws the bar, and log lines printed while it is up are
written above it (tqdm's `logging_redirect_tqdm`) instead of breaking it. Without a terminal a
line goes to the `bench.progress` logger at most every `interval` seconds, and one when the step
ends, so a CI log is never silent for minutes while a model trains:

    train: 120/488 batch (25%), 46 s, about 2 min 20 s left, loss=0.4712

Work done once per machine and then cached (the timing calibration, training the default model, the
roofline and the kernel probe) runs inside the first job that needs it. Each such step runs under
`once_per_machine(name)`, which adds its seconds to `ONCE`; a sweep's line leaves them out of the
per-job rate its time left is estimated from, and names them apart:

    sweep: 1/42 job (2%), 4 min 10 s (3 min 50 s of it once per machine: calibration 2 min, training 1 min 50 s), about 2 min 5 s left
"""

from __future__ import annotations

import logging
import sys
import time
from contextlib import ExitStack, contextmanager
from typing import Any, Callable, Iterator

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

log = logging.getLogger("bench.progress")
PLAIN_INTERVAL_S = 30.0


class OncePerMachine:
    """Seconds this process spent in once-per-machine steps, by step (in the order first run)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.steps: dict[str, float] = {}

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        start = self.clock()
        try:
            yield
        finally:
            self.steps[name] = self.steps.get(name, 0.0) + self.clock() - start

    def total(self) -> float:
        return sum(self.steps.values())

    def since(self, mark: dict[str, float]) -> dict[str, float]:
        """Seconds per step spent after `mark` (an earlier `dict(self.steps)`), steps with none left out."""
        return {k: v - mark.get(k, 0.0) for k, v in self.steps.items() if v - mark.get(k, 0.0) > 0}


ONCE = OncePerMachine()


def wall_per_cpu(spin_seconds: float = 0.2, wall: Callable[[], float] = time.perf_counter,
                 cpu: Callable[[], float] = time.thread_time) -> float:
    """Wall seconds per CPU second of this thread right now (at least 1): a short spin, timed on both clocks. An
    estimate made of CPU seconds is a wait this many times longer where other work shares the cores."""
    start_wall, start_cpu = wall(), cpu()
    while cpu() - start_cpu < spin_seconds:
        pass
    return max(1.0, (wall() - start_wall) / max(cpu() - start_cpu, 1e-9))


def once_per_machine(name: str):
    """Time a once-per-machine step (`with once_per_machine("training"): ...`): a sweep's time left leaves it out."""
    return ONCE.step(name)


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
        self._once_seen = ONCE.total()
        super().__init__(leave=False, dynamic_ncols=True, **kwargs)

    def update(self, n: float | None = 1, skipped: bool = False) -> bool | None:
        """tqdm's update, with the once-per-machine steps run since the last one moved out of its elapsed
        time, so its rate and time left are the steps' own."""
        once = ONCE.total()
        if once > self._once_seen and hasattr(self, "start_t"):
            self.start_t += once - self._once_seen
            self.last_print_t += once - self._once_seen
        self._once_seen = once
        return super().update(n)

    def begin(self) -> None:
        """The first step starts now: what came before it (composing a sweep's jobs) is not a step's time."""
        if self.n == 0:
            self.reset()
            self._once_seen = ONCE.total()

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

    def __init__(self, total: int | None, desc: str, unit: str, interval: float, clock: Callable[[], float] = time.monotonic,
                 emit: Callable[[str], None] | None = None, once: OncePerMachine | None = None, expected_skips: int = 0) -> None:
        self.total, self.desc, self.unit, self.interval = total, desc, unit, interval
        # steps known to be skipped in about no time (a sweep's jobs on a device this machine lacks): the time
        # left is the rate of the steps that ran times those still to run
        self.expected_skips, self.skipped = expected_skips, 0
        self.clock = clock
        self.emit = emit or log.info
        self.once = once or ONCE  # once-per-machine steps run after this point are left out of the rate
        self.once_mark = dict(self.once.steps)
        self.n = 0
        self.postfix = ""
        self.start = self.last = clock()
        self.closed = False

    def update(self, n: int = 1, skipped: bool = False) -> None:
        self.n += n
        self.skipped += n if skipped else 0
        now = self.clock()
        if now - self.last >= self.interval:
            self.last = now
            self.emit(self.line(now))

    def begin(self) -> None:
        """The first step starts now: what came before it (composing a sweep's jobs) is not a step's time."""
        if self.n == 0:
            self.start = self.last = self.clock()
            self.once_mark = dict(self.once.steps)

    def set_postfix(self, **values: Any) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text

    def line(self, now: float) -> str:
        elapsed = now - self.start
        once = self.once.since(self.once_mark)
        own = max(0.0, elapsed - sum(once.values()))  # the steps' own time: what the rest will take again
        text = f"{self.desc}: {self.n}"
        if self.total:
            text += f"/{self.total} {self.unit} ({100 * self.n / self.total:.0f}%), {duration(elapsed)}{once_words(once)}"
            ran = self.n - self.skipped
            to_run = self.total - self.n - max(0, self.expected_skips - self.skipped)
            if ran > 0 and self.n < self.total:
                text += f", about {duration(own * max(0, to_run) / ran)} left"
        else:
            text += f" {self.unit}, {duration(elapsed)}{once_words(once)}"
        return text + (f", {self.postfix}" if self.postfix else "")

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            now = self.clock()
            if self.n and self.interval > 0 and now - self.start >= self.interval:  # a long step says it ended
                self.emit(f"{self.desc}: done, {self.n} {self.unit} in {duration(now - self.start)}{once_words(self.once.since(self.once_mark))}"
                          + (f", {self.postfix}" if self.postfix else ""))

    def __enter__(self) -> "PlainProgress":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def once_words(steps: dict[str, float]) -> str:
    """` (3 min 50 s of it once per machine: calibration 2 min, training 1 min 50 s)`, or "" without any."""
    shown = {name: s for name, s in steps.items() if s >= 0.5}  # a cached step read in milliseconds is not news
    if not shown:
        return ""
    parts = ", ".join(f"{name} {duration(s)}" for name, s in shown.items())
    return f" ({duration(sum(steps.values()))} of it once per machine: {parts})"


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"
