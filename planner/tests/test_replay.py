"""What a pass plans from while writes are queued: each status patch and each node's lane
(node patches, pods created and deleted, metadata ConfigMaps) shown as done, the replayed
views kept as the same objects between passes."""

from typing import Any

from skyhook_planner.model.actions import (
    CreatePod,
    DeletePod,
    EvictPod,
    PatchNode,
    StopPod,
    UpsertConfigMap,
)
from skyhook_planner.model.replay import NodeReplay, StatusReplay
from skyhook_planner.model.snapshot import (
    ClusterSnapshot,
    ConfigMapView,
    NodeView,
    PodView,
    SkyhookView,
)


def node(name: str, rv: int, **annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(rv), "annotations": annotations}}


def pod_manifest(name: str, node: str = "n1") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "skyhook",
            "labels": {"skyhook.nvidia.com/name": "s"},
        },
        "spec": {"nodeName": node, "initContainers": [{"name": "apply", "image": "pkg:1"}]},
    }


def metadata_cm(name: str, node: str, **data: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "skyhook",
            "labels": {"skyhook.nvidia.com/skyhook-node-meta": "s"},
            "annotations": {"skyhook.nvidia.com/name": node},
        },
        "data": data,
    }


def _skyhook(status: dict[str, Any]) -> SkyhookView:
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
    both = replay.apply(snapshot, {"s": [first, second]}).skyhooks[0]
    assert both.status.node_status == {"n1": "complete", "n2": "in_progress"}
    assert both.status.nodes_in_progress == 1
    # Nothing decided since: the same view again, not a fleet's status decoded anew.
    assert replay.apply(snapshot, {"s": [first, second]}).skyhooks[0] is both

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


def test_a_queued_pod_shows_pending_and_a_queued_deletion_shows_terminating() -> None:
    running = PodView.from_api({**pod_manifest("s-n1-apply"), "status": {"phase": "Running"}})
    other = PodView.from_api(pod_manifest("other", node="n2"))
    snapshot = ClusterSnapshot(skyhooks=(), nodes=(), pods=(other, running))
    delete = DeletePod("skyhook", "s-n1-apply", "n1")
    create = CreatePod(pod_manifest("s-n1-config"))
    evict = EvictPod("default", "workload", "n1")
    replay = NodeReplay()

    first = replay.apply(snapshot, {"n1": (delete, create, evict)})
    by_name = {p.name: p for p in first.pods}
    assert by_name["s-n1-apply"].deleting, "a pod whose deletion is queued is on its way out"
    assert by_name["s-n1-config"].phase == "Pending" and not by_name["s-n1-config"].deleting
    assert by_name["s-n1-config"].node == "n1"
    assert by_name["other"] is other
    assert [p.name for p in first.pods] == sorted(p.name for p in first.pods)

    again = replay.apply(snapshot, {"n1": (delete, create, evict)})
    assert again.pods == first.pods
    assert all(a is b for a, b in zip(again.pods, first.pods, strict=True)), (
        "the same queued writes give the same objects, compared by identity"
    )

    # A create of a pod the cluster has already: the API keeps the one it has.
    written = PodView.from_api({**pod_manifest("s-n1-config"), "status": {"phase": "Running"}})
    kept = replay.apply(
        ClusterSnapshot(skyhooks=(), nodes=(), pods=(other, written)), {"n1": (create,)}
    )
    assert kept.pods == (other, written)

    # Nothing queued any more (written, or failed): the pods as stored.
    assert replay.apply(snapshot, {}).pods == snapshot.pods


def test_a_queued_stop_shows_its_annotations_and_leaves_the_pod_running() -> None:
    running = PodView.from_api(
        {
            **pod_manifest("s-n1-interrupt"),
            "metadata": {**pod_manifest("s-n1-interrupt")["metadata"], "annotations": {"a": "1"}},
            "status": {"phase": "Running"},
        }
    )
    snapshot = ClusterSnapshot(skyhooks=(), nodes=(), pods=(running,))
    stop = StopPod("skyhook", "s-n1-interrupt", "n1", {"why": "limit"})
    replay = NodeReplay()

    (shown,) = replay.apply(snapshot, {"n1": (stop,)}).pods
    assert shown.annotations == {"a": "1", "why": "limit"}
    assert shown.phase == "Running" and not shown.deleting, "the kubelet stops it, later"
    (again,) = replay.apply(snapshot, {"n1": (stop,)}).pods
    assert again is shown
    assert replay.apply(snapshot, {}).pods == (running,)


def test_a_queued_configmap_shows_its_new_content() -> None:
    stored = ConfigMapView.from_api(metadata_cm("s-n1-metadata", "n1", state="old"))
    unrelated = ConfigMapView.from_api(metadata_cm("s-n2-metadata", "n2", state="x"))
    snapshot = ClusterSnapshot(skyhooks=(), nodes=(), configmaps=(stored, unrelated))
    update = UpsertConfigMap(metadata_cm("s-n1-metadata", "n1", state="new"))
    fresh = UpsertConfigMap(metadata_cm("s-n3-metadata", "n3", state="first"))
    replay = NodeReplay()

    shown = replay.apply(snapshot, {"n1": (update,), "n3": (fresh,)}).configmaps
    assert [c.name for c in shown] == ["s-n1-metadata", "s-n2-metadata", "s-n3-metadata"]
    assert shown[0].holds({"state": "new"}) and not shown[0].holds({"state": "old"})
    assert shown[1].holds({"state": "x"})
    assert shown[2].holds({"state": "first"})
    assert shown[1] is unrelated
    again = replay.apply(snapshot, {"n1": (update,), "n3": (fresh,)}).configmaps
    assert again[0] is shown[0] and again[2] is shown[2]
    assert replay.apply(snapshot, {}).configmaps == (stored, unrelated)


def test_a_node_metadata_configmap_is_held_as_a_digest_and_still_compared_exactly() -> None:
    """One per node and Skyhook: the index keeps a digest of its data, not the JSON texts."""
    labels = '{"kubernetes.io/hostname":"n1","pool":"gpu"}'
    view = ConfigMapView.from_api(metadata_cm("s-n1-metadata", "n1", **{"labels.json": labels}))
    assert dict(view.data) == {}
    assert view.holds({"labels.json": labels})
    assert not view.holds({"labels.json": labels.replace("gpu", "cpu")})
    assert not view.holds({"labels.json": labels, "packages.json": "{}"})
    assert not view.holds({"labels.jso": "n" + labels})  # where a key ends counts
    package = {
        "metadata": {"name": "s-pkg-1.0.0", "namespace": "skyhook", "labels": {"x": "y"}},
        "data": {"a.sh": "echo"},
    }
    assert dict(ConfigMapView.from_api(package).data) == {"a.sh": "echo"}  # read by key
