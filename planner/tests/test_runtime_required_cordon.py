"""spec.runtimeRequiredCordonAfter: a node whose runtime-required taint comes off is cordoned in
the same write and marked `skyhook.nvidia.com/runtimeRequiredCordon`; no Skyhook lifts that
cordon (not a later interrupt, not a deletion), and uncordoning the node ends it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from skyhook_planner.model.actions import EmitEvent, PatchNode
from skyhook_planner.model.spec import decode_spec
from skyhook_planner.model.vocabulary import Taint
from skyhook_planner.passes import report
from skyhook_planner.sim.driver import SETTINGS, Driver, package
from skyhook_schemas import keys

SEL = {"nodeSelectors": {"matchLabels": {"role": "gpu"}}}
TAINT = {"key": "skyhook.nvidia.com", "value": "runtime-required", "effect": "NoSchedule"}
MARKER = keys.RUNTIME_REQUIRED_CORDON_ANNOTATION


def _node(d: Driver, name: str) -> dict[str, Any]:
    return d.sim.nodes[name]


def _cordoned(d: Driver, name: str) -> bool:
    return bool(_node(d, name)["spec"].get("unschedulable"))


def _tainted_fleet(nodes: int = 2) -> Driver:
    d = Driver(nodes, {"role": "gpu"})
    _node(d, "node-0000")["spec"]["taints"] = [dict(TAINT)]  # node-0001: taint already gone
    return d


def _events(d: Driver) -> list[EmitEvent]:
    return [a for plan in d.plans for a in plan.actions if isinstance(a, EmitEvent)]


def test_the_taint_comes_off_and_the_cordon_goes_on_in_one_write() -> None:
    d = _tainted_fleet()
    d.sim.add_skyhook(
        "scr",
        {
            **SEL,
            "runtimeRequired": True,
            "runtimeRequiredCordonAfter": True,
            "packages": {"alpha": package()},
        },
    )
    d.run()
    node = _node(d, "node-0000")
    assert node["spec"]["taints"] == []
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"][MARKER] == "true"
    writes = [
        a
        for plan in d.plans
        for a in plan.actions
        if isinstance(a, PatchNode) and a.name == "node-0000" and a.remove_taints
    ]
    assert len(writes) == 1 and writes[0].unschedulable is True
    assert writes[0].annotations[MARKER] == "true"
    # A node whose taint was already gone is left schedulable.
    assert not _cordoned(d, "node-0001")
    assert MARKER not in _node(d, "node-0001")["metadata"]["annotations"]
    (event,) = [e for e in _events(d) if e.reason == "RuntimeRequiredCordon"]
    assert (event.name, event.kind) == ("node-0000", "Node")
    assert "cordoned for [skyhook:scr] (runtimeRequiredCordonAfter)" in event.message
    # Quiet afterwards: the cordon is written once.
    later = d.step()
    assert not [a for a in later.actions if isinstance(a, PatchNode) and a.name == "node-0000"]


def test_without_the_flag_the_taint_comes_off_and_the_node_stays_schedulable() -> None:
    d = _tainted_fleet()
    d.sim.add_skyhook("scr", {**SEL, "runtimeRequired": True, "packages": {"alpha": package()}})
    d.run()
    assert _node(d, "node-0000")["spec"]["taints"] == []
    assert not _cordoned(d, "node-0000")
    assert MARKER not in _node(d, "node-0000")["metadata"]["annotations"]


def test_a_later_interrupt_and_a_deletion_leave_the_cordon_and_an_uncordon_ends_it() -> None:
    d = _tainted_fleet(1)
    d.sim.add_skyhook(
        "first",
        {
            **SEL,
            "runtimeRequired": True,
            "runtimeRequiredCordonAfter": True,
            "packages": {"alpha": package()},
        },
    )
    d.run()
    assert _cordoned(d, "node-0000")
    # A second Skyhook reboots the node: it shares the cordon and leaves it on when done.
    d.sim.add_skyhook(
        "second", {**SEL, "packages": {"kernel": package(interrupt={"type": "reboot"})}}
    )
    shared: list[bool] = []
    d.run(
        on_step=lambda d: shared.append(
            keys.cordon_key("second") in _node(d, "node-0000")["metadata"]["annotations"]
        )
    )
    assert d.node_status("second", "node-0000") == "complete"
    assert any(shared), "the second Skyhook holds a share of the cordon while it reboots"
    assert not [e for e in _events(d) if e.reason == report.ADMIN_CORDON_KEPT]
    annotations = _node(d, "node-0000")["metadata"]["annotations"]
    assert _cordoned(d, "node-0000")
    assert annotations[MARKER] == "true"
    assert keys.cordon_key("second") not in annotations
    # Deleting the Skyhook that asked for the cordon keeps it.
    d.sim.skyhooks["first"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:10Z"
    d.run()
    assert _cordoned(d, "node-0000")
    assert _node(d, "node-0000")["metadata"]["annotations"][MARKER] == "true"
    # Someone uncordons the node and forgets the annotation: it is removed, the node stays
    # schedulable, and a later interrupt lifts its own cordon again.
    _node(d, "node-0000")["spec"]["unschedulable"] = False
    d.run()
    assert MARKER not in _node(d, "node-0000")["metadata"]["annotations"]
    assert not _cordoned(d, "node-0000")
    d.sim.skyhooks["second"]["spec"]["packages"]["kernel"]["version"] = "1.0.1"
    d.run()
    assert d.node_status("second", "node-0000") == "complete"
    assert not _cordoned(d, "node-0000")


def test_the_flag_alone_is_admitted_with_a_warning_naming_it() -> None:
    spec = decode_spec({"runtimeRequiredCordonAfter": True, "packages": {"alpha": package()}})
    assert spec.runtime_required_cordon_after is True
    assert any(
        w.startswith("spec.runtimeRequiredCordonAfter: has no effect without spec.runtimeRequired")
        for w in spec.warnings
    )
    d = _tainted_fleet(1)
    d.sim.add_skyhook(
        "scr", {**SEL, "runtimeRequiredCordonAfter": True, "packages": {"alpha": package()}}
    )
    d.run()
    assert not _cordoned(d, "node-0000")


def test_the_legacy_runtime_taint_is_tolerated_and_removed_never_applied() -> None:
    """Speaking nodewright.nvidia.com, a node provisioned before the rename (with
    skyhook.nvidia.com=runtime-required) is rolled out and untainted as one with the new taint
    would be. (This process speaks skyhook.nvidia.com: the settings spell the other side.)"""
    ours = Taint("nodewright.nvidia.com", "NoSchedule", "runtime-required")
    legacy = Taint("skyhook.nvidia.com", "NoSchedule", "runtime-required")
    settings = replace(SETTINGS, runtime_required_taint=ours, legacy_runtime_required_taint=legacy)
    d = Driver(2, {"role": "gpu"}, settings)
    _node(d, "node-0000")["spec"]["taints"] = [dict(TAINT)]
    d.sim.add_skyhook(
        "scr",
        {
            **SEL,
            "runtimeRequired": True,
            "autoTaintNewNodes": True,
            "packages": {"alpha": package()},
        },
    )
    d.run()
    assert _node(d, "node-0000")["spec"]["taints"] == []
    pods = [a.manifest for p in d.plans for a in p.actions if type(a).__name__ == "CreatePod"]
    assert pods and all(
        {
            "key": "skyhook.nvidia.com",
            "operator": "Equal",
            "value": "runtime-required",
            "effect": "NoSchedule",
        }
        in pod["spec"]["tolerations"]
        for pod in pods
    )
    # autoTaintNewNodes taints the node that joined without one (with the new taint), never
    # the one with the legacy taint.
    added = {
        (a.name, t.key)
        for p in d.plans
        for a in p.actions
        if isinstance(a, PatchNode)
        for t in a.add_taints
    }
    assert added == {("node-0001", "nodewright.nvidia.com")}, added


def test_speaking_skyhook_no_other_runtime_taint_is_touched() -> None:
    d = Driver(1, {"role": "gpu"})
    theirs = {**TAINT, "key": "nodewright.nvidia.com"}
    _node(d, "node-0000")["spec"]["taints"] = [dict(TAINT), dict(theirs)]
    d.sim.add_skyhook("scr", {**SEL, "runtimeRequired": True, "packages": {"alpha": package()}})
    d.run()
    # Upstream's newer taint is any other taint here: not tolerated, so the node waits.
    assert _node(d, "node-0000")["spec"]["taints"] == [TAINT, theirs]


def test_with_reapply_on_reboot_the_taint_and_the_cordon_come_back_after_a_reboot() -> None:
    """REAPPLY_ON_REBOOT with autoTaintNewNodes: a node someone else rebooted gets the
    runtime-required taint back before its state is reset, so no workload lands before the
    packages ran again; it comes off, and the cordon goes on, once they have."""
    d = Driver(1, {"role": "gpu"}, replace(SETTINGS, reapply_on_reboot=True))
    spec = {
        **SEL,
        "runtimeRequired": True,
        "autoTaintNewNodes": True,
        "runtimeRequiredCordonAfter": True,
        "packages": {"alpha": package()},
    }
    d.sim.add_skyhook("scr", spec)
    d.run()
    assert _node(d, "node-0000")["spec"].get("taints") in ([], None)
    assert _cordoned(d, "node-0000")
    _node(d, "node-0000")["spec"]["unschedulable"] = False  # the admin let workloads in
    d.run()
    ran = len(d.stages_run())
    d.sim.nodes["node-0000"]["status"]["nodeInfo"]["bootID"] = "someone-else-rebooted"
    d.step()
    # First the taint, with the state untouched: nothing runs on an untainted, reset node.
    assert _node(d, "node-0000")["spec"]["taints"] == [TAINT]
    assert d.entries("scr", "node-0000") == {"alpha|1.0.0": ("config", "complete")}
    assert len(d.stages_run()) == ran
    tainted_while_running = []
    for _ in range(50):
        d.step()
        for key in d.pending_pods():
            tainted_while_running.append(bool(_node(d, "node-0000")["spec"].get("taints")))
            d.sim.finish_pod(key)
        if not d.pending_pods() and len(d.stages_run()) > ran and not d.step().actions:
            break
    assert [s for _, _, s in d.stages_run()][ran:] == ["apply", "config"]
    assert tainted_while_running and all(tainted_while_running)
    assert _node(d, "node-0000")["spec"]["taints"] == []
    assert _cordoned(d, "node-0000")
