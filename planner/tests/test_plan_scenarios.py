"""Whole passes of the planner against the in-memory cluster: what a user would notice."""

from __future__ import annotations

import base64
import copy
import json
from dataclasses import replace
from datetime import timedelta

import pytest

from skyhook_planner.model.actions import CreatePod, EvictPod, PatchNode
from skyhook_planner.sim.driver import SETTINGS, Driver, package, pod_stage
from skyhook_schemas import keys

SEL = {"nodeSelectors": {"matchLabels": {"role": "gpu"}}}
LABELS = {"role": "gpu"}


def installed(driver: Driver, spec: dict, nodes: int = 3) -> Driver:
    driver.sim.add_skyhook("scr", {**SEL, **spec})
    driver.run()
    return driver


def test_install_runs_apply_then_config_on_every_node() -> None:
    d = installed(Driver(3, LABELS), {"packages": {"tuning": package(configMap={"a.sh": "x"})}})
    for node in d.sim.nodes:
        assert [s for _, _, s in d.stages_run(node)] == ["apply", "config"]
        assert d.entries("scr", node) == {"tuning|1.0.0": ("config", "complete")}
        assert d.node_status("scr", node) == "complete"
    status = d.status("scr")
    assert status["status"] == "complete"
    assert status["completeNodes"] == "3/3"
    assert status["packageList"] == "tuning:1.0.0"


def test_unselected_nodes_are_left_alone() -> None:
    d = Driver(2, {"role": "cpu"})
    d.sim.add_skyhook("scr", {**SEL, "packages": {"tuning": package()}})
    d.run()
    assert d.sim.created_pods == []
    assert d.status("scr")["completeNodes"] == "0/0"


def test_config_change_reruns_config_only() -> None:
    d = installed(
        Driver(2, LABELS), {"packages": {"tuning": package(configMap={"a.sh": "1", "b.sh": "1"})}}
    )
    before = len(d.sim.created_pods)
    d.sim.skyhooks["scr"]["spec"]["packages"]["tuning"]["configMap"]["a.sh"] = "2"
    d.run()
    reruns = [pod_stage(p)[2] for p in d.sim.created_pods[before:]]
    assert reruns == ["config", "config"]
    assert d.status("scr")["configUpdates"] == {"tuning": ["a.sh"]}
    cm = d.sim.configmaps[("skyhook", "scr-tuning-1.0.0")]
    assert cm["data"]["a.sh"] == "2"


def test_config_change_with_config_interrupt_runs_interrupt_and_post_interrupt() -> None:
    pkg = package(
        configMap={"a.sh": "1", "b.sh": "1"},
        configInterrupts={"a.sh": {"type": "service", "services": ["containerd"]}},
    )
    d = installed(Driver(1, LABELS), {"packages": {"tuning": pkg}})
    before = len(d.sim.created_pods)
    d.sim.skyhooks["scr"]["spec"]["packages"]["tuning"]["configMap"]["b.sh"] = "2"
    d.run()
    assert [pod_stage(p)[2] for p in d.sim.created_pods[before:]] == ["config"]
    before = len(d.sim.created_pods)
    d.sim.skyhooks["scr"]["spec"]["packages"]["tuning"]["configMap"]["a.sh"] = "2"
    d.run()
    assert [pod_stage(p)[2] for p in d.sim.created_pods[before:]] == [
        "config",
        "interrupt",
        "post-interrupt",
    ]
    assert d.entries("scr", "node-0000") == {"tuning|1.0.0": ("post-interrupt", "complete")}


def test_config_edit_waits_for_running_pods() -> None:
    d = Driver(1, LABELS)
    d.sim.add_skyhook("scr", {**SEL, "packages": {"tuning": package(configMap={"a.sh": "1"})}})
    d.step()  # apply pod created, still running
    d.sim.skyhooks["scr"]["spec"]["packages"]["tuning"]["configMap"]["a.sh"] = "2"
    d.step()
    assert d.sim.configmaps[("skyhook", "scr-tuning-1.0.0")]["data"]["a.sh"] == "1"
    d.run()
    assert d.sim.configmaps[("skyhook", "scr-tuning-1.0.0")]["data"]["a.sh"] == "2"
    assert [s for _, _, s in d.stages_run()] == ["apply", "config"]


