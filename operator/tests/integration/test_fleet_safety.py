"""Fleet safety on the sandbox (docs/fleet-safety.md), each read back from a watch that records
every version of the nodes and pods: the soak time is honoured between batch starts; an
admin-cordoned node ends cordoned, every other uncordoned; a node that never comes back from a
reboot is marked erroring within the deadline and its batch handled as the policy says; a health
condition that turns bad halts the rollout until it clears."""

from __future__ import annotations

import time
from typing import Any

from skyhook_dev.harness import wait_until
from skyhook_operator.kube.client import MERGE_PATCH
from skyhook_planner.passes import report
from skyhook_planner.rules import deadlines, health, soak
from skyhook_schemas import keys

from .conftest import NAMESPACE
from .helpers import SHELLSCRIPT, Cluster, Recording, agentless, create_policy, ordered


def first_pod_times(recording: Recording) -> dict[str, float]:
    """When the watch first saw a stage pod of ours on each node: the node's start."""
    first: dict[str, float] = {}
    for at, _, pod in recording.of("pod"):
        node = pod["spec"].get("nodeName")
        if node:
            first.setdefault(node, at)
    return first


def condition(cluster: Cluster, scr: str, kind: str) -> dict[str, Any]:
    for found in cluster.get_skyhook(scr).get("status", {}).get("conditions", []):
        if found["type"] == kind:
            return dict(found)
    return {}


def test_the_soak_time_is_honoured_between_batch_starts(
    cluster: Cluster,
    policies: list[str],
) -> None:
    nodes = ordered(cluster, cluster.add_nodes(4))
    name = cluster.label
    policies.append(name)
    create_policy(
        cluster.kube,
        name,
        {
            "default": {"budget": {"percent": 100}, "strategy": {"fixed": {"initialBatch": 2}}},
            "soakTime": "12s",
        },
    )
    recording = cluster.record(name)
    cluster.skyhook(name, {"tools": agentless("1.0.0", sleep=0)}, deploymentPolicy=name)
    cluster.wait_complete(name, timeout=180)

    starts = first_pod_times(recording)
    assert sorted(starts) == sorted(nodes)
    first, second = [starts[n] for n in nodes[:2]], [starts[n] for n in nodes[2:]]
    assert max(first) - min(first) < 5, "the nodes of one batch start together"
    assert min(second) - min(first) >= 12 - 1, (
        f"the second batch started {min(second) - min(first):.1f}s after the first"
    )
    status = cluster.get_skyhook(name)["status"]
    assert set(status["batchStarts"]) == {keys.DEFAULT_COMPARTMENT}
    # The rollout waited on the soak in between: the condition said so, then cleared.
    assert condition(cluster, name, soak.CONDITION_SOAK)["status"] == "False"


def reboot_package() -> dict[str, Any]:
    return {
        "version": "1.0.0",
        "image": SHELLSCRIPT,
        "interrupt": {"type": "reboot"},
        "configMap": {"apply.sh": "#!/bin/bash\ntrue\n"},
    }


def test_an_admin_cordoned_node_ends_cordoned_every_other_uncordoned(cluster: Cluster) -> None:
    """Through a reboot interrupt on every node, an operator restart mid-rollout and the
    Skyhook's deletion: the node cordoned before the rollout is never seen schedulable and ends
    cordoned; the others are cordoned for their reboot and end uncordoned."""
    nodes = cluster.add_nodes(3)
    admin = nodes[0]
    cluster.kube.request(
        "PATCH", cluster.kube.node_path(admin), {"spec": {"unschedulable": True}}, MERGE_PATCH
    )
    boots = {n: cluster.node(n)["status"]["nodeInfo"]["bootID"] for n in nodes}
    name = cluster.label
    recording = cluster.record(name)
    cluster.skyhook(name, {"kernel": reboot_package()}, interruptionBudget={"count": 3})

    marker = keys.cordon_key(name)
    wait_until(
        lambda: any(marker in cluster.node(n)["metadata"].get("annotations", {}) for n in nodes),
        60,
        "a node cordoned by the rollout",
    )
    assert cluster.operator is not None
    cluster.operator.stop()  # a restart mid-rollout: the markers on the nodes are the memory
    cluster.operator = cluster.start_operator()
    cluster.wait_complete(name, timeout=240)

    for node in nodes:
        assert cluster.node(node)["status"]["nodeInfo"]["bootID"] != boots[node], node
    versions = {
        n: [o for _, _, o in recording.of("node") if o["metadata"]["name"] == n] for n in nodes
    }
    assert all(v["spec"].get("unschedulable") for v in versions[admin]), (
        "the administrator's cordon was lifted at some point"
    )
    for node in nodes[1:]:
        assert any(v["spec"].get("unschedulable") for v in versions[node]), node
        assert not cluster.node(node)["spec"].get("unschedulable"), node
    assert cluster.node(admin)["spec"]["unschedulable"] is True
    assert condition(cluster, name, report.CONDITION_ADMIN_CORDONS)["status"] == "True"

    cluster.kube.request("DELETE", cluster.kube.skyhook_path(name))
    wait_until(lambda: cluster._gone(name), 60, "the Skyhook deleted")
    assert cluster.node(admin)["spec"]["unschedulable"] is True
    assert not any(cluster.node(n)["spec"].get("unschedulable") for n in nodes[1:])
    assert all(marker not in cluster.node(n)["metadata"].get("annotations", {}) for n in nodes)


