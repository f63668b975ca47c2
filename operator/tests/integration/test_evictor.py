"""The drain's Evictor against the sandbox's real apiserver, with a real pod index.

Each test gets a namespace and a Node object of its own that no kubelet runs: a pod bound to
it stays exactly as the apiserver leaves it (a graceful delete keeps it terminating, a
finalizer holds it), and its Ready status, which the disruption controller counts, is written
here through the status subresource. Pods ask for no grace (terminationGracePeriodSeconds 0),
so an accepted eviction removes them at once unless a test says otherwise. The Evictor gets a
client of its own, whose request counts are what the Evictor sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from skyhook_operator.kube import drain
from skyhook_operator.kube.client import MERGE_PATCH, ApiError, AsyncKube, Json, connect_async
from skyhook_operator.kube.drain import Evictor
from skyhook_operator.kube.watch import WatchedIndex
from skyhook_planner.model.actions import EvictPod
from skyhook_planner.model.snapshot import PodView
from skyhook_sandbox.sandbox import Sandbox

from .helpers import dry_run_eviction, refusing_removals

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

HOLD = "skyhook.nvidia.com/test-hold"  # a finalizer nothing removes but the test
APP = "evicted"
BUDGET_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."


@dataclass
class Bench:
    kube: AsyncKube  # setup, reads, and the pod index's list+watch
    evicting: AsyncKube  # the Evictor's own client
    namespace: str
    node: str
    index: WatchedIndex[PodView]
    changes: list[float] = field(default_factory=list)  # when on_change was called

    def evictor(self, timeout: float = 30.0) -> Evictor:
        return Evictor(self.evicting, self.index, timeout, lambda: self.changes.append(0.0))

    def action(self, name: str, **fields: Any) -> EvictPod:
        return EvictPod(namespace=self.namespace, name=name, node=self.node, **fields)

    def sent(self, verb: str = "", resource: str = "") -> int:
        """Requests the Evictor sent, of this verb and resource if given."""
        made, _ = self.evicting.request_totals()
        return sum(
            n
            for (v, r), n in made.items()
            if (not verb or v == verb) and (not resource or r == resource)
        )

    async def changed(self, count: int, timeout: float) -> float:
        """Wait until on_change was called `count` times in all; the seconds it took."""
        start = time.monotonic()
        while len(self.changes) < count:
            if time.monotonic() - start > timeout:
                raise AssertionError(f"on_change called {len(self.changes)} times, not {count}")
            await asyncio.sleep(0.02)
        return time.monotonic() - start

    def path(self, name: str = "", subresource: str = "") -> str:
        return self.kube.namespaced_path("pods", self.namespace, name, subresource)

    async def pod(
        self, name: str, *, finalizers: tuple[str, ...] = (), grace: int = 0, indexed: bool = True
    ) -> Json:
        """A Ready pod bound to this test's node, in the index when this returns (unless the
        index is stopped: `indexed=False`)."""
        manifest = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": APP}, "finalizers": list(finalizers)},
            "spec": {
                "nodeName": self.node,
                "terminationGracePeriodSeconds": grace,
                "tolerations": [{"operator": "Exists"}],  # the node is never Ready
                "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10"}],
            },
        }
        created = await self.kube.request("POST", self.path(), manifest)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status = {
            "phase": "Running",
            "startTime": now,
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": now}
                for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            ],
        }
        await self.kube.request("PATCH", self.path(name, "status"), {"status": status}, MERGE_PATCH)
        uid = created["metadata"]["uid"]
        if not indexed:
            return created
        await until(lambda: self.index.uid((self.namespace, name)) == uid, 10, "pod indexed")
        return created

    async def read(self, name: str) -> Json | None:
        try:
            return await self.kube.request("GET", self.path(name))
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    async def release(self, name: str) -> None:
        """Remove the test's finalizer from the pod."""
        body = {"metadata": {"finalizers": None}}
        await self.kube.request("PATCH", self.path(name), body, MERGE_PATCH)

    def budget_path(self, name: str = "") -> str:
        path = f"/apis/policy/v1/namespaces/{self.namespace}/poddisruptionbudgets"
        return path + (f"/{name}" if name else "")

    async def budget(self, name: str) -> None:
        """A PodDisruptionBudget that allows no disruption of the (one) app pod, once the
        disruption controller has counted that pod healthy."""
        manifest = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": APP}}},
        }
        await self.kube.request("POST", self.budget_path(), manifest)
        await until_async(_budget_counts(self, name), 60, "the disruption controller counts it")


