"""What a checkpoint file is, from its first bytes, without torch: the pre-flight check
(`bench.preflight`) refuses a file that cannot be a checkpoint before torch is even imported."""

from __future__ import annotations

import zipfile
from pathlib import Path


def file_problem(path: Path) -> str | None:
    """None for what torch.load can read (a torch zip archive, a pickle); otherwise what the file is."""
    with open(path, "rb") as f:
        head = f.read(4)
    if not head:
        return "is empty (0 bytes)"
    if head.startswith(b"PK\x03\x04"):
        try:
            with zipfile.ZipFile(path) as z:
                names = z.namelist()
        except (zipfile.BadZipFile, OSError):
            return "is a damaged zip archive (truncated?), not a readable torch checkpoint"
        if not any(n.endswith("data.pkl") for n in names):
            return f"is a zip archive without data.pkl ({', '.join(names[:3])}...), not a torch checkpoint"
        return None
    if head[:1] == b"\x80":  # a pickle: torch's legacy format or a plain one
        return None
    return f"is not a torch checkpoint: neither a torch zip archive nor a pickle (starts with {head!r})"


def checkpoint_problem(path: str | Path) -> str | None:
    """The one-line refusal for a checkpoint path that is missing or cannot be a checkpoint, else None."""
    path = Path(path)
    if not path.is_file():
        return f"checkpoint not found: {path} (give an existing file with model.checkpoint=PATH)"
    problem = file_problem(path)
    return None if problem is None else f"checkpoint {path} {problem}: give a file written by torch.save"
