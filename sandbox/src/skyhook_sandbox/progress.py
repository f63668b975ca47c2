"""Progress display for long work (the first control-plane build takes minutes).

On a terminal: a rich progress bar with a spinner, the package being compiled and the elapsed
time. Elsewhere (CI logs, pytest capture): a plain line every tenth of the way.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)


class BuildProgress:
    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(file=sys.stderr)

    def note(self, message: str) -> None:
        self.console.print(f"[skyhook-sandbox] {message}", highlight=False, markup=False)

    def done(self, message: str) -> None:
        self.note(message)

    @contextmanager
    def task(self, label: str, total: int) -> Iterator[Callable[[str], None]]:
        if self.console.is_terminal:
            with Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("[dim]{task.fields[current]}"),
                console=self.console,
                transient=False,
            ) as bar:
                task_id = bar.add_task(label, total=total, current="")
                yield lambda item: bar.update(task_id, advance=1, current=item[-60:])
            return
        started = time.monotonic()
        state = {"count": 0, "next": max(total // 10, 1)}

        def advance(item: str) -> None:
            state["count"] += 1
            if state["count"] >= state["next"]:
                state["next"] += max(total // 10, 1)
                elapsed = time.monotonic() - started
                self.note(f"{label}: {state['count']}/~{total} packages, {elapsed:.0f} s ({item})")

        yield advance