def test_upgrade_runs_upgrade_then_config() -> None:
    d = installed(Driver(1, LABELS), {"packages": {"tuning": package("1.0.0")}})
    d.sim.skyhooks["scr"]["spec"]["packages"]["tuning"]["version"] = "1.1.0"
    before = len(d.sim.created_pods)
    d.run()
    assert [pod_stage(p)[1:] for p in d.sim.created_pods[before:]] == [
        ("tuning|1.1.0", "upgrade"),
        ("tuning|1.1.0", "config"),
    ]
    assert d.entries("scr", "node-0000") == {"tuning|1.1.0": ("config", "complete")}


def test_downgrade_installs_the_older_version_and_keeps_the_newer_entry() -> None:
    d = installed(Driver(1, LABELS), {"packages": {"tuning": package("2.0.0")}})
    d.sim.skyhooks["scr"]["spec"]["packages"]["tuning"]["version"] = "1.0.0"
    before = len(d.sim.created_pods)
    d.run()
    assert [pod_stage(p)[1:] for p in d.sim.created_pods[before:]] == [
        ("tuning|1.0.0", "apply"),
        ("tuning|1.0.0", "config"),
    ]
    # The newer version's entry stays: its files may remain on the host.
    assert d.entries("scr", "node-0000") == {
        "tuning|1.0.0": ("config", "complete"),
        "tuning|2.0.0": ("config", "complete"),
    }
    assert d.status("scr")["status"] == "complete"


def test_removed_package_is_left_installed() -> None:
    d = installed(Driver(2, LABELS), {"packages": {"tuning": package(), "extra": package()}})
    del d.sim.skyhooks["scr"]["spec"]["packages"]["extra"]
    before = len(d.sim.created_pods)
    d.run()
    assert d.sim.created_pods[before:] == []  # nothing is uninstalled unless asked
    assert d.entries("scr", "node-0000") == {
        "extra|1.0.0": ("config", "complete"),
        "tuning|1.0.0": ("config", "complete"),
    }
    assert d.status("scr")["packageList"] == "tuning:1.0.0"
    assert d.status("scr")["status"] == "complete"


def test_depends_on_runs_dependency_first() -> None:
    d = installed(
        Driver(1, LABELS),
        {"packages": {"base": package(), "app": package(dependsOn={"base": "1.0.0"})}},
    )
    order = [pod_stage(p)[1:] for p in d.sim.created_pods]
    assert order.index(("app|1.0.0", "apply")) > order.index(("base|1.0.0", "config"))


def test_budget_of_three_holds_on_ten_nodes() -> None:
    d = Driver(10, LABELS)
    d.sim.add_skyhook(
        "scr", {**SEL, "interruptionBudget": {"count": 3}, "packages": {"tuning": package()}}
    )
    peak = []

    def watch(driver: Driver) -> None:
        running = [p for p in driver.sim.pods.values() if p["status"]["phase"] != "Succeeded"]
        busy = {n for (n, _, _) in (pod_stage(p) for p in running)}
        peak.append(len(busy))
        assert driver.status("scr").get("nodesInProgress", 0) <= 3

    # finish one pod per pass, so nodes finish one at a time and slots refill one by one
    d.run(finish=lambda pods: pods[:1], on_step=watch)
    assert max(peak) == 3
    assert d.status("scr")["completeNodes"] == "10/10"


def test_a_freed_slot_is_filled_in_the_same_pass() -> None:
    d = Driver(4, LABELS)
    d.sim.add_skyhook(
        "scr", {**SEL, "interruptionBudget": {"count": 1}, "packages": {"tuning": package()}}
    )
    d.step()  # node-0000 apply
    d.sim.finish_pod(d.pending_pods()[0])
    d.step()  # node-0000 config
    d.sim.finish_pod(d.pending_pods()[0])
    result = d.step()  # node-0000 completes; node-0001 starts in this same plan
    created = [pod_stage(a.manifest)[0] for a in result.actions if isinstance(a, CreatePod)]
    assert created == ["node-0001"]


