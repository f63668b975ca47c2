"""Explicit uninstall (`uninstall.enabled` / `uninstall.apply`) in whole passes of the planner
against the in-memory cluster."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyhook_planner import telemetry
from skyhook_planner.admission import review_skyhook
from skyhook_planner.model.spec import SpecError, decode_spec
from skyhook_planner.sim.cluster import make_node
from skyhook_planner.sim.driver import Driver, package, pod_stage
from skyhook_schemas import keys

SEL = {"nodeSelectors": {"matchLabels": {"role": "gpu"}}}
LABELS = {"role": "gpu"}
ENABLED = {"enabled": True, "apply": False}


def installed(driver: Driver, spec: dict[str, Any]) -> Driver:
    driver.sim.add_skyhook("scr", {**SEL, **spec})
    driver.run()
    return driver


def request_uninstall(driver: Driver, name: str, apply: bool = True) -> None:
    driver.sim.skyhooks["scr"]["spec"]["packages"][name]["uninstall"]["apply"] = apply


def conditions(driver: Driver) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in driver.status("scr").get("conditions", [])}


def runs_since(driver: Driver, before: int) -> list[tuple[str, str, str]]:
    return [pod_stage(p) for p in driver.sim.created_pods[before:]]


# --- the API field --------------------------------------------------------------------------------


def test_uninstall_block_decodes_and_apply_needs_enabled() -> None:
    base = {"version": "1.0.0", "image": "example.com/p"}
    spec = decode_spec(
        {"packages": {"aa": {**base, "uninstall": {"enabled": True, "apply": True}}}}
    )
    assert spec.packages["aa"].uninstalling
    assert (
        not decode_spec({"packages": {"aa": {**base, "uninstall": {}}}}).packages["aa"].uninstalling
    )
    try:
        decode_spec({"packages": {"aa": {**base, "uninstall": {"apply": True}}}})
    except SpecError as error:
        assert error.messages == [
            "spec.packages.aa.uninstall.apply: requires uninstall.enabled to be true "
            "(the package must declare it can be uninstalled)"
        ]
    else:
        raise AssertionError("apply without enabled was admitted")


# --- one package, no interrupt --------------------------------------------------------------------


def test_uninstall_runs_once_per_node_and_leaves_no_entry() -> None:
    d = installed(Driver(2, LABELS), {"packages": {"tuning": package(uninstall=dict(ENABLED))}})
    before = len(d.sim.created_pods)
    request_uninstall(d, "tuning")
    d.run()
    assert sorted(runs_since(d, before)) == [
        ("node-0000", "tuning|1.0.0", "uninstall"),
        ("node-0001", "tuning|1.0.0", "uninstall"),
    ]
    for node in d.sim.nodes:
        assert d.entries("scr", node) == {}  # absent: uninstalled
        assert d.node_status("scr", node) == "complete"
    status = d.status("scr")
    assert status["status"] == "complete"
    assert conditions(d)["Ready"]["status"] == "True"
    assert keys.CONDITION_UNINSTALL_IN_PROGRESS not in conditions(d)
    # It stays uninstalled: later passes and new nodes install nothing.
    d.sim.add_node(make_node("node-0009", LABELS))
    before = len(d.sim.created_pods)
    d.run()
    assert runs_since(d, before) == []


def test_uninstall_pod_is_the_full_package_stage_pod() -> None:
    env = [{"name": "MODE", "value": "strict"}]
    pkg = package(uninstall=dict(ENABLED), env=env, configMap={"a.sh": "1"})
    d = installed(Driver(1, LABELS), {"packages": {"tuning": pkg}})
    request_uninstall(d, "tuning")
    d.step()
    (pod,) = d.sim.pods.values()
    names = [c["name"] for c in pod["spec"]["initContainers"]]
    assert names == ["tuning-init", "tuning-uninstall", "tuning-uninstallcheck"]
    assert pod["spec"]["initContainers"][1]["args"][0] == "uninstall"
    assert {"name": "MODE", "value": "strict"} in pod["spec"]["initContainers"][1]["env"]
    assert any(v.get("configMap") for v in pod["spec"]["volumes"])


def test_conditions_while_uninstalling_and_failing() -> None:
    d = installed(Driver(1, LABELS), {"packages": {"tuning": package(uninstall=dict(ENABLED))}})
    request_uninstall(d, "tuning")
    d.step()
    found = conditions(d)
    assert found[keys.CONDITION_UNINSTALL_IN_PROGRESS]["status"] == "True"
    assert found[keys.CONDITION_UNINSTALL_IN_PROGRESS]["reason"] == "UninstallInProgress"
    assert keys.CONDITION_UNINSTALL_FAILED not in found
    now = d.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    d.sim.finish_pod(d.pending_pods()[0], 1, at=now)  # fails the pod: restartPolicy Never
    d.step()
    assert d.entries("scr", "node-0000") == {"tuning|1.0.0": ("uninstall", "erroring")}
    failed = conditions(d)[keys.CONDITION_UNINSTALL_FAILED]
    assert (failed["status"], failed["reason"]) == ("True", "UninstallPodFailing")
    # A fix to the package's env rolls forward: the failing pod is replaced.
    d.sim.skyhooks["scr"]["spec"]["packages"]["tuning"]["env"] = [{"name": "FIX", "value": "1"}]
    d.run()
    assert d.entries("scr", "node-0000") == {}
    found = conditions(d)
    assert keys.CONDITION_UNINSTALL_FAILED not in found
    assert keys.CONDITION_UNINSTALL_IN_PROGRESS not in found


def test_uninstall_waits_for_the_install_stage_under_way() -> None:
    d = Driver(1, LABELS)
    d.sim.add_skyhook("scr", {**SEL, "packages": {"tuning": package(uninstall=dict(ENABLED))}})
    d.step()  # apply runs
    request_uninstall(d, "tuning")
    d.run()
    assert [s for _, _, s in d.stages_run()] == ["apply", "uninstall"]
    assert d.entries("scr", "node-0000") == {}


def test_never_installed_package_with_apply_is_a_no_op() -> None:
    d = Driver(2, LABELS)
    pkg = package(uninstall={"enabled": True, "apply": True})
    d.sim.add_skyhook("scr", {**SEL, "packages": {"tuning": pkg, "other": package()}})
    d.run()
    assert {key for _, key, _ in d.stages_run()} == {"other|1.0.0"}
    assert d.status("scr")["status"] == "complete"


def test_cancel_sends_an_unfinished_uninstall_back_to_apply() -> None:
    pkg = package(uninstall=dict(ENABLED), configMap={"a.sh": "1"})
    d = installed(Driver(1, LABELS), {"packages": {"tuning": pkg}})
    request_uninstall(d, "tuning")
    d.step()  # the uninstall pod runs
    request_uninstall(d, "tuning", apply=False)
    before = len(d.sim.created_pods)
    d.run()
    assert [s for _, _, s in runs_since(d, before)] == ["apply", "config"]
    assert d.entries("scr", "node-0000") == {"tuning|1.0.0": ("config", "complete")}
    assert keys.CONDITION_UNINSTALL_IN_PROGRESS not in conditions(d)


def test_cancel_after_the_uninstall_finished_reinstalls() -> None:
    d = installed(Driver(1, LABELS), {"packages": {"tuning": package(uninstall=dict(ENABLED))}})
    request_uninstall(d, "tuning")
    d.run()
    before = len(d.sim.created_pods)
    request_uninstall(d, "tuning", apply=False)
    d.run()
    assert [s for _, _, s in runs_since(d, before)] == ["apply", "config"]


# --- interrupts -----------------------------------------------------------------------------------


def test_uninstall_with_interrupt_cordons_drains_then_runs_uninstall_interrupt() -> None:
    pkg = package(uninstall=dict(ENABLED), interrupt={"type": "reboot"})
    d = installed(Driver(1, LABELS), {"packages": {"kernel": pkg}})
    node = d.sim.nodes["node-0000"]
    assert not node["spec"].get("unschedulable")
    request_uninstall(d, "kernel")
    before = len(d.sim.created_pods)
    d.step()
    assert node["spec"].get("unschedulable") is True  # cordoned before the uninstall pod
    assert runs_since(d, before) == []
    d.step()
    assert [s for _, _, s in runs_since(d, before)] == ["uninstall"]
    d.sim.finish_pod(d.pending_pods()[0])
    d.step()
    assert d.entries("scr", "node-0000") == {"kernel|1.0.0": ("uninstall-interrupt", "in_progress")}
    (interrupt,) = d.sim.pods.values()
    assert interrupt["metadata"]["name"].startswith("scr-uninstall-interrupt-reboot-")
    assert interrupt["metadata"]["labels"][keys.INTERRUPT_LABEL] == "True"
    assert interrupt["spec"]["initContainers"][0]["args"][0] == "interrupt"
    assert pod_stage(interrupt)[2] == "uninstall-interrupt"
    # The node reboots: the uninstall is over.
    d.sim.reboot("node-0000", "boot-after-uninstall")
    d.run()
    assert d.entries("scr", "node-0000") == {}
    assert not node["spec"].get("unschedulable")  # given back
    assert keys.cordon_key("scr") not in node["metadata"]["annotations"]
    assert d.status("scr")["status"] == "complete"


def test_an_uninstall_interrupt_is_not_cancelled() -> None:
    pkg = package(uninstall=dict(ENABLED), interrupt={"type": "service", "services": ["x"]})
    d = installed(Driver(1, LABELS), {"packages": {"svc": pkg}})
    request_uninstall(d, "svc")
    d.step()  # cordon
    d.step()
    d.sim.finish_pod(d.pending_pods()[0])
    d.step()  # uninstall-interrupt pod created
    request_uninstall(d, "svc", apply=False)
    before = len(d.sim.created_pods)
    d.run()
    stages_after = [s for _, _, s in runs_since(d, before)]
    assert stages_after == ["apply", "config", "interrupt", "post-interrupt"]
    assert d.sim.created_pods[before - 1]["metadata"]["name"].startswith("scr-uninstall-interrupt")


def test_an_uninstall_asked_while_another_waits_for_its_interrupt_shares_it() -> None:
    # bravo's uninstall is done and its reboot is due when alpha's uninstall is asked: alpha's
    # uninstall runs first, then one reboot covers both, rather than a reboot, alpha's
    # uninstall and then a service restart.
    spec = {
        "packages": {
            "alpha": package(
                uninstall=dict(ENABLED), interrupt={"type": "service", "services": ["cron"]}
            ),
            "bravo": package(uninstall=dict(ENABLED), interrupt={"type": "reboot"}),
        }
    }
    d = installed(Driver(1, LABELS), spec)
    before = len(d.sim.created_pods)
    request_uninstall(d, "bravo")
    while not any(pod_stage(p)[2] == "uninstall" for p in d.sim.pods.values()):
        d.step()
    d.sim.finish_pod(d.pending_pods()[0])
    request_uninstall(d, "alpha")
    d.run()
    assert [stage[1:] for stage in runs_since(d, before)] == [
        ("bravo|1.0.0", "uninstall"),
        ("alpha|1.0.0", "uninstall"),
        ("bravo|1.0.0", "uninstall-interrupt"),
    ]
    assert d.entries("scr", "node-0000") == {}


# --- dependencies ---------------------------------------------------------------------------------


def test_a_dependent_is_blocked_by_an_uninstalled_dependency() -> None:
    spec = {
        "packages": {
            "base": package(uninstall=dict(ENABLED)),
            "top": package(dependsOn={"base": "1.0.0"}),
        }
    }
    d = installed(Driver(1, LABELS), spec)
    request_uninstall(d, "base")
    d.run()
    # top stays installed (nothing cascades); nothing is blocked while top is complete.
    assert d.entries("scr", "node-0000") == {"top|1.0.0": ("config", "complete")}
    assert keys.CONDITION_BLOCKED not in conditions(d)
    # A new version of top cannot install without its dependency.
    d.sim.skyhooks["scr"]["spec"]["packages"]["top"]["version"] = "1.1.0"
    d.run()
    blocked = conditions(d)[keys.CONDITION_BLOCKED]
    assert blocked["reason"] == "DependencyUninstalled"
    assert blocked["message"] == "package top is blocked: dependency base has been uninstalled"
    # Cancelling the uninstall lets it through.
    request_uninstall(d, "base", apply=False)
    d.run()
    assert d.entries("scr", "node-0000") == {
        "base|1.0.0": ("config", "complete"),
        "top|1.1.0": ("config", "complete"),
    }
    assert keys.CONDITION_BLOCKED not in conditions(d)


# --- the budget -----------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.integers(1, 6),
    budget=st.integers(1, 3),
    interrupt=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_an_uninstall_never_exceeds_the_budget(
    nodes: int, budget: int, interrupt: bool, seed: int
) -> None:
    rng = random.Random(seed)
    extra = {"interrupt": {"type": "reboot"}} if interrupt else {}
    spec = {
        **SEL,
        "interruptionBudget": {"count": budget},
        "packages": {"kernel": package(uninstall=dict(ENABLED), **extra)},
    }
    d = Driver(nodes, LABELS)
    d.sim.add_skyhook("scr", spec)
    d.run(max_steps=400)
    request_uninstall(d, "kernel")

    def check(driver: Driver) -> None:
        busy = {pod_stage(p)[0] for p in driver.sim.pods.values()}
        held = {
            n
            for n, node in driver.sim.nodes.items()
            if driver.node_status("scr", n) in {"in_progress", "erroring"}
            or node["spec"].get("unschedulable")
        }
        assert busy <= held
        assert len(held) <= budget, f"{sorted(held)} at once, budget {budget}"

    d.run(
        max_steps=400,
        finish=lambda pods: [p for p in pods if rng.random() < 0.6],
        on_step=check,
    )
    for name in d.sim.nodes:
        assert d.entries("scr", name) == {}
        assert not d.sim.nodes[name]["spec"].get("unschedulable")
    assert d.status("scr")["status"] == "complete"


# --- admission: removal, downgrade, cancel --------------------------------------------------------


def _scr(packages: dict[str, Any], node_state: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": "scr"}, "spec": {**SEL, "packages": packages}}
    if node_state is not None:
        body["status"] = {"nodeState": node_state}
    return body


def _pkg(version: str = "2.0.0", **uninstall: bool) -> dict[str, Any]:
    return package(version, uninstall={"enabled": True, "apply": False, **uninstall})


HELD = {"node-0000": {"tuning|2.0.0": {"name": "tuning", "version": "2.0.0", "image": "x"}}}


@pytest.mark.parametrize(
    ("old", "new", "refusal"),
    [
        pytest.param(
            _scr({"tuning": _pkg()}, HELD), _scr({}), "spec.packages.tuning: has", id="removal"
        ),
        pytest.param(_scr({"tuning": _pkg(apply=True)}, {}), _scr({}), "", id="removal-done"),
        pytest.param(
            _scr({"tuning": package("2.0.0")}, HELD), _scr({}), "", id="removal-not-enabled"
        ),
        pytest.param(
            _scr({"tuning": _pkg()}, {}),
            _scr({"tuning": _pkg("1.0.0")}),
            "set uninstall.apply=true first",
            id="downgrade-without-apply",
        ),
        pytest.param(
            _scr({"tuning": _pkg(apply=True)}, HELD),
            _scr({"tuning": _pkg("1.0.0", apply=True)}),
            "the uninstall has not finished on every node",
            id="downgrade-before-done",
        ),
        pytest.param(
            _scr({"tuning": _pkg(apply=True)}, {}),
            _scr({"tuning": _pkg("1.0.0")}),
            "",
            id="downgrade-after-uninstall",
        ),
        pytest.param(
            _scr({"tuning": _pkg()}, HELD), _scr({"tuning": _pkg("3.0.0")}), "", id="upgrade"
        ),
        pytest.param(
            _scr({"tuning": package("2.0.0")}, HELD),
            _scr({"tuning": package("1.0.0")}),
            "",
            id="downgrade-not-enabled",
        ),
    ],
)
def test_removal_and_downgrade_gates(
    old: dict[str, Any], new: dict[str, Any], refusal: str
) -> None:
    verdict = review_skyhook("UPDATE", new, old, policies=())
    if refusal:
        assert not verdict.allowed
        assert refusal in verdict.message
        assert "spec.packages.tuning" in verdict.message
    else:
        assert verdict.allowed, verdict.message


def test_cancelling_an_uninstall_is_admitted_with_a_warning() -> None:
    old = _scr({"tuning": _pkg(apply=True)}, HELD)
    verdict = review_skyhook("UPDATE", _scr({"tuning": _pkg()}), old, policies=())
    assert verdict.allowed
    assert verdict.warnings == (
        "spec.packages.tuning.uninstall.apply: uninstall cancelled; nodes where it already "
        "finished will install the package again",
    )
    created = review_skyhook("CREATE", _scr({"tuning": _pkg()}), None, policies=())
    assert created.allowed and not created.warnings


# --- deletion -------------------------------------------------------------------------------------


def delete(driver: Driver) -> None:
    driver.sim.skyhooks["scr"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"


def test_deletion_uninstalls_enabled_packages_first_within_the_budget() -> None:
    spec = {
        "interruptionBudget": {"count": 1},
        "packages": {"tuning": package(uninstall=dict(ENABLED)), "plain": package()},
    }
    d = installed(Driver(2, LABELS), spec)
    before = len(d.sim.created_pods)
    delete(d)
    d.run()
    assert sorted(runs_since(d, before)) == [
        ("node-0000", "tuning|1.0.0", "uninstall"),
        ("node-0001", "tuning|1.0.0", "uninstall"),
    ]
    assert "scr" not in d.sim.skyhooks  # the finalizer went once every node was uninstalled
    for name in d.sim.nodes:
        # What is still on the host stays recorded: a Skyhook created again under the name
        # installs the uninstalled package again and leaves the other alone.
        assert d.entries("scr", name) == {"plain|1.0.0": ("config", "complete")}
    d.sim.add_skyhook("scr", {**SEL, **spec})
    before = len(d.sim.created_pods)
    d.run()
    assert {(node, package) for node, package, _ in runs_since(d, before)} == {
        ("node-0000", "tuning|1.0.0"),
        ("node-0001", "tuning|1.0.0"),
    }


def test_deletion_without_enabled_packages_cleans_up_at_once() -> None:
    d = installed(Driver(1, LABELS), {"packages": {"plain": package()}})
    delete(d)
    d.step()
    assert "scr" not in d.sim.skyhooks
    assert [s for _, _, s in d.stages_run()] == ["apply", "config"]


@pytest.mark.parametrize(
    ("annotation", "reason"),
    [
        pytest.param(keys.PAUSE_ANNOTATION, "PausedWithPendingUninstall", id="paused"),
        pytest.param(keys.DISABLE_ANNOTATION, "DisabledWithPendingUninstall", id="disabled"),
    ],
)
def test_deletion_is_blocked_while_paused_or_disabled(annotation: str, reason: str) -> None:
    d = installed(Driver(1, LABELS), {"packages": {"tuning": package(uninstall=dict(ENABLED))}})
    d.sim.skyhooks["scr"]["metadata"]["annotations"][annotation] = "true"
    delete(d)
    before = len(d.sim.created_pods)
    d.run()
    assert runs_since(d, before) == []
    blocked = conditions(d)[keys.CONDITION_DELETION_BLOCKED]
    assert (blocked["status"], blocked["reason"]) == ("True", reason)
    warnings = [e for e in d.sim.events if e.reason == "DeletionBlocked"]
    assert len(warnings) == 1 and warnings[0].type == "Warning"
    del d.sim.skyhooks["scr"]["metadata"]["annotations"][annotation]
    d.run()
    assert "scr" not in d.sim.skyhooks
    assert [s for _, _, s in d.stages_run()][-1] == "uninstall"


def test_deletion_waits_while_a_node_state_is_unreadable() -> None:
    d = installed(Driver(1, LABELS), {"packages": {"tuning": package(uninstall=dict(ENABLED))}})
    d.sim.nodes["node-0000"]["metadata"]["annotations"][keys.node_state_key("scr")] = "{oops"
    delete(d)
    d.run()
    assert "scr" in d.sim.skyhooks
    assert conditions(d)[keys.CONDITION_DELETION_BLOCKED]["reason"] == "MalformedNodeState"


# --- metrics --------------------------------------------------------------------------------------


def test_stage_count_has_uninstall_interrupt_and_drops_to_zero_when_uninstalled() -> None:
    pkg = package(uninstall=dict(ENABLED), interrupt={"type": "reboot"})
    d = installed(Driver(1, LABELS), {"packages": {"kernel": pkg}})

    def stage_counts() -> dict[str, float]:
        (family,) = [
            f
            for f in telemetry.skyhook_families(d.sim.snapshot(d.now))
            if f.name == "skyhook_package_stage_count"
        ]
        return {s.labels[-1]: s.value for s in family.samples}

    assert stage_counts()["uninstall-interrupt"] == 0  # every stage has its series
    request_uninstall(d, "kernel")
    d.step()  # cordon
    d.step()
    d.sim.finish_pod(d.pending_pods()[0])
    d.step()
    assert stage_counts()["uninstall-interrupt"] == 1
    d.sim.reboot("node-0000", "boot-after-uninstall")
    d.run()
    assert set(stage_counts().values()) == {0}  # uninstalled: the package counts no node
