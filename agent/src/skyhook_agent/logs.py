"""Step output: ``[out]``/``[err]`` + local ISO timestamp prefixes, log files and reaping.

Each step run gets ``<log dir>/<package>/<version>/<step path>-<UTC %Y-%m-%d-%H%M%S>.log``
(stdout) and ``.log.err`` (stderr), as upstream. Reaping keeps the 5 newest ``.log`` files
per step; like upstream, ``.log.err`` files and interrupt logs are not reaped.
"""

import re
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

KEEP_LOGS = 5
_STAMP = "%Y-%m-%d-%H%M%S"
_STAMP_PATTERN = r"\d{4}-\d{2}-\d{2}-\d{6}(?:-\d+)?"


class LinePrefixer:
    """Turns a byte stream into complete lines, each prefixed ``<label><local iso> ``.

    Upstream prefixes per read chunk, so a line split across two reads gets a prefix in its
    middle; buffering to line ends keeps every line whole. A last line without a newline is
    emitted by ``finish``.
    """

    def __init__(self, label: str, clock: Callable[[], datetime] = datetime.now) -> None:
        self._label = label
        self._clock = clock
        self._partial = b""

    def feed(self, data: bytes) -> str:
        *lines, self._partial = (self._partial + data).split(b"\n")
        return "".join(self._format(line) for line in lines)

    def finish(self) -> str:
        rest, self._partial = self._partial, b""
        return self._format(rest) if rest else ""

    def _format(self, line: bytes) -> str:
        text = line.decode("utf-8", errors="replace")
        return f"{self._label}{self._clock().isoformat()} {text}\n"


def new_log_path(directory: Path, step_path: str, now_utc: datetime) -> Path:
    """A fresh log path; a second run in the same second gets ``-2`` rather than overwriting."""
    stem = f"{step_path}-{now_utc.astimezone(UTC).strftime(_STAMP)}"
    candidate = directory / f"{stem}.log"
    counter = 2
    while candidate.exists():
        candidate = directory / f"{stem}-{counter}.log"
        counter += 1
    return candidate


def reap_logs(directory: Path, step_path: str, keep: int = KEEP_LOGS) -> list[Path]:
    """Delete all but the ``keep`` newest (by mtime) ``.log`` files of one step; return them."""
    log_dir = (directory / step_path).parent
    pattern = re.compile(re.escape(Path(step_path).name) + "-" + _STAMP_PATTERN + r"\.log")
    if not log_dir.is_dir():
        return []
    logs = [p for p in log_dir.iterdir() if pattern.fullmatch(p.name) and p.is_file()]
    logs.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for old in logs[keep:]:
        old.unlink()
    return logs[keep:]


class OutputSink:
    """Where one process's output goes: the agent's stdout/stderr and, optionally, log files."""

    def __init__(
        self,
        console_out: IO[str],
        console_err: IO[str],
        log_out: IO[str] | None = None,
        log_err: IO[str] | None = None,
    ) -> None:
        self._targets = {
            "out": (LinePrefixer("[out]"), [console_out, *([log_out] if log_out else [])]),
            "err": (LinePrefixer("[err]"), [console_err, *([log_err] if log_err else [])]),
        }

    def write(self, stream: str, data: bytes) -> None:
        prefixer, targets = self._targets[stream]
        self._emit(prefixer.feed(data), targets)

    def close(self) -> None:
        for prefixer, targets in self._targets.values():
            self._emit(prefixer.finish(), targets)

    @staticmethod
    def _emit(text: str, targets: list[IO[str]]) -> None:
        if not text:
            return
        for target in targets:
            target.write(text)
            target.flush()
