"""Applies a plan's Actions to the cluster as idempotent, conflict-aware writes.

Idempotent: creating what exists (409) and deleting what is gone (404) count as done, and
every patch states the end result (a merge patch of keys, a taint list computed from the
node as it is now), so applying an action twice changes nothing.

Conflict-aware: writes that replace a list (taints, finalizers) are preconditioned on the
resourceVersion they were computed from and recomputed from a fresh read on conflict.
Annotation and label writes are per-key merge patches and need no precondition: the planner
owns those keys.

Order and speed: a plan of node lanes is only queued (`submit`), and the next pass plans
while it is written, from a snapshot that replays every queued node write (`pending_writes`)
and status patch (`pending_statuses`); it may queue more lanes for a node whose earlier ones
have not gone out. The writer keeps the order that planning assumed:

- Chains. Actions about one node (its patch, metadata ConfigMap, pods, events) form that
  node's lane in a plan (`model.actions.lane_of`). A node's lanes, from every plan, wait in
  the node's chain and go out one at a time in submission order. Chains of different nodes
  run concurrently (`concurrency` worker tasks on the event loop), the chain holding the most
  urgent lane first.
- Failures. When an action fails, the rest of its lane is skipped and the lanes queued behind
  it in the chain are dropped unsent (they were planned on top of it), and so is a lane
  submitted later by a plan made from a snapshot that still replayed the failed write. The
  next pass re-plans the node from the node as it is.
- The budget gate. A lane that starts a node waits until every release queued before it, in
  any plan, is done, and is dropped if one of them failed: a watcher never counts more nodes
  in progress than the budget.

Statuses go out after their plan's lanes. A plan with actions about a Skyhook as a whole
(package ConfigMaps, finalizers) is written in order with nothing else in flight, those
actions being barriers (`apply`).

Every object the API returns is handed to the snapshot overlays (read-your-writes).
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from skyhook_operator.kube import events
from skyhook_operator.kube.client import (
    APPLY_PATCH,
    FIELD_MANAGER,
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    ApiError,
    AsyncKube,
    Json,
)
from skyhook_operator.store import ClusterStore, ObjectKey
from skyhook_planner.model.actions import (
    Action,
    AddFinalizer,
    AnnotateSkyhook,
    CreatePod,
    DeleteConfigMap,
    DeletePod,
    EmitEvent,
    EvictPod,
    PatchNode,
    PatchSkyhookStatus,
    Plan,
    RemoveFinalizer,
    UpsertConfigMap,
    lane_of,
    skyhook_wide,
)
from skyhook_planner.model.snapshot import WriteRefusal
from skyhook_planner.model.spec import normalising_patch
from skyhook_planner.model.status import compose_merge_patches
from skyhook_planner.model.vocabulary import Taint
from skyhook_schemas import keys

log = logging.getLogger(__name__)

_CONFLICT_RETRIES = 5
# A deletion we cannot date hides the watch's copy until the watch drops the object.
_GONE = 1 << 62


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
    failed_lanes: set[str] = field(default_factory=set)
    attempted: int = 0


class _Countdown:
    """Calls `then` once, when `tick` has been called `count` times (or at `open`)."""

    def __init__(self, count: int, then: Callable[[], None]) -> None:
        self._left = count
        self._then = then

    def tick(self) -> None:
        self._left -= 1
        if self._left == 0:
            self._then()

    def open_if_empty(self) -> None:
        """Call `then` now when there was nothing to count."""
        if self._left == 0:
            self._then()


@dataclass(eq=False)
class _Gate:
    """What the starting lanes of one plan wait for: every release queued before them."""

    left: int  # those releases not done yet
    lanes: list[_Lane] = field(default_factory=list)
    failed: bool = False  # one of them failed: the lanes were dropped

    @property
    def open(self) -> bool:
        return self.left == 0 and not self.failed


@dataclass(eq=False)
class _Lane:
    """One plan's actions about one node, in that node's chain until done with."""

    node: str
    actions: tuple[Action, ...]
    priority: int
    run: _Run
    then: Callable[[], None]  # once done with: written, failed or dropped
    gate: _Gate | None = None  # set for a lane that starts its node
    order: int = 0  # submission order, to tell what a `pending_writes` call listed

    @property
    def ready(self) -> bool:
        return self.gate is None or self.gate.open


@dataclass(eq=False)
class _Chain:
    """A node's lanes, oldest first; the first is going out (`running`) or next."""

    node: str
    lanes: list[_Lane] = field(default_factory=list)
    running: bool = False
    # The most urgent entry queued for the chain since it last started a lane: a lane joining
    # at a more urgent priority queues another one (the older entries find nothing to do).
    queued_at: int | None = None