def test_a_node_that_never_comes_back_from_a_reboot_is_marked_erroring_within_the_deadline(
    cluster: Cluster,
    policies: list[str],
) -> None:
    """The first node's reboot hangs (boot id unchanged for ever). rebootDeadline 15s marks it
    erroring, its batch (with the node that came back) is judged failed, failureThreshold 1
    stops the compartment: the next batch never starts. The watch shows when."""
    nodes = ordered(cluster, cluster.add_nodes(4))
    dead = nodes[0]
    cluster.sandbox.hang_reboots(dead)
    boot = cluster.node(dead)["status"]["nodeInfo"]["bootID"]
    name = cluster.label
    policies.append(name)
    strategy = {"fixed": {"initialBatch": 2, "failureThreshold": 1, "safetyLimit": 100}}
    create_policy(
        cluster.kube,
        name,
        {"default": {"budget": {"percent": 100}, "strategy": strategy}, "rebootDeadline": "15s"},
    )
    recording = cluster.record(name)
    cluster.skyhook(name, {"kernel": reboot_package()}, deploymentPolicy=name)

    def compartment() -> dict[str, Any]:
        found = cluster.get_skyhook(name).get("status", {}).get("compartmentStatuses") or {}
        return dict(found.get(keys.DEFAULT_COMPARTMENT) or {})

    wait_until(
        lambda: compartment().get("batchState", {}).get("shouldStop") is True,
        180,
        "the compartment to stop after the failed batch",
    )
    status_key = keys.node_status_key(name)
    assert cluster.node(dead)["metadata"]["labels"][status_key] == "erroring"
    wait_until(
        lambda: cluster.node(nodes[1])["metadata"]["labels"].get(status_key) == "complete",
        60,
        "the other node of the batch to complete",
    )
    interrupt_created = min(
        at
        for at, _, pod in recording.of("pod")
        if pod["spec"].get("nodeName") == dead and keys.INTERRUPT_LABEL in pod["metadata"]["labels"]
    )
    erroring_at = min(
        at
        for at, _, node in recording.of("node")
        if node["metadata"]["name"] == dead
        and node["metadata"].get("labels", {}).get(status_key) == "erroring"
    )
    waited = erroring_at - interrupt_created
    assert 15 - 2 <= waited <= 15 + 15, f"marked erroring {waited:.1f}s after its interrupt"
    assert cluster.node(dead)["status"]["nodeInfo"]["bootID"] == boot, "it never rebooted"
    condition_found = condition(cluster, name, deadlines.CONDITION_DEADLINE)
    assert condition_found["status"] == "True" and dead in condition_found["message"]
    # The rest of the fleet is held as the policy says: nothing of the next batch started.
    started = {pod["spec"].get("nodeName") for _, _, pod in recording.of("pod")}
    assert started <= set(nodes[:2]), started
    cluster.sandbox.hang_reboots(dead, hang=False)


