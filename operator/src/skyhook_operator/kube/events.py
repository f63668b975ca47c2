"""Kubernetes Events about Skyhooks and Nodes: posted only for transitions, and aggregated so a
1,000-node rollout does not flood the apiserver.

The writer hands every event the planner reports to `Recorder.record`; nothing here is called
on a pass that changed nothing. `Correlator` (pure, no I/O) decides which requests go out, in
the spirit of client-go's EventCorrelator:

- **dedup**: the same object, type, reason and message within `window` seconds is one Event,
  whose `count` and `lastTimestamp` a PATCH bumps instead of a new POST;
- **similar**: once an object got `similar_limit` distinct messages of one type and reason
  within the window (say "Applying package ... to node [n]" on a Skyhook, once per node),
  further ones bump a single "(combined from similar events): <latest>" Event;
- **rate limit per object**: a token bucket (`burst`, then one request every `refill`
  seconds). Unlike client-go's spam filter nothing is dropped: an event over the limit waits,
  merged with any repeats, and goes out (with the full count) when the object has a token.

Events are best-effort: a failed request is logged and never fails the write that caused it.
"""

from __future__ import annotations

import datetime
import logging
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from skyhook_operator.kube.client import MERGE_PATCH, ApiError, Json, Kube
from skyhook_schemas import keys

log = logging.getLogger(__name__)

COMPONENT = "skyhook-controller"
# Events about cluster-scoped objects live in `default`, where kubectl describe finds them.
EVENT_NAMESPACE = "default"
COMBINED_PREFIX = "(combined from similar events): "


@dataclass(frozen=True)
class Subject:
    """The object an event is about."""

    kind: str  # "Node" or "Skyhook"
    name: str
    uid: str = ""

    @property
    def api_version(self) -> str:
        return "v1" if self.kind == "Node" else f"{keys.API_VERSION}"


@dataclass(frozen=True)
class Event:
    """One event as the planner reports it."""

    subject: Subject
    reason: str
    message: str
    type: str = "Normal"


@dataclass(frozen=True)
class Write:
    """One request: POST a new Event (`create`) or PATCH the count of the existing one."""

    create: bool
    name: str  # the Event object's name
    event: Event
    count: int
    first_seen: float  # seconds since the epoch
    last_seen: float


@dataclass
class _Record:
    """One Event object as we last wrote it, and what has not been written yet."""

    name: str
    event: Event
    count: int
    first_seen: float
    last_seen: float
    created: bool = False
    pending: bool = True


@dataclass
class _Bucket:
    tokens: float
    at: float
    queue: list[tuple[Subject, str, str, str]] = field(default_factory=list)  # record keys