# Seconds between two status writes: more often, a status write per pass would cost about one
# request per node-stage at fleet scale; less often, `kubectl get skyhooks` lags behind.
STATUS_INTERVAL = 1.0

# Lane priorities: hand-offs and releases first, admissions after them, bookkeeping last.
_URGENT, _STARTING, _LATER = 0, 1, 2


Job = Callable[[], Awaitable[None]]


class _Workers:
    """Worker tasks that take the most urgent queued job first (then the oldest): a node
    chain's turn, or a lane `apply` writes at once; started on the event loop of the first."""

    def __init__(self, count: int) -> None:
        self._count = count
        self._queue: asyncio.PriorityQueue[tuple[int, int, Job | None]] = asyncio.PriorityQueue()
        self._order = itertools.count()
        self._tasks: list[asyncio.Task[None]] = []

    def submit(self, priority: int, job: Job) -> None:
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._work(), name=f"writer-{i}") for i in range(self._count)
            ]
        self._queue.put_nowait((priority, next(self._order), job))

    async def close(self) -> None:
        """Let running lanes finish; queued ones are dropped (the next leader re-plans)."""
        for _ in self._tasks:
            self._queue.put_nowait((-1, next(self._order), None))
        await asyncio.gather(*self._tasks)

    async def _work(self) -> None:
        while True:
            _, _, job = await self._queue.get()
            if job is None:
                return
            try:
                await job()
            except Exception:  # a lane reports its own failures; this is a bug, keep working
                log.exception("writer lane crashed")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Writer:
    """Applies plans; one instance per process, shared by every pass, on the event loop.

    Two ways in. `submit` (a plan with only node lanes, statuses and events) appends each lane
    to its node's chain and returns at once: the next pass plans meanwhile, from the writes
    `pending_writes` lists, and a node's next stage waits for that node's own writes, not for
    a whole pass. `apply` (a plan that changes a Skyhook as a whole; the reconciler calls it
    only when nothing is `in_flight`) writes in order up to the plan's last Skyhook-wide
    action and queues the rest as `submit` does.
    """

    def __init__(
        self,
        kube: AsyncKube,
        store: ClusterStore,
        evict: Callable[[EvictPod], object],
        concurrency: int = 16,
        event_interval: float = 30.0,
    ) -> None:
        self._kube = kube
        self._store = store
        self._evict = evict  # starts a pod's eviction unless it is under way
        self._workers = _Workers(concurrency)
        self._recorder = events.Recorder(kube, events.Correlator(min_interval=event_interval))
        self._queued = 0  # actions handed to the writer that have not been attempted yet
        self._chains: dict[str, _Chain] = {}  # nodes with lanes queued, gated or going out
        # Each chain's actions, oldest first, kept as chains change: what `pending_writes` lists.
        self._pending: dict[str, tuple[Action, ...]] = {}
        # Releasing lanes not done with yet, each with the gates waiting for it.
        self._releases: dict[_Lane, list[_Gate]] = {}
        self._submitted = 0  # lanes submitted so far: the next one's `order`
        self._listed_upto = 0  # lanes up to this `order` were listed by `pending_writes`
        # Nodes whose listed lane failed since `pending_writes` was last called.
        self._failed_since_listed: set[str] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        # Submitted status patches, oldest first, each with its plan's "lanes done" event.
        self._unsent: list[tuple[PatchSkyhookStatus, asyncio.Event]] = []
        self._status_written = 0.0  # time.monotonic() of the last status write
        self._statuses: asyncio.Queue[tuple[PatchSkyhookStatus, asyncio.Event] | None] = (
            asyncio.Queue()
        )
        self._status_task: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()
        self._generations: Mapping[str, int] = {}  # each Skyhook's, as the last plan saw it
        # Called when a node's lanes are all written (False) or a write failed (True).
        self.on_written: Callable[[bool], None] = lambda failed: None

    @property
    def queue_depth(self) -> int:
        """Actions handed to the writer that have not been attempted yet."""
        return self._queued

    @property
    def in_flight(self) -> bool:
        """Whether any lane or status patch is queued, waiting for its gate or going out."""
        return bool(self._chains or self._unsent)

    async def drain(self) -> None:
        """Wait until nothing is in flight."""
        await self._idle.wait()

    def _update_idle(self) -> None:
        if self.in_flight:
            self._idle.clear()
        else:
            self._idle.set()

    async def close(self, timeout: float | None = None) -> bool:
        """Stop: lanes going out finish, queued ones are dropped (the next leader re-plans),
        statuses still waiting for their lanes are not written, Events still waiting are
        sent. True once that is done; with a `timeout`, False if it is not done by then,
        what is left going on as tasks: a stopping operator must exit within its pod's grace
        period whatever the apiserver does. Events never hold the answer back (they are
        best-effort): they get what is left of `timeout` once the writes are done.
        """
        self._closing.set()
        stop = None if timeout is None else time.monotonic() + timeout

        async def writes() -> None:
            await self._workers.close()
            self._statuses.put_nowait(None)
            if self._status_task is not None:
                await self._status_task

        try:
            await asyncio.wait_for(asyncio.shield(writes()), timeout)
            written = True
        except TimeoutError:
            written = False
        left = 10.0 if stop is None else max(0.0, stop - time.monotonic())
        await self._recorder.close(deadline=min(10.0, left))
        return written

    def submit(self, plan: Plan) -> ApplyResult:
        """Queue a plan whose only Skyhook-wide actions are statuses (`not plan.needs_quiet`).

        Its Skyhook status patches go out after every lane of the plan is done with (a status
        never reports nodes ahead of their own annotations), one plan after another; until
        then `pending_statuses` lists them, so the next pass plans from the status this one
        decided.
        """
        assert not plan.needs_quiet, "a Skyhook-wide plan goes through apply()"
        lanes: dict[str, list[Action]] = {}
        statuses: list[PatchSkyhookStatus] = []
        for action in plan.actions:
            if isinstance(action, PatchSkyhookStatus):
                statuses.append(action)
            elif isinstance(action, EmitEvent):
                self.emit_event(action)
            else:
                lanes.setdefault(lane_of(action) or "", []).append(action)
        written = asyncio.Event()
        if statuses:
            self._queued += len(statuses)
            self._unsent += [(status, written) for status in statuses]
            self._update_idle()
            if self._status_task is None:
                self._status_task = asyncio.create_task(self._write_statuses(), name="statuses")
            self._statuses.put_nowait((statuses[0], written))
        queued = self._queue_lanes(lanes, plan, _Countdown(len(lanes), written.set))
        return ApplyResult(queued=len(statuses) + queued)

    def pending_writes(self) -> dict[str, tuple[Action, ...]]:
        """Per node, the actions of its lanes queued, waiting for their gate or going out,
        oldest first, as submitted: the snapshot replays them. A lane's actions are listed
        until it is done with (written, failed or dropped); a node's tuple stays the same
        object from one call to the next while its chain does not change.

        Each call opens a new window: a lane submitted for a node whose listed lane failed
        since is dropped (it was planned from a snapshot that replayed the failed write)."""
        self._listed_upto = self._submitted
        self._failed_since_listed.clear()
        return dict(self._pending)

    def pending_statuses(self) -> dict[str, list[Mapping[str, Any]]]:
        """Status patches decided but not written yet, per Skyhook, oldest first."""
        pending: dict[str, list[Mapping[str, Any]]] = {}
        for action, _ in self._unsent:
            pending.setdefault(action.name, []).append(action.patch)
        return pending

    async def _write_statuses(self) -> None:
        """One plan after another: once the plan's lanes are done and `STATUS_INTERVAL` has
        passed since the last status write (at once if the Skyhook's phase changes), write its
        statuses together with those of later plans whose lanes are done too, one merged patch
        per Skyhook (a pass every few hundred milliseconds need not mean a status write
        each)."""
        while (item := await self._statuses.get()) is not None:
            first, lanes_done = item
            if not await _first_set(lanes_done, self._closing):
                return
            if not self._unsent or self._unsent[0][0] is not first:
                continue  # written with an earlier plan's statuses
            # A change of phase (complete, in_progress, ...) goes out at once: watchers act
            # on it.
            pause = self._status_written + STATUS_INTERVAL - time.monotonic()
            if pause > 0 and not self._closing.is_set() and "status" not in first.patch:
                await asyncio.sleep(pause)
            done = 0
            while done < len(self._unsent) and self._unsent[done][1].is_set():
                done += 1
            batch: dict[str, list[Mapping[str, Any]]] = {}
            for action, _ in self._unsent[:done]:
                batch.setdefault(action.name, []).append(action.patch)
            run = _Run()
            for name, patches in batch.items():
                patch = compose_merge_patches(patches)
                await self._run_one(PatchSkyhookStatus(name, patch), run, lane=None)
            self._status_written = time.monotonic()
            del self._unsent[:done]  # only this task removes, oldest first
            self._queued = max(0, self._queued - (done - len(batch)))
            self._update_idle()
            if not run.result.ok:  # a written status wakes the loop through the Skyhook's watch
                self._report(failed=True)

    def _queue_lanes(
        self, lanes: Mapping[str, list[Action]], plan: Plan, all_done: _Countdown
    ) -> int:
        """Append each lane to its node's chain; the number of actions queued, not dropped."""
        if not lanes:
            all_done.open_if_empty()
            return 0
        run = _Run()
        made = [
            self._lane(node, actions, plan, run, all_done.tick) for node, actions in lanes.items()
        ]
        starts = [lane for lane in made if lane.node in plan.starting]
        # This plan's releases count for its starts as those of earlier plans do. A lane that
        # both releases and starts its node waits like a start and is waited for by later ones.
        for lane in made:
            if lane.node in plan.releasing and lane.node not in plan.starting:
                self._releases[lane] = []
        if starts and self._releases:  # with none outstanding, the starts need no gate
            gate = _Gate(left=len(self._releases), lanes=starts)
            for gates in self._releases.values():
                gates.append(gate)
            for lane in starts:
                lane.gate = gate
        for lane in starts:
            if lane.node in plan.releasing:
                self._releases[lane] = []
        queued = [lane for lane in made if self._enqueue(lane)]
        if len(queued) < len(made):
            self._report(failed=True)
        return sum(len(lane.actions) for lane in queued)

    def _lane(
        self, node: str, actions: Sequence[Action], plan: Plan, run: _Run, then: Callable[[], None]
    ) -> _Lane:
        """`plan`'s lane for `node`, at its priority: releases and hand-offs first, then
        starts, then bookkeeping."""
        if node in plan.releasing:
            priority = _URGENT
        elif node in plan.starting:
            priority = _STARTING
        elif any(isinstance(a, CreatePod | DeletePod | EvictPod) for a in actions):
            priority = _URGENT  # a hand-off
        else:
            priority = _LATER
        self._submitted += 1
        return _Lane(node, tuple(actions), priority, run, then, order=self._submitted)

    def _enqueue(self, lane: _Lane) -> bool:
        """Append `lane` to its node's chain; False if it is dropped instead, planned on top of
        a write that did not land."""
        if lane.node in self._failed_since_listed or (lane.gate is not None and lane.gate.failed):
            log.info("node %s: lane dropped, planned on top of a write that failed", lane.node)
            self._done_with(lane, ok=False)
            return False
        self._queued += len(lane.actions)
        chain = self._chains.get(lane.node)
        if chain is None:
            chain = self._chains[lane.node] = _Chain(lane.node)
        chain.lanes.append(lane)
        self._settle(chain)
        return True

    def _settle(self, chain: _Chain) -> None:
        """After a chain changed: list what is left in it and let a worker take its next lane,
        or forget it once it is empty."""
        if chain.lanes:
            self._pending[chain.node] = tuple(a for lane in chain.lanes for a in lane.actions)
            self._wake(chain)
        elif self._chains.get(chain.node) is chain:
            del self._chains[chain.node]
            del self._pending[chain.node]
        self._update_idle()

    def _wake(self, chain: _Chain) -> None:
        """Queue the chain for the workers at the most urgent priority among its lanes, unless
        an entry at least that urgent is queued: a bookkeeping lane ahead of a hand-off for the
        same node goes out as urgently as the hand-off."""
        if chain.running or not chain.lanes or not chain.lanes[0].ready:
            return
        priority = min(lane.priority for lane in chain.lanes)
        if chain.queued_at is None or priority < chain.queued_at:
            chain.queued_at = priority
            self._workers.submit(priority, functools.partial(self._run_next, chain))

    async def _run_next(self, chain: _Chain) -> None:
        """A worker's turn for `chain`: write its first lane, unless an earlier entry has it
        going out already, or it waits for its gate (opening the gate queues the chain)."""
        if chain.running or not chain.lanes or not chain.lanes[0].ready:
            return
        lane = chain.lanes[0]
        chain.running, chain.queued_at = True, None
        ok = False
        try:
            await self._run_lane(lane.node, lane.actions, run=lane.run)
            ok = lane.node not in lane.run.failed_lanes
        finally:
            chain.running = False
            del chain.lanes[0]
            self._done_with(lane, ok)
            if ok:
                self._settle(chain)
            else:
                self._drop(chain, 0)  # the rest was planned on top of this lane
            if not ok or not chain.lanes:  # otherwise the chain's next lane reports
                self._report(failed=not ok)

    def _drop(self, chain: _Chain, first: int) -> None:
        """Drop the chain's lanes from index `first` on, unsent."""
        dropped = chain.lanes[first:]
        del chain.lanes[first:]
        if dropped:
            log.info(
                "node %s: %d queued lane(s) dropped, planned on top of a failed write",
                chain.node,
                len(dropped),
            )
        for lane in dropped:
            self._queued = max(0, self._queued - len(lane.actions))
            self._done_with(lane, ok=False)
        self._settle(chain)

    def _done_with(self, lane: _Lane, ok: bool) -> None:
        """Once a lane is written, failed or dropped: count it for its plan, and open the
        gates that waited for it (or drop their starts, if it did not land)."""
        if not ok and lane.order <= self._listed_upto:
            self._failed_since_listed.add(lane.node)
        lane.then()
        for gate in self._releases.pop(lane, ()):
            if gate.failed:
                continue
            gate.left -= 1
            if not ok:
                self._fail(gate)
            elif gate.open:
                for start in gate.lanes:
                    if (chain := self._chains.get(start.node)) is not None:
                        self._wake(chain)
                gate.lanes = []  # lane -> gate -> lanes is a cycle: break it once it is used

    def _fail(self, gate: _Gate) -> None:
        """A release the gate waited for did not land: drop its starts and what their chains
        hold after them (a start not queued yet is dropped when it is)."""
        gate.failed = True
        for start in gate.lanes:
            chain = self._chains.get(start.node)
            if chain is not None and start in chain.lanes:
                self._drop(chain, chain.lanes.index(start))
        gate.lanes = []

    def _report(self, failed: bool) -> None:
        try:
            self.on_written(failed)
        except Exception:  # a callback must never take a writer task down
            log.exception("after-write callback failed")

    async def apply(self, plan: Plan) -> ApplyResult:
        """Apply a plan that changes a Skyhook as a whole, with nothing else in flight: in
        order up to its last Skyhook-wide action (a barrier: every lane before one finishes
        first; within a stretch of lanes, the nodes the plan starts go after the others), then
        the rest is queued as `submit` queues a plan (a new Skyhook's first pass: its
        finalizer and package ConfigMaps, then every node's lane in the background)."""
        barriers = [i for i, a in enumerate(plan.actions) if skyhook_wide(a)]
        cut = barriers[-1] + 1 if barriers else 0
        result = await self._apply_in_order(replace(plan, actions=plan.actions[:cut]))
        if result.ok and cut < len(plan.actions):
            result.queued = self.submit(replace(plan, actions=plan.actions[cut:])).queued
        return result

    async def _apply_in_order(self, plan: Plan) -> ApplyResult:
        self._queued += len(plan.actions)
        run = _Run()
        lanes: dict[str, list[Action]] = {}
        for action in plan.actions:
            lane = lane_of(action)
            if lane is not None:
                lanes.setdefault(lane, []).append(action)
                continue
            await self._run_segment(lanes, plan.starting, run)
            lanes = {}
            if run.result.ok:
                await self._run_one(action, run, lane=None)
            if not run.result.ok:
                break
        else:
            await self._run_segment(lanes, plan.starting, run)
        # What a failure skipped is no longer queued.
        self._queued = max(0, self._queued - (len(plan.actions) - run.attempted))
        return run.result

    async def _run_segment(
        self, lanes: Mapping[str, list[Action]], starting: Collection[str], run: _Run
    ) -> None:
        releasing = [(lane, actions) for lane, actions in lanes.items() if lane not in starting]
        admitting = [(lane, actions) for lane, actions in lanes.items() if lane in starting]
        for group in (releasing, admitting):
            await self._run_and_wait(group, run)

    async def _run_and_wait(self, lanes: Sequence[tuple[str, Sequence[Action]]], run: _Run) -> None:
        """Write the lanes now, past the chains (nothing else is in flight), and wait."""
        finished = asyncio.Event()
        done = _Countdown(len(lanes), finished.set)
        for lane, actions in lanes:

            async def job(lane: str = lane, actions: Sequence[Action] = actions) -> None:
                try:
                    await self._run_lane(lane, actions, run=run)
                finally:
                    done.tick()

            self._workers.submit(_URGENT, job)
        done.open_if_empty()
        await finished.wait()

    async def _run_lane(self, lane: str, actions: Sequence[Action], *, run: _Run) -> None:
        for action in actions:
            await self._run_one(action, run, lane)

    def without_held(self, plan: Plan, generations: Mapping[str, int]) -> Plan:
        """`plan` without the writes the apiserver refused as invalid for the current spec of
        their Skyhook (`generations`), nor what their node's lane holds after them: a refused
        write is sent once per spec, not every pass (the Skyhook's status names it)."""
        self._generations = dict(generations)
        refusals = self._store.refusals
        stopped: set[str] = set()
        kept: list[Action] = []
        for action in plan.actions:
            lane = lane_of(action)
            if lane is not None and lane in stopped:
                continue
            key = _object_of(action)
            if key is not None and refusals.held(key, generations):
                if lane is not None:
                    stopped.add(lane)
                continue
            kept.append(action)
        return plan if len(kept) == len(plan.actions) else replace(plan, actions=tuple(kept))

    def _refused(self, action: Action, error: ApiError) -> None:
        """The apiserver refused the write as invalid (422): record it for the planner and
        the next passes, and say so once in a Warning Event on the Skyhook."""
        key, skyhook = _object_of(action), _skyhook_of(action)
        if key is None or not skyhook:
            return
        refusal = WriteRefusal(
            skyhook, *key, message=error.reason, generation=self._generations.get(skyhook, 0)
        )
        if not self._store.refusals.refused(refusal):
            return
        fields = ", ".join(error.fields) or "a field it did not name"
        message = (
            f"{refusal.object}: the apiserver refused {fields}, not sent again until the "
            f"spec changes: {error.reason}"
        )
        log.warning("Skyhook %s: %s", skyhook, message)
        self.emit_event(EmitEvent("Skyhook", skyhook, "WriteRefused", message, "Warning"))

    async def _run_one(self, action: Action, run: _Run, lane: str | None) -> None:
        self._queued = max(0, self._queued - 1)
        run.attempted += 1
        if lane is not None and lane in run.failed_lanes:
            return  # an earlier action for this node failed: the next pass re-plans it
        try:
            await self._dispatch(action)
        except (ApiError, OSError) as error:
            if isinstance(error, ApiError) and error.status == 422:
                self._refused(action, error)
            log.warning("%s failed, the next pass re-plans: %s", type(action).__name__, error)
            run.result.failures.append(f"{type(action).__name__}: {error}")
            if lane is not None:
                run.failed_lanes.add(lane)
            return
        key = _object_of(action)
        if key is not None:
            self._store.refusals.written(key)
        run.result.applied += 1

    async def _dispatch(self, action: Action) -> None:
        if isinstance(action, EvictPod | EmitEvent):  # handed on, nothing to wait for
            if isinstance(action, EvictPod):
                self.evict_pod(action)
            else:
                self.emit_event(action)
            return
        handlers: dict[type, Callable[[Any], Awaitable[None]]] = {
            PatchNode: self.patch_node,
            CreatePod: self.create_pod,
            DeletePod: self.delete_pod,
            UpsertConfigMap: self.upsert_configmap,
            DeleteConfigMap: self.delete_configmap,
            PatchSkyhookStatus: self.patch_skyhook_status,
            AddFinalizer: self.add_finalizer,
            RemoveFinalizer: self.remove_finalizer,
            AnnotateSkyhook: self.annotate_skyhook,
        }
        await handlers[type(action)](action)

    # --- nodes ------------------------------------------------------------------------------

    async def patch_node(self, action: PatchNode) -> None:
        """One request in the common case: metadata and conditions go together through
        nodes/status (whose patches may change metadata, never spec). A spec change
        (cordon, uncordon) needs the node itself, and the conditions then follow on /status."""
        metadata: Json = {}
        if action.annotations:
            metadata["annotations"] = dict(action.annotations)
        if action.labels:
            metadata["labels"] = dict(action.labels)
        conditions = _conditions_patch(action)
        if action.unschedulable is not None:
            body: Json = {"spec": {"unschedulable": action.unschedulable}}
            if metadata:
                body["metadata"] = metadata
            path = self._kube.node_path(action.name)
            self._store.nodes.wrote(await self._kube.request("PATCH", path, body, MERGE_PATCH))
            metadata = {}
        if metadata or conditions:
            body = {"metadata": metadata} if metadata else {}
            if conditions:
                body["status"] = {"conditions": conditions}
            path = self._kube.node_path(action.name, "status")
            # Strategic merge: conditions merge by `type`; `$patch: delete` drops one.
            answer = await self._kube.request("PATCH", path, body, STRATEGIC_MERGE_PATCH)
            self._store.nodes.wrote(answer)
        # Taints after the state: a taint removed because the node completed must never be
        # seen gone while the node still reads incomplete.
        if action.add_taints or action.remove_taints:
            taints = await self._patch_taints(self._kube.node_path(action.name), action)
            self._store.nodes.wrote(taints)

    async def _patch_taints(self, path: str, action: PatchNode) -> Json:
        """Replace spec.taints with the wanted list, retried on a concurrent change."""
        for attempt in range(_CONFLICT_RETRIES):
            node = await self._kube.request("GET", path)
            current = [Taint.from_api(t) for t in node.get("spec", {}).get("taints") or ()]
            wanted = _wanted_taints(current, action.add_taints, action.remove_taints)
            if wanted == current:
                return node
            patch = [
                {
                    "op": "test",
                    "path": "/metadata/resourceVersion",
                    "value": node["metadata"]["resourceVersion"],
                },
                {"op": "add", "path": "/spec/taints", "value": [t.to_api() for t in wanted]},
            ]
            try:
                return await self._kube.request("PATCH", path, patch, JSON_PATCH)
            except ApiError as error:
                if error.status == 422 and attempt == _CONFLICT_RETRIES - 1:
                    # The `test` of the resourceVersion kept failing: a conflict, not a
                    # node the apiserver refuses.
                    raise ApiError(409, error.reason, "PATCH", path) from error
                if error.status not in (409, 422) or attempt == _CONFLICT_RETRIES - 1:
                    raise
                log.debug("taints of %s changed meanwhile, recomputing", path)
        raise AssertionError("unreachable")

    # --- pods -------------------------------------------------------------------------------

    async def create_pod(self, action: CreatePod) -> None:
        path = self._kube.namespaced_path("pods", action.namespace)
        try:
            self._store.pods.wrote(
                await self._kube.request("POST", path, action.manifest), created=True
            )
        except ApiError as error:
            if error.status != 409:
                raise

    async def delete_pod(self, action: DeletePod) -> None:
        path = self._kube.namespaced_path("pods", action.namespace, action.name)
        try:
            answer = await self._kube.request("DELETE", path)
        except ApiError as error:
            if error.status != 404:
                raise
            answer = {"kind": "Status"}
        if action.reason:
            log.info("deleted pod %s/%s: %s", action.namespace, action.name, action.reason)
        if answer.get("kind") == "Pod":
            self._store.pods.wrote(answer)  # still terminating: deletionTimestamp set
        else:
            self._store.pods.deleted(action.namespace, action.name, _GONE)

    def evict_pod(self, action: EvictPod) -> None:
        self._evict(action)

    # --- configmaps -------------------------------------------------------------------------

    async def upsert_configmap(self, action: UpsertConfigMap) -> None:
        manifest = {"apiVersion": "v1", "kind": "ConfigMap", **action.manifest}
        namespace = manifest["metadata"]["namespace"]
        path = self._kube.namespaced_path("configmaps", namespace, action.name)
        query = {"fieldManager": FIELD_MANAGER, "force": "true"}
        answer = await self._kube.request("PATCH", path, manifest, APPLY_PATCH, query=query)
        self._store.configmaps.wrote(answer, created=True)

    async def delete_configmap(self, action: DeleteConfigMap) -> None:
        path = self._kube.namespaced_path("configmaps", action.namespace, action.name)
        try:
            await self._kube.request("DELETE", path)
        except ApiError as error:
            if error.status != 404:
                raise
        self._store.configmaps.deleted(action.namespace, action.name, _GONE)

    # --- skyhooks ---------------------------------------------------------------------------

    async def patch_skyhook_status(self, action: PatchSkyhookStatus) -> None:
        path = self._kube.skyhook_path(action.name, "status")
        try:
            answer = await self._kube.request(
                "PATCH", path, {"status": dict(action.patch)}, MERGE_PATCH
            )
        except ApiError as error:
            if error.status == 404:
                return  # deleted meanwhile: nothing left to report on
            raise
        self._store.skyhooks.wrote(answer)

    async def annotate_skyhook(self, action: AnnotateSkyhook) -> None:
        path = self._kube.skyhook_path(action.name)
        body = {"metadata": {"annotations": dict(action.annotations)}}
        try:
            self._store.skyhooks.wrote(await self._kube.request("PATCH", path, body, MERGE_PATCH))
        except ApiError as error:
            if error.status != 404:
                raise

    async def add_finalizer(self, action: AddFinalizer) -> None:
        # The first write to a new Skyhook also stores its spec in the form it is read in, as
        # upstream's operator does: created without the mutating webhook, its generation
        # becomes 2 here, which upstream's users and checks expect.
        await self._edit_finalizers(
            action.name,
            lambda f: f if action.finalizer in f else [*f, action.finalizer],
            normalise=True,
        )

    async def remove_finalizer(self, action: RemoveFinalizer) -> None:
        await self._edit_finalizers(action.name, lambda f: [x for x in f if x != action.finalizer])

    async def _edit_finalizers(
        self, name: str, edit: Callable[[list[str]], list[str]], *, normalise: bool = False
    ) -> None:
        path = self._kube.skyhook_path(name)
        for attempt in range(_CONFLICT_RETRIES):
            try:
                current = await self._kube.request("GET", path)
            except ApiError as error:
                if error.status == 404:
                    return
                raise
            finalizers = list(current["metadata"].get("finalizers") or [])
            wanted = edit(finalizers)
            if wanted == finalizers:
                return
            body: dict[str, Any] = {
                "metadata": {
                    "finalizers": wanted,
                    "resourceVersion": current["metadata"]["resourceVersion"],
                }
            }
            spec = normalising_patch(current.get("spec") or {}) if normalise else None
            if spec is not None:
                body["spec"] = spec
            try:
                self._store.skyhooks.wrote(
                    await self._kube.request("PATCH", path, body, MERGE_PATCH)
                )
                return
            except ApiError as error:
                if error.status == 404:
                    return
                if error.status != 409 or attempt == _CONFLICT_RETRIES - 1:
                    raise

    def emit_event(self, action: EmitEvent) -> None:
        """Events are best-effort and order-free: posted in the background, never waited for,
        so they add nothing to a pass's latency; the recorder aggregates repeats."""
        subject = events.Subject(kind=action.kind, name=action.name)
        self._recorder.record(events.Event(subject, action.reason, action.message, action.type))