def test_a_health_condition_that_turns_bad_halts_the_rollout_until_it_clears(
    cluster: Cluster,
) -> None:
    """One node at a time through a reboot, gated on the node condition GPUHealthy. The first
    node's condition turns False once it is complete: no further node starts (the one already
    running finishes), the status names the node; when it clears, the rollout completes."""
    nodes = ordered(cluster, cluster.add_nodes(4))
    for node in nodes:
        cluster.sandbox.set_node_condition(node, "GPUHealthy", "True")
    name = cluster.label
    recording = cluster.record(name)
    gate = {"nodeConditions": [{"type": "GPUHealthy"}], "timeout": "10m"}
    cluster.skyhook(
        name, {"kernel": reboot_package()}, interruptionBudget={"count": 1}, healthGate=gate
    )
    status_key = keys.node_status_key(name)
    wait_until(
        lambda: cluster.node(nodes[0])["metadata"]["labels"].get(status_key) == "complete",
        120,
        "the first node to complete",
    )
    cluster.sandbox.set_node_condition(nodes[0], "GPUHealthy", "False")
    wait_until(
        lambda: condition(cluster, name, health.CONDITION_FAILED).get("status") == "True",
        60,
        "the rollout to halt on the health gate",
    )
    halted = condition(cluster, name, health.CONDITION_FAILED)
    assert (
        f"node [{nodes[0]}] turned unhealthy: condition GPUHealthy is False" in (halted["message"])
    )
    # The node already running when it turned bad may finish; nothing after it starts.
    running = {pod["spec"].get("nodeName") for _, _, pod in recording.of("pod")} - {nodes[0]}
    assert len(running) <= 1, running
    wait_until(
        lambda: all(
            cluster.node(n)["metadata"]["labels"].get(status_key) == "complete" for n in running
        ),
        120,
        "the node already running to finish",
    )
    time.sleep(10)  # halted: ten seconds in which no other node may start
    started = {pod["spec"].get("nodeName") for _, _, pod in recording.of("pod")}
    assert started == {nodes[0], *running}, f"{started - {nodes[0], *running}} started while halted"

    cleared_at = time.monotonic()
    cluster.sandbox.set_node_condition(nodes[0], "GPUHealthy", "True")
    cluster.wait_complete(name, timeout=240)
    first = first_pod_times(recording)
    assert all(first[n] >= cleared_at for n in set(nodes) - {nodes[0], *running})
    assert condition(cluster, name, health.CONDITION_FAILED) == {}
    assert not any(cluster.node(n)["spec"].get("unschedulable") for n in nodes)


def test_a_check_pod_gates_each_node_and_a_failed_one_is_run_again_once_deleted(
    cluster: Cluster,
) -> None:
    """The health gate's check pod runs on each node after its reboot, looking at the node's
    own root: the node with the file passes and is released; on the other the check fails,
    the rollout is halted naming it and it stays cordoned, its failed pod kept. Once the file
    is there and the pod deleted, the check runs again and the rollout completes."""
    nodes = ordered(cluster, cluster.add_nodes(2))
    healthy, broken = nodes
    (cluster.sandbox.host_root(healthy) / "etc" / "gpu-ok").write_text("ok\n")
    name = cluster.label
    check = {
        "image": "docker.io/library/busybox:1.36",
        "command": ["sh", "-c", "test -e /host/etc/gpu-ok"],
    }
    cluster.skyhook(
        name,
        {"kernel": reboot_package()},
        interruptionBudget={"count": 1},
        healthGate={"checkPod": check, "timeout": "10m"},
    )
    wait_until(
        lambda: condition(cluster, name, health.CONDITION_FAILED).get("status") == "True",
        180,
        "the second node's check to fail",
    )
    status_key = keys.node_status_key(name)
    assert cluster.node(healthy)["metadata"]["labels"][status_key] == "complete"
    assert not cluster.node(healthy)["spec"].get("unschedulable")
    assert cluster.node(broken)["spec"]["unschedulable"] is True
    message = condition(cluster, name, health.CONDITION_FAILED)["message"]
    assert f"node [{broken}] failed its health check: check pod " in message
    pods = [p for p in cluster.pods(name) if keys.HEALTH_CHECK_LABEL in p["metadata"]["labels"]]
    assert [p["spec"]["nodeName"] for p in pods] == [broken], "the passed check was deleted"
    (failed,) = pods

    (cluster.sandbox.host_root(broken) / "etc" / "gpu-ok").write_text("ok\n")
    cluster.kube.request(
        "DELETE", cluster.kube.namespaced_path("pods", NAMESPACE, failed["metadata"]["name"])
    )
    cluster.wait_complete(name, timeout=120)
    assert not cluster.node(broken)["spec"].get("unschedulable")
    assert condition(cluster, name, health.CONDITION_FAILED) == {}