class Correlator:
    """Which Event requests to send, and when; pure (time is passed in), not thread-safe."""

    def __init__(
        self,
        *,
        window: float = 600.0,
        similar_limit: int = 10,
        burst: int = 25,
        refill: float = 10.0,
        max_records: int = 16384,
    ) -> None:
        self.window = window
        self.similar_limit = similar_limit
        self.burst = burst
        self.refill = refill
        self.max_records = max_records
        self._records: OrderedDict[tuple[Subject, str, str, str], _Record] = OrderedDict()
        self._messages: dict[tuple[Subject, str, str], dict[str, float]] = {}
        self._buckets: dict[Subject, _Bucket] = {}
        self._waiting: dict[Subject, None] = {}  # objects with a queue, in order

    def add(self, event: Event, now: float) -> None:
        """Count one occurrence of `event`; it goes out with the next `take` that has a token."""
        event = self._aggregated(event, now)
        key = (event.subject, event.type, event.reason, self._dedup_message(event))
        record = self._records.get(key)
        if record is not None and now - record.last_seen <= self.window:
            record.count += 1
            record.last_seen = now
            record.event = event  # a combined Event shows the latest message
            self._records.move_to_end(key)
        else:
            name = f"{event.subject.name}.{secrets.token_hex(8)}"
            record = _Record(name, event, 1, now, now)
            self._records[key] = record
            self._forget_oldest()
        record.pending = True
        bucket = self._buckets.setdefault(event.subject, _Bucket(float(self.burst), now))
        if key not in bucket.queue:
            bucket.queue.append(key)
        self._waiting[event.subject] = None
        if len(self._buckets) > self.max_records:
            self._forget_full_buckets(now)

    def take(self, now: float, *, force: bool = False) -> tuple[list[Write], float | None]:
        """The requests allowed now (all of them with `force`), oldest first, and the seconds
        until the next one is allowed (None when nothing waits)."""
        writes: list[Write] = []
        wait: float | None = None
        for subject in list(self._waiting):
            bucket = self._buckets[subject]
            self._refill(bucket, now)
            while bucket.queue and (force or bucket.tokens >= 1):
                record = self._records.get(bucket.queue.pop(0))
                if record is None or not record.pending:
                    continue
                bucket.tokens -= 1
                writes.append(
                    Write(
                        not record.created,
                        record.name,
                        record.event,
                        record.count,
                        record.first_seen,
                        record.last_seen,
                    )
                )
                record.created, record.pending = True, False
            if bucket.queue:
                until = (1 - bucket.tokens) * self.refill
                wait = until if wait is None else min(wait, until)
            else:
                del self._waiting[subject]
        return writes, wait

    def _refill(self, bucket: _Bucket, now: float) -> None:
        bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) / self.refill)
        bucket.at = now

    def _forget_full_buckets(self, now: float) -> None:
        """A bucket that is full again says nothing a new one would not."""
        for subject, bucket in list(self._buckets.items()):
            self._refill(bucket, now)
            if subject not in self._waiting and bucket.tokens >= self.burst:
                del self._buckets[subject]

    def failed(self, write: Write) -> None:
        """A POST that did not happen: the next occurrence creates the Event again."""
        for record in self._records.values():
            if record.name == write.name:
                record.created = False

    def _aggregated(self, event: Event, now: float) -> Event:
        seen = self._messages.setdefault((event.subject, event.type, event.reason), {})
        for message, at in list(seen.items()):
            if now - at > self.window:
                del seen[message]
        seen[event.message] = now
        if len(seen) > self.similar_limit:
            return replace(event, message=COMBINED_PREFIX + event.message)
        return event

    @staticmethod
    def _dedup_message(event: Event) -> str:
        # Every combined message of one object, type and reason bumps the same Event.
        return COMBINED_PREFIX if event.message.startswith(COMBINED_PREFIX) else event.message

    def _forget_oldest(self) -> None:
        while len(self._records) > self.max_records:
            key, record = next(iter(self._records.items()))
            del self._records[key]
            if record.pending:
                log.debug("event %s forgotten unsent: too many distinct events", record.name)
        for subject in list(self._messages):
            if len(self._messages) <= self.max_records:
                break
            del self._messages[subject]


def _timestamp(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def body(write: Write) -> Json:
    """The Event object a POST creates."""
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
        "message": event.message,
        "type": event.type,
        "source": {"component": COMPONENT},
        "firstTimestamp": _timestamp(write.first_seen),
        "lastTimestamp": _timestamp(write.last_seen),
        "count": write.count,
        "reportingComponent": COMPONENT,
    }


def count_patch(write: Write) -> Json:
    """The merge patch that brings an existing Event up to date."""
    return {
        "count": write.count,
        "lastTimestamp": _timestamp(write.last_seen),
        "message": write.event.message,
    }


class Recorder:
    """Sends what the Correlator allows; thread-safe. A timer sends what had to wait."""

    def __init__(self, kube: Kube, correlator: Correlator | None = None) -> None:
        self._kube = kube
        self._correlator = correlator or Correlator()
        self._lock = threading.Lock()  # the correlator
        self._sending = threading.Lock()  # one flush at a time: a PATCH never overtakes its POST
        self._timer: threading.Timer | None = None
        self._closed = False

    def record(self, event: Event) -> None:
        with self._lock:
            self._correlator.add(event, time.time())
        self.flush()

    def flush(self, *, force: bool = False) -> None:
        with self._sending:
            with self._lock:
                writes, wait = self._correlator.take(time.time(), force=force)
                if wait is not None and self._timer is None and not self._closed:
                    self._timer = threading.Timer(wait, self._on_timer)
                    self._timer.daemon = True
                    self._timer.start()
            self._send(writes)

    def close(self) -> None:
        """Send what waits (counts included), and stop the timer."""
        with self._lock:
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
        self.flush(force=True)

    def _on_timer(self) -> None:
        with self._lock:
            self._timer = None
        self.flush()

    def _send(self, writes: Iterable[Write]) -> None:
        path = self._kube.namespaced_path("events", EVENT_NAMESPACE)
        for write in writes:
            try:
                if not write.create:
                    try:
                        self._kube.request(
                            "PATCH", f"{path}/{write.name}", count_patch(write), MERGE_PATCH
                        )
                        continue
                    except ApiError as error:
                        if error.status != 404:
                            raise
                        # Expired (the apiserver keeps Events for an hour): post it again.
                self._kube.request("POST", path, body(write))
            except ApiError as error:
                event = write.event
                log.debug(
                    "event %s on %s %s not posted: %s",
                    event.reason,
                    event.subject.kind,
                    event.subject.name,
                    error,
                )
                if write.create:
                    with self._lock:
                        self._correlator.failed(write)
