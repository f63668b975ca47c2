"""Kubernetes Events about Skyhooks and Nodes: posted only for transitions, and aggregated so a
node's rollout costs a few Event requests, not one per occurrence.

The writer hands every event the planner reports to `Recorder.record`; nothing here is called
on a pass that changed nothing. `Correlator` (pure, no I/O, time passed in) decides which
requests go out and when; `Recorder` sends them and runs the timer.

Which Event object an occurrence counts towards:

- **on a Node**, one Event per node, type and reason: a new message bumps that Event's `count`
  and `lastTimestamp` and becomes its message (and its action), so `kubectl describe node`
  shows, say, `State  (x3 over 4s)  Skyhook [s] complete.` (the latest of the three: two stages'
  `JobComplete`, then `MarkComplete`);
- **on a Skyhook** (many nodes' messages land on one object), an identical message bumps the
  first; once the Skyhook got `similar_limit` distinct messages of one type and reason within
  `window`, further ones bump one "(combined from similar events): <latest>" Event.

An Event object not seen for `window` seconds is forgotten (memory stays bounded, and a later
occurrence starts a new Event), and at most `max_records` are remembered.

When requests go out, per Event object: its first occurrence `first_delay` (5 s) later, as a
POST carrying whatever occurred meanwhile; later ones no sooner than `min_interval` after the
object's last write and `gather` after the occurrence, merged into one PATCH of the full count,
latest message and `lastTimestamp`. `gather` lets the occurrences of one pass (a stage
completing and the next starting) share a PATCH. Nothing is dropped while the operator runs,
only delayed: a pending Event pushed out of memory is sent at once, and `Recorder.close` sends
everything pending, for up to 10 s (a stopping operator must not outlive its grace period).

`min_interval` is 30 s: `kubectl describe` is at most that much behind, and each Event object
costs at most two requests a minute. The 5 s `first_delay` lets a short stage's start and end
share the first request: a node whose stages take seconds (apply, then config) gets one POST
for all its `Apply` occurrences (its stages starting) and one for its `State` ones (its stages
complete, then "Skyhook [s] complete."). Long stages cost one
PATCH per stage boundary.

Events are best-effort: a failed request is logged and never fails the write that caused it; a
failed POST is posted again with the full count by the next occurrence.
"""

from __future__ import annotations

import asyncio
import datetime
import heapq
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, replace

from skyhook_operator.kube.client import MERGE_PATCH, ApiError, AsyncKube, Json
from skyhook_schemas import keys

log = logging.getLogger(__name__)

COMPONENT = "skyhook-controller"
# Events about cluster-scoped objects live in `default`, where kubectl describe finds them.
EVENT_NAMESPACE = "default"
COMBINED_PREFIX = "(combined from similar events): "
# Kinds whose Events are about the object itself: one Event per type and reason, latest message.
ONE_EVENT_PER_REASON = frozenset({"Node"})


@dataclass(frozen=True, slots=True)
class Subject:
    """The object an event is about."""

    kind: str  # "Node" or the SCR kind (keys.KIND)
    name: str
    uid: str = ""
    group: str = ""  # of a custom resource: ours unless given (the other group's objects)

    @property
    def api_version(self) -> str:
        if self.kind == "Node":
            return "v1"
        return f"{self.group}/{keys.VERSION}" if self.group else keys.API_VERSION


@dataclass(frozen=True, slots=True)
class Event:
    """One event as the planner reports it."""

    subject: Subject
    reason: str
    message: str
    type: str = "Normal"
    action: str = ""  # what the operator did: one Event's occurrences may differ in it


@dataclass(frozen=True, slots=True)
class Write:
    """One request: POST a new Event (`create`) or PATCH the count of the existing one."""

    create: bool
    name: str  # the Event object's name
    event: Event
    count: int
    first_seen: float  # seconds since the epoch
    last_seen: float


_Key = tuple[Subject, str, str, str]  # subject, type, reason, message ("" for one per reason)


def _key(event: Event) -> _Key:
    if event.subject.kind in ONE_EVENT_PER_REASON:
        message = ""
    elif event.message.startswith(COMBINED_PREFIX):
        message = COMBINED_PREFIX  # every combined message of one reason bumps the same Event
    else:
        message = event.message
    return (event.subject, event.type, event.reason, message)


@dataclass(slots=True)
class _Record:
    """One Event object: what it counts, when it was last written, when its next write is due."""

    name: str
    event: Event
    count: int
    first_seen: float
    last_seen: float
    created: bool = False
    written_at: float = 0.0
    due: float | None = None  # None: nothing to write
    ticket: int = 0  # which entry of the due heap is this record's current one

    def write(self) -> Write:
        return Write(
            not self.created, self.name, self.event, self.count, self.first_seen, self.last_seen
        )


