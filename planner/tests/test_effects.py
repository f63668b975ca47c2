"""What a node patch leaves on the node, one rule for the writer, the replay and the simulator
(model/effects.py); the apiserver's own result is compared in the operator's
test_node_patch.py."""

import pytest

from skyhook_planner.model.actions import AddFinalizer, PatchNode, RemoveFinalizer
from skyhook_planner.model.effects import finalizers_after, node_patched, taints_after
from skyhook_planner.model.snapshot import NodeView
from skyhook_planner.model.vocabulary import NodeCondition, Taint
from skyhook_planner.sim.cluster import SimCluster, make_node

RUNTIME = Taint("skyhook.nvidia.com", "NoSchedule", "runtime-required")
GPU = Taint("gpu", "NoExecute", "true")


@pytest.mark.parametrize(
    ("current", "add", "remove", "wanted"),
    [
        pytest.param(
            [GPU, RUNTIME],
            [],
            [Taint("skyhook.nvidia.com", "NoSchedule")],
            [GPU],
            id="remove-by-key-effect",
        ),
        pytest.param([GPU], [RUNTIME], [], [GPU, RUNTIME], id="add"),
        pytest.param(
            [RUNTIME, GPU],
            [Taint("skyhook.nvidia.com", "NoSchedule", "v2")],
            [],
            [Taint("skyhook.nvidia.com", "NoSchedule", "v2"), GPU],
            id="update-keeps-position",
        ),
        pytest.param(
            [RUNTIME, GPU],
            [RUNTIME],
            [RUNTIME],
            [RUNTIME, GPU],
            id="removed-and-added-again-keeps-position",
        ),
        pytest.param([GPU], [], [RUNTIME], [GPU], id="remove-absent-is-no-op"),
    ],
)
def test_taints_after(
    current: list[Taint], add: list[Taint], remove: list[Taint], wanted: list[Taint]
) -> None:
    assert list(taints_after(current, add, remove)) == wanted


NODE = {
    "metadata": {"name": "n1", "labels": {"pool": "gpu"}, "annotations": {"a": "1"}},
    "spec": {"taints": [RUNTIME.to_api(), GPU.to_api()]},
    "status": {
        "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "skyhook.nvidia.com/s/NotReady", "status": "True"},
            {"type": "skyhook.nvidia.com/s/Erroring", "status": "False"},
            {"type": "MemoryPressure", "status": "False"},
        ]
    },
}
PATCH = PatchNode(
    "n1",
    annotations={"a": None, "b": "2"},
    labels={"status": "in_progress"},
    add_taints=(Taint("skyhook.nvidia.com", "NoSchedule", "v2"), Taint("y", "NoExecute")),
    remove_taints=(GPU,),
    unschedulable=True,
    conditions=(
        NodeCondition("skyhook.nvidia.com/s/NotReady", "False", "Complete"),
        NodeCondition("skyhook.nvidia.com/t/NotReady", "True"),
    ),
    remove_conditions=("skyhook.nvidia.com/s/Erroring",),
)


def test_a_node_patch_reads_the_same_in_the_replay_and_in_the_simulator() -> None:
    view = node_patched(NodeView.from_api(NODE), PATCH)
    assert view.annotations == {"b": "2"}
    assert view.labels == {"pool": "gpu", "status": "in_progress"}
    assert view.taints == (Taint("skyhook.nvidia.com", "NoSchedule", "v2"), Taint("y", "NoExecute"))
    assert view.unschedulable
    # Updated in place, a new one after the patch's other one (as the apiserver merges a
    # list), removed ones gone; Ready is the kubelet's.
    assert [(c.type, c.status) for c in view.conditions] == [
        ("Ready", "True"),
        ("skyhook.nvidia.com/s/NotReady", "False"),
        ("skyhook.nvidia.com/t/NotReady", "True"),
        ("MemoryPressure", "False"),
    ]
    sim = SimCluster.from_objects(nodes=[NODE])
    sim.apply([PATCH])
    assert NodeView.from_api(sim.nodes["n1"]) == view
    assert node_patched(view, PatchNode("n1")) == view


def test_a_node_the_simulator_makes_takes_a_patch_as_a_view_does() -> None:
    sim = SimCluster()
    sim.add_node(make_node("n1"))
    before = NodeView.from_api(sim.nodes["n1"])
    sim.apply([PATCH])
    assert NodeView.from_api(sim.nodes["n1"]) == node_patched(before, PATCH)


def test_finalizers_are_added_once_and_removed() -> None:
    add, remove = AddFinalizer("s", "f"), RemoveFinalizer("s", "f")
    assert finalizers_after(["x"], add) == ["x", "f"]
    assert finalizers_after(["x", "f"], add) == ["x", "f"]
    assert finalizers_after(["f", "x"], remove) == ["x"]
