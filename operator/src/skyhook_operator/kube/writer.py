"""Applies a plan's Actions to the cluster: the lanes go out in the schedule's order
(model/lanes.py), each action as its request (kube/verbs.py), the statuses after their plan's
lanes (kube/statuses.py), and a write the apiserver refuses as invalid is kept out of later
plans (kube/refusals.py).

A plan of node lanes is only queued (`submit`), and the next pass plans while it is written,
from a snapshot that replays every queued node write (`pending_writes`) and status patch
(`pending_statuses`). A plan with actions about a Skyhook as a whole (package ConfigMaps,
finalizers) is written in the order `plan_order` (model/lanes.py) gives, with nothing else in
flight (`apply`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from skyhook_operator.kube import events
from skyhook_operator.kube.client import ApiError, AsyncKube
from skyhook_operator.kube.refusals import RefusedWrites
from skyhook_operator.kube.statuses import StatusWriter
from skyhook_operator.kube.verbs import ApiVerbs, TaintRefused
from skyhook_operator.store import ClusterStore
from skyhook_planner.model.actions import (
    Action,
    EmitEvent,
    EvictPod,
    PatchNode,
    PatchSkyhookStatus,
    Plan,
)
from skyhook_planner.model.lanes import Lane, LaneSchedule, PlanOrder, Step, Wave, plan_order

log = logging.getLogger(__name__)


@dataclass
class ApplyResult:
    """What one plan did: how many actions took effect and which failed (and why)."""

    applied: int = 0
    failures: list[str] = field(default_factory=list)
    queued: int = 0  # actions handed over to go out in the background (`Writer.submit`)

    @property
    def ok(self) -> bool:
        return not self.failures


@dataclass
class _Run:
    """One plan's progress, shared by the lanes applying it."""

    result: ApplyResult = field(default_factory=ApplyResult)
    attempted: int = 0  # actions sent, or skipped after a failure in their lane
    # The lanes its statuses wait for, not done with yet (written, failed or dropped): its
    # hand-offs and releases (`Lane.reported`).
    awaited: set[Lane] = field(default_factory=set)
    lanes_done: asyncio.Event = field(default_factory=asyncio.Event)  # when none is left

    def lane_done(self, lane: Lane) -> None:
        self.awaited.discard(lane)
        if not self.awaited:
            self.lanes_done.set()