class Correlator:
    """Which Event requests to send, and when; pure (time is passed in), not thread-safe."""

    def __init__(
        self,
        *,
        window: float = 600.0,
        similar_limit: int = 10,
        min_interval: float = 30.0,
        gather: float = 1.0,
        first_delay: float = 5.0,
        max_records: int = 16384,
    ) -> None:
        self.window = window
        self.similar_limit = similar_limit
        self.min_interval = min_interval
        self.gather = gather
        self.first_delay = first_delay
        self.max_records = max_records
        # Ordered by last occurrence, so the records to forget are at the front.
        self._records: OrderedDict[_Key, _Record] = OrderedDict()
        # Per subject, type and reason: its distinct messages, oldest occurrence first.
        self._messages: dict[tuple[Subject, str, str], OrderedDict[str, float]] = {}
        self._due: list[tuple[float, int, _Key]] = []  # heap of (due, ticket, key)
        self._tickets = 0
        self._early: list[Write] = []  # pending writes of records forgotten before they were due

    def __len__(self) -> int:
        """Event objects remembered."""
        return len(self._records)

    def add(self, event: Event, now: float) -> None:
        """Count one occurrence of `event`; `take` says when it goes out."""
        self._forget_idle(now)
        event = self._aggregated(event, now)
        key = _key(event)
        record = self._records.get(key)
        if record is None:
            name = f"{event.subject.name}.{secrets.token_hex(8)}"
            record = _Record(name, event, 1, now, now)
            self._records[key] = record
            self._forget_oldest()
        else:
            record.count += 1
            record.last_seen = now
            record.event = event  # the Event shows the latest message
            self._records.move_to_end(key)
        if record.due is None:
            if record.created:
                due = max(now + self.gather, record.written_at + self.min_interval)
            else:
                due = now + self.first_delay
            self._schedule(key, record, due)

    def take(self, now: float, *, force: bool = False) -> tuple[list[Write], float | None]:
        """The requests due now (all of them with `force`), oldest first, and the seconds until
        the next one is due (None when nothing waits)."""
        writes, self._early = self._early, []
        while self._due and (force or self._due[0][0] <= now):
            _, ticket, key = heapq.heappop(self._due)
            record = self._records.get(key)
            if record is None or record.due is None or record.ticket != ticket:
                continue  # forgotten or rescheduled
            writes.append(record.write())
            record.created, record.written_at, record.due = True, now, None
        while self._due and not self._current(self._due[0]):
            heapq.heappop(self._due)
        return writes, (self._due[0][0] - now if self._due else None)

    def failed(self, write: Write) -> None:
        """A POST that did not happen: the next occurrence creates the Event again."""
        record = self._records.get(_key(write.event))
        if record is not None and record.name == write.name:
            record.created = False

    def _schedule(self, key: _Key, record: _Record, due: float) -> None:
        self._tickets += 1
        record.due, record.ticket = due, self._tickets
        heapq.heappush(self._due, (due, self._tickets, key))

    def _current(self, entry: tuple[float, int, _Key]) -> bool:
        record = self._records.get(entry[2])
        return record is not None and record.due is not None and record.ticket == entry[1]

    def _aggregated(self, event: Event, now: float) -> Event:
        if event.subject.kind in ONE_EVENT_PER_REASON:
            return event
        seen = self._messages.setdefault((event.subject, event.type, event.reason), OrderedDict())
        # Only the oldest can have left the window: one per node otherwise made a rollout's
        # Events quadratic in its nodes.
        while seen and now - next(iter(seen.values())) > self.window:
            seen.popitem(last=False)
        seen[event.message] = now
        seen.move_to_end(event.message)
        if len(seen) > self.similar_limit:
            return replace(event, message=COMBINED_PREFIX + event.message)
        return event

    def _forget(self, key: _Key) -> None:
        """Drop a record from memory; a write it still owes goes out with the next `take`."""
        record = self._records.pop(key)
        if record.due is not None:
            self._early.append(record.write())

    def _forget_idle(self, now: float) -> None:
        while self._records:
            key, record = next(iter(self._records.items()))
            if now - record.last_seen <= self.window:
                break
            self._forget(key)
        while len(self._messages) > self.max_records:
            del self._messages[next(iter(self._messages))]

    def _forget_oldest(self) -> None:
        while len(self._records) > self.max_records:
            self._forget(next(iter(self._records)))


def _timestamp(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def body(write: Write, instance: str = "") -> Json:
    """The Event object a POST creates; `instance` names the replica that reports it."""
    event = write.event
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": write.name, "namespace": EVENT_NAMESPACE},
        "involvedObject": {
            "kind": event.subject.kind,
            "name": event.subject.name,
            "apiVersion": event.subject.api_version,
            **({"uid": event.subject.uid} if event.subject.uid else {}),
        },
        "reason": event.reason,
        **({"action": event.action} if event.action else {}),
        "message": event.message,
        "type": event.type,
        "source": {"component": COMPONENT},
        "firstTimestamp": _timestamp(write.first_seen),
        "lastTimestamp": _timestamp(write.last_seen),
        "count": write.count,
        "reportingComponent": COMPONENT,
        **({"reportingInstance": instance} if instance else {}),
    }


