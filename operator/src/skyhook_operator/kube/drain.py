"""Drains that wait: evict (or delete) pods, then wait on the pod index until they are gone.

The planner asks for one `EvictPod` per pod to drain, pass after pass, until the node holds
none; here each is one task on the event loop, started once however often it is asked for.
A PodDisruptionBudget's refusal (a 429 with a `DisruptionBudget` cause) is a wait, not a
failure: it is kept as an `EvictionRefusal` (`refusals()`, which the planner reports) and the
pod is not asked again for `REFUSAL_THROTTLE` seconds. Any other 429, a 500 or a 503 is
retried with backoff until the deadline. With `delete` (drainConfig.disableEviction) a plain
DELETE, which no budget holds, replaces the eviction. Both are preconditioned on the uid the
index holds, so a pod gone (404) or replaced under its name (409) counts as removed. Once
accepted, the task waits on the pod index, at no request's cost, then calls `on_change` so
the reconciler runs a pass at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from skyhook_operator.kube.client import ApiError, AsyncKube, Unreachable
from skyhook_operator.store import Key
from skyhook_planner.model.actions import EvictPod
from skyhook_planner.model.snapshot import EvictionRefusal

log = logging.getLogger(__name__)

_FIRST_BACKOFF = 1.0
_MAX_BACKOFF = 10.0
# Seconds before a pod whose eviction a budget refused is asked again: the planner asks every
# pass, and a budget rarely opens within seconds.
REFUSAL_THROTTLE = 30.0
DISRUPTION_BUDGET = "DisruptionBudget"  # the cause type of a budget's 429 (policy/v1)


class PodsSeen(Protocol):
    """What the drain needs of the pod index (kube/watch.py's WatchedIndex)."""

    def uid(self, key: Key) -> str | None: ...

    async def until_gone(self, key: Key, uid: str, timeout: float) -> None: ...


class _Refused(Exception):
    """A PodDisruptionBudget refused the eviction of the pod with `uid`."""

    def __init__(self, uid: str, detail: str) -> None:
        super().__init__(detail)
        self.uid = uid
        self.detail = detail


class Evictor:
    """At most one eviction in flight per pod; a finished or failed one may be asked again,
    one a budget refused only after `REFUSAL_THROTTLE` seconds."""

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
        # Each refusal with the time.monotonic() it came at (the throttle's clock).
        self._refused: dict[Key, tuple[EvictionRefusal, float]] = {}

    def ensure(self, action: EvictPod) -> bool:
        """Start removing the pod unless that is under way or a budget refused its eviction
        less than `REFUSAL_THROTTLE` seconds ago; True if started. Call on the event loop."""
        key = (action.namespace, action.name)
        if key in self._running:
            return False
        refused = self._holding(key)
        # A delete (drainConfig.disableEviction turned on meanwhile) is no budget's to refuse.
        throttled = refused is not None and time.monotonic() - refused[1] < REFUSAL_THROTTLE
        if throttled and not action.delete:
            return False
        self._running[key] = asyncio.create_task(
            self._run(action), name=f"evict {action.namespace}/{action.name}"
        )
        return True

    def refusals(self) -> Mapping[Key, EvictionRefusal]:
        """The refusals that still hold: of pods the index still holds, not evicted since."""
        return {key: held[0] for key in list(self._refused) if (held := self._holding(key))}

    def cancel(self) -> None:
        """Stop every eviction under way (the operator stops; the next leader asks again)."""
        for task in self._running.values():
            task.cancel()

    def _holding(self, key: Key) -> tuple[EvictionRefusal, float] | None:
        """The refusal of `key`, dropped once the index holds no pod of its uid (gone, or
        replaced: the new pod was never refused)."""
        refused = self._refused.get(key)
        if refused is not None and self._pods.uid(key) != refused[0].uid:
            del self._refused[key]
            return None
        return refused

    async def _run(self, action: EvictPod) -> None:
        key = (action.namespace, action.name)
        where = f"{action.namespace}/{action.name}"
        deadline = time.monotonic() + self._timeout
        try:
            uid = await self._remove(action, deadline)
            self._refused.pop(key, None)  # accepted, gone or replaced: no budget holds it now
            if uid:
                try:
                    await self._pods.until_gone(key, uid, deadline - time.monotonic())
                except TimeoutError:
                    raise TimeoutError(f"pod {where} still exists after its eviction") from None
        except _Refused as refused:
            refusal = EvictionRefusal(
                namespace=action.namespace,
                name=action.name,
                node=action.node,
                uid=refused.uid,
                detail=refused.detail,
                at=datetime.now(UTC),
            )
            self._refused[key] = (refusal, time.monotonic())
            log.info(
                "eviction of %s waits for its disruption budget, asked again in %.0f s: %s",
                where,
                REFUSAL_THROTTLE,
                refused.detail,
            )
        except (TimeoutError, ApiError, Unreachable) as error:
            log.warning("eviction of %s failed, the next pass asks again: %s", where, error)
        finally:
            del self._running[key]
            self._on_change()

    async def _remove(self, action: EvictPod, deadline: float) -> str:
        """Post the eviction (or the delete); the pod's uid once accepted, "" when the pod is
        gone already or replaced; `_Refused` when a budget says not now."""
        namespace, name = action.namespace, action.name
        uid = self._pods.uid((namespace, name))
        if uid is None:
            return ""
        # Preconditioned on the uid the pod index holds: a pod recreated under the same name
        # meanwhile is never removed by mistake (409), and no read is needed first.
        options: dict[str, Any] = {"preconditions": {"uid": uid}}
        if action.grace_seconds is not None:
            options["gracePeriodSeconds"] = action.grace_seconds
        pod_path = self._kube.namespaced_path("pods", namespace, name)
        if action.delete:
            method, path = "DELETE", pod_path
            body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", **options}
        else:
            method, path = "POST", pod_path + "/eviction"
            body = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": namespace},
                "deleteOptions": options,
            }
        backoff = _FIRST_BACKOFF
        while True:
            try:
                await self._kube.request(method, path, body)
                log.info("%s pod %s/%s", "deleted" if action.delete else "evicted", namespace, name)
                return uid
            except ApiError as error:
                if error.status in (404, 409):  # gone, or replaced: nothing of ours to evict
                    return ""
                budget = [text for kind, text in error.causes if kind == DISRUPTION_BUDGET]
                if error.status == 429 and budget:
                    # Verbatim: the message, then the cause's, which names the budget.
                    raise _Refused(uid, " ".join([error.reason, *budget])) from error
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
