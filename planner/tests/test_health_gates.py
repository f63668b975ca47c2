"""Health gates (rules/health.py, passes/health.py): after its interrupt a node stays cordoned,
holding its slot and its batch, until it shows the gate's signals; a node that does not show
them within the timeout, or that turns unhealthy once complete, halts the rollout until it
shows them again. Refused at admission when malformed; shown in the status, Events, the
plan's waiting reasons and the held-nodes count."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyhook_planner import admission, telemetry
from skyhook_planner.model import waiting
from skyhook_planner.model.actions import EmitEvent, Plan
from skyhook_planner.model.settings import PlannerSettings
from skyhook_planner.rules import health
from skyhook_planner.sim.cluster import SimCluster, make_node
from skyhook_planner.sim.driver import Driver, package
from skyhook_planner.sim.forecast import Timing, forecast
from skyhook_schemas import keys

SEL = {"nodeSelectors": {"matchLabels": {"role": "gpu"}}}
SERVICE = {"type": "service", "services": ["gpud"]}
GATE = {"nodeConditions": [{"type": "GPUHealthy"}], "timeout": "1m"}


def _spec(**extra: Any) -> dict[str, Any]:
    return {**SEL, "packages": {"driver": package(interrupt=SERVICE)}, **extra}


def _set_health(d: Driver, node: str, status: str | None) -> None:
    """The node's GPUHealthy condition (None: it has none)."""
    conditions = d.sim.nodes[node]["status"]["conditions"]
    conditions[:] = [c for c in conditions if c["type"] != "GPUHealthy"]
    if status is not None:
        conditions.append({"type": "GPUHealthy", "status": status})


def _pass(d: Driver) -> Plan:
    """One pass, then every pending pod finishes and a second goes by."""
    plan = d.step()
    at = d.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    for key in d.pending_pods():
        d.sim.finish_pod(key, at=at)
    d.now += timedelta(seconds=1)
    return plan


def _cordoned(d: Driver, node: str) -> bool:
    return bool(d.sim.nodes[node]["spec"].get("unschedulable"))


def _condition(d: Driver, scr: str, kind: str) -> dict[str, Any] | None:
    return next((c for c in d.status(scr).get("conditions", []) if c["type"] == kind), None)


def _events(plans: list[Plan], reason: str) -> list[tuple[str, str, str]]:
    return [
        (a.kind, a.name, a.type)
        for p in plans
        for a in p.actions
        if isinstance(a, EmitEvent) and a.reason == reason
    ]


def test_a_node_stays_cordoned_after_its_interrupt_until_it_is_healthy() -> None:
    d = Driver(2, {"role": "gpu"})
    d.sim.add_skyhook("scr", _spec(interruptionBudget={"count": 1}, healthGate=GATE))
    for node in d.sim.nodes:
        _set_health(d, node, "False")
    plans = [_pass(d) for _ in range(15)]
    first = "node-0000"
    assert d.entries("scr", first) == {"driver|1.0.0": ("post-interrupt", "complete")}
    assert _cordoned(d, first), "held cordoned after its interrupt"
    assert d.node_status("scr", first) == "in_progress"
    assert d.entries("scr", "node-0001") == {}, "its slot holds the next node back"
    reason = plans[-1].waiting[("scr", first)][0]
    assert reason.blocker == waiting.HEALTH
    assert "condition GPUHealthy is False (wants True)" in reason.message
    assert telemetry.held(plans[-1])[("scr", health.WAITING)] == 1
    assert plans[-1].waiting[("scr", "node-0001")][0].blocker == waiting.BUDGET
    assert first in d.status("scr")["healthGateWaiting"]
    found = _condition(d, "scr", health.CONDITION_WAITING)
    assert found is not None and first in found["message"]

    _set_health(d, first, "True")
    plans = [_pass(d) for _ in range(3)]
    assert not _cordoned(d, first)
    assert d.node_status("scr", first) == "complete"
    assert _events(plans, health.PASSED) == [("Node", first, "Normal")]
    assert d.entries("scr", "node-0001"), "the next node started"
    assert first not in d.status("scr").get("healthGateWaiting", {})