def count_patch(write: Write) -> Json:
    """The merge patch that brings an existing Event up to date."""
    return {
        "count": write.count,
        "lastTimestamp": _timestamp(write.last_seen),
        "message": write.event.message,
        **({"action": write.event.action} if write.event.action else {}),
    }


EVENT_REFUSAL_LOG_INTERVAL = 60.0  # seconds between warnings for Events refused alike


class Recorder:
    """Sends what the Correlator says is due, on the event loop: one send at a time (a PATCH
    never overtakes its POST), and a timer for what had to wait."""

    def __init__(
        self, kube: AsyncKube, correlator: Correlator | None = None, instance: str = ""
    ) -> None:
        self._kube = kube
        self._instance = instance  # reportingInstance: the operator replica's name
        self._correlator = correlator if correlator is not None else Correlator()
        self._sending = asyncio.Lock()
        self._flush_waiting = False  # a flush is queued behind the one sending
        self._flushes: set[asyncio.Task[None]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._closed = False
        self._refusal_said_at: dict[int, float] = {}  # status -> when last logged as a warning

    def record(self, event: Event) -> None:
        """Count the occurrence and send what is due, in the background."""
        self._correlator.add(event, time.time())
        self._flush_soon()

    def _flush_soon(self) -> None:
        if self._flush_waiting or self._closed:
            return
        self._flush_waiting = True
        task = asyncio.get_running_loop().create_task(self.flush())
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def flush(self) -> None:
        async with self._sending:
            self._flush_waiting = False
            now = time.time()
            writes, wait = self._correlator.take(now)
            if wait is not None and not self._closed:
                self._wake_at(now + wait)
            await self._send(writes)

    async def close(self, deadline: float = 10.0) -> None:
        """Send what waits (counts included) for at most `deadline` seconds, and stop the
        timer. A fleet-wide rollout can leave thousands of Events waiting; a stopping
        operator must not outlive its pod's grace period sending them, so what is left after
        the deadline is logged, not sent."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        stop = time.monotonic() + deadline
        try:
            async with asyncio.timeout(deadline):
                await self._sending.acquire()
        except TimeoutError:
            log.warning("stopping: Event updates not written (%.0f s deadline)", deadline)
            return
        try:
            writes, _ = self._correlator.take(time.time(), force=True)
            for index, write in enumerate(writes):
                if time.monotonic() > stop:
                    log.warning(
                        "stopping: %d Event updates not written (%.0f s deadline)",
                        len(writes) - index,
                        deadline,
                    )
                    return
                await self._send([write])
        finally:
            self._sending.release()

    def _level_for(self, error: ApiError | OSError) -> int:
        """A refusal (401, 403) or an invalid Event (422) is a warning, once a minute per
        status: Events are best effort, but a missing grant must show at the default level.
        Anything else (an apiserver away, a conflict) is retried and logged at debug."""
        status = error.status if isinstance(error, ApiError) else 0
        if status not in (401, 403, 422):
            return logging.DEBUG
        now = time.monotonic()
        if now - self._refusal_said_at.get(status, -EVENT_REFUSAL_LOG_INTERVAL) < (
            EVENT_REFUSAL_LOG_INTERVAL
        ):
            return logging.DEBUG
        self._refusal_said_at[status] = now
        return logging.WARNING

    def _wake_at(self, at: float) -> None:
        """Run the timer at `at`, or sooner if it already runs sooner."""
        if self._timer is not None and self._timer_at <= at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(
            max(0.0, at - time.time()), self._on_timer
        )
        self._timer_at = at

    def _on_timer(self) -> None:
        self._timer = None
        self._flush_soon()

    async def _send(self, writes: Iterable[Write]) -> None:
        path = self._kube.namespaced_path("events", EVENT_NAMESPACE)
        for write in writes:
            try:
                if not write.create:
                    try:
                        await self._kube.request(
                            "PATCH", f"{path}/{write.name}", count_patch(write), MERGE_PATCH
                        )
                        continue
                    except ApiError as error:
                        if error.status != 404:
                            raise
                        # Expired (the apiserver keeps Events for an hour): post it again.
                await self._kube.request("POST", path, body(write, self._instance))
            except (ApiError, OSError) as error:
                event = write.event
                log.log(
                    self._level_for(error),
                    "event %s on %s %s not posted: %s",
                    event.reason,
                    event.subject.kind,
                    event.subject.name,
                    error,
                )
                if write.create:
                    self._correlator.failed(write)
