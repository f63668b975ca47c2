"""Drains that wait: evict (or delete) pods, then wait on the pod index until they are gone.

The planner asks for one `EvictPod` per pod to drain, pass after pass, until the node holds
none; here each is one task on the event loop, started once however often it is asked for.
With `delete` (drainConfig.disableEviction) a plain DELETE, which no budget holds, replaces the
eviction. Both are preconditioned on the uid the index holds, so a pod gone (404) or replaced
under its name (409) counts as removed. Once accepted, the task waits on the pod index, at no
request's cost, then calls `on_change` so the reconciler runs a pass at once.

Every other answer is kept as an `EvictionRefusal` (`refusals()`, which the planner reports as
a blocked pod) until a later request is accepted or the pod is gone, and the pod is not asked
again before its retry time, however often the planner asks: a PodDisruptionBudget's refusal
(a 429 with a `DisruptionBudget` cause) is a wait asked again after `REFUSAL_THROTTLE`
seconds; any other (a 403 from RBAC or a policy engine, a 500, another 429, no answer) a
failure asked again after `FIRST_RETRY` seconds, doubling to `MAX_RETRY`. A refusal wakes the
reconciler when it is new or its answer changed (a pass then reports it), and again at its
retry time, never at once for one that repeats: a refused pod costs one request per retry.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from skyhook_operator.kube.client import (
    THROTTLED_RETRIES,
    ApiError,
    AsyncKube,
    NotLeading,
    Unreachable,
)
from skyhook_operator.store import Key
from skyhook_planner.model.actions import EvictPod
from skyhook_planner.model.snapshot import EvictionRefusal

log = logging.getLogger(__name__)

# Seconds before a pod whose eviction a budget refused is asked again: the planner asks every
# pass, and a budget rarely opens within seconds.
REFUSAL_THROTTLE = 30.0
# Seconds before a pod whose removal failed otherwise is asked again: the first retry, doubled
# at each failure up to the last. A 403 lasts until someone changes a grant or a policy.
FIRST_RETRY = 1.0
MAX_RETRY = 60.0
DISRUPTION_BUDGET = "DisruptionBudget"  # the cause type of a budget's 429 (policy/v1)
ANSWER_LENGTH = 240  # characters of the apiserver's answer kept (node annotation, condition)


class PodsSeen(Protocol):
    """What the drain needs of the pod index (kube/watch.py's WatchedIndex)."""

    def uid(self, key: Key) -> str | None: ...

    async def until_gone(self, key: Key, uid: str, timeout: float) -> None: ...


class _Refused(Exception):
    """The apiserver refused to remove the pod with `uid`: a budget (`by_budget`) or else."""

    def __init__(self, uid: str, detail: str, *, by_budget: bool) -> None:
        super().__init__(detail)
        self.uid = uid
        self.detail = detail
        self.by_budget = by_budget


@dataclass(frozen=True)
class _Held:
    """A refusal, when the pod may be asked again (time.monotonic()), and the wait before that
    ask, which the next failure doubles."""

    refusal: EvictionRefusal
    retry_at: float
    wait: float


class Evictor:
    """At most one removal in flight per pod; a finished one may be asked again, a refused one
    only at its retry time."""

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
        self._refused: dict[Key, _Held] = {}
        self._wakes: dict[Key, asyncio.TimerHandle] = {}  # a pass at each retry time

    def ensure(self, action: EvictPod) -> bool:
        """Start removing the pod unless that is under way or it was refused the same way
        (eviction or delete) and its retry time has not come; True if started. Call on the
        event loop."""
        key = (action.namespace, action.name)
        if key in self._running:
            return False
        held = self._holding(key)
        # The other way (drainConfig.disableEviction changed meanwhile) was never refused.
        if held and held.refusal.delete == action.delete and time.monotonic() < held.retry_at:
            return False
        self._running[key] = asyncio.create_task(
            self._run(action), name=f"evict {action.namespace}/{action.name}"
        )
        return True

    def refusals(self) -> Mapping[Key, EvictionRefusal]:
        """The refusals that still hold: of pods the index still holds, not removed since."""
        return {key: held.refusal for key in list(self._refused) if (held := self._holding(key))}

    def cancel(self) -> None:
        """Stop every removal under way (the operator stops; the next leader asks again)."""
        for task in self._running.values():
            task.cancel()
        for wake in self._wakes.values():
            wake.cancel()

    def _holding(self, key: Key) -> _Held | None:
        """The refusal of `key`, dropped once the index holds no pod of its uid (gone, or
        replaced: the new pod was never refused)."""
        held = self._refused.get(key)
        if held is not None and self._pods.uid(key) != held.refusal.uid:
            self._forget(key)
            return None
        return held

    def _forget(self, key: Key) -> None:
        self._refused.pop(key, None)
        wake = self._wakes.pop(key, None)
        if wake is not None:
            wake.cancel()

    async def _run(self, action: EvictPod) -> None:
        key = (action.namespace, action.name)
        where = f"{action.namespace}/{action.name}"
        deadline = time.monotonic() + self._timeout
        news = True  # whether a pass should look at once
        try:
            uid = await self._remove(action)
            self._forget(key)  # accepted, gone or replaced: no refusal holds it now
            if uid:
                try:
                    await self._pods.until_gone(key, uid, deadline - time.monotonic())
                except TimeoutError:
                    raise TimeoutError(f"pod {where} still exists after its eviction") from None
        except _Refused as refused:
            news = self._refused_now(action, refused)
        except (TimeoutError, ApiError) as error:  # NotLeading: the next leader asks again
            log.warning("eviction of %s: %s", where, error)
        finally:
            del self._running[key]
            if news:
                self._on_change()

    def _refused_now(self, action: EvictPod, refused: _Refused) -> bool:
        """Keep the refusal until the pod's retry time, with a pass woken then; True when it
        is news a pass should report at once (new, or another answer)."""
        key = (action.namespace, action.name)
        before = self._holding(key)
        if refused.by_budget:
            wait = REFUSAL_THROTTLE
        elif before and not before.refusal.by_budget and before.refusal.delete == action.delete:
            wait = min(before.wait * 2, MAX_RETRY)
        else:
            wait = FIRST_RETRY
        refusal = EvictionRefusal(
            namespace=action.namespace,
            name=action.name,
            node=action.node,
            uid=refused.uid,
            detail=refused.detail,
            at=datetime.now(UTC),
            by_budget=refused.by_budget,
            delete=action.delete,
        )
        self._forget(key)
        self._refused[key] = _Held(refusal, time.monotonic() + wait, wait)
        # A little after the retry time: the loop may run a timer a clock tick early.
        self._wakes[key] = asyncio.get_running_loop().call_later(wait + 0.1, self._on_change)
        what = "delete" if action.delete else "eviction"
        if refused.by_budget:
            log.info(
                "eviction of %s/%s waits for its disruption budget, asked again in %g s: %s",
                action.namespace,
                action.name,
                wait,
                refused.detail,
            )
        else:
            log.warning(
                "%s of %s/%s refused, the drain is blocked, asked again in %g s: %s",
                what,
                action.namespace,
                action.name,
                wait,
                refused.detail,
            )
        said = before.refusal if before else None
        return said is None or (said.detail, said.by_budget, said.delete) != (
            refusal.detail,
            refusal.by_budget,
            refusal.delete,
        )

    async def _remove(self, action: EvictPod) -> str:
        """Post the eviction (or the delete); the pod's uid once accepted, "" when the pod is
        gone already or replaced; `_Refused` with the apiserver's answer otherwise."""
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
        try:
            # An eviction's 429 (a budget's, with a Retry-After) is a wait of this drain's
            # own, asked again after REFUSAL_THROTTLE: never retried inside the client, as
            # client-go's eviction is not.
            await self._kube.request(
                method, path, body, throttled_retries=THROTTLED_RETRIES if action.delete else 0
            )
        except NotLeading:
            raise
        except ApiError as error:
            if error.status in (404, 409):  # gone, or replaced: nothing of ours to evict
                return ""
            budget = [text for kind, text in error.causes if kind == DISRUPTION_BUDGET]
            if error.status == 429 and budget:
                # Verbatim: the message, then the cause's, which names the budget.
                raise _Refused(uid, " ".join([error.reason, *budget]), by_budget=True) from error
            answer = _short(f"{error.status} {error.reason}")
            raise _Refused(uid, answer, by_budget=False) from error
        except Unreachable as error:
            raise _Refused(uid, _short(f"no answer: {error}"), by_budget=False) from error
        log.info("%s pod %s/%s", "deleted" if action.delete else "evicted", namespace, name)
        return uid


def _short(answer: str) -> str:
    return answer if len(answer) <= ANSWER_LENGTH else answer[: ANSWER_LENGTH - 1] + "…"
