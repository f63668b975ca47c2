"""Which nodes a plan admits: the writer holds their writes until every release is written."""

from skyhook_operator.planner.model import ClusterSnapshot, DeletePod, NodeView, PatchNode, Plan
from skyhook_operator.reconcile import nodes_starting
from skyhook_schemas import keys

STATUS = keys.node_status_key("scr")


def snapshot(**statuses: str) -> ClusterSnapshot:
    nodes = tuple(
        NodeView(name=n, annotations={STATUS: s} if s else {}) for n, s in statuses.items()
    )
    return ClusterSnapshot(skyhooks=(), nodes=nodes)


def test_only_transitions_into_progress_count() -> None:
    plan = Plan(
        actions=(
            PatchNode("done", annotations={STATUS: "complete"}),
            PatchNode("next", annotations={STATUS: "in_progress"}),
            PatchNode("still", annotations={STATUS: "in_progress"}),
            PatchNode("fresh", annotations={STATUS: "in_progress"}),
            DeletePod("skyhook", "pod"),
        )
    )
    current = snapshot(done="in_progress", next="waiting", still="in_progress", fresh="")
    assert nodes_starting(current, plan) == {"next", "fresh"}


def test_other_annotations_do_not_count() -> None:
    plan = Plan(actions=(PatchNode("n", annotations={keys.cordon_key("scr"): "true"}),))
    assert nodes_starting(snapshot(n="waiting"), plan) == set()
