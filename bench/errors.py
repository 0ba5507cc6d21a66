"""User-facing errors: one line that names the problem and the fix."""


class UserError(Exception):
    """Bad input from the user. The CLI prints it on one line and exits with code 2."""

    exit_code = 2