def test_a_node_not_healthy_within_the_timeout_halts_the_rollout_until_it_is() -> None:
    d = Driver(3, {"role": "gpu"})
    d.sim.add_skyhook("scr", _spec(interruptionBudget={"count": 2}, healthGate=GATE))
    _set_health(d, "node-0000", "False")
    _set_health(d, "node-0001", "True")
    _set_health(d, "node-0002", "True")
    plans = [_pass(d) for _ in range(20)]
    assert d.node_status("scr", "node-0001") == "complete"
    assert _condition(d, "scr", health.CONDITION_FAILED) is None, "not yet: within the timeout"
    assert plans[-1].requeue_after is not None and plans[-1].requeue_after <= 60
    assert d.entries("scr", "node-0002"), "a free slot: the third node runs meanwhile"
    # The third node is done; a fourth joins and must wait once the first times out.
    d.sim.add_node(
        {**d.sim.nodes["node-0002"], "metadata": {"name": "node-0003", "labels": {"role": "gpu"}}}
    )
    d.now += timedelta(seconds=60)
    plans = [_pass(d) for _ in range(10)]
    assert d.entries("scr", "node-0003") == {}, "halted: no new node starts"
    reason = plans[-1].waiting[("scr", "node-0003")][0]
    assert reason.blocker == waiting.HEALTH
    assert reason.message.startswith("rollout halted by the health gate: node [node-0000] ")
    assert "not healthy within timeout 1m" in reason.message
    assert telemetry.held(plans[-1])[("scr", health.FAILED)] == 1
    failed = _condition(d, "scr", health.CONDITION_FAILED)
    assert failed is not None and "node [node-0000]" in failed["message"]
    assert _events(plans, health.FAILED) == [
        ("Node", "node-0000", "Warning"),
        ("Skyhook", "scr", "Warning"),
    ], "once, when it fails"
    assert _cordoned(d, "node-0000")

    _set_health(d, "node-0000", "True")
    [_pass(d) for _ in range(15)]
    assert _condition(d, "scr", health.CONDITION_FAILED) is None
    assert d.status("scr")["completeNodes"] == "4/4"
    assert not any(_cordoned(d, n) for n in d.sim.nodes)


def test_a_complete_node_that_turns_unhealthy_halts_the_rollout_until_it_clears() -> None:
    d = Driver(3, {"role": "gpu"})
    d.sim.add_skyhook("scr", _spec(interruptionBudget={"count": 1}, healthGate=GATE))
    for node in d.sim.nodes:
        _set_health(d, node, "True")
    for _ in range(30):
        _pass(d)
        if d.node_status("scr", "node-0000") == "complete":
            break
    assert d.node_status("scr", "node-0000") == "complete"
    _set_health(d, "node-0000", "False")
    before = {n for n in d.sim.nodes if d.entries("scr", n)}
    plans = [_pass(d) for _ in range(20)]
    started = {n for p in plans for n in p.starting}
    assert not started - before, f"{started - before} started while node-0000 was unhealthy"
    failed = _condition(d, "scr", health.CONDITION_FAILED)
    assert failed is not None
    assert "node [node-0000] turned unhealthy: condition GPUHealthy is False" in failed["message"]
    _set_health(d, "node-0000", "True")
    [_pass(d) for _ in range(30)]
    assert d.status("scr")["completeNodes"] == "3/3"
    assert _condition(d, "scr", health.CONDITION_FAILED) is None


def test_a_label_signal_and_the_policy_s_gate() -> None:
    """A DeploymentPolicy's gate applies to the Skyhooks using it; a label is a signal too."""
    d = Driver(1, {"role": "gpu"})
    d.sim.add_policy(
        "p",
        {
            "default": {"budget": {"count": 1}, "strategy": {"fixed": {}}},
            "healthGate": {"nodeLabels": {"example.com/gpu-checks": "passed"}},
        },
    )
    d.sim.add_skyhook("scr", _spec(deploymentPolicy="p"))
    plans = [_pass(d) for _ in range(10)]
    assert _cordoned(d, "node-0000")
    assert "label example.com/gpu-checks is missing (wants 'passed')" in (
        plans[-1].waiting[("scr", "node-0000")][0].message
    )
    d.sim.nodes["node-0000"]["metadata"]["labels"]["example.com/gpu-checks"] = "passed"
    [_pass(d) for _ in range(3)]
    assert not _cordoned(d, "node-0000")
    assert d.node_status("scr", "node-0000") == "complete"


