"""Skyhook status patches, coalesced: a pass every few hundred milliseconds need not mean a
status write each.

A plan's status patches go out after every lane of that plan that hands off or releases a
node is done with (`Lane.reported`), one plan after another: a status never reports a stage
done or a node complete ahead of the node's own annotations. Starts and bookkeeping lanes
(the `waiting` mark a first pass puts on every node it does not start) are not waited for:
they go out after every hand-off, so on a busy fleet a status waiting for them would lag by
the depth of the writer's queue. A node may thus show `in_progress` or `waiting` in the status
a moment before its own annotations do. Until written, `pending` lists the patches, so the
next pass plans from the status this one decided (model/replay.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from skyhook_planner.model.actions import PatchSkyhookStatus
from skyhook_planner.model.status import compose_merge_patches

# Seconds between two status writes: more often, a status write per pass would cost about one
# request per node-stage at fleet scale; less often, `kubectl get skyhooks` lags behind.
STATUS_INTERVAL = 1.0
# The apiserver decodes, validates and stores the whole object on each status write, whatever
# the patch: a large status is written less often, one second per this many of its bytes (a
# 1 MiB Skyhook about every 4 s).
STATUS_BYTES_PER_SECOND = 256 * 1024


class StatusWriter:
    """Writes each plan's status patches once its lanes are done, merged per Skyhook."""

    def __init__(
        self,
        write: Callable[[PatchSkyhookStatus], Awaitable[bool]],
        closing: asyncio.Event,
        changed: Callable[[], None],
        failed: Callable[[], None],
        size: Callable[[str], int] = lambda name: 0,
    ) -> None:
        self._write = write  # sends one patch; False if it failed
        self._size = size  # a Skyhook's bytes as last written
        self._closing = closing
        self._changed = changed  # called once the patches waiting change
        self._failed = failed  # called after a round with a failed write
        # Submitted status patches, oldest first, each with its plan's "lanes done" event.
        self._unsent: list[tuple[PatchSkyhookStatus, asyncio.Event]] = []
        self._written_at = 0.0  # time.monotonic() of the last status write
        self._plans: asyncio.Queue[tuple[PatchSkyhookStatus, asyncio.Event] | None] = (
            asyncio.Queue()
        )
        self._task: asyncio.Task[None] | None = None

    @property
    def unsent(self) -> int:
        """Status patches decided and not written yet."""
        return len(self._unsent)

    def add(self, statuses: list[PatchSkyhookStatus], lanes_done: asyncio.Event) -> None:
        """Queue one plan's status patches, to go out once `lanes_done` is set."""
        self._unsent += [(status, lanes_done) for status in statuses]
        if self._task is None:
            self._task = asyncio.create_task(self._write_rounds(), name="statuses")
        self._plans.put_nowait((statuses[0], lanes_done))

    def pending(self) -> dict[str, list[Mapping[str, Any]]]:
        """Status patches decided but not written yet, per Skyhook, oldest first."""
        pending: dict[str, list[Mapping[str, Any]]] = {}
        for action, _ in self._unsent:
            pending.setdefault(action.name, []).append(action.patch)
        return pending

    async def close(self) -> None:
        """Stop once the round going out is written; statuses still waiting for their lanes
        are not written (their nodes' writes were not)."""
        self._plans.put_nowait(None)
        if self._task is not None:
            await self._task

    async def _write_rounds(self) -> None:
        """One plan after another: once the plan's lanes are done and `STATUS_INTERVAL` (longer
        for a large Skyhook) has passed since the last status write (at once if the Skyhook's
        phase changes), write its statuses together with those of later plans whose lanes are
        done too, one merged patch per Skyhook."""
        while (item := await self._plans.get()) is not None:
            first, lanes_done = item
            if not await _first_set(lanes_done, self._closing):
                return
            if not self._unsent or self._unsent[0][0] is not first:
                continue  # written with an earlier plan's statuses
            # A change of phase (complete, in_progress, ...) goes out at once: watchers act
            # on it.
            interval = max(STATUS_INTERVAL, self._size(first.name) / STATUS_BYTES_PER_SECOND)
            pause = self._written_at + interval - time.monotonic()
            if pause > 0 and not self._closing.is_set() and "status" not in first.patch:
                await asyncio.sleep(pause)
            done = 0
            while done < len(self._unsent) and self._unsent[done][1].is_set():
                done += 1
            batch: dict[str, list[Mapping[str, Any]]] = {}
            for action, _ in self._unsent[:done]:
                batch.setdefault(action.name, []).append(action.patch)
            ok = True
            for name, patches in batch.items():
                ok &= await self._write(PatchSkyhookStatus(name, compose_merge_patches(patches)))
            self._written_at = time.monotonic()
            del self._unsent[:done]  # only this task removes, oldest first
            self._changed()
            if not ok:  # a written status wakes the loop through the Skyhook's watch
                self._failed()


async def _first_set(wanted: asyncio.Event, other: asyncio.Event) -> bool:
    """Wait until `wanted` or `other` is set; True if `wanted` is."""
    if not wanted.is_set() and not other.is_set():
        waits = [asyncio.ensure_future(wanted.wait()), asyncio.ensure_future(other.wait())]
        _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for wait in pending:
            wait.cancel()
    return wanted.is_set()
