"""Rules that hold across a rollout, checked from watches that record every transition:
the interruption budget, blocking pods before an interrupt, reboots, runtime-required."""

from __future__ import annotations

import json
from typing import Any

from skyhook_dev.harness import node_state, wait_until
from skyhook_schemas import keys

from .helpers import SHELLSCRIPT, Cluster, agentless, pod_stage

RUNTIME_TAINT = {"key": "skyhook.nvidia.com", "value": "runtime-required", "effect": "NoSchedule"}


def busy_nodes(latest_pods: dict[str, dict[str, Any]]) -> set[str]:
    """Nodes with a stage pod whose work is not done: some init container (copy, stage,
    check) has not exited 0 yet. The pause container keeps a finished pod Running until the
    operator deletes it, so the phase alone would count finished work."""
    busy = set()
    for pod in latest_pods.values():
        if pod["metadata"].get("deletionTimestamp"):
            continue
        statuses = pod.get("status", {}).get("initContainerStatuses") or []
        done = len(statuses) == len(pod["spec"]["initContainers"]) and all(
            (s.get("state", {}).get("terminated") or {}).get("exitCode") == 0 for s in statuses
        )
        if not done:
            busy.add(pod["spec"]["nodeName"])
    return busy


def test_budget_of_three_is_never_exceeded_on_ten_nodes(cluster: Cluster) -> None:
    cluster.add_nodes(10)
    recording = cluster.record("budget")
    cluster.skyhook("budget", {"pkg": agentless("1.0.0", sleep=1)}, interruptionBudget={"count": 3})
    cluster.wait_complete("budget", timeout=240)

    # Replay every recorded version: at no point more than 3 nodes in progress, by the
    # operator's own account (status annotation) or by the pods actually on nodes.
    in_progress: dict[str, bool] = {}
    pods: dict[str, dict[str, Any]] = {}
    peak_status = peak_pods = 0
    for _, what, kind, obj in recording.events:
        if what == "node":
            status = obj["metadata"].get("annotations", {}).get(keys.node_status_key("budget"))
            in_progress[obj["metadata"]["name"]] = status == "in_progress"
            peak_status = max(peak_status, sum(in_progress.values()))
        else:
            if kind == "DELETED":
                pods.pop(obj["metadata"]["name"], None)
            else:
                pods[obj["metadata"]["name"]] = obj
            peak_pods = max(peak_pods, len(busy_nodes(pods)))
    assert peak_status == 3, f"peak nodes in_progress {peak_status}"
    assert 1 <= peak_pods <= 3, f"peak nodes with a running stage pod {peak_pods}"
    assert len(recording.of("pod")) > 0


def test_non_interrupt_pod_blocks_the_reboot_until_it_exits(cluster: Cluster) -> None:
    (node,) = cluster.add_nodes(1)
    boot_before = cluster.node(node)["status"]["nodeInfo"]["bootID"]
    blocker = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"critical-{node}",
            "namespace": "default",
            "labels": {"app": "critical"},
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [
                {"name": "work", "image": "docker.io/library/busybox:1", "command": ["sleep", "8"]}
            ],
        },
    }
    cluster.kube.request("POST", cluster.kube.namespaced_path("pods", "default"), blocker)
    wait_until(
        lambda: _pod_phase(cluster, "default", blocker["metadata"]["name"]) == "Running",
        30,
        "blocker running",
    )
    recording = cluster.record(
        "reboot",
        extra={"blocker": ("/api/v1/namespaces/default/pods", {"labelSelector": "app=critical"})},
    )
    reboot_package = {
        "version": "1.0.0",
        "image": SHELLSCRIPT,
        "interrupt": {"type": "reboot"},
        "configMap": {
            "apply.sh": "#!/bin/bash\necho applied >> /skyhook-steps\n",
            "apply_check.sh": "#!/bin/bash\ngrep -q applied /skyhook-steps\n",
            "post_interrupt.sh": "#!/bin/bash\necho post-interrupt >> /skyhook-steps\n",
            "post_interrupt_check.sh": "#!/bin/bash\ngrep -q post-interrupt /skyhook-steps\n",
        },
    }
    cluster.skyhook(
        "reboot",
        {"kernel": reboot_package},
        podNonInterruptLabels={"matchLabels": {"app": "critical"}},
    )
    cluster.wait_complete("reboot", timeout=180)

    # resourceVersions order all writes in the cluster, whichever watch delivered them.
    blocker_exit = min(
        _rv(p)
        for _, _, p in recording.of("blocker")
        if p["status"].get("phase") in ("Succeeded", "Failed")
    )
    interrupt_created = min(
        _rv(p) for _, kind, p in recording.of("pod") if pod_stage(p) == "interrupt"
    )
    assert interrupt_created > blocker_exit, "the interrupt started while the blocking pod ran"
    # Reboot detected: the boot ID changed, post-interrupt ran after it, nothing ran twice.
    assert cluster.node(node)["status"]["nodeInfo"]["bootID"] != boot_before
    assert cluster.host_file(node, "/skyhook-steps") == "applied\npost-interrupt\n"
    assert not cluster.node(node)["spec"].get("unschedulable")
    state = node_state(cluster.node(node), "reboot")
    assert state["kernel|1.0.0"]["stage"] == "post-interrupt"


def test_runtime_required_taint_comes_off_only_when_every_package_is_done(cluster: Cluster) -> None:
    nodes = cluster.add_nodes(2, taints=[RUNTIME_TAINT])
    recording = cluster.record("runtime")
    packages = {
        "first": agentless("1.0.0", sleep=1),
        "second": agentless("1.0.0", sleep=1, dependsOn={"first": "1.0.0"}),
    }
    cluster.skyhook("runtime", packages, runtimeRequired=True)
    cluster.wait_complete("runtime", timeout=120)

    for node in nodes:
        versions = [o for _, k, o in recording.of("node") if o["metadata"]["name"] == node]
        tainted = [_has_runtime_taint(o) for o in versions]
        assert tainted[0], "the node starts tainted"
        assert not tainted[-1], "the taint is gone at the end"
        first_untainted = tainted.index(False)
        assert all(not t for t in tainted[first_untainted:]), "the taint came back"
        state = node_state(versions[first_untainted], "runtime")
        done = {k: (v["stage"], v["state"]) for k, v in state.items()}
        assert done == {
            "first|1.0.0": ("config", "complete"),
            "second|1.0.0": ("config", "complete"),
        }, f"taint removed on {node} while packages were {json.dumps(done)}"


def _has_runtime_taint(node: dict[str, Any]) -> bool:
    return any(
        t["key"] == RUNTIME_TAINT["key"] and t["effect"] == RUNTIME_TAINT["effect"]
        for t in node.get("spec", {}).get("taints") or []
    )


def _rv(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


def _pod_phase(cluster: Cluster, namespace: str, name: str) -> str:
    pod = cluster.kube.request("GET", cluster.kube.namespaced_path("pods", namespace, name))
    return str(pod.get("status", {}).get("phase", ""))