def test_without_an_interrupt_nothing_waits_at_the_gate() -> None:
    """No cordon to hold: a package without an interrupt completes as before."""
    d = Driver(1, {"role": "gpu"})
    d.sim.add_skyhook("scr", {**SEL, "packages": {"tool": package()}, "healthGate": GATE})
    _set_health(d, "node-0000", "True")
    [_pass(d) for _ in range(8)]
    assert d.node_status("scr", "node-0000") == "complete"
    assert "healthGateWaiting" not in d.status("scr")


CHECK = {"checkPod": {"image": "registry.example/gpu-check:1.2", "command": ["/check"]}}


def _check_pods(d: Driver) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        k: p for k, p in d.sim.pods.items() if keys.HEALTH_CHECK_LABEL in p["metadata"]["labels"]
    }


def _until_check_pod(d: Driver) -> tuple[str, str]:
    """Passes (stage pods finishing, check pods left running) until a check pod is there."""
    for _ in range(20):
        d.step()
        at = d.now.strftime("%Y-%m-%dT%H:%M:%SZ")
        for key in d.pending_pods():
            if key not in _check_pods(d):
                d.sim.finish_pod(key, at=at)
        d.now += timedelta(seconds=1)
        if _check_pods(d):
            (key,) = _check_pods(d)
            return key
    raise AssertionError("no check pod was created")


