"""Crash-safe file writes: a reader sees the old content or the new, never a torn file."""

import os
from pathlib import Path


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a synced temp file and a rename in the same dir."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # One agent per host root and stage at a time; the pid keeps a crashed run's leftover
    # temp file from colliding (tempfile would cost every stage pod its import time).
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as handle:
            handle.write(text)
            handle.flush()
            # fsync: flags and history must survive the reboot an interrupt may trigger next.
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
