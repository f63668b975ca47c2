"""Reboot deadlines (rules/deadlines.py): a node whose boot id never changes after its reboot
interrupt, or that stays NotReady after it, is marked erroring once rebootDeadline has passed;
the rollout then follows its failure handling. Refused at admission when malformed; shown in
the status, Events, the plan's waiting reasons and the held-nodes count."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyhook_planner import admission, telemetry
from skyhook_planner.model import waiting
from skyhook_planner.model.actions import EmitEvent, Plan
from skyhook_planner.rules import deadlines
from skyhook_planner.sim.driver import Driver, package, pod_stage
from skyhook_schemas import keys

SEL = {"nodeSelectors": {"matchLabels": {"role": "gpu"}}}
REBOOT = {"type": "reboot"}


def _spec(**extra: Any) -> dict[str, Any]:
    return {**SEL, "packages": {"kernel": package(interrupt=REBOOT)}, **extra}


def _passes(d: Driver, count: int, dead: Callable[[str], bool] = lambda node: False) -> list[Plan]:
    """`count` passes a second apart; every pod finishes, but an interrupt pod on a `dead`
    node never does, and its node never reboots."""
    plans = []
    for _ in range(count):
        plans.append(d.step())
        at = d.now.strftime("%Y-%m-%dT%H:%M:%SZ")
        for key in d.pending_pods():
            node, _, stage = pod_stage(d.sim.pods[key])
            if stage == "interrupt" and dead(node):
                continue
            if stage == "interrupt":
                d.sim.reboot(node, f"boot-{node}-{d.now.timestamp()}")
            else:
                d.sim.finish_pod(key, at=at)
        d.now += timedelta(seconds=1)
    return plans


def _condition(d: Driver, scr: str) -> dict[str, Any] | None:
    found = [
        c for c in d.status(scr).get("conditions", []) if c["type"] == deadlines.CONDITION_DEADLINE
    ]
    return found[0] if found else None


def test_a_node_that_never_reboots_is_marked_erroring_at_the_deadline() -> None:
    d = Driver(2, {"role": "gpu"})
    d.sim.add_skyhook("scr", _spec(interruptionBudget={"count": 1}, rebootDeadline="30s"))
    plans = _passes(d, 10, dead=lambda node: node == "node-0000")
    assert d.entries("scr", "node-0000") == {"kernel|1.0.0": ("interrupt", "in_progress")}
    assert plans[-1].requeue_after is not None and plans[-1].requeue_after <= 30
    assert _condition(d, "scr") is None
    plans = _passes(d, 30, dead=lambda node: node == "node-0000")
    assert d.entries("scr", "node-0000") == {"kernel|1.0.0": ("interrupt", "erroring")}
    assert d.node_status("scr", "node-0000") == "erroring"
    (reason,) = plans[-1].waiting[("scr", "node-0000")]
    assert reason.blocker == waiting.REBOOT_DEADLINE
    assert reason.message.startswith(
        "reboot deadline: its boot id did not change within rebootDeadline 30s (since "
    )
    assert telemetry.held(plans[-1])[("scr", deadlines.EXCEEDED)] == 1
    warnings = [
        (a.kind, a.name)
        for p in plans
        for a in p.actions
        if isinstance(a, EmitEvent) and a.reason == deadlines.EXCEEDED
    ]
    assert warnings == [("Node", "node-0000"), ("Skyhook", "scr")], "once, when it is marked"
    condition = _condition(d, "scr")
    assert condition is not None and condition["status"] == "True"
    assert "node-0000" in condition["message"]
    # Without a policy the budget is the failure handling: the erroring node keeps its slot.
    assert d.node_status("scr", "node-0001") in {None, "waiting", "unknown"}
    assert plans[-1].waiting[("scr", "node-0001")][0].blocker == waiting.BUDGET
    assert "Stalled" in {c["type"] for c in d.status("scr")["conditions"]}

    # The reboot comes late after all: the interrupt completes, the rollout goes on.
    d.sim.reboot("node-0000", "boot-late")
    d.run()
    assert d.status("scr")["completeNodes"] == "2/2"
    assert _condition(d, "scr") is None
    assert sum(1 for _, _, s in d.stages_run("node-0000") if s == "interrupt") == 1, (
        "no second reboot was started"
    )


def test_a_node_that_stays_not_ready_after_its_reboot_is_marked_erroring() -> None:
    d = Driver(1, {"role": "gpu"})
    d.sim.add_skyhook("scr", _spec(rebootDeadline="1m"))
    for _ in range(10):  # until the reboot is seen
        _passes(d, 1)
        if d.entries("scr", "node-0000").get("kernel|1.0.0") == ("interrupt", "complete"):
            break
    # Rebooted, and the node does not come back Ready.
    ready = d.sim.ready_condition("node-0000")
    ready.update(status="False", lastTransitionTime=d.now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    _passes(d, 30)
    assert d.entries("scr", "node-0000")["kernel|1.0.0"][1] != "erroring"
    d.now += timedelta(seconds=40)
    plan = d.step()
    assert d.entries("scr", "node-0000") == {"kernel|1.0.0": ("post-interrupt", "erroring")}
    assert plan.waiting[("scr", "node-0000")][-1].message.startswith(
        "reboot deadline: it stayed NotReady after rebooting within rebootDeadline 1m"
    )
    ready.update(status="True")
    d.run()
    assert d.node_status("scr", "node-0000") == "complete"
    assert [s for _, _, s in d.stages_run()][-1] == "post-interrupt"


def test_with_a_policy_the_overdue_node_fails_its_batch_and_the_compartment_stops() -> None:
    """The batch with the dead node ends at the deadline, is evaluated as failed, and
    failureThreshold 1 stops the compartment: no node of the next batch starts."""
    d = Driver(4, {"role": "gpu"})
    d.sim.add_policy(
        "p",
        {
            "default": {
                "budget": {"percent": 100},
                "strategy": {
                    "fixed": {"initialBatch": 2, "failureThreshold": 1, "safetyLimit": 100}
                },
            },
            "rebootDeadline": "30s",
        },
    )
    d.sim.add_skyhook(
        "scr", {**SEL, "deploymentPolicy": "p", "packages": {"kernel": package(interrupt=REBOOT)}}
    )
    plans = _passes(d, 120, dead=lambda node: node == "node-0000")
    started = {n for p in plans for n in p.starting}
    assert started == {"node-0000", "node-0001"}
    assert d.node_status("scr", "node-0001") == "complete"
    assert d.node_status("scr", "node-0000") == "erroring"
    batch = d.status("scr")["compartmentStatuses"][keys.DEFAULT_COMPARTMENT]["batchState"]
    assert batch["shouldStop"] is True
    stopped = [
        a
        for p in plans
        for a in p.actions
        if isinstance(a, EmitEvent) and a.reason == "RolloutStopped"
    ]
    assert len(stopped) == 1


def test_without_a_deadline_the_node_waits_as_upstream_s_does() -> None:
    d = Driver(1, {"role": "gpu"})
    d.sim.add_skyhook("scr", _spec())
    _passes(d, 200, dead=lambda node: True)
    assert d.entries("scr", "node-0000") == {"kernel|1.0.0": ("interrupt", "in_progress")}


@pytest.mark.parametrize("value", ["soon", 30, "1d"])
def test_a_malformed_reboot_deadline_is_refused_naming_the_field(value: object) -> None:
    skyhook = {"metadata": {"name": "scr"}, "spec": _spec(rebootDeadline=value)}
    verdict = admission.review_skyhook("CREATE", skyhook, None, ())
    assert not verdict.allowed
    assert "spec.rebootDeadline: " in verdict.message
    policy = {
        "metadata": {"name": "p"},
        "spec": {
            "default": {"budget": {"count": 1}, "strategy": {"fixed": {}}},
            "rebootDeadline": value,
        },
    }
    verdict = admission.review_policy("CREATE", policy, None, ())
    assert not verdict.allowed
    assert "spec.rebootDeadline: " in verdict.message


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.integers(2, 6),
    initial=st.integers(1, 3),
    threshold=st.integers(1, 2),
    dead=st.sets(st.integers(0, 5), min_size=1),
    kind=st.sampled_from(["fixed", "linear", "exponential"]),
)
def test_a_halted_rollout_starts_no_new_node(
    nodes: int, initial: int, threshold: int, dead: set[int], kind: str
) -> None:
    """Whatever the strategy and whichever nodes never come back: once the compartment is
    stopped (shouldStop), no pass starts a node that had not started before."""
    d = Driver(nodes, {"role": "gpu"})
    strategy = {kind: {"initialBatch": initial, "failureThreshold": threshold}}
    d.sim.add_policy(
        "p",
        {"default": {"budget": {"percent": 100}, "strategy": strategy}, "rebootDeadline": "20s"},
    )
    d.sim.add_skyhook(
        "scr", {**SEL, "deploymentPolicy": "p", "packages": {"kernel": package(interrupt=REBOOT)}}
    )
    names = sorted(d.sim.nodes)
    halted = False
    seen: set[str] = set()
    for _ in range(150):
        (plan,) = _passes(d, 1, dead=lambda node: names.index(node) in dead)
        if halted:
            assert plan.starting <= seen, f"{plan.starting - seen} started after the halt"
        seen |= plan.starting
        batch = (
            d.status("scr").get("compartmentStatuses", {}).get(keys.DEFAULT_COMPARTMENT, {})
        ).get("batchState", {})
        halted = halted or bool(batch.get("shouldStop"))
    if any(i < nodes for i in dead):
        assert any(d.node_status("scr", n) == "erroring" for n in names)
