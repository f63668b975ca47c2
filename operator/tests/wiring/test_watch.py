"""A list+watch: every page and every event decoded into the index the store follows."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast

from skyhook_operator.kube.client import AsyncKube
from skyhook_operator.kube.watch import WatchedIndex
from skyhook_operator.store import ClusterStore
from skyhook_planner.model.snapshot import NodeView


def _node(name: str, version: int = 3, pool: str = "gpu") -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(version), "labels": {"pool": pool}}}


class PagedClient:
    """Answers a LIST page by page; the watch that follows sends `events` once `go` is set,
    then nothing."""

    def __init__(
        self, pages: list[dict[str, Any]], events: Sequence[tuple[str, dict[str, Any]]] = ()
    ) -> None:
        self.pages = pages
        self.events = list(events)
        self.queries: list[dict[str, str]] = []
        self.go = asyncio.Event()
        self.sent = asyncio.Event()

    async def request(self, method: str, path: str, *_: Any, **kwargs: Any) -> dict[str, Any]:
        self.queries.append(dict(kwargs.get("query") or {}))
        return self.pages[len(self.queries) - 1]

    async def stream(self, *_: Any, **__: Any) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        await self.go.wait()
        for event in self.events:
            yield event
        self.sent.set()
        await asyncio.Event().wait()


def test_a_listing_of_several_pages_fills_the_index_the_store_holds() -> None:
    async def scenario() -> None:
        client = PagedClient(
            [
                {"items": [_node("n1"), _node("skip")], "metadata": {"continue": "next"}},
                {"items": [_node("n2")], "metadata": {"resourceVersion": "42"}},
            ]
        )
        pokes: list[int] = []
        index = WatchedIndex(
            cast(AsyncKube, client),
            "/api/v1/nodes",
            decode=NodeView.from_api,
            on_change=lambda: pokes.append(1),
            keep=lambda obj: obj["metadata"]["name"] != "skip",
        )
        store = ClusterStore()
        store.attach("node_index", index)  # before the listing, as the operator does
        await index.start()
        index.stop()
        assert sorted(index.index) == [("", "n1"), ("", "n2")]
        assert store.snapshot().nodes == (
            NodeView.from_api(_node("n1")),
            NodeView.from_api(_node("n2")),
        )
        assert client.queries[0]["limit"] == "100"
        assert client.queries[1]["continue"] == "next", "the second page follows the first"
        assert pokes, "the loop is woken once the index is filled"

    asyncio.run(scenario())


def test_the_store_follows_each_watch_event_and_keeps_node_order() -> None:
    async def scenario() -> None:
        client = PagedClient(
            [{"items": [_node("b"), _node("d")], "metadata": {"resourceVersion": "9"}}],
            events=[
                ("ADDED", _node("a", 10)),
                ("MODIFIED", _node("d", 11, pool="cpu")),
                ("DELETED", _node("b", 12)),
                ("ADDED", _node("c", 13)),
            ],
        )
        index = WatchedIndex(
            cast(AsyncKube, client),
            "/api/v1/nodes",
            decode=NodeView.from_api,
            on_change=lambda: None,
        )
        store = ClusterStore()
        store.attach("node_index", index)
        index.run()
        await index.listed.wait()
        assert [n.name for n in store.snapshot().nodes] == ["b", "d"]
        client.go.set()
        await asyncio.wait_for(client.sent.wait(), 5)
        index.stop()
        nodes = store.snapshot().nodes
        assert [n.name for n in nodes] == ["a", "c", "d"], "in name order, b gone"
        assert nodes[2].labels == {"pool": "cpu"}

    asyncio.run(scenario())
