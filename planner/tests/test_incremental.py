"""A pass that reuses the last pass's verdicts plans exactly what a pass from nothing plans, over
random sequences of cluster events (passes/memory.py)."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyhook_planner.model.actions import Plan, lane_of
from skyhook_planner.model.settings import PlannerSettings
from skyhook_planner.model.snapshot import ClusterSnapshot
from skyhook_planner.passes.memory import PassMemory
from skyhook_planner.passes.plan import plan, replan
from skyhook_planner.sim.cluster import make_node
from skyhook_planner.sim.driver import SETTINGS, Driver, package
from skyhook_schemas import keys

INTERRUPTS = [None, {"type": "reboot"}, {"type": "service", "services": ["cron"]}]
EVENTS = [
    "pass",
    "finish",
    "fail",
    "clock",
    "not-ready",
    "ignore",
    "taint",
    "workload",
    "pause",
    "disable",
    "new-version",
    "config-edit",
    "uninstall",
    "reboot",
    "add-node",
    "remove-node",
    "lag",
    "soak",
    "cordon",
    "deadline",
    "health",
    "delete-pod",
]


@st.composite
def skyhook_specs(draw: st.DrawFn, priority: int) -> dict[str, Any]:
    names = ["alpha", "bravo", "charlie"][: draw(st.integers(1, 3))]
    packages: dict[str, Any] = {}
    for index, name in enumerate(names):
        extra: dict[str, Any] = {}
        if index and draw(st.booleans()):
            extra["dependsOn"] = {names[0]: "1.0.0"}
        interrupt = draw(st.sampled_from(INTERRUPTS))
        if interrupt:
            extra["interrupt"] = interrupt
        if draw(st.booleans()):
            extra["configMap"] = {"settings.conf": "a=1"}
        packages[name] = package("1.0.0", **extra)
    spec: dict[str, Any] = {"packages": packages, "priority": priority}
    spec["interruptionBudget"] = (
        {"count": draw(st.integers(1, 3))}
        if draw(st.booleans())
        else {"percent": draw(st.sampled_from([25, 50, 100]))}
    )
    if draw(st.booleans()):
        spec["podNonInterruptLabels"] = {"matchLabels": {"critical": "yes"}}
    if draw(st.booleans()):
        spec["nodeSelectors"] = {"matchLabels": {"pool": "gpu"}}
    if draw(st.booleans()):
        spec["sequencing"] = "all"
    if draw(st.booleans()):
        spec["soakTime"] = draw(st.sampled_from(["20s", "5m"]))
    if draw(st.booleans()):
        spec["rebootDeadline"] = draw(st.sampled_from(["10s", "2m"]))
    if draw(st.booleans()):
        spec["healthGate"] = draw(
            st.sampled_from(
                [
                    {"nodeConditions": [{"type": "Healthy"}], "timeout": "30s"},
                    {"checkPod": {"image": "example.com/check:1"}, "timeout": "5m"},
                ]
            )
        )
    return spec


class Checked:
    """The driver's planner: every pass planned twice, with and without memory; the counts
    each Skyhook keeps for the next pass (passes/tally.py) and what its selection adds up to
    (passes/select.py) are the same both ways too."""

    def __init__(self) -> None:
        self.memory: PassMemory | None = None

    def __call__(self, snapshot: ClusterSnapshot, settings: PlannerSettings) -> Plan:
        full, counted = replan(snapshot, settings, None)
        incremental, self.memory = replan(snapshot, settings, self.memory)
        assert incremental == full, _difference(incremental, full)
        _assert_same_tallies(self.memory, counted)
        return incremental


def _assert_same_tallies(kept: PassMemory, counted: PassMemory) -> None:
    """The tallies, selections and groups a pass updated from the last pass's equal those
    counted from nothing: a stale one would hide a condition (or an uninstall's) until some
    other change showed it, or hand the budget to a node in the wrong order."""
    assert kept.skyhooks.keys() == counted.skyhooks.keys()
    # The pods and ConfigMaps regrouped from the last pass's groups, as grouped from nothing
    # (passes/grouped.py), each group in the same order.
    assert kept.grouped == counted.grouped
    for name, memory in kept.skyhooks.items():
        assert memory.tally == counted.skyhooks[name].tally, name
        updated, found = memory.totals, counted.skyhooks[name].totals
        assert updated == found, name
        if updated is not None and found is not None:  # in the same order, too
            assert list(updated.node_statuses.by_node.items()) == list(
                found.node_statuses.by_node.items()
            )
            assert list(updated.protected) == list(found.protected)
            assert list(updated.nodes) == list(found.nodes)


def _difference(incremental: Plan, full: Plan) -> str:
    only_incremental = [a for a in incremental.actions if a not in full.actions]
    only_full = [a for a in full.actions if a not in incremental.actions]
    return (
        f"incremental plan differs:\n  only with memory: {only_incremental}\n"
        f"  only without: {only_full}\n  requeue {incremental.requeue_after} vs "
        f"{full.requeue_after}\n  waiting {dict(incremental.waiting)} vs {dict(full.waiting)}"
    )


def _new_version(scr: dict[str, Any], data: st.DataObject) -> None:
    packages = scr["spec"]["packages"]
    name = data.draw(st.sampled_from(sorted(packages)))
    packages[name] = {**packages[name], "version": "1.1.0"}
    for other in packages.values():
        if name in other.get("dependsOn", {}):
            other["dependsOn"] = {**other["dependsOn"], name: "1.1.0"}
    scr["metadata"]["generation"] += 1


def _toggle_uninstall(scr: dict[str, Any], data: st.DataObject) -> None:
    """Request an explicit uninstall of one package, or cancel it."""
    packages = scr["spec"]["packages"]
    name = data.draw(st.sampled_from(sorted(packages)))
    asked = packages[name].get("uninstall", {}).get("apply", False)
    packages[name] = {**packages[name], "uninstall": {"enabled": True, "apply": not asked}}
    scr["metadata"]["generation"] += 1


def _change_duration(scr: dict[str, Any], data: st.DataObject, field: str) -> None:
    """Set, change or remove the soak time (rules/soak.py) or the reboot deadline
    (rules/deadlines.py)."""
    choice = data.draw(st.sampled_from([None, "3s", "2m"]))
    if choice is None:
        scr["spec"].pop(field, None)
    else:
        scr["spec"][field] = choice
    scr["metadata"]["generation"] += 1


def _toggle_cordon(node: dict[str, Any]) -> None:
    node["spec"]["unschedulable"] = not node["spec"].get("unschedulable")


def _flip_health(node: dict[str, Any]) -> None:
    """The health gate's signal appears, or flips."""
    conditions = node["status"]["conditions"]
    found = next((c for c in conditions if c["type"] == "Healthy"), None)
    if found is None:
        conditions.append({"type": "Healthy", "status": "True"})
    else:
        found["status"] = "False" if found["status"] == "True" else "True"


# An administrator cordons or uncordons a node; a node's health gate signal flips.
NODE_TOGGLES = {"cordon": _toggle_cordon, "health": _flip_health}


def _pod_event(d: Driver, data: st.DataObject, event: str, pending: list[tuple[str, str]]) -> None:
    """A running stage pod finishes, fails, or is deleted by someone."""
    key = data.draw(st.sampled_from(pending))
    if event == "delete-pod":
        del d.sim.pods[key]
        return
    at = d.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    d.sim.finish_pod(key, 0 if event == "finish" else 1, at=at, failed_phase=True)


def _happen(d: Driver, data: st.DataObject, event: str, names: list[str]) -> None:
    """One cluster event between passes."""
    node_names = sorted(d.sim.nodes)
    node = data.draw(st.sampled_from(node_names)) if node_names else None
    scr = d.sim.skyhooks[data.draw(st.sampled_from(names))]
    pending = d.pending_pods()
    if event in {"finish", "fail", "delete-pod"} and pending:
        _pod_event(d, data, event, pending)
    elif event == "clock":
        d.now += timedelta(seconds=data.draw(st.sampled_from([1, 5, 30, 300])))
    elif event == "not-ready" and node:
        ready = d.sim.ready_condition(node)
        ready["status"] = "False" if ready["status"] == "True" else "True"
    elif event == "ignore" and node:
        labels = d.sim.nodes[node]["metadata"]["labels"]
        if labels.pop(keys.IGNORE_LABEL, None) is None:
            labels[keys.IGNORE_LABEL] = "true"
    elif event == "taint" and node:
        spec = d.sim.nodes[node]["spec"]
        spec["taints"] = [] if spec.get("taints") else [{"key": "x", "effect": "NoSchedule"}]
    elif event == "workload" and node:
        key = ("default", f"work-{node}")
        if d.sim.pods.pop(key, None) is None:
            d.sim.add_pod(
                {
                    "metadata": {
                        "name": key[1],
                        "namespace": "default",
                        "labels": {"critical": "yes"},
                    },
                    "spec": {"nodeName": node, "containers": [{"name": "w"}]},
                    "status": {"phase": "Running"},
                }
            )
    elif event in {"pause", "disable"}:
        flag = keys.PAUSE_ANNOTATION if event == "pause" else keys.DISABLE_ANNOTATION
        annotations = scr["metadata"]["annotations"]
        if annotations.pop(flag, None) is None:
            annotations[flag] = "true"
    elif event == "new-version":
        _new_version(scr, data)
    elif event == "config-edit":
        for package_spec in scr["spec"]["packages"].values():
            if "configMap" in package_spec:
                package_spec["configMap"] = {"settings.conf": f"a={d.now.timestamp()}"}
        scr["metadata"]["generation"] += 1
    elif event == "uninstall":
        _toggle_uninstall(scr, data)
    elif event == "reboot" and node:
        d.sim.reboot(node, f"boot-{node}-{d.now.timestamp()}")
    elif event == "add-node":
        d.sim.add_node(make_node(f"extra-{len(d.sim.nodes)}", {"pool": "gpu"}))
    elif event == "remove-node" and node and len(node_names) > 1:
        del d.sim.nodes[node]
    elif event in NODE_TOGGLES and node:
        NODE_TOGGLES[event](d.sim.nodes[node])
    elif event in {"soak", "deadline"}:
        _change_duration(scr, data, "soakTime" if event == "soak" else "rebootDeadline")
    elif event == "lag":
        d.lag = (lambda plan: {lane_of(a) or "" for a in plan.actions}) if d.lag is None else None


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), nodes=st.integers(1, 6), two=st.booleans())
def test_incremental_pass_plans_as_a_full_pass(data: st.DataObject, nodes: int, two: bool) -> None:
    # Retention short enough that kept pods go while the rollout runs (learn.expire_finished)
    retention = replace(SETTINGS, pod_ttl_succeeded_s=20.0, pod_ttl_failed_s=300.0)
    d = Driver(nodes, labels={"pool": "gpu"}, settings=retention)
    checked = Checked()
    d.planner = checked
    names = ["first", "second"] if two else ["first"]
    for priority, name in enumerate(names, start=1):
        d.sim.add_skyhook(name, data.draw(skyhook_specs(priority)))
    for event in data.draw(st.lists(st.sampled_from(EVENTS), min_size=10, max_size=60)):
        _happen(d, data, event, names)
        d.step()
    # Then let the rollout run on, still planning both ways at every pass.
    d.lag = None
    for _ in range(40):
        d.step()
        at = d.now.strftime("%Y-%m-%dT%H:%M:%SZ")
        for key in d.pending_pods():
            d.sim.finish_pod(key, at=at)
        d.now += timedelta(seconds=1)
    # The same cluster planned again: every node kept is taken over as it was, not re-planned.
    snapshot = d.sim.snapshot(d.now)
    again, memory = replan(snapshot, d.settings, checked.memory)
    assert again == plan(snapshot, d.settings)
    twice, memory_twice = replan(snapshot, d.settings, memory)
    assert twice == again
    for name, remembered in memory_twice.skyhooks.items():
        first = memory.skyhooks[name].verdicts
        assert remembered.verdicts.keys() == first.keys()
        assert all(first[n] is v for n, v in remembered.verdicts.items())