def test_interrupt_waits_for_non_interrupt_pods_before_it_drains() -> None:
    spec = {
        **SEL,
        "podNonInterruptLabels": {"matchLabels": {"critical": "yes"}},
        "packages": {"kernel": package(interrupt={"type": "reboot"})},
    }
    d = Driver(1, LABELS)
    d.sim.add_pod(_workload("critical-job", {"critical": "yes"}))
    d.sim.add_pod(_workload("web", {"app": "web"}))
    d.sim.add_skyhook("scr", spec)
    first = d.step()
    assert any(isinstance(a, PatchNode) and a.unschedulable for a in first.actions)
    assert d.sim.nodes["node-0000"]["metadata"]["annotations"][keys.cordon_key("scr")] == "true"
    assert first.requeue_after is not None
    for result in [first] + [d.step() for _ in range(3)]:
        assert not any(isinstance(a, EvictPod | CreatePod) for a in result.actions), (
            "nothing is evicted or started while the critical pod runs"
        )
        reasons = result.waiting[("scr", "node-0000")]
        assert any("default/critical-job" in r.message for r in reasons), reasons
    assert ("default", "web") in d.sim.pods, "not displaced while the interrupt waits"
    assert d.sim.nodes["node-0000"]["spec"]["unschedulable"] is True
    del d.sim.pods[("default", "critical-job")]
    drained = d.step()
    assert [(a.namespace, a.name) for a in drained.actions if isinstance(a, EvictPod)] == [
        ("default", "web")
    ]
    d.run()
    assert [s for _, _, s in d.stages_run()] == ["apply", "config", "interrupt", "post-interrupt"]
    node = d.sim.nodes["node-0000"]
    assert node["spec"]["unschedulable"] is False
    assert keys.cordon_key("scr") not in node["metadata"]["annotations"]


def test_an_admin_cordon_is_left_in_place() -> None:
    d = Driver(1, LABELS)
    d.sim.nodes["node-0000"]["spec"]["unschedulable"] = True
    d.sim.add_skyhook("scr", {**SEL, "packages": {"kernel": package(interrupt={"type": "reboot"})}})
    d.run()
    assert d.node_status("scr", "node-0000") == "complete"
    assert d.sim.nodes["node-0000"]["spec"]["unschedulable"] is True


def test_one_merged_interrupt_per_node() -> None:
    spec = {
        **SEL,
        "packages": {
            "alpha": package(interrupt={"type": "service", "services": ["cron"]}),
            "beta": package(interrupt={"type": "service", "services": ["containerd", "foobar"]}),
        },
    }
    d = installed(Driver(1, LABELS), spec)
    interrupt_pods = [p for p in d.sim.created_pods if pod_stage(p)[2] == "interrupt"]
    assert len(interrupt_pods) == 1
    payload = interrupt_pods[0]["spec"]["initContainers"][0]["args"][3]
    assert (
        base64.b64decode(payload)
        == b'{"type":"service_restart","services":["containerd","cron","foobar"]}'
    )
    assert d.entries("scr", "node-0000") == {
        "alpha|1.0.0": ("post-interrupt", "complete"),
        "beta|1.0.0": ("post-interrupt", "complete"),
    }


def _two_interrupts(alpha_config_fails: bool = False) -> tuple[Driver, list[str]]:
    """`alpha` (a service restart) and `bravo` (a reboot) on one node, bravo's stages finishing
    first: alpha's pods finish only once bravo is due for its interrupt; `alpha_config_fails`:
    its first config attempt fails. Returns the driver and the packages of the interrupt pods
    created, in order."""
    spec = {
        **SEL,
        "packages": {
            "alpha": package(interrupt={"type": "service", "services": ["cron"]}),
            "bravo": package(interrupt={"type": "reboot"}),
        },
    }
    d = Driver(1, LABELS)
    d.sim.add_skyhook("scr", spec)
    bravo_due: list[bool] = []
    failed: list[str] = []

    def finish(pending: list[tuple[str, str]]) -> list[tuple[str, str]]:
        if d.entries("scr", "node-0000").get("bravo|1.0.0") == ("config", "complete"):
            bravo_due.append(True)
        return [k for k in pending if bravo_due or pod_stage(d.sim.pods[k])[1] != "alpha|1.0.0"]

    def exit_code(pod: dict) -> int:
        if alpha_config_fails and not failed and pod_stage(pod)[1:] == ("alpha|1.0.0", "config"):
            failed.append(pod["metadata"]["name"])
            return 1
        return 0

    d.run(finish=finish, exit_code=exit_code)
    interrupts = [pod_stage(p)[1] for p in d.sim.created_pods if pod_stage(p)[2] == "interrupt"]
    return d, interrupts


def test_an_interrupt_waits_for_the_earlier_stages_of_another_interrupt_package() -> None:
    # bravo is due for its reboot while alpha has config still to run: alpha's config runs
    # first, then one reboot covers both, rather than a reboot and then a service restart.
    d, interrupts = _two_interrupts()
    assert interrupts == ["bravo|1.0.0"]
    assert d.entries("scr", "node-0000") == {
        "alpha|1.0.0": ("post-interrupt", "complete"),
        "bravo|1.0.0": ("post-interrupt", "complete"),
    }


