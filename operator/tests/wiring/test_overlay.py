"""Read-your-writes: the snapshot prefers our newer writes until the watch catches up."""

from skyhook_operator.store import NodeReplay, Overlay, StatusReplay, versioned
from skyhook_planner.model.actions import PatchNode
from skyhook_planner.model.snapshot import ClusterSnapshot, NodeView, PodView, SkyhookView


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


def _skyhook(status: dict) -> SkyhookView:
    return SkyhookView.from_api(
        {"metadata": {"name": "s", "resourceVersion": "5"}, "spec": {}, "status": status}
    )


def test_pending_status_patches_apply_in_order_and_only_new_ones_are_applied_again() -> None:
    stored = _skyhook({"status": "in_progress", "nodeStatus": {"n1": "in_progress"}})
    snapshot = ClusterSnapshot(skyhooks=(stored,), nodes=())
    first = {"nodeStatus": {"n1": "complete"}}
    second = {"nodeStatus": {"n2": "in_progress"}, "nodesInProgress": 1}
    replay = StatusReplay()

    status = replay.apply(snapshot, {"s": [first]}).skyhooks[0].status
    assert status.node_status == {"n1": "complete"}
    status = replay.apply(snapshot, {"s": [first, second]}).skyhooks[0].status
    assert status.node_status == {"n1": "complete", "n2": "in_progress"}
    assert status.nodes_in_progress == 1

    # The first patch written: the stored status has it, the second still waits.
    written = _skyhook({"status": "in_progress", "nodeStatus": {"n1": "complete"}})
    status = (
        replay.apply(ClusterSnapshot(skyhooks=(written,), nodes=()), {"s": [second]})
        .skyhooks[0]
        .status
    )
    assert status.node_status == {"n1": "complete", "n2": "in_progress"}
    # A patch that removes a key, then nothing pending: the stored status as it is.
    third = {"nodeStatus": {"n2": None}}
    status = replay.apply(ClusterSnapshot(skyhooks=(written,), nodes=()), {"s": [second, third]})
    assert status.skyhooks[0].status.node_status == {"n1": "complete"}
    assert replay.apply(ClusterSnapshot(skyhooks=(written,), nodes=()), {}).skyhooks == (written,)


def test_a_patch_replaced_at_the_head_of_the_queue_is_not_mistaken_for_a_kept_one() -> None:
    stored = _skyhook({"nodeStatus": {}})
    snapshot = ClusterSnapshot(skyhooks=(stored,), nodes=())
    replay = StatusReplay()
    replay.apply(snapshot, {"s": [{"nodeStatus": {"n1": "complete"}}]})
    other = {"nodeStatus": {"n1": "erroring"}}  # equal shape, another decision
    status = replay.apply(snapshot, {"s": [other]}).skyhooks[0].status
    assert status.node_status == {"n1": "erroring"}


def _node_view(name: str, **annotations: str) -> NodeView:
    return NodeView.from_api(node(name, 5, **annotations))


def test_a_node_reads_as_its_queued_patches_leave_it_and_stays_the_same_object() -> None:
    n1, n2 = _node_view("n1"), _node_view("n2")
    snapshot = ClusterSnapshot(skyhooks=(), nodes=(n1, n2))
    waiting = PatchNode("n1", annotations={"status_s": "waiting"}, labels={"status_s": "waiting"})
    started = PatchNode("n1", annotations={"status_s": "in_progress"}, unschedulable=True)
    replay = NodeReplay()

    first = replay.apply(snapshot, {"n1": (waiting,)})
    assert first.nodes[0].annotations == {"status_s": "waiting"}
    assert first.nodes[0].labels == {"status_s": "waiting"}
    assert first.nodes[1] is n2, "a node with nothing queued is left as it is"
    # The same patches on the same stored node: the same object, so the planner's memory
    # compares it by identity.
    assert replay.apply(snapshot, {"n1": (waiting,)}).nodes[0] is first.nodes[0]

    both = replay.apply(snapshot, {"n1": (waiting, started)}).nodes[0]
    assert both.annotations == {"status_s": "in_progress"}
    assert both.labels == {"status_s": "waiting"}
    assert both.unschedulable

    # Someone else changed the node meanwhile: the patches apply to the node as it now is.
    changed = _node_view("n1", owner="admin")
    replayed = replay.apply(
        ClusterSnapshot(skyhooks=(), nodes=(changed, n2)), {"n1": (waiting, started)}
    ).nodes[0]
    assert replayed.annotations == {"owner": "admin", "status_s": "in_progress"}

    # The lanes done (written, or failed and rolled back): the node as stored.
    assert replay.apply(snapshot, {}).nodes == (n1, n2)


def test_a_patch_queued_again_after_a_failure_is_not_mistaken_for_the_kept_one() -> None:
    n1 = _node_view("n1")
    snapshot = ClusterSnapshot(skyhooks=(), nodes=(n1,))
    replay = NodeReplay()
    replay.apply(snapshot, {"n1": (PatchNode("n1", annotations={"status_s": "waiting"}),)})
    again = PatchNode("n1", annotations={"status_s": "erroring"})  # another decision
    assert replay.apply(snapshot, {"n1": (again,)}).nodes[0].annotations == {"status_s": "erroring"}
