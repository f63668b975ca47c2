"""Leader election on a coordination.k8s.io Lease: with two or more replicas, exactly one plans
and writes.

The protocol is client-go's (so controller-runtime's, which upstream's operator uses): the
leader rewrites `spec.renewTime` every `retry_period`; the others read the Lease as often and
take it when its holder released it (empty `holderIdentity`) or when its record has not
changed for `leaseDurationSeconds` by their own clock (clocks of different machines are never
compared). Every write is a PUT preconditioned on the resourceVersion read, so of two
replicas racing for the Lease one wins and the other gets a 409.

Fencing: the leader counts itself leading only until `renew_deadline` after the start of its
last successful renewal, a deadline shorter than the lease duration, so it stops sending writes
before anyone else may take over even if its renewals hang. Another replica may take the Lease
no sooner than the lease duration after that start (it waits that long after it saw the
renewal, which came after the start), so a write sent while leading is given at most the time
left until then (`write_time_left`): no write outlives the lease it was sent under.
`AsyncKube.fence` makes every write of the operator's client check that (the elector's own view
of the session is unfenced).

`decide` is the pure part: what one attempt does, given what was last seen of the Lease.
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import logging
import math
import secrets
import time
from dataclasses import dataclass, replace

from skyhook_operator.kube.client import ApiError, AsyncKube, Json

log = logging.getLogger(__name__)

_MICROTIME = "%Y-%m-%dT%H:%M:%S.%fZ"


class Step(enum.Enum):
    CREATE = "create"  # no Lease yet
    RENEW = "renew"  # ours
    TAKE = "take"  # released, or its holder stopped renewing
    WAIT = "wait"  # someone else's, still valid


@dataclass(frozen=True)
class Record:
    """The Lease's spec: who holds it, for how long, since when."""

    holder: str = ""
    duration_s: int = 0
    acquire_time: str = ""
    renew_time: str = ""
    transitions: int = 0

    @classmethod
    def from_api(cls, lease: Json) -> Record:
        spec = lease.get("spec") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            duration_s=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=str(spec.get("acquireTime") or ""),
            renew_time=str(spec.get("renewTime") or ""),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def to_api(self) -> Json:
        spec: Json = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration_s,
            "leaseTransitions": self.transitions,
        }
        if self.acquire_time:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time:
            spec["renewTime"] = self.renew_time
        return spec


@dataclass(frozen=True)
class Seen:
    """The Lease as last read, and when (monotonic) its record last changed."""

    record: Record
    resource_version: str
    changed_at: float


def decide(identity: str, seen: Seen | None, now: float) -> Step:
    """What one attempt does: `now` and `seen.changed_at` are on the same monotonic clock."""
    if seen is None:
        return Step.CREATE
    if seen.record.holder == identity:
        return Step.RENEW
    if not seen.record.holder or now >= seen.changed_at + seen.record.duration_s:
        return Step.TAKE
    return Step.WAIT


def claimed(record: Record, identity: str, duration_s: int, stamp: str) -> Record:
    """`record` renewed by its holder, or taken over by `identity`."""
    if record.holder == identity:
        return replace(record, duration_s=duration_s, renew_time=stamp)
    return Record(identity, duration_s, stamp, stamp, record.transitions + 1)


def write_time_left(now: float, valid_until: float, takeable_at: float) -> float:
    """Seconds a write sent at `now` may take: none once this replica stopped leading (at
    `valid_until`), else until another replica could take the Lease (at `takeable_at`)."""
    return takeable_at - now if now < valid_until else 0.0


def released(record: Record, stamp: str) -> Record:
    """What the leader writes when it stops: no holder, so a successor need not wait."""
    return replace(record, holder="", duration_s=1, renew_time=stamp)


def _stamp() -> str:
    return datetime.datetime.now(datetime.UTC).strftime(_MICROTIME)


