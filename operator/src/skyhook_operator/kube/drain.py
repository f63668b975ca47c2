"""Drains that wait: evict pods through the eviction subresource, then wait until they are gone.

The planner decides what to drain: it cordons through a `PatchNode` and asks for one
`EvictPod` per evictable pod, pass after pass, until the node holds none (its snapshot then
shows the gate open). This module makes each eviction robust and cheap to ask for again: one
task per pod on the event loop, started once however often the eviction is requested; a 429
(a PodDisruptionBudget says not now) or a 5xx is retried with backoff until the deadline; a
pod already gone counts as evicted. After acceptance the task waits on the pod index (the
pod watch the planner reads) until the pod is gone or replaced by a new one of the same
name, so waiting costs no request; then it calls `on_change` so the reconciler runs a pass at
once instead of at its next timer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from skyhook_operator.kube.client import ApiError, AsyncKube, Unreachable
from skyhook_operator.store import Key

log = logging.getLogger(__name__)

_FIRST_BACKOFF = 1.0
_MAX_BACKOFF = 10.0


class PodsSeen(Protocol):
    """What the drain needs of the pod index (kube/watch.py's WatchedIndex)."""

    def uid(self, key: Key) -> str | None: ...

    async def until_gone(self, key: Key, uid: str, timeout: float) -> None: ...


class Evictor:
    """At most one eviction in flight per pod; a finished or failed one may be asked again."""

    def __init__(
        self,
        kube: AsyncKube,
        pods: PodsSeen,
        timeout: float,
        on_change: Callable[[], None],
    ) -> None:
        self._kube = kube
        self._pods = pods
        self._timeout = timeout
        self._on_change = on_change
        self._running: dict[Key, asyncio.Task[None]] = {}

    def ensure(self, namespace: str, name: str) -> bool:
        """Start evicting the pod unless that is already under way; True if started. Call on
        the event loop."""
        key = (namespace, name)
        if key in self._running:
            return False
        self._running[key] = asyncio.create_task(self._run(key), name=f"evict {namespace}/{name}")
        return True

    def cancel(self) -> None:
        """Stop every eviction under way (the operator stops; the next leader asks again)."""
        for task in self._running.values():
            task.cancel()

    async def _run(self, key: Key) -> None:
        namespace, name = key
        deadline = time.monotonic() + self._timeout
        try:
            uid = await self._evict(namespace, name, deadline)
            if uid:
                try:
                    await self._pods.until_gone(key, uid, deadline - time.monotonic())
                except TimeoutError:
                    raise TimeoutError(
                        f"pod {namespace}/{name} still exists after its eviction"
                    ) from None
        except (TimeoutError, ApiError, Unreachable) as error:
            log.warning(
                "eviction of %s/%s failed, the next pass asks again: %s", namespace, name, error
            )
        finally:
            del self._running[key]
            self._on_change()

    async def _evict(self, namespace: str, name: str, deadline: float) -> str:
        """Post the eviction; the pod's uid once accepted, "" when the pod is gone already."""
        pod_path = self._kube.namespaced_path("pods", namespace, name)
        uid = self._pods.uid((namespace, name))
        if uid is None:
            return ""
        # Preconditioned on the uid the pod index holds: a pod recreated under the same name
        # meanwhile is never evicted by mistake (409), and no read is needed first.
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": {"preconditions": {"uid": uid}},
        }
        backoff = _FIRST_BACKOFF
        while True:
            try:
                await self._kube.request("POST", pod_path + "/eviction", body)
                log.info("evicted pod %s/%s", namespace, name)
                return uid
            except ApiError as error:
                if error.status in (404, 409):  # gone, or replaced: nothing of ours to evict
                    return ""
                if error.status not in (429, 500, 503):
                    raise
                if time.monotonic() + backoff > deadline:
                    raise TimeoutError(
                        f"pod {namespace}/{name} could not be evicted before the deadline: "
                        f"{error.status} {error.reason}"
                    ) from error
                log.info(
                    "eviction of %s/%s refused (%s %s), retrying in %.0f s",
                    namespace,
                    name,
                    error.status,
                    error.reason,
                    backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF)
