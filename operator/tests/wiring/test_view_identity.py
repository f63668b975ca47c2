"""The store keeps the object-identity contract of incremental passes (skyhook_planner
passes/memory.py): an object nothing changed is handed to the next snapshot as the same view
object, and an object a watch event or our own write changed gets a new one."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

from skyhook_operator.kube.client import AsyncKube
from skyhook_operator.kube.watch import WatchedIndex
from skyhook_operator.store import ClusterStore
from skyhook_planner.model.snapshot import ClusterSnapshot, NodeView, PodView


def _node(name: str, version: int, pool: str = "gpu") -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(version), "labels": {"pool": pool}}}


def _pod(name: str, node: str, version: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "work", "resourceVersion": str(version)},
        "spec": {"nodeName": node},
    }


class ListThenWatch:
    """Answers the LIST with `items`; the watch that follows sends `events` once `go` is set,
    then nothing."""

    def __init__(
        self, items: list[dict[str, Any]], events: Sequence[tuple[str, dict[str, Any]]] = ()
    ) -> None:
        self.items = items
        self.events = list(events)
        self.go = asyncio.Event()
        self.sent = asyncio.Event()

    async def request(self, *_: Any, **__: Any) -> dict[str, Any]:
        return {"items": self.items, "metadata": {"resourceVersion": "20"}}

    async def stream(self, *_: Any, **__: Any) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        await self.go.wait()
        for event in self.events:
            yield event
        self.sent.set()
        await asyncio.Event().wait()


def _watched(client: ListThenWatch, path: str, decode: Any) -> WatchedIndex[Any]:
    return WatchedIndex(cast(AsyncKube, client), path, decode=decode, on_change=lambda: None)


def _same_objects(one: tuple[Any, ...], other: tuple[Any, ...]) -> list[bool]:
    return [a is b for a, b in zip(one, other, strict=True)]


def test_snapshots_with_nothing_between_hand_over_the_same_views() -> None:
    async def scenario() -> tuple[ClusterSnapshot, ClusterSnapshot]:
        nodes = ListThenWatch([_node("n1", 1), _node("n2", 2)])
        pods = ListThenWatch([_pod("p1", "n1", 3), _pod("p2", "n2", 4)])
        store = ClusterStore()
        node_index = _watched(nodes, "/api/v1/nodes", NodeView.from_api)
        pod_index = _watched(pods, "/api/v1/pods", PodView.from_api)
        store.attach("node_index", node_index)
        store.attach("pod_index", pod_index)
        await node_index.start()
        await pod_index.start()
        node_index.stop()
        pod_index.stop()
        return store.snapshot(), store.snapshot()

    first, second = asyncio.run(scenario())
    assert second.nodes is first.nodes, "an unchanged kind is the same tuple"
    assert second.pods is first.pods
    assert _same_objects(first.nodes, second.nodes) == [True, True]
    assert _same_objects(first.pods, second.pods) == [True, True]


def test_a_watch_event_or_our_write_renews_only_its_object_s_view() -> None:
    async def scenario() -> tuple[ClusterSnapshot, ClusterSnapshot, ClusterSnapshot]:
        nodes = ListThenWatch(
            [_node("n1", 1), _node("n2", 2), _node("n3", 3)],
            events=[("MODIFIED", _node("n2", 21, pool="cpu"))],
        )
        pods = ListThenWatch([_pod("p1", "n1", 4), _pod("p2", "n2", 5)])
        store = ClusterStore()
        node_index = _watched(nodes, "/api/v1/nodes", NodeView.from_api)
        pod_index = _watched(pods, "/api/v1/pods", PodView.from_api)
        store.attach("node_index", node_index)
        store.attach("pod_index", pod_index)
        node_index.run()
        await pod_index.start()
        pod_index.stop()
        await node_index.listed.wait()
        before = store.snapshot()
        nodes.go.set()
        await asyncio.wait_for(nodes.sent.wait(), 5)
        node_index.stop()
        after_event = store.snapshot()
        store.nodes.wrote(_node("n3", 22, pool="ours"))  # as the writer records its answer
        return before, after_event, store.snapshot()

    before, after_event, after_write = asyncio.run(scenario())
    assert after_event.nodes[1].labels == {"pool": "cpu"}
    assert _same_objects(before.nodes, after_event.nodes) == [True, False, True]
    assert after_event.pods is before.pods, "no pod changed: the same tuple of the same views"
    assert after_write.nodes[2].labels == {"pool": "ours"}
    assert _same_objects(after_event.nodes, after_write.nodes) == [True, True, False]
    assert after_write.pods is before.pods