def test_a_quiet_fleet_is_not_looked_at_again() -> None:
    """With memory, the pass after one that changed a single node re-plans that node only: its
    verdicts for the others are the ones kept."""
    d = Driver(20)
    d.sim.add_skyhook(
        "fleet", {"packages": {"tools": package()}, "interruptionBudget": {"count": 2}}
    )
    memory = None
    snapshot = d.sim.snapshot(d.now)
    first, memory = replan(snapshot, d.settings, memory)
    d.sim.apply(first.actions)
    snapshot = d.sim.snapshot(d.now)
    second, memory = replan(snapshot, d.settings, memory)
    kept_before = copy.copy(dict(memory.skyhooks["fleet"].verdicts))
    assert len(kept_before) >= 18, "the nodes waiting for the budget are quiet"
    d.sim.apply(second.actions)
    busy = sorted({p["spec"]["nodeName"] for p in d.sim.pods.values()})
    d.sim.finish_pod(next(k for k, p in d.sim.pods.items() if p["spec"]["nodeName"] == busy[0]))
    snapshot = d.sim.snapshot(d.now)
    third, memory = replan(snapshot, d.settings, memory)
    assert third == plan(snapshot, d.settings)
    after = memory.skyhooks["fleet"].verdicts
    reused = [n for n, v in after.items() if kept_before.get(n) is v]
    assert len(reused) >= 17, f"only {len(reused)} of {len(after)} verdicts were reused"
    # The plan says what it cost: the nodes it looked at again, against every node without memory.
    assert 1 <= third.looked_at <= 3
    assert plan(snapshot, d.settings).looked_at == 20