class LeaderElector:
    """Holds or waits for the Lease; `leading` is safe to read from any thread."""

    def __init__(
        self,
        kube: AsyncKube,
        namespace: str,
        name: str,
        identity: str,
        *,
        duration: float,
        renew_deadline: float,
        retry_period: float,
    ) -> None:
        self._kube = kube
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self._namespace, self._name = namespace, name
        self.identity = f"{identity}_{secrets.token_hex(4)}"
        self._duration_s = max(1, math.ceil(duration))
        self._renew_deadline = renew_deadline
        self._retry_period = retry_period
        self._seen: Seen | None = None
        self._valid_until = 0.0  # monotonic; leading while now is before it
        self._takeable_at = 0.0  # monotonic; another replica may take the Lease from then
        self._changed = asyncio.Event()
        self._stopped = False

    @property
    def leading(self) -> bool:
        return time.monotonic() < self._valid_until

    def write_time_left(self) -> float:
        """Seconds a write sent now may take (`write_time_left` below)."""
        return write_time_left(time.monotonic(), self._valid_until, self._takeable_at)

    async def wait_leading(self) -> None:
        """Return once this replica leads."""
        while not self.leading:
            self._changed.clear()
            await self._changed.wait()

    async def run(self) -> None:
        """Try to take or renew the Lease every retry period, until cancelled."""
        was_leading = False
        while not self._stopped:
            await self.attempt()
            if self.leading != was_leading:
                was_leading = self.leading
                log.info(
                    "%s Lease %s/%s as %s",
                    "holding" if was_leading else "not holding",
                    self._namespace,
                    self._name,
                    self.identity,
                )
                self._changed.set()
            await asyncio.sleep(self._retry_period)

    async def attempt(self) -> None:
        """One read and, if `decide` says so, one write of the Lease."""
        started = time.monotonic()
        try:
            await self._attempt(started)
        except (ApiError, OSError) as error:
            log.warning("Lease %s/%s: %s", self._namespace, self._name, error)

    async def _request(self, method: str, path: str, body: Json | None, timeout: float) -> Json:
        """One request, never retried: an attempt takes at most its timeout, and the next
        attempt is the retry."""
        return await self._kube.request(method, path, body, timeout=timeout, retries=0)

    async def _attempt(self, started: float) -> None:
        timeout = self._renew_deadline / 2
        try:
            lease = await self._request("GET", self._path, None, timeout)
        except ApiError as error:
            if error.status != 404:
                raise
            lease = None
        if lease is not None:
            self._observe(lease, started)
        step = decide(self.identity, self._seen, time.monotonic())
        if step is Step.WAIT:
            self._valid_until = 0.0
            return
        wanted = claimed(
            self._seen.record if self._seen else Record(),
            self.identity,
            self._duration_s,
            _stamp(),
        )
        body: Json = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self._name, "namespace": self._namespace},
            "spec": wanted.to_api(),
        }
        try:
            if step is Step.CREATE:
                collection = self._path.rsplit("/", 1)[0]
                answer = await self._request("POST", collection, body, timeout)
            else:
                assert self._seen is not None
                body["metadata"]["resourceVersion"] = self._seen.resource_version
                answer = await self._request("PUT", self._path, body, timeout)
        except ApiError as error:
            if error.status != 409:
                raise
            self._valid_until = 0.0  # someone else was faster
            return
        self._observe(answer, started)
        if not self._stopped:  # an attempt that ends after step_down does not lead again
            self._valid_until = started + self._renew_deadline
            self._takeable_at = started + self._duration_s

    def _observe(self, lease: Json, at: float) -> None:
        record = Record.from_api(lease)
        version = str(lease["metadata"]["resourceVersion"])
        if self._seen is None or self._seen.record != record:
            self._seen = Seen(record, version, at)
        else:
            self._seen = replace(self._seen, resource_version=version)

    def step_down(self) -> None:
        """Stop leading now (fencing every further write) and stop trying to lead."""
        self._stopped = True
        self._valid_until = 0.0

    async def release(self, timeout: float | None = None) -> bool:
        """Hand the Lease over at once, if this replica holds it (on shutdown, after
        `step_down` and the last write); True if it is not ours any more. Takes at most
        `timeout` seconds (default: half the renew deadline) whatever the apiserver does:
        an unreachable one means the successor waits for the lease duration instead."""
        self.step_down()
        budget = self._renew_deadline / 2 if timeout is None else timeout
        stop = time.monotonic() + budget
        for _ in range(2):  # the second time after a 409: an attempt in flight renewed it
            if self._seen is None or self._seen.record.holder != self.identity:
                return True
            body: Json = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": self._name,
                    "namespace": self._namespace,
                    "resourceVersion": self._seen.resource_version,
                },
                "spec": released(self._seen.record, _stamp()).to_api(),
            }
            try:
                left = max(0.1, stop - time.monotonic())
                await self._request("PUT", self._path, body, left)
                log.info("released Lease %s/%s", self._namespace, self._name)
                return True
            except ApiError as error:
                if error.status != 409 or time.monotonic() >= stop:
                    log.warning("Lease %s/%s not released: %s", self._namespace, self._name, error)
                    return False
            except OSError as error:
                log.warning(
                    "Lease %s/%s not released (the apiserver did not answer): %s; "
                    "another replica takes over once it expires",
                    self._namespace,
                    self._name,
                    error,
                )
                return False
            try:
                left = max(0.1, stop - time.monotonic())
                self._observe(await self._request("GET", self._path, None, left), time.monotonic())
            except (ApiError, OSError) as error:
                log.warning("Lease %s/%s not released: %s", self._namespace, self._name, error)
                return False
        return False
