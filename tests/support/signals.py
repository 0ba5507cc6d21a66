"""For tests that press Ctrl-C on a real `python -m bench` process."""

import signal
from contextlib import contextmanager


@contextmanager
def sigint_at_default():
    """Children started inside get SIGINT handled as at a terminal.

    A shell starts background jobs with SIGINT ignored, and an ignored signal stays ignored across
    fork and exec (a CI runner, `make test &`): the test's Ctrl-C would then be lost. A signal with a
    handler is reset to its default by exec, so the handler is installed here while the child starts.
    """
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