class Writer:
    """Applies plans; one instance per process, shared by every pass, on the event loop.

    Two ways in. `submit` (a plan with only node lanes, statuses and events) queues each lane
    in its node's chain and returns at once: the next pass plans meanwhile, from the writes
    `pending_writes` lists, and a node's next stage waits for that node's own writes, not for
    a whole pass. `apply` (a plan that changes a Skyhook as a whole; the reconciler calls it
    only when nothing is `in_flight`) writes the steps `plan_order` puts in order and queues
    the rest as `submit` does.
    """

    def __init__(
        self,
        kube: AsyncKube,
        store: ClusterStore,
        evict: Callable[[EvictPod], object],
        concurrency: int = 16,
        event_interval: float = 30.0,
        *,
        reporter: str = "",
    ) -> None:
        self._verbs = ApiVerbs(kube, store)
        self._evict = evict  # starts a pod's eviction unless it is under way
        correlator = events.Correlator(min_interval=event_interval)
        self._recorder = events.Recorder(kube, correlator, instance=reporter)
        self._refusals = RefusedWrites(store.refusals)
        self._schedule = LaneSchedule()
        self._runs: dict[Lane, _Run] = {}  # each queued lane's plan
        # Nodes with a lane written whose report waits for their next lane.
        self._unreported: set[str] = set()
        self._concurrency = concurrency  # lanes going out at once
        self._sending: set[asyncio.Task[None]] = set()
        self._queued = 0  # actions of queued lanes that have not been attempted yet
        self._failures = 0  # lanes and status writes that failed or were dropped so far
        self._idle = asyncio.Event()
        self._idle.set()
        self._closing = asyncio.Event()
        self._statuses = StatusWriter(
            self._send_status,
            self._closing,
            self._update_idle,
            self._status_failed,
            size=lambda name: self._verbs.skyhook_bytes.get(name, 0),
        )
        # Called when a node's lanes are all written (False) or a write failed (True).
        self.on_written: Callable[[bool], None] = lambda failed: None

    @property
    def queue_depth(self) -> int:
        """Actions handed to the writer that have not been attempted yet."""
        return self._queued + self._statuses.unsent

    @property
    def failures(self) -> int:
        """Lanes and status writes that failed or were dropped so far: a plan made while
        writes were in flight still holds once they are written if this did not change."""
        return self._failures

    @property
    def in_flight(self) -> bool:
        """Whether any lane or status patch is queued, waiting for its gate or going out."""
        return self._schedule.busy or bool(self._statuses.unsent)

    async def drain(self) -> None:
        """Wait until nothing is in flight."""
        await self._idle.wait()

    def _update_idle(self) -> None:
        if self.in_flight:
            self._idle.clear()
        else:
            self._idle.set()

    async def close(self, timeout: float | None = None) -> bool:
        """Stop: lanes going out finish, queued ones are not sent (the next leader re-plans),
        statuses still waiting for their lanes are not written, Events still waiting are
        sent. True once that is done; with a `timeout`, False if it is not done by then,
        what is left going on as tasks: a stopping operator must exit within its pod's grace
        period whatever the apiserver does. Events never hold the answer back (they are
        best-effort): they get what is left of `timeout` once the writes are done.
        """
        self._closing.set()
        stop = None if timeout is None else time.monotonic() + timeout

        async def writes() -> None:
            await asyncio.gather(*self._sending)
            await self._statuses.close()

        try:
            await asyncio.wait_for(asyncio.shield(writes()), timeout)
            written = True
        except TimeoutError:
            written = False
        left = 10.0 if stop is None else max(0.0, stop - time.monotonic())
        await self._recorder.close(deadline=min(10.0, left))
        return written

    def submit(self, plan: Plan) -> ApplyResult:
        """Queue a plan whose only Skyhook-wide actions are statuses (`not plan.needs_quiet`),
        as `plan_order` splits it."""
        order = plan_order(plan)
        assert not order.in_order, "a Skyhook-wide plan goes through apply()"
        return ApplyResult(queued=self._queue(order, plan))

    def pending_writes(self) -> dict[str, tuple[Action, ...]]:
        """Per node, the actions of its lanes queued, waiting for their gate or going out,
        oldest first (`LaneSchedule.listed`): the snapshot replays them."""
        return self._schedule.listed()

    def pending_statuses(self) -> dict[str, list[Mapping[str, Any]]]:
        """Status patches decided but not written yet, per Skyhook, oldest first."""
        return self._statuses.pending()

    def without_held(self, plan: Plan, generations: Mapping[str, int]) -> Plan:
        """`plan` without the writes refused as invalid for their Skyhook's current spec."""
        return self._refusals.without_held(plan, generations)

    def emit_event(self, action: EmitEvent) -> None:
        """Events are best-effort and order-free: posted in the background, never waited for,
        so they add nothing to a pass's latency; the recorder aggregates repeats."""
        subject = events.Subject(kind=action.kind, name=action.name)
        self._recorder.record(
            events.Event(subject, action.reason, action.message, action.type, action.action)
        )

    def record_event(self, event: events.Event) -> None:
        """An Event about an object outside the plan (the carry-over's), posted likewise."""
        self._recorder.record(event)

    # --- node lanes, in the schedule's order --------------------------------------------------

    def _queue(self, order: PlanOrder, plan: Plan) -> int:
        """Send the plan's Events, queue its lanes and its statuses behind the lanes that
        report (`Queued.reported`); the number of actions queued, not dropped."""
        for event in order.events:
            self.emit_event(event)
        run = _Run()
        queued = self._queue_lanes(order.lanes, plan, run)
        if order.statuses:
            self._statuses.add(list(order.statuses), run.lanes_done)
        self._update_idle()
        return len(order.statuses) + queued

    def _queue_lanes(self, lanes: Mapping[str, Sequence[Action]], plan: Plan, run: _Run) -> int:
        if not lanes:
            run.lanes_done.set()
            return 0
        queued = self._schedule.queue(lanes, plan.starting, plan.releasing)
        run.awaited = queued.reported
        if not run.awaited:
            run.lanes_done.set()
        for lane in queued.lanes:
            self._runs[lane] = run
            self._queued += len(lane.actions)
        for lane in queued.dropped:
            self._dropped(lane)
        if queued.dropped:
            self._report(failed=True)
        self._send_ready()
        return sum(len(lane.actions) for lane in queued.lanes) - sum(
            len(lane.actions) for lane in queued.dropped
        )

    def _send_ready(self) -> None:
        """Start sending the lanes the schedule has ready, up to `concurrency` at once."""
        while not self._closing.is_set() and len(self._sending) < self._concurrency:
            lane = self._schedule.take()
            if lane is None:
                return
            task = asyncio.create_task(self._send_lane(lane), name=f"lane-{lane.node}")
            self._sending.add(task)

    async def _send_lane(self, lane: Lane) -> None:
        run = self._runs.pop(lane)
        ok = False
        try:
            ok = await self._send_actions(lane.actions, run)
        except Exception:  # a lane reports its own failures; this is a bug, keep writing
            log.exception("writer lane crashed")
        finally:
            self._sending.discard(asyncio.current_task())
            run.lane_done(lane)
            if not ok:
                self._failures += 1
                log.info("node %s: a write failed, the next pass re-plans it", lane.node)
            for dropped in self._schedule.done(lane, ok):
                self._dropped(dropped)
            self._update_idle()
            if ok and lane.node in self._schedule.pending:  # the node's next lane reports
                if _changes_state(lane):
                    self._unreported.add(lane.node)
            elif not ok or _changes_state(lane) or lane.node in self._unreported:
                self._unreported.discard(lane.node)
                self._report(failed=not ok)
            self._send_ready()

    def _dropped(self, lane: Lane) -> None:
        """A lane dropped unsent: planned on top of a write that did not land."""
        log.info("node %s: lane dropped, planned on top of a write that failed", lane.node)
        self._failures += 1
        self._queued = max(0, self._queued - len(lane.actions))
        run = self._runs.pop(lane, None)
        if run is not None:
            run.lane_done(lane)

    async def _send_actions(self, actions: Sequence[Action], run: _Run) -> bool:
        """Send a lane's actions in order; stop at the first that fails (the next pass re-plans
        from the node as it is)."""
        for i, action in enumerate(actions):
            if not await self._send(action, run):
                skipped = len(actions) - i - 1
                self._queued = max(0, self._queued - skipped)
                run.attempted += skipped
                return False
        return True

    async def _send(self, action: Action, run: _Run) -> bool:
        """Send a queued action (it leaves the queue depth)."""
        self._queued = max(0, self._queued - 1)
        return await self._write(action, run)

    async def _write(self, action: Action, run: _Run) -> bool:
        run.attempted += 1
        try:
            if isinstance(action, EvictPod):  # handed on, nothing to wait for
                self._evict(action)
            elif isinstance(action, EmitEvent):
                self.emit_event(action)
            else:
                await self._verbs.send(action)
        except (ApiError, OSError) as error:
            if isinstance(error, TaintRefused) and isinstance(action, PatchNode):
                self.emit_event(_taint_refused(action, error))
            elif isinstance(error, ApiError) and error.status == 422:
                said = self._refusals.refused(action, error)
                if said is not None:
                    self.emit_event(said)
            log.warning("%s failed, the next pass re-plans: %s", type(action).__name__, error)
            run.result.failures.append(f"{type(action).__name__}: {error}")
            return False
        self._refusals.written(action)
        run.result.applied += 1
        return True

    async def _send_status(self, action: PatchSkyhookStatus) -> bool:
        return await self._write(action, _Run())  # counted as unsent by the status writer

    def _status_failed(self) -> None:
        self._failures += 1
        self._report(failed=True)

    def _report(self, failed: bool) -> None:
        try:
            self.on_written(failed)
        except Exception:  # a callback must never take a writer task down
            log.exception("after-write callback failed")

    # --- Skyhook-wide plans, in order -----------------------------------------------------------

    async def apply(self, plan: Plan) -> ApplyResult:
        """Apply a plan that changes a Skyhook as a whole, with nothing else in flight: the
        steps `plan_order` puts in order, each once every one before it landed, then, if they
        all did, the rest queued as `submit` queues a plan (a new Skyhook's first pass: its
        finalizer and package ConfigMaps, then every node's lane in the background)."""
        order = plan_order(plan)
        result = await self._send_in_order(order.in_order)
        if result.ok:
            result.queued = self._queue(order, plan)
        return result

    async def _send_in_order(self, steps: Sequence[Step]) -> ApplyResult:
        """Send each step once the one before it landed; stop at the first failed write."""
        run = _Run()
        limit = asyncio.Semaphore(self._concurrency)

        async def send(actions: Sequence[Action]) -> None:
            async with limit:
                await self._send_actions(actions, run)

        total = sum(_size(step) for step in steps)
        self._queued += total
        for step in steps:
            if not run.result.ok:
                break
            if isinstance(step, Wave):
                await asyncio.gather(*(send(actions) for actions in step.lanes.values()))
            else:
                await self._send(step, run)
        # What a failure skipped is no longer queued.
        self._queued = max(0, self._queued - (total - run.attempted))
        return run.result


def _taint_refused(action: PatchNode, error: Exception) -> EmitEvent:
    """The Warning on the node when the runtime-required taint (the only taint the planner
    adds, for autoTaintNewNodes) could not be written; the next pass tries it again."""
    taints = ", ".join(str(t) for t in action.add_taints)
    message = (
        f"could not taint node [{action.name}] with [{taints}]: {error}; no stage starts on "
        f"it until the taint is written, tried again every pass"
    )
    return EmitEvent("Node", action.name, "AutoTaint", message, "Warning", "TaintNode")


def _changes_state(lane: Lane) -> bool:
    """Whether the lane writes something a pass reads. Pods handed to the evictor and Events
    do not: the evictor wakes the reconciler itself once a pod is gone or its removal refused,
    so a drain that waits plans again on its own schedule, not at once after every pass."""
    return any(not isinstance(action, EvictPod | EmitEvent) for action in lane.actions)


def _size(step: Step) -> int:
    return sum(map(len, step.lanes.values())) if isinstance(step, Wave) else 1
