"""`spec.sequencing`: how a Skyhook holds back the Skyhooks after it, on one node (`node`) or on
every node until it is complete everywhere (`all`)."""

from __future__ import annotations

from typing import Any

import pytest

from skyhook_planner.model.spec import SpecError, decode_spec
from skyhook_planner.sim.driver import Driver, package, pod_stage
from skyhook_schemas import keys


def skyhook(priority: int, sequencing: str | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "priority": priority,
        "packages": {"tools": package()},
        "interruptionBudget": {"count": 1},
        **spec,
    }
    if sequencing is not None:
        body["sequencing"] = sequencing
    return body


def complete_everywhere(d: Driver, scr: str, nodes: list[str]) -> bool:
    return all(d.node_status(scr, n) == "complete" for n in nodes)


def test_a_gate_holds_every_node_until_it_is_complete_on_all_of_them() -> None:
    """zzz (node) -> gate (all) -> late: nodes move through zzz on their own, but no node starts
    `late` before `gate` is complete on every node."""
    d = Driver(3)
    d.sim.add_skyhook("zzz", skyhook(1))
    d.sim.add_skyhook("gate", skyhook(2, "all"))
    d.sim.add_skyhook("late", skyhook(3))
    nodes = sorted(d.sim.nodes)
    late_started_while_gate_open: list[str] = []
    late_waiting_seen = False

    def check(driver: Driver) -> None:
        nonlocal late_waiting_seen
        for pod in driver.sim.pods.values():
            if pod["metadata"]["labels"].get(keys.NAME_LABEL) == "late" and not (
                complete_everywhere(driver, "gate", nodes)
            ):
                late_started_while_gate_open.append(pod_stage(pod)[0])
        status = driver.sim.skyhooks["late"].get("status", {})
        if not complete_everywhere(driver, "gate", nodes):
            assert status.get("status") in {None, "waiting"}, status.get("status")
            late_waiting_seen = late_waiting_seen or status.get("status") == "waiting"

    d.run(on_step=check)
    assert late_started_while_gate_open == []
    assert late_waiting_seen
    for scr in ("zzz", "gate", "late"):
        assert d.status(scr)["status"] == "complete"
    # The node-sequenced Skyhook ahead let nodes overlap: `gate` started on some node while
    # `zzz` still ran on another (budget 1 each, one node at a time per Skyhook).
    order = [(p["metadata"]["labels"][keys.NAME_LABEL]) for p in d.sim.created_pods]
    assert order.index("gate") < len(order) - 1 - order[::-1].index("zzz")


def test_a_gate_holds_nodes_it_does_not_select() -> None:
    d = Driver(2)
    gated_node, other = sorted(d.sim.nodes)
    d.sim.nodes[gated_node]["metadata"]["labels"]["pool"] = "a"
    d.sim.add_skyhook("gate", skyhook(1, "all", nodeSelectors={"matchLabels": {"pool": "a"}}))
    d.sim.add_skyhook("late", skyhook(2))
    plan = d.step()
    late_waits = plan.waiting.get(("late", other), ())
    assert any("sequencing: all" in r.message for r in late_waits), late_waits
    d.run()
    late_pods = [p for p in d.sim.created_pods if p["spec"]["nodeName"] == other]
    gate_done = max(
        i
        for i, p in enumerate(d.sim.created_pods)
        if p["metadata"]["labels"][keys.NAME_LABEL] == "gate"
    )
    assert late_pods
    assert all(d.sim.created_pods.index(p) > gate_done for p in late_pods)


def test_node_sequencing_holds_only_the_nodes_it_selects() -> None:
    d = Driver(2)
    gated_node, other = sorted(d.sim.nodes)
    d.sim.nodes[gated_node]["metadata"]["labels"]["pool"] = "a"
    d.sim.add_skyhook("first", skyhook(1, "node", nodeSelectors={"matchLabels": {"pool": "a"}}))
    d.sim.add_skyhook("late", skyhook(2))
    d.step()
    first_pods = {pod_stage(p)[0] for p in d.sim.created_pods}
    late_nodes = {
        p["spec"]["nodeName"]
        for p in d.sim.created_pods
        if p["metadata"]["labels"][keys.NAME_LABEL] == "late"
    }
    assert first_pods >= {gated_node}
    assert late_nodes == {other}


def test_a_gate_that_selects_no_node_holds_nothing() -> None:
    d = Driver(2)
    d.sim.add_skyhook("gate", skyhook(1, "all", nodeSelectors={"matchLabels": {"pool": "none"}}))
    d.sim.add_skyhook("late", skyhook(2, interruptionBudget={"percent": 100}))
    d.step()
    assert {p["spec"]["nodeName"] for p in d.sim.created_pods} == set(d.sim.nodes)


@pytest.mark.parametrize(
    ("annotation", "holds"), [(keys.PAUSE_ANNOTATION, True), (keys.DISABLE_ANNOTATION, False)]
)
def test_a_paused_gate_holds_and_a_disabled_one_does_not(annotation: str, holds: bool) -> None:
    d = Driver(2)
    d.sim.add_skyhook("gate", skyhook(1, "all"), annotations={annotation: "true"})
    d.sim.add_skyhook("late", skyhook(2, interruptionBudget={"percent": 100}))
    d.step()
    late = [p for p in d.sim.created_pods if p["metadata"]["labels"][keys.NAME_LABEL] == "late"]
    assert bool(late) is not holds


def test_sequencing_is_node_unless_all_and_other_values_are_refused() -> None:
    assert decode_spec({"packages": {}}).sequencing == "node"
    assert decode_spec({"packages": {}, "sequencing": "all"}).sequencing == "all"
    with pytest.raises(SpecError) as refused:
        decode_spec({"packages": {}, "sequencing": "everything"})
    assert "spec.sequencing" in str(refused.value)
