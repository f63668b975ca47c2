"""Read-your-writes: the snapshot prefers our newer writes until the watch catches up."""

from skyhook_operator.store import Overlay, versioned
from skyhook_planner.model.snapshot import NodeView, PodView


def node(name: str, rv: int, **annotations: str) -> dict:
    return {"metadata": {"name": name, "resourceVersion": str(rv), "annotations": annotations}}


def pod(name: str, rv: int, deleting: bool = False) -> dict:
    meta = {"name": name, "namespace": "skyhook", "resourceVersion": str(rv)}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": "n1"}}


def test_our_newer_write_shadows_the_stale_watch_copy() -> None:
    overlay: Overlay[NodeView] = Overlay(NodeView.from_api)
    overlay.wrote(node("n1", 12, state="in_progress"))
    stale = [versioned(node("n1", 10, state="complete"), NodeView.from_api)]
    assert [n.annotations["state"] for n in overlay.merge(stale)] == ["in_progress"]


def test_watch_copy_wins_once_it_is_as_new_and_the_entry_is_dropped() -> None:
    overlay: Overlay[NodeView] = Overlay(NodeView.from_api)
    overlay.wrote(node("n1", 12, state="ours"))
    caught_up = [versioned(node("n1", 13, state="someone else"), NodeView.from_api)]
    assert [n.annotations["state"] for n in overlay.merge(caught_up)] == ["someone else"]
    older = [versioned(node("n1", 11, state="old"), NodeView.from_api)]
    assert [n.annotations["state"] for n in overlay.merge(older)] == ["old"]


def test_created_pod_is_visible_before_the_watch_sees_it() -> None:
    overlay: Overlay[PodView] = Overlay(PodView.from_api)
    overlay.wrote(pod("p1", 20), created=True)
    assert [p.name for p in overlay.merge([])] == ["p1"]


def test_deleted_pod_disappears_when_the_watch_drops_it() -> None:
    overlay: Overlay[PodView] = Overlay(PodView.from_api)
    overlay.wrote(pod("p1", 21, deleting=True))
    indexed = [versioned(pod("p1", 20), PodView.from_api)]
    assert [p.deleting for p in overlay.merge(indexed)] == [True]
    assert overlay.merge([]) == []


def test_immediately_deleted_object_is_hidden_until_a_newer_version_shows() -> None:
    overlay: Overlay[PodView] = Overlay(PodView.from_api)
    overlay.deleted("skyhook", "p1", 1 << 62)
    assert overlay.merge([versioned(pod("p1", 20), PodView.from_api)]) == []
    overlay.wrote(pod("p1", 30), created=True)  # created again under the same name
    assert [p.name for p in overlay.merge([])] == ["p1"]