def test_an_interrupt_does_not_wait_for_a_package_retrying_a_failed_stage() -> None:
    # alpha's config fails and backs off: bravo's reboot goes meanwhile, alpha's own restart
    # once its config succeeds.
    d, interrupts = _two_interrupts(alpha_config_fails=True)
    assert interrupts == ["bravo|1.0.0", "alpha|1.0.0"]
    assert d.entries("scr", "node-0000") == {
        "alpha|1.0.0": ("post-interrupt", "complete"),
        "bravo|1.0.0": ("post-interrupt", "complete"),
    }


def test_reboot_is_detected_by_boot_id() -> None:
    d = Driver(1, LABELS)
    d.sim.add_skyhook("scr", {**SEL, "packages": {"kernel": package(interrupt={"type": "reboot"})}})
    while not any(pod_stage(p)[2] == "interrupt" for p in d.sim.pods.values()):
        d.step()
        for key in d.pending_pods():
            if pod_stage(d.sim.pods[key])[2] != "interrupt":
                d.sim.finish_pod(key)
    # the node reboots: a new boot id; the interrupt pod's container died with the node
    d.sim.nodes["node-0000"]["status"]["nodeInfo"]["bootID"] = "boot-after-reboot"
    key = d.pending_pods()[0]
    d.sim.pods[key]["status"] = {
        "phase": "Running",
        "initContainerStatuses": [
            {
                "name": "interrupt",
                "restartCount": 0,
                "state": {"waiting": {"reason": "ContainerCreating"}},
            }
        ],
    }
    d.run()
    assert d.entries("scr", "node-0000") == {"kernel|1.0.0": ("post-interrupt", "complete")}
    assert [s for _, _, s in d.stages_run()].count("interrupt") == 1


def test_runtime_required_taint_removed_only_when_all_done() -> None:
    d = Driver(1, LABELS)
    d.sim.nodes["node-0000"]["spec"]["taints"] = [
        {"key": "skyhook.nvidia.com", "value": "runtime-required", "effect": "NoSchedule"}
    ]
    d.sim.add_skyhook(
        "scr", {**SEL, "runtimeRequired": True, "packages": {"alpha": package(), "beta": package()}}
    )

    def still_tainted_while_incomplete(driver: Driver) -> None:
        taints = driver.sim.nodes["node-0000"]["spec"].get("taints", [])
        if driver.node_status("scr", "node-0000") != "complete":
            assert taints, "taint removed before every package completed"

    d.run(finish=lambda pods: pods[:1], on_step=still_tainted_while_incomplete)
    assert d.sim.nodes["node-0000"]["spec"]["taints"] == []


def test_untolerated_taint_blocks_node() -> None:
    d = Driver(1, LABELS)
    d.sim.nodes["node-0000"]["spec"]["taints"] = [
        {"key": "dedicated", "value": "x", "effect": "NoSchedule"}
    ]
    d.sim.add_skyhook("scr", {**SEL, "packages": {"alpha": package()}})
    d.run()
    assert d.sim.created_pods == []
    assert d.node_status("scr", "node-0000") == "blocked"
    d.sim.skyhooks["scr"]["spec"]["additionalTolerations"] = [
        {"key": "dedicated", "operator": "Exists"}
    ]
    d.run()
    assert d.node_status("scr", "node-0000") == "complete"


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        pytest.param(keys.PAUSE_ANNOTATION, "paused", id="paused"),
        pytest.param(keys.DISABLE_ANNOTATION, "disabled", id="disabled"),
    ],
)
def test_pause_and_disable_start_nothing(annotation: str, expected: str) -> None:
    d = Driver(2, LABELS)
    d.sim.add_skyhook("scr", {**SEL, "packages": {"alpha": package()}}, {annotation: "true"})
    d.run()
    assert d.sim.created_pods == []
    assert d.status("scr")["status"] == expected
    del d.sim.skyhooks["scr"]["metadata"]["annotations"][annotation]
    d.run()
    assert d.status("scr")["status"] == "complete"


def test_priority_orders_skyhooks_per_node() -> None:
    d = Driver(1, LABELS)
    d.sim.add_skyhook("second", {**SEL, "priority": 2, "packages": {"beta": package()}})
    d.sim.add_skyhook("first", {**SEL, "priority": 1, "packages": {"alpha": package()}})
    d.run()
    order = [pod_stage(p)[1] for p in d.sim.created_pods]
    assert order == ["alpha|1.0.0", "alpha|1.0.0", "beta|1.0.0", "beta|1.0.0"]