def test_a_check_pod_runs_on_the_node_and_its_success_releases_it() -> None:
    d = Driver(2, {"role": "gpu"})
    d.sim.add_skyhook("scr", _spec(interruptionBudget={"count": 1}, healthGate=CHECK))
    key = _until_check_pod(d)
    pod = d.sim.pods[key]
    assert pod["spec"]["nodeName"] == "node-0000"
    (container,) = pod["spec"]["initContainers"]
    assert container["image"] == "registry.example/gpu-check:1.2"
    assert container["command"] == ["/check"]
    assert {"key": keys.UNSCHEDULABLE_TAINT_KEY, "operator": "Exists"} in pod["spec"]["tolerations"]
    assert _cordoned(d, "node-0000")
    plan = d.step()
    assert "check pod " + key[1] + " not finished" in plan.waiting[("scr", "node-0000")][0].message
    assert d.entries("scr", "node-0001") == {}
    d.sim.finish_pod(key, 0, at=d.now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    [_pass(d) for _ in range(20)]
    assert d.status("scr")["completeNodes"] == "2/2"
    assert not any(_cordoned(d, n) for n in d.sim.nodes)
    assert not _check_pods(d), "each check pod is deleted once its node passed"


def test_a_failed_check_pod_halts_the_rollout_and_deleting_it_checks_again() -> None:
    d = Driver(2, {"role": "gpu"})
    d.sim.add_skyhook("scr", _spec(interruptionBudget={"count": 1}, healthGate=CHECK))
    key = _until_check_pod(d)
    d.sim.finish_pod(key, 3, at=d.now.strftime("%Y-%m-%dT%H:%M:%SZ"), failed_phase=True)
    plans = [d.step() for _ in range(3)]
    failed = _condition(d, "scr", health.CONDITION_FAILED)
    assert failed is not None
    assert (
        f"node [node-0000] failed its health check: check pod {key[1]} failed"
        in (failed["message"])
    )
    assert _events(plans, health.FAILED) == [
        ("Node", "node-0000", "Warning"),
        ("Skyhook", "scr", "Warning"),
    ]
    assert key in d.sim.pods, "a failed check pod is kept for its logs"
    assert _cordoned(d, "node-0000") and d.entries("scr", "node-0001") == {}
    del d.sim.pods[key]  # an administrator deletes it: the check runs again
    d.step()
    assert key in _check_pods(d)
    d.sim.finish_pod(key, 0, at=d.now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    [_pass(d) for _ in range(20)]
    assert d.status("scr")["completeNodes"] == "2/2"
    assert _condition(d, "scr", health.CONDITION_FAILED) is None


@pytest.mark.parametrize(
    ("gate", "path"),
    [
        ({}, "spec.healthGate: set nodeConditions, nodeLabels or checkPod"),
        ({"checkPod": {"image": "Not An Image"}}, "spec.healthGate.checkPod.image: "),
        ({"checkPod": {"command": ["/check"]}}, "spec.healthGate.checkPod.image: "),
        ({"nodeConditions": [{"type": "Bad Type"}]}, "spec.healthGate.nodeConditions[0].type: "),
        (
            {"nodeConditions": [{"type": "GPUHealthy", "status": "yes"}]},
            "spec.healthGate.nodeConditions[0].status: ",
        ),
        ({"nodeLabels": {"a": "not ok"}}, "spec.healthGate.nodeLabels.a: "),
        ({"nodeLabels": {"a": "b"}, "timeout": "soon"}, "spec.healthGate.timeout: "),
        ({"nodeLabels": {"a": "b"}, "timeout": "0"}, "spec.healthGate.timeout: must be more"),
        ({"nodeLabels": {"a": "b"}, "signal": "x"}, "spec.healthGate.signal: unknown field"),
        ("on", "spec.healthGate: "),
    ],
)
def test_a_malformed_health_gate_is_refused_naming_the_field(gate: object, path: str) -> None:
    skyhook = {"metadata": {"name": "scr"}, "spec": _spec(healthGate=gate)}
    verdict = admission.review_skyhook("CREATE", skyhook, None, ())
    assert not verdict.allowed
    assert path in verdict.message, verdict.message
    policy = {
        "metadata": {"name": "p"},
        "spec": {
            "default": {"budget": {"count": 1}, "strategy": {"fixed": {}}},
            "healthGate": gate,
        },
    }
    verdict = admission.review_policy("CREATE", policy, None, ())
    assert not verdict.allowed
    assert path in verdict.message, verdict.message


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.integers(2, 5),
    count=st.integers(1, 3),
    flips=st.lists(st.tuples(st.integers(0, 4), st.booleans(), st.integers(1, 40)), max_size=8),
)
def test_a_failing_gate_starts_no_new_node_and_never_releases_an_unhealthy_one(
    nodes: int, count: int, flips: list[tuple[int, bool, int]]
) -> None:
    """Whatever the nodes' health does: a pass that sees a node failing the gate starts no
    node, and a node we cordoned is never uncordoned while it is unhealthy."""
    d = Driver(nodes, {"role": "gpu"})
    d.sim.add_skyhook(
        "scr",
        _spec(
            interruptionBudget={"count": count},
            healthGate={"nodeConditions": [{"type": "GPUHealthy"}], "timeout": "20s"},
        ),
    )
    names = sorted(d.sim.nodes)
    for name in names:
        _set_health(d, name, "True")
    schedule = {at: (names[i % nodes], ok) for i, ok, at in flips}
    for step in range(60):
        if step in schedule:
            name, ok = schedule[step]
            _set_health(d, name, "True" if ok else "False")
        cordoned = {n for n in names if _cordoned(d, n)}
        unhealthy = {
            n
            for n in names
            if not any(
                c["type"] == "GPUHealthy" and c["status"] == "True"
                for c in d.sim.nodes[n]["status"]["conditions"]
            )
        }
        plan = _pass(d)
        if _condition(d, "scr", health.CONDITION_FAILED) is not None:
            assert not plan.starting, f"{plan.starting} started while the gate halts"
        for n in cordoned & unhealthy:
            assert _cordoned(d, n), f"{n} uncordoned while unhealthy"


def test_the_forecast_names_the_health_gate_as_what_holds_a_node() -> None:
    """`kubectl skyhook plan`: a node that does not show the gate's signal now is forecast to
    stay held after its interrupt, with the health blocker and the unmet signal."""
    sim = SimCluster()
    for i in range(3):
        node = make_node(f"node-{i}", {"role": "gpu"})
        if i != 2:
            node["status"]["conditions"].append({"type": "GPUHealthy", "status": "True"})
        sim.add_node(node)
    sim.add_skyhook("fleet", _spec(interruptionBudget={"count": 1}, healthGate=GATE))
    start = datetime(2026, 1, 1, tzinfo=UTC)
    result = forecast(
        sim,
        "fleet",
        settings=PlannerSettings(),
        timing=Timing(stage_s=10, reboot_s=60),
        start=start,
    )
    assert [sorted(w.nodes) for w in result.waves] == [["node-0"], ["node-1"]]
    (held,) = result.blocked
    assert held.node == "node-2"
    assert held.reasons[0].blocker == waiting.HEALTH
    assert "condition GPUHealthy is missing (wants True)" in held.reason
