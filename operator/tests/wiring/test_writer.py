"""The writer's queue: what goes out first, what waits for what, and what the next pass sees
while writes are in flight. A stand-in client records requests and can hold them back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any, cast

from skyhook_operator.kube.client import ApiError, AsyncKube
from skyhook_operator.kube.writer import Writer
from skyhook_operator.store import ClusterStore
from skyhook_planner.model.actions import CreatePod, PatchNode, PatchSkyhookStatus, Plan


class HeldClient:
    """Answers every request with a minimal object; requests about a held node wait."""

    node_path = staticmethod(AsyncKube.node_path)
    namespaced_path = staticmethod(AsyncKube.namespaced_path)
    skyhook_path = staticmethod(AsyncKube.skyhook_path)

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []  # (method, path) in the order they went out
        self.held: dict[str, asyncio.Event] = {}
        self.waiting: set[str] = set()  # held nodes with a request waiting
        self.failing: set[str] = set()  # nodes whose requests the apiserver answers 500

    def hold(self, node: str) -> asyncio.Event:
        self.held[node] = asyncio.Event()
        return self.held[node]

    async def request(self, method: str, path: str, body: Any = None, *_: Any, **__: Any) -> Any:
        for node, gate in self.held.items():
            if f"/{node}" in path or (isinstance(body, dict) and _pod_node(body) == node):
                self.waiting.add(node)
                await asyncio.wait_for(gate.wait(), 10)
        if any(f"/{node}" in path for node in self.failing):
            raise ApiError(500, "etcd timeout", method, path)
        self.sent.append((method, path))
        name = path.rstrip("/").split("/")[-1]
        return {"metadata": {"name": name, "namespace": "skyhook", "resourceVersion": "7"}}

    def paths(self) -> list[str]:
        return [path for _, path in self.sent]


async def eventually(check: Callable[[], object], seconds: float, what: str) -> Any:
    """`check()` once it is truthy; AssertionError naming `what` after `seconds`."""
    stop = time.monotonic() + seconds
    while not (found := check()):
        if time.monotonic() > stop:
            raise AssertionError(f"not within {seconds} s: {what}")
        await asyncio.sleep(0.02)
    return found


async def stays_false(check: Callable[[], object], seconds: float) -> None:
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        assert not check()
        await asyncio.sleep(0.02)


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


def _pod_node(body: dict[str, Any]) -> str:
    return str((body.get("spec") or {}).get("nodeName") or "")


def _pod(node: str) -> CreatePod:
    return CreatePod(
        {
            "metadata": {"name": f"pod-{node}", "namespace": "skyhook", "labels": {}},
            "spec": {"nodeName": node},
        }
    )


def _mark(node: str, value: str = "in_progress") -> PatchNode:
    return PatchNode(node, annotations={"skyhook.nvidia.com/status_s": value})


def _writer(client: HeldClient, concurrency: int = 4) -> Writer:
    kube = cast(AsyncKube, client)
    return Writer(kube, ClusterStore(), lambda namespace, name: None, concurrency)


async def _closed(writer: Writer) -> None:
    assert await writer.close(5.0)


def test_submit_returns_at_once_and_a_node_is_busy_until_its_writes_are_done() -> None:
    async def scenario() -> None:
        client = HeldClient()
        gate = client.hold("n1")
        writer = _writer(client)
        result = writer.submit(Plan((_mark("n1"), _pod("n1"), _mark("n2"))))
        assert result.queued == 3
        await eventually(lambda: "/api/v1/nodes/n2/status" in client.paths(), 10, "n2 written")
        assert writer.busy_nodes() == ({"n1"}, set()), "n1's writes are held, n2's are done"
        gate.set()
        await eventually(lambda: not writer.busy_nodes()[0], 10, "n1 written")
        assert client.paths().index("/api/v1/nodes/n1/status") < client.paths().index(
            "/api/v1/namespaces/skyhook/pods"
        ), "a node's patch goes before its pod"
        await _closed(writer)

    run(scenario)


def test_a_node_the_plan_starts_waits_for_the_nodes_it_releases() -> None:
    async def scenario() -> None:
        client = HeldClient()
        gate = client.hold("done")
        writer = _writer(client)
        plan = Plan(
            (_mark("done", "complete"), _mark("next"), _pod("next")),
            starting=frozenset({"next"}),
            releasing=frozenset({"done"}),
        )
        writer.submit(plan)
        # next holds a slot already; done holds its slot until its release is written
        assert writer.busy_nodes() == ({"done", "next"}, {"done", "next"})
        await stays_false(lambda: any("next" in p for p in client.paths()), 0.5)
        gate.set()
        await eventually(lambda: not writer.busy_nodes()[0], 10, "both written")
        paths = client.paths()
        assert paths.index("/api/v1/nodes/done/status") < paths.index("/api/v1/nodes/next/status")
        await _closed(writer)

    run(scenario)


def test_a_node_patch_is_pending_until_its_lane_is_written_or_has_failed() -> None:
    async def scenario() -> None:
        client = HeldClient()
        written, failing = client.hold("n1"), client.hold("n2")
        client.failing.add("n2")
        writer = _writer(client)
        first, second, other = _mark("n1", "waiting"), _mark("n1"), _mark("n2")
        writer.submit(Plan((first, other)))
        writer.submit(Plan((second, _pod("n1"))))
        # What the next snapshot replays: each node's patches in the order they were decided.
        assert writer.pending_node_patches() == {"n1": (first, second), "n2": (other,)}
        failing.set()
        await eventually(lambda: "n2" not in writer.pending_node_patches(), 10, "n2 failed")
        assert writer.pending_node_patches() == {"n1": (first, second)}
        written.set()
        await eventually(lambda: not writer.pending_node_patches(), 10, "n1 written")
        await _closed(writer)

    run(scenario)


def test_a_status_goes_out_after_its_plan_and_is_pending_until_then() -> None:
    async def scenario() -> None:
        client = HeldClient()
        gate = client.hold("n1")
        writer = _writer(client)
        status = PatchSkyhookStatus("s", {"status": "in_progress"})
        writer.submit(Plan((_mark("n1"), status)))
        assert writer.pending_statuses() == {"s": [{"status": "in_progress"}]}
        await stays_false(lambda: any("skyhooks" in p for p in client.paths()), 0.5)
        gate.set()
        await writer.drain()  # waits for the status too
        assert client.paths()[-1].endswith("/skyhooks/s/status")
        assert writer.pending_statuses() == {}
        await _closed(writer)

    run(scenario)


def test_hand_offs_go_out_before_bookkeeping_queued_ahead_of_them() -> None:
    async def scenario() -> None:
        client = HeldClient()
        gate = client.hold("blocker")
        writer = _writer(client, concurrency=1)
        writer.submit(Plan((_mark("blocker"),)))  # takes the only worker
        await eventually(lambda: "blocker" in client.waiting, 10, "the blocker going out")
        waiting = tuple(_mark(f"w{i}", "waiting") for i in range(5))
        writer.submit(Plan((*waiting, _mark("handoff"), _pod("handoff"))))
        gate.set()
        await eventually(lambda: not writer.busy_nodes()[0], 10, "everything written")
        after_blocker = client.paths()[1:]
        assert after_blocker[:2] == [
            "/api/v1/nodes/handoff/status",
            "/api/v1/namespaces/skyhook/pods",
        ], after_blocker
        await _closed(writer)

    run(scenario)


def test_statuses_of_passes_close_together_are_one_write() -> None:
    async def scenario() -> None:
        client = HeldClient()
        gate = client.hold("n1")
        writer = _writer(client)
        writer.submit(Plan((_mark("n1"), PatchSkyhookStatus("s", {"nodesInProgress": 1}))))
        writer.submit(Plan((PatchSkyhookStatus("s", {"completeNodes": "1/2"}),)))
        assert writer.pending_statuses() == {
            "s": [{"nodesInProgress": 1}, {"completeNodes": "1/2"}]
        }
        gate.set()
        await writer.drain()
        assert [p for p in client.paths() if "skyhooks" in p] == [
            "/apis/skyhook.nvidia.com/v1alpha1/skyhooks/s/status"
        ]
        await _closed(writer)

    run(scenario)


def test_a_change_of_phase_is_not_held_back_by_the_status_interval() -> None:
    async def scenario() -> None:
        client = HeldClient()
        writer = _writer(client)

        def status_writes() -> int:
            return sum("skyhooks" in p for p in client.paths())

        writer.submit(Plan((PatchSkyhookStatus("s", {"completeNodes": "1/2"}),)))
        await writer.drain()
        writer.submit(Plan((PatchSkyhookStatus("s", {"status": "in_progress"}),)))
        await eventually(lambda: status_writes() == 2, 0.5, "the phase change written at once")
        writer.submit(Plan((PatchSkyhookStatus("s", {"completeNodes": "2/2"}),)))
        await stays_false(lambda: status_writes() == 3, 0.5)  # progress waits out the interval
        await writer.drain()
        assert status_writes() == 3
        await _closed(writer)

    run(scenario)


def test_close_gives_up_on_writes_the_apiserver_never_answers() -> None:
    async def scenario() -> None:
        client = HeldClient()
        client.hold("n1")  # never answered
        writer = _writer(client)
        writer.submit(Plan((_mark("n1"),)))
        await eventually(lambda: "n1" in client.waiting, 10, "n1 going out")
        started = time.monotonic()
        assert not await writer.close(0.3)
        assert time.monotonic() - started < 2

    run(scenario)
