"""The reconcile loop: snapshot -> planner.plan -> writer, one global pass at a time.

Why one global pass rather than one reconcile per SCR: the decisions are coupled across SCRs.
A node works through its SCRs in (priority, name) order, the runtime-required taint comes off
only when every runtimeRequired SCR is done on the node, and an interrupt waits for any
Skyhook pod on the node whatever its SCR. Per-SCR workers would each see the others'
half-applied writes; one serialized pass over one consistent snapshot keeps every invariant
(budget, one stage per node and package, ordering) true by construction, as upstream's
single worker does.

What makes it cheap where upstream's pass is slow: the snapshot comes from in-memory indexes
(no LIST per pass), planning is pure in-memory work, and only the planner's actions are
written, concurrently per node. A pass does not wait for its writes: it queues them and the
next pass plans while they go out, from a snapshot that shows every queued write as done
(skyhook_planner.model.replay), so a node's next stage waits for that node's own writes, not
for a whole pass of a thousand nodes. The writer keeps each node's writes in order and a start
behind every release queued before it (kube/writer.py). Only a plan that changes a Skyhook as
a whole (finalizers, package ConfigMaps) is planned and written with nothing in flight. Watch
events and finished writes only "poke" the loop; a burst of them within `pass_debounce`
becomes one pass, and a pass that is running when events arrive is followed by exactly one
more. Passes are incremental (the planner's passes/memory.py): a pass re-plans only the nodes
whose inputs changed, so its cost follows the work, not the fleet, and the pause need not
grow with the fleet.

With leader election on, only the leader runs passes: a replica that does not lead waits
before planning (its indexes stay current, so a take-over plans at once), and a leader that
loses the Lease stops at the next pass (its writes are fenced off already, kube/lease.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from skyhook_operator.kube.artifacts import ArtifactResolver
from skyhook_operator.kube.lease import LeaderElector
from skyhook_operator.kube.prometheus import AlertPoller
from skyhook_operator.kube.writer import ApplyResult, Writer
from skyhook_operator.observability import Telemetry
from skyhook_operator.settings import Settings
from skyhook_operator.store import ClusterStore
from skyhook_planner.model.actions import Plan
from skyhook_planner.model.replay import NodeReplay, StatusReplay
from skyhook_planner.model.settings import PlannerSettings
from skyhook_planner.model.snapshot import ClusterSnapshot
from skyhook_planner.rules.holds import alert_urls

log = logging.getLogger(__name__)

Planner = Callable[[ClusterSnapshot, PlannerSettings], Plan]

# A pass normally takes well under a second (seconds at thousands of nodes); one running this
# long is stuck, and the liveness probe says so.
STUCK_PASS_SECONDS = 600.0


class Reconciler:
    """Runs passes when poked, when the plan asks for a timer, and every `default_interval`."""

    def __init__(
        self,
        store: ClusterStore,
        writer: Writer,
        settings: Settings,
        planner: Planner,
        *,
        telemetry: Telemetry | None = None,
        leader: LeaderElector | None = None,
        artifacts: ArtifactResolver | None = None,
        before_passes: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._leader = leader
        # Awaited once, leading, before the first pass (runtime.py: the carry-over).
        self._before_passes = before_passes
        self._artifacts = artifacts
        self._artifact_sources = False
        self._store = store
        self._telemetry = telemetry
        self._stopped = False
        self._pass_started: float | None = None
        self._writer = writer
        self._settings = settings
        self._planner_settings = settings.for_planner()
        self._plan = planner
        self._alerts = AlertPoller(settings.alert_poll_interval, settings.alert_query_timeout)
        self._replay = StatusReplay()
        self._node_replay = NodeReplay()
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.passes = 0
        writer.on_written = self._written

    def poke(self) -> None:
        """Ask for a pass soon; safe to call from any thread. Pokes before the loop runs are
        dropped: its first pass plans at once."""
        loop = self._loop
        if loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._wake.set()
        else:
            loop.call_soon_threadsafe(self._wake.set)

    @property
    def ready(self) -> bool:
        """The loop runs, which it does only once every index is full: passes plan from the
        whole cluster (the readiness probe)."""
        return self._loop is not None

    def alive(self) -> str | None:
        """None unless the loop has stopped or a pass is stuck, else what is wrong (the
        liveness probe)."""
        if self._stopped:
            return "the reconcile loop has stopped"
        started = self._pass_started
        if started is not None and time.monotonic() - started > STUCK_PASS_SECONDS:
            return f"a pass has been running for more than {STUCK_PASS_SECONDS:.0f} s"
        return None

    def _written(self, failed: bool) -> None:
        """A queued write finished (on the loop): plan again, after `retry_interval` when it
        failed, so a cluster refusing writes is not asked again at once."""
        if not failed:
            self.poke()
        elif self._loop is not None:
            self._loop.call_later(self._settings.retry_interval, self.poke)

    def bind(self) -> None:
        """Remember the running loop so other threads can poke; call from that loop."""
        self._loop = asyncio.get_running_loop()

    async def run_forever(self) -> None:
        """Plan at once, then whenever poked or due. Start it once every index is full."""
        self.bind()
        try:
            delay = 0.0
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=max(delay, 0.0))
                if self._leader is not None and not self._leader.leading:
                    log.info("not the leader: no passes until this replica holds the Lease")
                    await self._leader.wait_leading()
                    log.info("leading: planning from the current indexes")
                if self._before_passes is not None:
                    await self._before_passes()
                    self._before_passes = None
                if self._settings.pass_debounce:
                    await asyncio.sleep(self._settings.pass_debounce)
                self._wake.clear()
                try:
                    delay = await self.run_pass()
                except Exception:
                    log.exception("pass failed, retrying in %.0f s", self._settings.retry_interval)
                    delay = self._settings.retry_interval
        finally:
            self._stopped = True
            await self._alerts.close()

    async def run_pass(self) -> float:
        """One pass; returns the seconds until the next one unless something pokes first."""
        started = self._pass_started = time.monotonic()
        try:
            # The queued writes are read before the stored objects: a write that finishes in
            # between is then in both, never in neither.
            pending = self._writer.pending_statuses()
            unwritten = self._writer.pending_writes()
            in_flight = self._writer.in_flight
            snapshot = self._store.snapshot()  # on the loop: the watches change the indexes here
            snapshot = replace(
                snapshot, now=self._now(), alerts=await self._alerts.readings(alert_urls(snapshot))
            )
            snapshot = self._replay.apply(snapshot, pending)
            snapshot = self._node_replay.apply(snapshot, unwritten)
            if self._artifacts is not None:
                # Image compatibility artifacts are inputs like the indexes: fetched (from
                # cache, mostly) before the pure pass, on the loop; only a registry fetch
                # goes to a thread (kube/artifacts.py), and none when no Skyhook names one.
                found = await self._artifacts.resolve(snapshot.skyhooks)
                snapshot = replace(snapshot, image_artifacts=found)
                self._artifact_sources = bool(found)
            plan, plan_cpu_s = await asyncio.to_thread(self._timed_plan, snapshot)
            # Writes the apiserver refused as invalid go out once per spec, not every pass.
            generations = {s.name: s.generation for s in snapshot.skyhooks}
            plan = self._writer.without_held(plan, generations)
            planned = time.monotonic()
            if plan.needs_quiet and in_flight:
                # Planned on writes still queued, as if written: once they are, the plan holds
                # unless one of them failed (then plan again at once, from what landed).
                failures = self._writer.failures
                await self._writer.drain()
                if self._writer.failures != failures:
                    return 0.0
            if plan.needs_quiet:
                result = await self._writer.apply(plan)
            else:
                result = self._writer.submit(plan)
        finally:
            self._pass_started = None
        self.passes += 1
        finished = time.monotonic()
        _log_pass(plan, result, planned - started, plan_cpu_s, finished - planned)
        if self._telemetry is not None:
            # Computed from the snapshot this pass started from, as upstream reports the
            # state it read; our own writes wake the next pass, which reports them. In a
            # thread: 10 ms at 1,000 nodes, 72 ms at 5,000 (the hand-offs of a busy pass).
            await asyncio.to_thread(
                self._telemetry.record_pass, snapshot, plan, result.ok, finished - started
            )
        return self._next_delay(plan, result)

    def _timed_plan(self, snapshot: ClusterSnapshot) -> tuple[Plan, float]:
        """The plan, and the CPU seconds its thread spent on it: the pass's wall time also
        counts the waits for the GIL while the loop reads the watches."""
        started = time.thread_time()
        plan = self._plan(snapshot, self._planner_settings)
        return plan, time.thread_time() - started

    def _now(self) -> datetime:
        """The planner's clock: the real time, plus the offset of the test hook
        `clock_offset_file` when that is set (an unreadable file counts as no offset)."""
        now = datetime.now(UTC)
        if not self._settings.clock_offset_file:
            return now
        try:
            offset = float(Path(self._settings.clock_offset_file).read_text() or 0)
        except (OSError, ValueError) as error:
            log.warning("clock offset file: %s; using the real clock", error)
            return now
        return now + timedelta(seconds=offset)

    def _next_delay(self, plan: Plan, result: ApplyResult) -> float:
        delays = [self._settings.default_interval]
        if not result.ok or plan.actions:
            # Upstream requeues 2 s after a pass that wrote: our own watch events usually
            # wake us sooner; this covers writes whose events carry nothing new.
            delays.append(self._settings.retry_interval)
        if plan.requeue_after is not None:
            delays.append(plan.requeue_after)
        if self._artifact_sources:  # notice a changed artifact (or a registry back up)
            delays.append(self._settings.image_artifact_refresh)
        return min(delays)


def _log_pass(
    plan: Plan, result: ApplyResult, plan_s: float, plan_cpu_s: float, write_s: float
) -> None:
    cost = f"{plan_cpu_s * 1000:.1f} ms CPU, {plan.looked_at} nodes looked at again"
    if not plan.actions:
        log.debug("pass: nothing to do (planned in %.3f s; %s)", plan_s, cost)
        return
    kinds = Counter(type(a).__name__ for a in plan.actions)
    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
    log.info(
        "pass: %s; applied %d in %.3f s, queued %d (planned in %.3f s; %s)%s",
        summary,
        result.applied,
        write_s,
        result.queued,
        plan_s,
        cost,
        f"; {len(result.failures)} failed: {result.failures[0]}" if result.failures else "",
    )
