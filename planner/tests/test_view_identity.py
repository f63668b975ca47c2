"""The replay of queued writes and the simulator keep the object-identity contract of incremental
passes (passes/memory.py): a view nothing changed is handed to the next pass as the same object,
and a view a write changed is a new one."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from skyhook_planner.model.actions import Action, DeletePod, PatchNode
from skyhook_planner.model.replay import NodeReplay, StatusReplay
from skyhook_planner.model.snapshot import (
    ClusterSnapshot,
    ConfigMapView,
    NodeView,
    PodView,
    SkyhookView,
)
from skyhook_planner.sim.cluster import SimCluster, make_node

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _pod(name: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "work"},
        "spec": {"nodeName": node},
        "status": {"phase": "Running"},
    }


def _skyhook(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {}, "status": {"nodeStatus": {}}}


def _configmap(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "skyhook"}, "data": {"k": "v"}}


def _stored() -> ClusterSnapshot:
    """A snapshot as the store hands it over: three nodes, a pod on each, two Skyhooks."""
    names = ("n1", "n2", "n3")
    return ClusterSnapshot(
        skyhooks=(SkyhookView.from_api(_skyhook("a")), SkyhookView.from_api(_skyhook("b"))),
        nodes=tuple(NodeView.from_api(make_node(n)) for n in names),
        pods=tuple(PodView.from_api(_pod(f"w-{n}", n)) for n in names),
        configmaps=(ConfigMapView.from_api(_configmap("c")),),
    )


class Replay:
    """Both replays, applied as the reconciler applies them to each pass's snapshot."""

    def __init__(self) -> None:
        self.statuses = StatusReplay()
        self.nodes = NodeReplay()

    def __call__(
        self,
        snapshot: ClusterSnapshot,
        statuses: dict[str, list[dict[str, Any]]],
        lanes: dict[str, tuple[Action, ...]],
    ) -> ClusterSnapshot:
        return self.nodes.apply(self.statuses.apply(snapshot, statuses), lanes)


def _same(one: tuple[Any, ...], other: tuple[Any, ...]) -> list[bool]:
    return [a is b for a, b in zip(one, other, strict=True)]


def test_a_replay_with_nothing_queued_hands_over_the_stored_views() -> None:
    stored = _stored()
    replay = Replay()
    for _ in range(2):  # the first pass and the next, with the same stored snapshot
        shown = replay(stored, {}, {})
        assert shown.nodes is stored.nodes
        assert shown.pods is stored.pods
        assert shown.configmaps is stored.configmaps
        assert shown.skyhooks is stored.skyhooks


def test_writes_queued_for_one_node_renew_only_that_node_s_views() -> None:
    stored = _stored()
    lane: tuple[Action, ...] = (
        PatchNode("n2", annotations={"skyhook.nvidia.com/status_a": "in_progress"}),
        DeletePod("work", "w-n2", "n2"),
    )
    replay = Replay()
    first = replay(stored, {}, {"n2": lane})
    assert first.nodes[1].annotations == {"skyhook.nvidia.com/status_a": "in_progress"}
    assert first.pods[1].deleting
    assert _same(stored.nodes, first.nodes) == [True, False, True]
    assert _same(stored.pods, first.pods) == [True, False, True]
    assert first.configmaps is stored.configmaps
    # The next pass, the same writes still queued: every view is the one the last pass got.
    again = replay(stored, {}, {"n2": lane})
    assert _same(first.nodes, again.nodes) == [True, True, True]
    assert _same(first.pods, again.pods) == [True, True, True]


def test_a_status_patch_queued_for_one_skyhook_renews_only_its_view() -> None:
    stored = _stored()
    patches = [{"nodeStatus": {"n1": "in_progress"}}]
    replay = Replay()
    first = replay(stored, {"a": patches}, {})
    assert first.skyhooks[0].status.node_status == {"n1": "in_progress"}
    assert _same(stored.skyhooks, first.skyhooks) == [False, True]
    assert _same(first.skyhooks, replay(stored, {"a": patches}, {}).skyhooks) == [True, True]


def test_the_simulator_renews_only_the_views_of_what_a_plan_changed() -> None:
    sim = SimCluster.from_objects(
        nodes=[make_node(n) for n in ("n1", "n2", "n3")],
        pods=[_pod(f"w-{n}", n) for n in ("n1", "n2", "n3")],
        configmaps=[_configmap("c")],
        skyhooks=[_skyhook("a")],
    )
    before = sim.snapshot(NOW)
    assert _same(before.nodes, sim.snapshot(NOW).nodes) == [True, True, True]
    sim.apply(
        [
            PatchNode("n2", annotations={"skyhook.nvidia.com/status_a": "in_progress"}),
            DeletePod("work", "w-n2", "n2"),
        ]
    )
    after = sim.snapshot(NOW)
    assert after.nodes[1].annotations == {"skyhook.nvidia.com/status_a": "in_progress"}
    assert _same(before.nodes, after.nodes) == [True, False, True]
    assert [p.name for p in after.pods] == ["w-n1", "w-n3"]
    assert after.pods[0] is before.pods[0] and after.pods[1] is before.pods[2]
    assert _same(before.configmaps, after.configmaps) == [True]
    assert _same(before.skyhooks, after.skyhooks) == [True]