async def _first_set(wanted: asyncio.Event, other: asyncio.Event) -> bool:
    """Wait until `wanted` or `other` is set; True if `wanted` is."""
    if not wanted.is_set() and not other.is_set():
        waits = [asyncio.ensure_future(wanted.wait()), asyncio.ensure_future(other.wait())]
        _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for wait in pending:
            wait.cancel()
    return wanted.is_set()


def _conditions_patch(action: PatchNode) -> list[Json]:
    """The strategic-merge list for status.conditions: upserts, then `$patch: delete` entries."""
    now = _now()
    upserts: list[Json] = [
        {
            "type": c.type,
            "status": c.status,
            "reason": c.reason,
            "message": c.message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        for c in action.conditions
    ]
    return upserts + [{"type": t, "$patch": "delete"} for t in action.remove_conditions]


def _wanted_taints(
    current: Sequence[Taint], add: Sequence[Taint], remove: Sequence[Taint]
) -> list[Taint]:
    """`current` without the removed taints, with the added ones set (same key and effect)."""
    wanted = [t for t in current if not any(t.same_as(r) for r in remove)]
    for taint in add:
        wanted = [t for t in wanted if not t.same_as(taint)]
        wanted.append(taint)
    # Keep the original order for taints that did not change.
    order = {(t.key, t.effect): i for i, t in enumerate(current)}
    return sorted(wanted, key=lambda t: order.get((t.key, t.effect), len(order)))


# Per-Skyhook node keys (`<group>/nodeState_<skyhook>`, ...): what names a node patch's Skyhook.
_NODE_KEY_PREFIXES = tuple(
    key("")
    for key in (
        keys.node_state_key,
        keys.node_status_key,
        keys.cordon_key,
        keys.version_key,
        keys.image_selection_key,
    )
)


def _object_of(action: Action) -> ObjectKey | None:
    """The object a write creates or changes, for those the apiserver may refuse as invalid."""
    if isinstance(action, CreatePod):
        return ("Pod", action.namespace, action.name)
    if isinstance(action, UpsertConfigMap):
        return ("ConfigMap", str(action.manifest["metadata"].get("namespace", "")), action.name)
    if isinstance(action, PatchNode):
        return ("Node", "", action.name)
    return None


def _skyhook_of(action: Action) -> str:
    """The Skyhook a write is for ("" if none can be told)."""
    if isinstance(action, CreatePod | UpsertConfigMap):
        labels = action.manifest["metadata"].get("labels") or {}
        return str(labels.get(keys.NAME_LABEL) or labels.get(keys.NODE_META_LABEL) or "")
    if isinstance(action, PatchNode):
        for key in sorted({**action.annotations, **action.labels}):
            for prefix in _NODE_KEY_PREFIXES:
                if key.startswith(prefix) and len(key) > len(prefix):
                    return key[len(prefix) :]
    return ""