def test_failed_stage_is_erroring_then_retried_with_backoff() -> None:
    d = Driver(1, LABELS)
    d.sim.add_skyhook("scr", {**SEL, "packages": {"alpha": package()}})
    d.step()
    key = d.pending_pods()[0]
    d.sim.finish_pod(key, 1, at=d.now.strftime("%Y-%m-%dT%H:%M:%SZ"), restarts=2, failed_phase=True)
    result = d.step()
    # The package's entry says the attempt failed; the node is still in progress: its stage
    # has retries left.
    assert d.entries("scr", "node-0000") == {"alpha|1.0.0": ("apply", "erroring")}
    assert d.node_status("scr", "node-0000") == "in_progress"
    assert d.status("scr")["status"] == "in_progress"
    assert key in d.sim.pods, "kept for its logs"
    assert result.requeue_after == pytest.approx(1.0)  # the first retry: the base backoff
    for _ in range(10):  # well within the failed pod's retention
        d.now += timedelta(seconds=1)
        d.step()
        for pending in d.pending_pods():
            d.sim.finish_pod(pending, 0, at=d.now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    assert d.entries("scr", "node-0000") == {"alpha|1.0.0": ("config", "complete")}
    assert [s for _, _, s in d.stages_run()] == ["apply", "apply", "config"]
    assert key in d.sim.pods, "the failed attempt is still there to read"
    retry = d.sim.created_pods[1]
    assert retry["metadata"]["name"] != key[1]
    assert retry["metadata"]["annotations"][keys.ATTEMPT_ANNOTATION] == "1"


def test_restart_resumes_without_rerunning_anything() -> None:
    """Planning twice from the same cluster state (an operator restart) adds nothing."""
    d = Driver(3, LABELS)
    d.sim.add_skyhook(
        "scr",
        {
            **SEL,
            "interruptionBudget": {"count": 2},
            "packages": {"alpha": package(), "beta": package()},
        },
    )
    d.step()
    d.sim.finish_pod(d.pending_pods()[0])
    d.step()
    again = d.step()  # nothing finished in between: a restarted operator sees the same state
    assert not any(isinstance(a, CreatePod) for a in again.actions)
    d.run()
    runs = d.stages_run()
    assert len(runs) == len(set(runs)), "a stage ran twice on a node"


def test_deleting_a_skyhook_cleans_up() -> None:
    d = Driver(2, LABELS)
    d.sim.add_skyhook(
        "scr",
        {**SEL, "packages": {"alpha": package(configMap={"x": "1"}, interrupt={"type": "noop"})}},
    )
    d.step()
    d.step()
    d.sim.skyhooks["scr"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    d.step()
    assert "scr" not in d.sim.skyhooks
    assert d.sim.pods == {}
    assert d.sim.configmaps == {}
    kept = {keys.node_state_key("scr"), keys.version_key("scr")}  # the package is still there
    for node in d.sim.nodes.values():
        annotations = node["metadata"]["annotations"]
        assert {k for k in annotations if k.endswith("_scr")} == kept
        assert not [k for k in node["metadata"]["labels"] if k.endswith("_scr")]
        assert not node["spec"].get("unschedulable")
        assert not [c for c in node["status"]["conditions"] if "/scr/" in c["type"]]


def test_invalid_spec_is_reported_not_run() -> None:
    d = Driver(1, LABELS)
    d.sim.add_skyhook("scr", {**SEL, "packages": {"alpha": package("1.x")}})
    d.run()
    assert d.sim.created_pods == []
    status = d.status("scr")
    assert status["status"] == "blocked"
    message = next(c["message"] for c in status["conditions"] if c["type"].endswith("SpecInvalid"))
    assert "spec.packages.alpha.version: '1.x' is not a semver version" in message


def test_spec_edit_restarts_a_running_pod() -> None:
    d = Driver(1, LABELS)
    d.sim.add_skyhook(
        "scr", {**SEL, "packages": {"alpha": package(env=[{"name": "X", "value": "1"}])}}
    )
    d.step()
    running = d.pending_pods()[0]
    d.sim.skyhooks["scr"]["spec"]["packages"]["alpha"]["env"] = [{"name": "X", "value": "2"}]
    d.step()
    assert running not in d.sim.pods
    d.step()
    env = next(iter(d.sim.pods.values()))["spec"]["initContainers"][1]["env"]
    assert env[0] == {"name": "X", "value": "2"}


def _workload(name: str, labels: dict[str, str]) -> dict:
    return {
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"nodeName": "node-0000"},
        "status": {"phase": "Running"},
    }


def test_eviction_targets_only_evictable_pods() -> None:
    d = Driver(1, LABELS)
    d.sim.add_pod(_workload("web", {"app": "web"}))
    ds = _workload("ds", {})
    ds["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "x", "controller": True}]
    d.sim.add_pod(ds)
    d.sim.add_skyhook("scr", {**SEL, "packages": {"alpha": package(interrupt={"type": "reboot"})}})
    evicted = set()
    for _ in range(3):
        evicted |= {a.name for a in d.step().actions if isinstance(a, EvictPod)}
    assert evicted == {"web"}


def test_deployment_policy_fails_closed() -> None:
    d = Driver(1, LABELS)
    d.sim.add_skyhook(
        "scr", {**SEL, "deploymentPolicy": "rolling", "packages": {"alpha": package()}}
    )
    d.run()
    assert d.sim.created_pods == []
    status = d.status("scr")
    assert status["status"] == "blocked"
    assert any(c["reason"] == "DeploymentPolicyNotFound" for c in status["conditions"])


def test_reapply_on_reboot_resets_nodes_but_not_for_our_own_reboot() -> None:
    d = Driver(1, LABELS, settings=replace(SETTINGS, reapply_on_reboot=True))
    d.sim.add_skyhook("scr", {**SEL, "packages": {"kernel": package(interrupt={"type": "reboot"})}})
    while not any(pod_stage(p)[2] == "interrupt" for p in d.sim.pods.values()):
        d.step()
        for key in d.pending_pods():
            if pod_stage(d.sim.pods[key])[2] != "interrupt":
                d.sim.finish_pod(key)
    d.sim.nodes["node-0000"]["status"]["nodeInfo"]["bootID"] = "after-our-reboot"
    d.run()
    assert [s for _, _, s in d.stages_run()] == ["apply", "config", "interrupt", "post-interrupt"]
    d.sim.nodes["node-0000"]["status"]["nodeInfo"]["bootID"] = "someone-else-rebooted"
    d.run()
    assert [s for _, _, s in d.stages_run()][4:] == [
        "apply",
        "config",
        "interrupt",
        "post-interrupt",
    ]


def test_half_done_nodes_finish_before_fresh_ones_start() -> None:
    d = Driver(3, LABELS)
    d.sim.add_skyhook(
        "scr", {**SEL, "interruptionBudget": {"count": 1}, "packages": {"alpha": package()}}
    )
    # node-0002 was left half-way: its apply is recorded as due, but nothing holds a slot
    d.sim.nodes["node-0002"]["metadata"]["annotations"][keys.node_state_key("scr")] = (
        '{"alpha|1.0.0":{"name":"alpha","version":"1.0.0","image":"x","stage":"config","state":"in_progress"}}'
    )
    d.step()
    assert [pod_stage(p)[0] for p in d.sim.created_pods] == ["node-0002"]


def test_serial_runs_one_stage_pod_at_a_time_per_node() -> None:
    d = Driver(1, LABELS)
    d.sim.add_skyhook(
        "scr", {**SEL, "serial": True, "packages": {"alpha": package(), "beta": package()}}
    )
    most = 0

    def watch(driver: Driver) -> None:
        nonlocal most
        running = [p for p in driver.sim.pods.values() if p["status"]["phase"] != "Succeeded"]
        most = max(most, len(running))

    d.run(on_step=watch)
    assert most == 1
    assert d.status("scr")["status"] == "complete"


def test_auto_taint_marks_new_nodes_once() -> None:
    d = Driver(2, LABELS)
    d.sim.nodes["node-0001"]["metadata"]["annotations"]["skyhook.nvidia.com/status_other"] = (
        "complete"
    )
    spec = {
        **SEL,
        "runtimeRequired": True,
        "autoTaintNewNodes": True,
        "packages": {"alpha": package()},
    }
    d.sim.add_skyhook("scr", spec)
    first = d.step()
    tainted = {a.name for a in first.actions if isinstance(a, PatchNode) and a.add_taints}
    assert tainted == {"node-0000"}, "a node with skyhook annotations is not new"
    assert (
        d.sim.nodes["node-0000"]["metadata"]["annotations"][
            keys.auto_taint_key("skyhook.nvidia.com")
        ]
        == "true"
    )
    d.run()
    assert d.sim.nodes["node-0000"]["spec"]["taints"] == [], "removed again once complete"


def test_ignored_node_is_blocked() -> None:
    d = Driver(2, LABELS)
    d.sim.nodes["node-0001"]["metadata"]["labels"][keys.IGNORE_LABEL] = "true"
    d.sim.add_skyhook("scr", {**SEL, "packages": {"alpha": package()}})
    d.run()
    assert d.node_status("scr", "node-0001") == "blocked"
    assert {pod_stage(p)[0] for p in d.sim.created_pods} == {"node-0000"}
    ignored = next(
        c for c in d.status("scr")["conditions"] if c["type"] == keys.CONDITION_NODES_IGNORED
    )
    assert ignored["status"] == "True" and "node-0001" in ignored["message"]


def test_build_metadata_change_renames_without_rerunning() -> None:
    d = installed(Driver(1, LABELS), {"packages": {"alpha": package("1.0.0+build1")}})
    before = len(d.sim.created_pods)
    d.sim.skyhooks["scr"]["spec"]["packages"]["alpha"]["version"] = "1.0.0+build2"
    d.run()
    assert len(d.sim.created_pods) == before
    assert d.entries("scr", "node-0000") == {"alpha|1.0.0+build2": ("config", "complete")}


def test_node_leaving_the_selector_is_uncordoned() -> None:
    d = Driver(1, LABELS)
    d.sim.add_skyhook("scr", {**SEL, "packages": {"kernel": package(interrupt={"type": "reboot"})}})
    d.step()
    assert d.sim.nodes["node-0000"]["spec"]["unschedulable"] is True
    d.sim.nodes["node-0000"]["metadata"]["labels"]["role"] = "cpu"
    d.step()
    assert d.sim.nodes["node-0000"]["spec"]["unschedulable"] is False


def test_removed_package_configmap_is_deleted() -> None:
    d = installed(
        Driver(1, LABELS), {"packages": {"alpha": package(configMap={"a": "1"}), "beta": package()}}
    )
    assert ("skyhook", "scr-alpha-1.0.0") in d.sim.configmaps
    del d.sim.skyhooks["scr"]["spec"]["packages"]["alpha"]
    d.run()
    assert ("skyhook", "scr-alpha-1.0.0") not in d.sim.configmaps


def test_version_annotations_name_the_running_operator() -> None:
    settings = replace(SETTINGS, operator_version="v1.4.2")
    d = Driver(2, LABELS, settings=settings)
    d.sim.add_skyhook("scr", {**SEL, "packages": {"tuning": package()}})
    d.run()
    assert d.sim.skyhooks["scr"]["metadata"]["annotations"][keys.SKYHOOK_VERSION_ANNOTATION] == (
        "v1.4.2"
    )
    for node in d.sim.nodes.values():
        assert node["metadata"]["annotations"][keys.version_key("scr")] == "v1.4.2"


def test_an_operator_upgrade_rewrites_the_skyhook_version_only() -> None:
    d = installed(Driver(1, LABELS), {"packages": {"tuning": package()}})
    d.settings = replace(SETTINGS, operator_version="v2.0.0")
    d.run()
    annotations = d.sim.skyhooks["scr"]["metadata"]["annotations"]
    assert annotations[keys.SKYHOOK_VERSION_ANNOTATION] == "v2.0.0"
    node = d.sim.nodes["node-0000"]["metadata"]["annotations"]
    assert node[keys.version_key("scr")] == SETTINGS.operator_version  # the one it was rolled by


def test_retry_backoff_follows_the_settings() -> None:
    slow = replace(SETTINGS, retry_backoff_base_s=30.0, retry_backoff_max_s=30.0)
    d = Driver(1, LABELS, settings=slow)
    d.sim.add_skyhook("scr", {**SEL, "packages": {"tuning": package()}})
    d.step()
    (pod,) = d.pending_pods()
    d.sim.finish_pod(pod, 1, at=d.now.strftime("%Y-%m-%dT%H:%M:%SZ"), failed_phase=True)
    waiting = d.step()
    assert waiting.requeue_after == pytest.approx(30.0)


def test_a_shorthand_version_runs_as_upstream_runs_it_with_one_warning_event() -> None:
    d = Driver(1, LABELS)
    d.sim.add_skyhook("scr", {**SEL, "packages": {"alpha": package("1.2")}})
    d.run()
    assert d.entries("scr", "node-0000") == {"alpha|1.2": ("config", "complete")}
    assert d.sim.created_pods[0]["spec"]["initContainers"][0]["image"].endswith(":1.2")
    status = d.status("scr")
    assert status["status"] == "complete"
    warning = next(c for c in status["conditions"] if c["type"].endswith("/SpecWarning"))
    assert warning["status"] == "True"
    assert "version '1.2' is not strict SemVer" in warning["message"]
    warnings = [e for e in d.sim.events if e.reason == "SpecWarning"]
    assert len(warnings) == 1 and warnings[0].type == "Warning"
    # Written as strict SemVer, the same version: nothing reruns, the warning clears.
    before = len(d.sim.created_pods)
    d.sim.skyhooks["scr"]["spec"]["packages"]["alpha"]["version"] = "1.2.0"
    d.run()
    assert d.entries("scr", "node-0000") == {"alpha|1.2.0": ("config", "complete")}
    assert len(d.sim.created_pods) == before
    cleared = next(c for c in d.status("scr")["conditions"] if c["type"].endswith("/SpecWarning"))
    assert cleared["status"] == "False"


def test_a_copy_of_our_pod_in_another_namespace_is_not_a_stage_result() -> None:
    d = Driver(1, LABELS)
    d.sim.add_skyhook("scr", {**SEL, "packages": {"tuning": package()}})
    d.step()
    [(namespace, name)] = d.pending_pods()
    forged = copy.deepcopy(d.sim.pods[(namespace, name)])
    forged["metadata"].update(namespace="default", name=f"{name}-copy")
    d.sim.add_pod(forged)
    d.sim.finish_pod(("default", f"{name}-copy"), 0, at="2026-01-01T00:00:00Z")
    d.step()
    assert d.entries("scr", "node-0000") == {"tuning|1.0.0": ("apply", "in_progress")}
    assert ("default", f"{name}-copy") in d.sim.pods, "an ordinary pod: not ours to delete"


def test_each_stage_pod_finds_its_node_state_in_the_metadata_configmap() -> None:
    """The node-metadata ConfigMap is written before each stage pod with the node's labels and
    annotations as the pod will find them: the nodeState records the stage the pod runs."""
    d = Driver(2, LABELS)
    d.sim.add_skyhook("scr", {**SEL, "packages": {"tuning": package(configMap={"a.sh": "x"})}})
    seen: list[tuple[str, str]] = []

    def check(driver: Driver) -> None:
        for pod in driver.sim.created_pods[len(seen) :]:
            node, key, stage = pod_stage(pod)
            name = keys.node_metadata_configmap_name("scr", node)
            data = driver.sim.configmaps[("skyhook", name)]["data"]
            annotations = json.loads(data["annotations.json"])
            entries = json.loads(annotations[keys.node_state_key("scr")])
            assert (entries[key]["stage"], entries[key]["state"]) == (stage, "in_progress")
            assert json.loads(data["labels.json"])[keys.node_status_key("scr")] == "in_progress"
            seen.append((node, stage))

    d.run(on_step=check)
    assert sorted(seen) == [(n, s) for n in sorted(d.sim.nodes) for s in ("apply", "config")]


def _running(pod: dict) -> None:
    """The kubelet started the pod's first init container: its agent is at work."""
    first = pod["spec"]["initContainers"][0]["name"]
    pod["status"] = {
        "phase": "Pending",
        "initContainerStatuses": [{"name": first, "restartCount": 0, "state": {"running": {}}}],
    }


@pytest.mark.parametrize("version", ["1.0.0", "1.1.0"])
def test_nothing_of_a_package_starts_while_a_deleted_pod_of_it_still_runs(version: str) -> None:
    """A deleted stage pod's agent finishes the step it is running: the next stage pod of the
    package, for the same version or another, waits until the old pod has stopped."""
    d = Driver(1, LABELS)
    d.sim.add_skyhook("scr", {**SEL, "packages": {"tuning": package("1.0.0")}})
    d.step()
    (key,) = d.pending_pods()
    old = d.sim.pods[key]
    _running(old)
    old["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"  # deleted, still stopping
    d.sim.skyhooks["scr"]["spec"]["packages"]["tuning"]["version"] = version
    before = len(d.sim.created_pods)
    for _ in range(3):
        d.step()
    assert d.sim.created_pods[before:] == []
    del d.sim.pods[key]  # the old pod has stopped and is gone
    d.step()
    (started,) = d.sim.created_pods[before:]
    assert pod_stage(started)[1] == f"tuning|{version}"
