"""The list half of a list+watch: every page decoded into the index the store reads."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

from skyhook_operator.kube.client import AsyncKube
from skyhook_operator.kube.watch import WatchedIndex
from skyhook_planner.model.snapshot import NodeView


def _node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "3", "labels": {"pool": "gpu"}}}


class PagedClient:
    """Answers a LIST page by page; the watch that follows never sends anything."""

    def __init__(self, pages: list[dict[str, Any]]) -> None:
        self.pages = pages
        self.queries: list[dict[str, str]] = []

    async def request(self, method: str, path: str, *_: Any, **kwargs: Any) -> dict[str, Any]:
        self.queries.append(dict(kwargs.get("query") or {}))
        return self.pages[len(self.queries) - 1]

    async def stream(self, *_: Any, **__: Any) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        await asyncio.Event().wait()
        yield "BOOKMARK", {}  # never reached


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
        held = index.index  # what the store was given before the listing
        await index.start()
        index.stop()
        assert held is index.index
        assert sorted(held) == [("", "n1"), ("", "n2")]
        assert held[("", "n2")][0].view == NodeView.from_api(_node("n2"))
        assert client.queries[0]["limit"] == "100"
        assert client.queries[1]["continue"] == "next", "the second page follows the first"
        assert pokes, "the loop is woken once the index is filled"

    asyncio.run(scenario())
