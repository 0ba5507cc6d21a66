"""User-facing errors and the exit codes every command of the harness shares.

    0  everything ran; the gate (if any) passed
    1  a gate rule failed, or a job failed while measuring
    2  bad input: one line that names the problem and the fix, before any work
    3  the harness itself failed (an internal error, or a stage after the sweep that could not finish)
"""

EXIT_OK, EXIT_GATE_FAILED, EXIT_USER_ERROR, EXIT_HARNESS_ERROR = 0, 1, 2, 3


class UserError(Exception):
    """Bad input from the user. The CLI prints it on one line and exits with code 2."""

    exit_code = EXIT_USER_ERROR


def one_line(exc: BaseException) -> str:
    """An exception as one line: its type (unless it is a UserError) and its first line of text."""
    text = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    if isinstance(exc, UserError):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