async def until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting: {what}")
        await asyncio.sleep(0.05)


async def until_async(predicate: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting: {what}")
        await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def bench(sandbox: Sandbox, test: str) -> AsyncIterator[Bench]:
    stem = "ev-" + re.sub(r"[^a-z0-9]+", "-", test.lower()).strip("-")[:40].strip("-")
    kube = connect_async(str(sandbox.kubeconfig))
    evicting = connect_async(str(sandbox.kubeconfig))
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": stem}}
    await kube.request("POST", "/api/v1/namespaces", namespace)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": stem}}
    await kube.request("POST", kube.node_path(""), node)
    index: WatchedIndex[PodView] = WatchedIndex(
        kube,
        kube.namespaced_path("pods", stem),
        decode=PodView.from_api,
        selector="spec.nodeName!=",  # as the operator's pod index
        on_change=lambda: None,
    )
    await index.start()
    try:
        yield Bench(kube, evicting, stem, stem, index)
    finally:
        index.stop()
        # Nothing else would ever finish these pods: no kubelet runs the node.
        pods = await kube.request("GET", kube.namespaced_path("pods", stem))
        for pod in pods["items"]:
            path = kube.namespaced_path("pods", stem, pod["metadata"]["name"])
            with contextlib.suppress(ApiError):
                if pod["metadata"].get("finalizers"):
                    body = {"metadata": {"finalizers": None}}
                    await kube.request("PATCH", path, body, MERGE_PATCH)
                await kube.request("DELETE", path, {"gracePeriodSeconds": 0})
        with contextlib.suppress(ApiError):
            await kube.request("DELETE", kube.node_path(stem))
        with contextlib.suppress(ApiError):
            await kube.request("DELETE", f"/api/v1/namespaces/{stem}")
        await kube.close()
        await evicting.close()


def run(sandbox: Sandbox, request: pytest.FixtureRequest, scenario: Any) -> None:
    async def main() -> None:
        async with bench(sandbox, request.node.name) as test_bench:
            await scenario(test_bench)

    asyncio.run(main())


def test_a_budget_refusal_is_a_wait_asked_again_only_after_the_throttle(
    sandbox: Sandbox,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    throttle = 3.0
    monkeypatch.setattr(drain, "REFUSAL_THROTTLE", throttle)
    caplog.set_level(logging.INFO, logger=drain.__name__)

    async def scenario(b: Bench) -> None:
        pod = await b.pod("guarded", grace=30)  # terminating once evicted: no kubelet ends it
        await b.budget("keep-one")
        evictor = b.evictor()
        key = (b.namespace, "guarded")

        assert evictor.ensure(b.action("guarded"))
        took = await b.changed(1, 10)
        assert took < 5, "a refusal ends the task at once, no retry loop until the deadline"
        refusal = evictor.refusals()[key]
        assert BUDGET_MESSAGE in refusal.detail
        assert "keep-one" in refusal.detail, "the apiserver's message names the budget"
        assert (refusal.namespace, refusal.name, refusal.node) == (b.namespace, "guarded", b.node)
        assert refusal.uid == pod["metadata"]["uid"]
        assert refusal.at.tzinfo is not None
        assert abs((datetime.now(UTC) - refusal.at).total_seconds()) < 10
        assert await b.read("guarded") is not None, "the budget kept the pod"
        assert b.sent("POST", "pods/eviction") == 1
        assert "waits for its disruption budget" in caplog.text
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]

        # Within the throttle: no task, no request, however often the planner asks.
        sent = b.sent()
        for _ in range(5):
            assert not evictor.ensure(b.action("guarded"))
            await asyncio.sleep(0.1)
        assert b.sent() == sent
        assert len(b.changes) == 1
        assert evictor.refusals()[key] == refusal

        # At its end a pass is woken; asked then, refused again, with the same answer: no
        # pass more.
        await b.changed(2, throttle + 5)
        assert (datetime.now(UTC) - refusal.at).total_seconds() > throttle - 0.5, "woken early"
        assert evictor.ensure(b.action("guarded"))
        await until(lambda: evictor.refusals()[key].at > refusal.at, 10, "refused again")
        assert b.sent("POST", "pods/eviction") == 2
        again = evictor.refusals()[key]
        await asyncio.sleep(0.5)
        assert len(b.changes) == 2, "the same answer again: nothing new to report"

        # The budget goes: the next ask after the throttle is accepted, the refusal dropped.
        await b.kube.request("DELETE", b.budget_path("keep-one"))
        assert not evictor.ensure(b.action("guarded")), "still within the throttle"
        await asyncio.sleep(throttle - (datetime.now(UTC) - again.at).total_seconds() + 0.2)
        await until_async(_budget_gone(b, "keep-one"), 10, "the budget deleted")
        assert evictor.ensure(b.action("guarded"))
        await until_async(_terminating(b, "guarded"), 10, "the eviction accepted")
        assert b.sent("POST", "pods/eviction") == 3
        assert b.index.uid(key) == pod["metadata"]["uid"]
        assert key not in evictor.refusals(), "accepted: no budget holds the pod any more"
        assert len(b.changes) == 3, "the task waits for the pod to go (3: the throttle's wake)"
        await b.kube.request("DELETE", b.path("guarded"), {"gracePeriodSeconds": 0})
        await b.changed(4, 10)
        assert b.index.uid(key) is None

    run(sandbox, request, scenario)


def _budget_gone(b: Bench, name: str) -> Callable[[], Any]:
    async def gone() -> bool:
        try:
            await b.kube.request("GET", b.budget_path(name))
        except ApiError as error:
            return error.status == 404
        return False

    return gone


def test_a_pod_that_does_not_exist_is_evicted_at_once(
    sandbox: Sandbox, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(b: Bench) -> None:
        # Not in the index: nothing to ask.
        evictor = b.evictor()
        assert evictor.ensure(b.action("never-was"))
        assert await b.changed(1, 5) < 1
        assert b.sent() == 0

        # In the index, gone from the apiserver (the index stopped before it saw the delete):
        # the eviction's 404 means evicted.
        await b.pod("was")
        b.index.stop()
        await b.kube.request("DELETE", b.path("was"), {"gracePeriodSeconds": 0})
        assert evictor.ensure(b.action("was"))
        assert await b.changed(2, 5) < 2
        assert b.sent("POST", "pods/eviction") == 1
        assert not evictor.refusals()
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text

    run(sandbox, request, scenario)


def test_a_pod_replaced_under_the_same_name_is_not_evicted(
    sandbox: Sandbox, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(b: Bench) -> None:
        first = await b.pod("reborn")
        b.index.stop()  # the index keeps uid A while the pod is replaced
        await b.kube.request("DELETE", b.path("reborn"), {"gracePeriodSeconds": 0})
        second = await b.pod("reborn", indexed=False)
        assert second["metadata"]["uid"] != first["metadata"]["uid"]
        assert b.index.uid((b.namespace, "reborn")) == first["metadata"]["uid"]

        evictor = b.evictor()
        assert evictor.ensure(b.action("reborn"))
        try:
            await b.changed(1, 5)
        finally:  # said first if the task never ended
            now = await b.read("reborn")
            assert now is not None, "the new pod was evicted"
            assert now["metadata"]["uid"] == second["metadata"]["uid"]
            assert not now["metadata"].get("deletionTimestamp"), "the new pod was evicted"
        assert b.sent("POST", "pods/eviction") == 1
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text

    run(sandbox, request, scenario)


def test_a_pod_that_never_goes_ends_the_wait_at_the_deadline(
    sandbox: Sandbox, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    timeout = 3.0

    async def scenario(b: Bench) -> None:
        # Its own grace is 30 s; the eviction asks for none, which the finalizer outlasts.
        await b.pod("held", finalizers=(HOLD,), grace=30)
        evictor = b.evictor(timeout)
        assert evictor.ensure(b.action("held", grace_seconds=0))
        await until_async(_terminating(b, "held"), 5, "the eviction accepted")
        held = await b.read("held")
        assert held is not None
        assert held["metadata"]["deletionGracePeriodSeconds"] == 0, "the grace reaches the pod"
        assert not b.changes, "the task waits for the pod to go"
        took = await b.changed(1, timeout + 5)
        assert took > timeout - 1.5, "it waited until the deadline"
        assert "still exists after its eviction" in caplog.text
        assert b.sent("POST", "pods/eviction") == 1
        assert not evictor.refusals()

        # Asked again, it is accepted again and finishes once the finalizer goes.
        caplog.clear()
        evictor = b.evictor(30)
        assert evictor.ensure(b.action("held"))
        await asyncio.sleep(0.5)
        assert b.sent("POST", "pods/eviction") == 2
        assert len(b.changes) == 1, "still waiting"
        await b.release("held")
        assert await b.changed(2, 10) < 5
        assert await b.read("held") is None
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text

    run(sandbox, request, scenario)


def _terminating(b: Bench, name: str, or_gone: bool = False) -> Callable[[], Any]:
    async def terminating() -> bool:
        pod = await b.read(name)
        if pod is None:
            return or_gone
        return bool(pod["metadata"].get("deletionTimestamp"))

    return terminating


def test_delete_mode_bypasses_the_budget_with_the_grace_asked_for(
    sandbox: Sandbox, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(b: Bench) -> None:
        await b.pod("bypassed")
        await b.budget("keep-one")
        with pytest.raises(ApiError) as refused:  # the budget refuses evictions
            body = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": "bypassed", "namespace": b.namespace},
            }
            await b.kube.request("POST", b.path("bypassed", "eviction"), body)
        assert refused.value.status == 429
        assert [kind for kind, _ in refused.value.causes] == [drain.DISRUPTION_BUDGET]

        evictor = b.evictor()
        assert evictor.ensure(b.action("bypassed"))  # refused: the throttle starts
        await b.changed(1, 10)
        assert (b.namespace, "bypassed") in evictor.refusals()
        # disableEviction turned on meanwhile: the delete is not held by the eviction's throttle.
        assert evictor.ensure(b.action("bypassed", delete=True, grace_seconds=45))
        await until_async(_terminating(b, "bypassed", or_gone=True), 5, "the pod deleted")
        pod = await b.read("bypassed")
        assert pod is not None, "deleted at once: the grace did not reach the pod"
        assert pod["metadata"]["deletionGracePeriodSeconds"] == 45
        assert b.sent("DELETE", "pods") == 1
        assert b.sent("POST", "pods/eviction") == 1, "only the refused one"
        assert len(b.changes) == 1, "waiting for the pod to go"
        # Nothing runs the node: end the grace as a kubelet would.
        await b.kube.request("DELETE", b.path("bypassed"), {"gracePeriodSeconds": 0})
        await b.changed(2, 5)
        assert not evictor.refusals()
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text

    run(sandbox, request, scenario)


def test_a_refusal_goes_with_its_pod(sandbox: Sandbox, request: pytest.FixtureRequest) -> None:
    async def scenario(b: Bench) -> None:
        first = await b.pod("guarded")
        await b.budget("keep-one")
        evictor = b.evictor()
        key = (b.namespace, "guarded")
        assert evictor.ensure(b.action("guarded"))
        await b.changed(1, 10)
        assert evictor.refusals()[key].uid == first["metadata"]["uid"]

        # Gone: the refusal with it.
        await b.kube.request("DELETE", b.path("guarded"), {"gracePeriodSeconds": 0})
        await until(lambda: b.index.uid(key) is None, 10, "the pod gone from the index")
        assert key not in evictor.refusals()

        # A new pod of the same name was never refused: asked at once, within the throttle.
        second = await b.pod("guarded")
        await until_async(_budget_counts(b, "keep-one"), 60, "the budget counts the new pod")
        assert evictor.ensure(b.action("guarded"))
        await b.changed(2, 10)
        assert evictor.refusals()[key].uid == second["metadata"]["uid"]
        assert b.sent("POST", "pods/eviction") == 2

    run(sandbox, request, scenario)


def _budget_counts(b: Bench, name: str) -> Callable[[], Any]:
    async def counts() -> bool:
        pdb = await b.kube.request("GET", b.budget_path(name))
        status = pdb.get("status") or {}
        return (
            status.get("observedGeneration") == pdb["metadata"]["generation"]
            and status.get("currentHealthy") == 1
            and status.get("disruptionsAllowed") == 0
        )

    return counts


REFUSED_BY_POLICY = "pods here are not to be removed (test policy)"


async def refusing(b: Bench, pod: str) -> Callable[[], Any]:
    """Put a policy refusing every eviction and delete in the bench's namespace, in force
    once this returns; the coroutine function that lifts it."""
    name = f"refuse-{uuid.uuid4().hex[:6]}"  # short: the 403 repeats it before the message
    made = refusing_removals(name, b.namespace, REFUSED_BY_POLICY)
    for path, body in made:
        await b.kube.request("POST", path, body)

    async def in_force() -> bool:
        path, body = dry_run_eviction(b.namespace, pod)
        try:
            await b.kube.request("POST", path, body)
        except ApiError as error:
            return error.status == 403
        return False

    await until_async(in_force, 30, "the refusing policy in force")

    async def lift() -> None:
        for path, body in reversed(made):
            with contextlib.suppress(ApiError):
                await b.kube.request("DELETE", f"{path}/{body['metadata']['name']}")

    return lift


def test_a_refused_eviction_is_kept_and_asked_again_at_a_growing_interval(
    sandbox: Sandbox,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A 403 (here a ValidatingAdmissionPolicy's, as from a policy engine or missing RBAC) is
    a refusal kept with the apiserver's answer; the planner asking every 50 ms gets one
    request after 0.5 s, 1 s, 2 s, then every 2 s (the cap), and a pass is woken only for the
    news and at each retry time. Once the policy goes, the next retry is accepted."""
    monkeypatch.setattr(drain, "FIRST_RETRY", 0.5)
    monkeypatch.setattr(drain, "MAX_RETRY", 2.0)
    caplog.set_level(logging.INFO, logger=drain.__name__)

    async def scenario(b: Bench) -> None:
        pod = await b.pod("kept")
        lift = await refusing(b, "kept")
        try:
            evictor = b.evictor()
            key = (b.namespace, "kept")
            start = time.monotonic()
            while time.monotonic() - start < 9:  # a planner asking far more often than that
                evictor.ensure(b.action("kept"))
                await asyncio.sleep(0.05)
            refusal = evictor.refusals()[key]
            assert refusal.detail.startswith("403 "), refusal.detail
            assert REFUSED_BY_POLICY in refusal.detail, refusal.detail
            assert (refusal.by_budget, refusal.delete) == (False, False)
            assert refusal.uid == pod["metadata"]["uid"]
            # Asked at 0, 0.5, 1.5, 3.5, 5.5, 7.5 s: six, not one per ask.
            assert 5 <= b.sent("POST", "pods/eviction") <= 7, b.sent("POST", "pods/eviction")
            waits = [
                float(found.group(1))
                for r in caplog.records
                if (
                    found := re.search(
                        r"refused, the drain is blocked, asked again in (\S+) s", r.getMessage()
                    )
                )
            ]
            assert waits[:4] == [0.5, 1.0, 2.0, 2.0], waits
            # A pass for the news, then one at each retry time: not one per failure at once.
            assert len(b.changes) <= len(waits) + 1, (len(b.changes), waits)
            assert await b.read("kept") is not None

            # Turned to a delete meanwhile: asked at once (never refused that way), refused too.
            assert evictor.ensure(b.action("kept", delete=True))
            await until(lambda: evictor.refusals()[key].delete, 10, "the delete refused")
            assert evictor.refusals()[key].detail.startswith("403 ")
            assert b.sent("DELETE", "pods") == 1

            await lift()
            await until_async(_not_refused(b, "kept"), 30, "the policy lifted")
            await until(lambda: evictor.ensure(b.action("kept", delete=True)), 10, "retry time")
            await until(lambda: b.index.uid(key) is None, 10, "the pod deleted")
            assert key not in evictor.refusals()
        finally:
            await lift()

    run(sandbox, request, scenario)


def _not_refused(b: Bench, pod: str) -> Callable[[], Any]:
    async def admitted() -> bool:
        path, body = dry_run_eviction(b.namespace, pod)
        try:
            await b.kube.request("POST", path, body)
        except ApiError:
            return False
        return True

    return admitted


def test_a_pod_under_two_budgets_is_refused_as_a_failure_not_a_wait(
    sandbox: Sandbox, request: pytest.FixtureRequest
) -> None:
    """The eviction subresource answers 500 for a pod two PodDisruptionBudgets select: no
    budget's wait, a failure kept with the apiserver's words and asked again after 1 s."""

    async def scenario(b: Bench) -> None:
        await b.pod("doubly")
        for name in ("first", "second"):
            manifest = {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": name},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": APP}}},
            }
            await b.kube.request("POST", b.budget_path(), manifest)
        evictor = b.evictor()
        key = (b.namespace, "doubly")
        assert evictor.ensure(b.action("doubly"))
        await b.changed(1, 10)
        refusal = evictor.refusals()[key]
        assert refusal.detail.startswith("500 "), refusal.detail
        assert "more than one PodDisruptionBudget" in refusal.detail, refusal.detail
        assert not refusal.by_budget
        assert not evictor.ensure(b.action("doubly")), "within its first retry"
        await asyncio.sleep(drain.FIRST_RETRY + 0.2)
        assert evictor.ensure(b.action("doubly"))
        await until(lambda: b.sent("POST", "pods/eviction") == 2, 10, "asked again")

    run(sandbox, request, scenario)
