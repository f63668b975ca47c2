"""The writer's queue: what goes out first, what waits for what, and what the next pass sees
while writes are in flight. A stand-in client records requests and can hold them back."""

from __future__ import annotations

import threading
from typing import Any, cast

import pytest

from skyhook_dev.harness import WaitTimeout, wait_until
from skyhook_operator.kube.client import Kube
from skyhook_operator.kube.writer import Writer
from skyhook_operator.store import ClusterStore
from skyhook_planner.model.actions import CreatePod, PatchNode, PatchSkyhookStatus, Plan


class HeldClient:
    """Answers every request with a minimal object; requests about a held node wait."""

    node_path = staticmethod(Kube.node_path)
    namespaced_path = staticmethod(Kube.namespaced_path)
    skyhook_path = staticmethod(Kube.skyhook_path)

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []  # (method, path) in the order they went out
        self.lock = threading.Lock()
        self.held: dict[str, threading.Event] = {}
        self.waiting: set[str] = set()  # held nodes with a request waiting

    def hold(self, node: str) -> threading.Event:
        self.held[node] = threading.Event()
        return self.held[node]

    def request(self, method: str, path: str, body: Any = None, *_: Any, **__: Any) -> Any:
        for node, gate in self.held.items():
            if f"/{node}" in path or (isinstance(body, dict) and _pod_node(body) == node):
                self.waiting.add(node)
                gate.wait(10)
        with self.lock:
            self.sent.append((method, path))
        name = path.rstrip("/").split("/")[-1]
        return {"metadata": {"name": name, "namespace": "skyhook", "resourceVersion": "7"}}

    def paths(self) -> list[str]:
        with self.lock:
            return [path for _, path in self.sent]


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


@pytest.fixture
def client() -> HeldClient:
    return HeldClient()


def _writer(client: HeldClient, concurrency: int = 4) -> Writer:
    kube = cast(Kube, client)
    return Writer(kube, ClusterStore(), lambda namespace, name: None, concurrency)


def test_submit_returns_at_once_and_a_node_is_busy_until_its_writes_are_done(
    client: HeldClient,
) -> None:
    gate = client.hold("n1")
    writer = _writer(client)
    result = writer.submit(Plan((_mark("n1"), _pod("n1"), _mark("n2"))))
    assert result.queued == 3
    wait_until(lambda: "/api/v1/nodes/n2/status" in client.paths(), 10, "n2 written")
    assert writer.busy_nodes() == ({"n1"}, set()), "n1's writes are held, n2's are done"
    gate.set()
    wait_until(lambda: not writer.busy_nodes()[0], 10, "n1 written")
    assert client.paths().index("/api/v1/nodes/n1/status") < client.paths().index(
        "/api/v1/namespaces/skyhook/pods"
    ), "a node's patch goes before its pod"
    writer.close()


def test_a_node_the_plan_starts_waits_for_the_nodes_it_releases(client: HeldClient) -> None:
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
    with pytest.raises(WaitTimeout):
        wait_until(lambda: any("next" in p for p in client.paths()), 0.5, "next", 0.05)
    gate.set()
    wait_until(lambda: not writer.busy_nodes()[0], 10, "both written")
    paths = client.paths()
    assert paths.index("/api/v1/nodes/done/status") < paths.index("/api/v1/nodes/next/status")
    writer.close()


def test_a_status_goes_out_after_its_plan_and_is_pending_until_then(client: HeldClient) -> None:
    gate = client.hold("n1")
    writer = _writer(client)
    status = PatchSkyhookStatus("s", {"status": "in_progress"})
    writer.submit(Plan((_mark("n1"), status)))
    assert writer.pending_statuses() == {"s": [{"status": "in_progress"}]}
    with pytest.raises(WaitTimeout):
        wait_until(lambda: any("skyhooks" in p for p in client.paths()), 0.5, "status", 0.05)
    gate.set()
    writer.drain()  # waits for the status too
    assert client.paths()[-1].endswith("/skyhooks/s/status")
    assert writer.pending_statuses() == {}
    writer.close()


def test_hand_offs_go_out_before_bookkeeping_queued_ahead_of_them(client: HeldClient) -> None:
    gate = client.hold("blocker")
    writer = _writer(client, concurrency=1)
    writer.submit(Plan((_mark("blocker"),)))  # takes the only writer thread
    wait_until(lambda: "blocker" in client.waiting, 10, "the blocker going out")
    waiting = tuple(_mark(f"w{i}", "waiting") for i in range(5))
    writer.submit(Plan((*waiting, _mark("handoff"), _pod("handoff"))))
    gate.set()
    wait_until(lambda: not writer.busy_nodes()[0], 10, "everything written")
    after_blocker = client.paths()[1:]
    assert after_blocker[:2] == [
        "/api/v1/nodes/handoff/status",
        "/api/v1/namespaces/skyhook/pods",
    ], after_blocker
    writer.close()


def test_statuses_of_passes_close_together_are_one_write(client: HeldClient) -> None:
    gate = client.hold("n1")
    writer = _writer(client)
    writer.submit(Plan((_mark("n1"), PatchSkyhookStatus("s", {"nodesInProgress": 1}))))
    writer.submit(Plan((PatchSkyhookStatus("s", {"completeNodes": "1/2"}),)))
    assert writer.pending_statuses() == {"s": [{"nodesInProgress": 1}, {"completeNodes": "1/2"}]}
    gate.set()
    writer.drain()
    assert [p for p in client.paths() if "skyhooks" in p] == [
        "/apis/skyhook.nvidia.com/v1alpha1/skyhooks/s/status"
    ]
    writer.close()


def test_a_change_of_phase_is_not_held_back_by_the_status_interval(client: HeldClient) -> None:
    writer = _writer(client)

    def status_writes() -> int:
        return sum("skyhooks" in p for p in client.paths())

    writer.submit(Plan((PatchSkyhookStatus("s", {"completeNodes": "1/2"}),)))
    writer.drain()
    writer.submit(Plan((PatchSkyhookStatus("s", {"status": "in_progress"}),)))
    wait_until(lambda: status_writes() == 2, 0.5, "the phase change written at once", 0.02)
    writer.submit(Plan((PatchSkyhookStatus("s", {"completeNodes": "2/2"}),)))
    with pytest.raises(WaitTimeout):  # progress alone waits out the interval
        wait_until(lambda: status_writes() == 3, 0.5, "progress", 0.02)
    writer.drain()
    assert status_writes() == 3
    writer.close()
