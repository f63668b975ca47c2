"""What the agent prints for ``kubectl logs``: a short banner, one line per step start and
finish (with duration and return code), notes, and a one-line summary per stage.

Step output itself is interleaved between the START and finish lines, each line prefixed
``[out]``/``[err]`` and a timestamp (logs.LinePrefixer). Problems go to stderr, one a line.
"""

import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import IO


class Outcome(StrEnum):
    OK = "OK"
    FAILED = "FAILED"
    SKIPPED = "SKIPPED"


@dataclass(frozen=True)
class StepReport:
    """What happened to one step (or interrupt command), for the console and the summary."""

    mode: str
    index: int
    total: int
    label: str
    outcome: Outcome
    returncode: int | None = None
    seconds: float | None = None
    """Run time; None when the step did not run."""
    detail: str = ""


class Console:
    def __init__(self, out: IO[str] | None = None, err: IO[str] | None = None) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr

    def banner(self, title: str, fields: Sequence[tuple[str, str]]) -> None:
        self._print(f"=== {title} ===")
        self._print("  ".join(f"{key}={value}" for key, value in fields))

    def step_started(self, mode: str, index: int, total: int, label: str) -> None:
        self._print(f"{mode} {index}/{total} START   {label}")

    def step_finished(self, report: StepReport) -> None:
        parts = [f"{report.mode} {report.index}/{report.total} {report.outcome:<7} {report.label}"]
        if report.returncode is not None:
            parts.append(f"rc={report.returncode}")
        if report.seconds is not None:
            parts.append(f"{report.seconds:.3f}s")
        if report.detail:
            parts.append(f"({report.detail})")
        self._print(" ".join(parts))

    def note(self, text: str) -> None:
        self._print(f"note: {text}")

    def warning(self, text: str) -> None:
        self._print(f"WARNING: {text}")

    def summary(self, mode: str, reports: Iterable[StepReport], seconds: float, ok: bool) -> None:
        counts = dict.fromkeys(Outcome, 0)
        for report in reports:
            counts[report.outcome] += 1
        tally = ", ".join(f"{n} {outcome.lower()}" for outcome, n in counts.items())
        verdict = "succeeded" if ok else "FAILED"
        self._print(f"=== {mode} {verdict}: {tally} in {seconds:.3f}s ===")

    def problems(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.err.write(f"error: {line}\n")
        self.err.flush()

    def _print(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()
