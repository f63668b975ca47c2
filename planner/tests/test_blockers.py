"""Every node a pass holds back is in the plan with the reasons the blockers gave: the budget
naming the nodes that hold its slots, a pause, the ignore label, taints, a Skyhook ahead of
this one, the policy's batches and a drain waiting on pods that must not be interrupted."""

from __future__ import annotations

from typing import Any

from skyhook_planner.model import waiting
from skyhook_planner.model.actions import Plan
from skyhook_planner.model.waiting import Reason
from skyhook_planner.sim.driver import Driver, package
from skyhook_schemas import keys

SEL = {"nodeSelectors": {"matchLabels": {"role": "gpu"}}}
LABELS = {"role": "gpu"}
PLAIN = {"pk": package()}


def reasons(result: Plan, skyhook: str = "scr") -> dict[str, tuple[Reason, ...]]:
    return {node: why for (scr, node), why in result.waiting.items() if scr == skyhook}


def blockers_of(result: Plan, skyhook: str = "scr") -> dict[str, list[str]]:
    return {node: [r.blocker for r in found] for node, found in reasons(result, skyhook).items()}


def label(d: Driver, node: str, **labels: str) -> None:
    d.sim.nodes[node]["metadata"]["labels"].update(labels)


def test_nodes_past_the_budget_wait_on_it_naming_the_nodes_in_its_slots() -> None:
    d = Driver(3, LABELS)
    d.sim.add_skyhook("scr", {**SEL, "interruptionBudget": {"count": 1}, "packages": PLAIN})
    d.step()  # node-0000 starts
    found = reasons(d.step())
    assert set(found) == {"node-0001", "node-0002"}
    for node in ("node-0001", "node-0002"):
        (reason,) = found[node]
        assert reason.blocker == waiting.BUDGET
        assert reason.nodes == ("node-0000",)
        assert reason.message == "budget: all 1 slots in use"


def test_a_node_that_starts_does_not_wait_and_a_finished_rollout_leaves_no_one_waiting() -> None:
    d = Driver(2, LABELS)
    d.sim.add_skyhook("scr", {**SEL, "packages": PLAIN})
    assert reasons(d.step()) == {}
    d.run()
    assert reasons(d.step()) == {}


def test_a_paused_skyhook_holds_every_node_it_would_start() -> None:
    d = Driver(2, LABELS)
    d.sim.add_skyhook("scr", {**SEL, "packages": PLAIN}, {keys.PAUSE_ANNOTATION: "true"})
    found = reasons(d.step())
    assert {n: [r.message for r in rs] for n, rs in found.items()} == {
        "node-0000": ["skyhook paused"],
        "node-0001": ["skyhook paused"],
    }


def test_ignored_and_untolerating_nodes_say_so_and_others_proceed() -> None:
    d = Driver(3, LABELS)
    label(d, "node-0000", **{keys.IGNORE_LABEL: "true"})
    d.sim.nodes["node-0001"].setdefault("spec", {})["taints"] = [
        {"key": "gpu", "value": "bad", "effect": "NoSchedule"},
        {"key": "maintenance", "effect": "NoSchedule"},  # a taint with no value
    ]
    d.sim.add_skyhook("scr", {**SEL, "packages": PLAIN})
    found = reasons(d.step())
    assert [r.message for r in found["node-0000"]] == [f"ignored (label {keys.IGNORE_LABEL}=true)"]
    assert [r.message for r in found["node-0001"]] == [
        "taints not tolerated: gpu=bad:NoSchedule, maintenance:NoSchedule"
    ]
    assert "node-0002" not in found


def test_a_node_waits_for_a_skyhook_ahead_of_it() -> None:
    d = Driver(1, LABELS)
    d.sim.add_skyhook("first", {**SEL, "priority": 1, "packages": PLAIN})
    d.sim.add_skyhook("second", {**SEL, "priority": 2, "packages": {"other": package()}})
    result = d.step()
    assert blockers_of(result, "first") == {}
    assert [r.message for r in reasons(result, "second")["node-0000"]] == [
        "waits for Skyhook first, ahead of it, on this node"
    ]


def test_a_compartment_without_room_holds_its_nodes_as_a_batch() -> None:
    d = Driver(3, LABELS)
    policy: dict[str, Any] = {
        "default": {"budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 1}}}
    }
    d.sim.add_policy("one-at-a-time", policy)
    d.sim.add_skyhook("scr", {**SEL, "deploymentPolicy": "one-at-a-time", "packages": PLAIN})
    found = blockers_of(d.step())
    assert found == {"node-0001": [waiting.BATCH], "node-0002": [waiting.BATCH]}


def test_non_interrupt_pods_hold_the_drain_and_say_which() -> None:
    d = Driver(1, LABELS)
    d.sim.add_pod(
        {
            "metadata": {
                "name": "training",
                "namespace": "ml",
                "labels": {"critical": "yes"},
            },
            "spec": {"nodeName": "node-0000"},
            "status": {"phase": "Running"},
        }
    )
    d.sim.add_skyhook(
        "scr",
        {
            **SEL,
            "podNonInterruptLabels": {"matchLabels": {"critical": "yes"}},
            "packages": {"kernel": package(interrupt={"type": "reboot"})},
        },
    )
    for _ in range(10):  # apply, config, then the interrupt waits on the pod for good
        result = d.step()
        for key in d.pending_pods():
            d.sim.finish_pod(key, 0, at="2026-01-01T00:00:00Z")
    found = reasons(result)
    assert [(r.blocker, r.message) for r in found["node-0000"]] == [
        (waiting.DRAIN, "non-interrupt pods: ml/training")
    ]
    assert result.requeue_after is not None, "the drain is looked at again"
