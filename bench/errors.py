"""User-facing errors and the exit codes every command of the harness shares.

    0  everything ran; the gate (if any) passed
    1  a gate rule failed, or a job failed while measuring (any errored job of a sweep; skipped jobs are not errors)
    2  bad input: one line that names the problem and the fix, before any work
    3  the harness itself failed (an internal error, or a stage after the sweep that could not finish)
"""

import os
import tempfile
import traceback
from pathlib import Path

EXIT_OK, EXIT_GATE_FAILED, EXIT_USER_ERROR, EXIT_HARNESS_ERROR = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # Ctrl-C: the shell's 128 + SIGINT; the running job leaves no record


class UserError(Exception):
    """Bad input from the user. The CLI prints it on one line and exits with code 2."""

    exit_code = EXIT_USER_ERROR


def one_line(exc: BaseException) -> str:
    """An exception as one line: its type (unless it is a UserError) and its first line of text."""
    text = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    if isinstance(exc, UserError):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def internal_error(exc: BaseException, folder: Path | None = None, name: str = "traceback.txt") -> str:
    """An exception of the harness itself as one line, with where its traceback was saved (in `folder`,
    or a temporary file): the console gets the cause, the traceback stays for the bug report."""
    saved = None
    try:
        text = traceback.format_exc()
        if folder is not None:
            Path(folder).mkdir(parents=True, exist_ok=True)
            saved = Path(folder) / name
            saved.write_text(text, encoding="utf-8")
        else:
            fd, path = tempfile.mkstemp(prefix="bench-traceback-", suffix=".txt")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            saved = Path(path)
    except OSError:
        pass  # the one line is what matters
    return one_line(exc) + (f" (traceback: {saved})" if saved else "")
