"""Read-your-writes: the snapshot prefers our newer writes until the watch catches up, and
follows the watch key by key between passes."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Generic

import pytest

from skyhook_operator import store
from skyhook_operator.store import Key, Overlay, Versioned, View, versioned
from skyhook_planner.model.snapshot import NodeView, PodView


def node(name: str, rv: int, **annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(rv), "annotations": annotations}}


def pod(name: str, rv: int, deleting: bool = False, namespace: str = "skyhook") -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace, "resourceVersion": str(rv)}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": "n1"}}


class Watch(Generic[View]):
    """A watch's index as the overlay follows it: each change reported by key."""

    def __init__(self, overlay: Overlay[View], decode: Callable[[Mapping[str, Any]], View]):
        self.index: dict[Key, Versioned[View]] = {}
        self.decode = decode
        self.overlay = overlay
        overlay.follow(self.index)

    def put(self, body: Mapping[str, Any]) -> None:
        entry = versioned(body, self.decode)
        self.index[entry.key] = entry
        self.overlay.index_changed(entry.key)

    def drop(self, key: Key) -> None:
        del self.index[key]
        self.overlay.index_changed(key)

    def relist(self, *bodies: Mapping[str, Any]) -> None:
        self.index.clear()
        self.index.update((e.key, e) for e in (versioned(b, self.decode) for b in bodies))
        self.overlay.index_changed(None)


def nodes() -> tuple[Overlay[NodeView], Watch[NodeView]]:
    overlay: Overlay[NodeView] = Overlay(NodeView.from_api)
    return overlay, Watch(overlay, NodeView.from_api)


def pods() -> tuple[Overlay[PodView], Watch[PodView]]:
    overlay: Overlay[PodView] = Overlay(PodView.from_api)
    return overlay, Watch(overlay, PodView.from_api)


def test_our_newer_write_shadows_the_stale_watch_copy() -> None:
    overlay, watch = nodes()
    watch.put(node("n1", 10, state="complete"))
    assert [n.annotations["state"] for n in overlay.views()] == ["complete"]
    overlay.wrote(node("n1", 12, state="in_progress"))
    assert [n.annotations["state"] for n in overlay.views()] == ["in_progress"]


def test_watch_copy_wins_once_it_is_as_new_and_the_entry_is_dropped() -> None:
    overlay, watch = nodes()
    watch.put(node("n1", 10, state="complete"))
    overlay.wrote(node("n1", 12, state="ours"))
    watch.put(node("n1", 13, state="someone else"))
    assert [n.annotations["state"] for n in overlay.views()] == ["someone else"]
    watch.put(node("n1", 11, state="old"))
    assert [n.annotations["state"] for n in overlay.views()] == ["old"]


def test_created_pod_is_visible_before_the_watch_sees_it() -> None:
    overlay, _ = pods()
    overlay.wrote(pod("p1", 20), created=True)
    assert [p.name for p in overlay.views()] == ["p1"]


def test_a_created_pod_the_watch_never_shows_goes_after_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    overlay, _ = pods()
    overlay.wrote(pod("p1", 20), created=True)
    assert [p.name for p in overlay.views()] == ["p1"]
    later = time.monotonic() + store._OVERLAY_TTL + 1
    monkeypatch.setattr(time, "monotonic", lambda: later)
    assert overlay.views() == ()


def test_deleted_pod_disappears_when_the_watch_drops_it() -> None:
    overlay, watch = pods()
    watch.put(pod("p1", 20))
    overlay.wrote(pod("p1", 21, deleting=True))
    assert [p.deleting for p in overlay.views()] == [True]
    watch.drop(("skyhook", "p1"))
    assert overlay.views() == ()


def test_immediately_deleted_object_is_hidden_until_a_newer_version_shows() -> None:
    overlay, watch = pods()
    watch.put(pod("p1", 20))
    assert [p.name for p in overlay.views()] == ["p1"]
    overlay.deleted("skyhook", "p1", 1 << 62)
    assert overlay.views() == ()
    watch.drop(("skyhook", "p1"))
    overlay.wrote(pod("p1", 30), created=True)  # created again under the same name
    assert [p.name for p in overlay.views()] == ["p1"]


def test_the_views_stay_in_namespace_and_name_order_as_objects_come_and_go() -> None:
    overlay, watch = pods()
    watch.relist(pod("m", 1, namespace="b"), pod("z", 2, namespace="a"))
    assert [(p.namespace, p.name) for p in overlay.views()] == [("a", "z"), ("b", "m")]
    watch.put(pod("a", 3, namespace="b"))
    overlay.wrote(pod("c", 4, namespace="a"), created=True)
    watch.drop(("a", "z"))
    watch.put(pod("m", 5, namespace="b", deleting=True))
    views = overlay.views()
    assert [(p.namespace, p.name) for p in views] == [("a", "c"), ("b", "a"), ("b", "m")]
    assert views[2].deleting, "a changed object is read again"
    assert overlay.views() == views, "nothing changed, nothing new"


def test_a_new_listing_replaces_what_the_watch_showed_and_keeps_our_creations() -> None:
    overlay, watch = nodes()
    watch.relist(node("n1", 1), node("n2", 2))
    overlay.wrote(node("n2", 3, state="ours"))
    assert [n.name for n in overlay.views()] == ["n1", "n2"]
    overlay.wrote(node("n3", 4), created=True)
    watch.relist(node("n1", 5, state="relisted"))  # n2 was deleted while the watch was down
    views = overlay.views()
    assert [n.name for n in views] == ["n1", "n3"]
    assert views[0].annotations == {"state": "relisted"}
