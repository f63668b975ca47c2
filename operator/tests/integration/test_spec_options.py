"""Spec and policy options the planner's tests prove, here on the sandbox against the real
operator, each read back from a watch that recorded every node and pod version:
`matchExpressions` selectors, `serial`, `autoTaintNewNodes`, `runtimeRequiredCordonAfter`,
`resetBatchStateOnCompletion`, a `batchThreshold` below 100 and a topology of
`oneDomainAtATime`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from skyhook_dev.harness import wait_until
from skyhook_operator.kube.client import MERGE_PATCH, ApiError
from skyhook_schemas import keys

from .helpers import (
    TEST_LABEL,
    Cluster,
    Recording,
    agentless,
    batch_status,
    create_policy,
    failing_on,
    ordered,
    rv,
)

RUNTIME_TAINT = ("skyhook.nvidia.com", "NoSchedule")
ZONE = "skyhook.nvidia.com/test-zone"


def label_nodes(cluster: Cluster, labels: dict[str, dict[str, str]]) -> None:
    for node, wanted in labels.items():
        body = {"metadata": {"labels": wanted}}
        cluster.kube.request("PATCH", cluster.kube.node_path(node), body, MERGE_PATCH)


def running_pods(recording: Recording) -> Iterator[dict[str, list[str]]]:
    """After each recorded pod version: per node, the stage pods whose steps have not all
    ended yet (what holds the node's work)."""
    pods: dict[str, dict[str, Any]] = {}
    for _, kind, pod in recording.of("pod"):
        name = pod["metadata"]["name"]
        if kind == "DELETED":
            pods.pop(name, None)
        else:
            pods[name] = pod
        running: dict[str, list[str]] = {}
        for current in pods.values():
            if current["metadata"].get("deletionTimestamp"):
                continue
            statuses = current.get("status", {}).get("initContainerStatuses") or []
            ended = len(statuses) == len(current["spec"]["initContainers"]) and all(
                "terminated" in (s.get("state") or {}) for s in statuses
            )
            if not ended:
                running.setdefault(current["spec"]["nodeName"], []).append(
                    current["metadata"]["name"]
                )
        yield running


def node_versions(recording: Recording, node: str) -> list[dict[str, Any]]:
    return [obj for _, _, obj in recording.of("node") if obj["metadata"]["name"] == node]


def tainted(obj: dict[str, Any]) -> bool:
    """Does this version of a node carry the runtime-required taint?"""
    return any((t["key"], t["effect"]) == RUNTIME_TAINT for t in obj["spec"].get("taints") or ())


def held_until_done(cluster: Cluster, name: str) -> None:
    """A runtimeRequired Skyhook that taints new nodes and cordons them as the taint comes off,
    complete on the test's nodes."""
    cluster.skyhook(
        name,
        {"pkg": agentless("1.0.0", sleep=1)},
        runtimeRequired=True,
        autoTaintNewNodes=True,
        runtimeRequiredCordonAfter=True,
    )
    cluster.wait_complete(name, timeout=120)


def in_progress_peaks(recording: Recording, scr: str, groups: Iterable[set[str]]) -> list[int]:
    """For each group of nodes: the most of them in progress at once, by the status label."""
    status: dict[str, bool] = {}
    peaks = [0 for _ in groups]
    groups = list(groups)
    for _, _, obj in recording.of("node"):
        labels = obj["metadata"].get("labels") or {}
        status[obj["metadata"]["name"]] = labels.get(keys.node_status_key(scr)) == "in_progress"
        for i, group in enumerate(groups):
            peaks[i] = max(peaks[i], sum(status.get(n, False) for n in group))
    return peaks


def test_match_expressions_select_only_the_nodes_they_name(cluster: Cluster) -> None:
    first, second, third = cluster.add_nodes(3)
    label_nodes(cluster, {first: {ZONE: "a"}, second: {ZONE: "b"}, third: {ZONE: "c"}})
    recording = cluster.record("expressions")
    selector = {
        "matchLabels": {TEST_LABEL: cluster.label},
        "matchExpressions": [{"key": ZONE, "operator": "NotIn", "values": ["c"]}],
    }
    cluster.skyhook("expressions", {"pkg": agentless("1.0.0", sleep=0.5)}, nodeSelectors=selector)
    cluster.wait_complete("expressions", timeout=120, nodes=[first, second])

    ran_on = {pod["spec"]["nodeName"] for _, _, pod in recording.of("pod")}
    assert ran_on == {first, second}
    touched = [
        obj
        for obj in node_versions(recording, third)
        if keys.node_state_key("expressions") in (obj["metadata"].get("annotations") or {})
    ]
    assert touched == [], "the node the expression leaves out is never touched"
    assert cluster.get_skyhook("expressions")["status"]["completeNodes"] == "2/2"


def test_serial_runs_one_stage_pod_at_a_time_on_each_node_and_every_node_goes_on(
    cluster: Cluster,
) -> None:
    nodes = set(cluster.add_nodes(2))
    recording = cluster.record("serial")
    packages = {name: agentless("1.0.0", sleep=1) for name in ("one", "two", "three")}
    cluster.skyhook("serial", packages, serial=True, interruptionBudget={"percent": 100})
    cluster.wait_complete("serial", timeout=240)

    snapshots = list(running_pods(recording))
    crowded = [running for running in snapshots if any(len(p) > 1 for p in running.values())]
    assert crowded == [], f"two stage pods at once on a node: {crowded[:1]}"
    together = [running for running in snapshots if set(running) == nodes]
    assert together, "both nodes had a stage pod running at the same time"
    stages = {
        (pod["spec"]["nodeName"], pod["metadata"]["name"]) for _, _, pod in recording.of("pod")
    }
    assert len(stages) >= 2 * 3 * 2, "every package's apply and config ran on both nodes"


def test_auto_taint_new_nodes_holds_each_new_node_until_its_packages_are_done(
    cluster: Cluster,
) -> None:
    (first,) = cluster.add_nodes(1)
    recording = cluster.record("tainted")
    cluster.skyhook(
        "tainted",
        {"pkg": agentless("1.0.0", sleep=1)},
        runtimeRequired=True,
        autoTaintNewNodes=True,
    )
    cluster.wait_complete("tainted", timeout=120)
    (second,) = cluster.add_nodes(1)  # joins once the Skyhook is complete: it is new
    cluster.wait_complete("tainted", timeout=120)

    marker = keys.auto_taint_key(RUNTIME_TAINT[0])
    for node in (first, second):
        versions = node_versions(recording, node)
        seen = [tainted(o) for o in versions]
        assert any(seen), f"{node} was never tainted"
        assert not seen[-1], f"{node} is still tainted"
        first_taint = seen.index(True)
        obj = versions[first_taint]
        assert (obj["metadata"].get("annotations") or {}).get(marker) == "true"
        pods = [rv(p) for _, _, p in recording.of("pod") if p["spec"]["nodeName"] == node]
        assert pods and rv(obj) < min(pods), f"{node} ran a stage pod before it was tainted"
        untainted = seen.index(False, first_taint)
        labels = versions[untainted]["metadata"].get("labels") or {}
        done = labels.get(keys.node_status_key("tainted"))
        assert done == "complete", f"{node} lost its taint before it completed"


def test_a_refused_auto_taint_is_a_warning_on_the_node_and_nothing_runs_there_until_it_lands(
    cluster: Cluster,
) -> None:
    """Something refuses the runtime-required taint (here a ValidatingAdmissionPolicy): the
    node gets a Warning `AutoTaint` Event, no stage pod runs on it, and once the taint is
    allowed the next passes taint it and its packages run."""
    (node,) = cluster.add_nodes(1)
    policy = f"refuse-taint-{cluster.label}"[:63]
    with refused_taint(cluster, policy):
        recording = cluster.record("refused")
        cluster.skyhook(
            "refused",
            {"pkg": agentless("1.0.0", sleep=1)},
            runtimeRequired=True,
            autoTaintNewNodes=True,
        )

        def warned() -> list[dict[str, Any]]:
            events = cluster.kube.request("GET", "/api/v1/namespaces/default/events")["items"]
            return [
                e
                for e in events
                if e["involvedObject"]["name"] == node
                and (e["reason"], e["type"]) == ("AutoTaint", "Warning")
            ]

        wait_until(warned, 60, "a Warning AutoTaint Event on the node", interval=0.5)
        (event,) = warned()
        assert event["message"].startswith(f"could not taint node [{node}] with [")
        assert policy in event["message"], event["message"]
        assert event.get("action") == "TaintNode"
        wait_until(lambda: warned()[0].get("count", 1) > 1, 60, "tried again", interval=0.5)
        assert not cluster.pods("refused"), "a stage pod ran on a node that is not tainted"
        marker = keys.auto_taint_key(RUNTIME_TAINT[0])
        assert marker not in (cluster.node(node)["metadata"].get("annotations") or {})
    cluster.wait_complete("refused", timeout=120)
    versions = node_versions(recording, node)
    first = next(i for i, o in enumerate(versions) if tainted(o))
    assert not any(
        keys.node_state_key("refused") in (o["metadata"].get("annotations") or {})
        for o in versions[:first]
    ), "the node's state was written before its taint"


@contextlib.contextmanager
def refused_taint(cluster: Cluster, name: str) -> Iterator[None]:
    """While open, the apiserver refuses the runtime-required taint on this test's nodes."""
    kube = cluster.kube
    api = "/apis/admissionregistration.k8s.io/v1"
    kube.request(
        "POST",
        f"{api}/validatingadmissionpolicies",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["UPDATE"],
                            "resources": ["nodes"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": "!has(object.spec.taints) || !object.spec.taints.exists("
                        f"t, t.key == '{RUNTIME_TAINT[0]}')",
                        "message": f"{name}: the runtime-required taint is refused",
                    }
                ],
            },
        },
    )
    kube.request(
        "POST",
        f"{api}/validatingadmissionpolicybindings",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"objectSelector": {"matchLabels": {TEST_LABEL: cluster.label}}},
            },
        },
    )
    probe = {"spec": {"taints": [{"key": RUNTIME_TAINT[0], "effect": RUNTIME_TAINT[1]}]}}

    def in_force() -> bool:
        try:
            kube.request(
                "PATCH",
                kube.node_path(cluster.nodes[0]),
                probe,
                MERGE_PATCH,
                query={"dryRun": "All"},
            )
        except ApiError:
            return True
        return False

    try:
        wait_until(in_force, 30, "the policy refuses the taint", interval=0.2)
        yield
    finally:
        for kind in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
            with contextlib.suppress(ApiError):
                kube.request("DELETE", f"{api}/{kind}/{name}")


def test_runtime_required_cordon_after_cordons_as_the_taint_comes_off_and_outlives_the_skyhook(
    cluster: Cluster,
) -> None:
    (node,) = cluster.add_nodes(1)
    recording = cluster.record("held")
    held_until_done(cluster, "held")
    marker = keys.RUNTIME_REQUIRED_CORDON_ANNOTATION

    def untainted_version() -> dict[str, Any] | None:
        versions = [o for _, _, o in recording.of("node") if o["metadata"]["name"] == node]
        seen = [tainted(o) for o in versions]
        if True not in seen or False not in seen[seen.index(True) :]:
            return None
        return versions[seen.index(False, seen.index(True))]

    # The version that lost the taint is cordoned and marked: one write, no window in which
    # the node takes workloads.
    obj = wait_until(untainted_version, 30, "the runtime-required taint removed")
    assert obj["spec"].get("unschedulable") is True
    assert (obj["metadata"].get("annotations") or {}).get(marker) == "true"

    def cordon_events() -> list[dict[str, Any]] | None:
        query = {"fieldSelector": f"involvedObject.name={node},reason=RuntimeRequiredCordon"}
        path = cluster.kube.namespaced_path("events", "default")
        return cluster.kube.request("GET", path, query=query)["items"] or None

    events = wait_until(cordon_events, 30, "the RuntimeRequiredCordon Event")
    assert len(events) == 1 and "runtimeRequiredCordonAfter" in events[0]["message"]

    # Deleting the Skyhook keeps the cordon; an uncordon that forgets the annotation ends it.
    cluster.kube.request("DELETE", cluster.kube.skyhook_path("held"))
    wait_until(lambda: cluster._gone("held"), 60, "the Skyhook deleted")
    after = cluster.node(node)
    assert after["spec"].get("unschedulable") is True
    assert after["metadata"]["annotations"].get(marker) == "true"
    body = {"spec": {"unschedulable": False}}
    cluster.kube.request("PATCH", cluster.kube.node_path(node), body, MERGE_PATCH)
    wait_until(
        lambda: marker not in (cluster.node(node)["metadata"].get("annotations") or {}),
        30,
        "the annotation removed once the node was uncordoned",
    )
    assert not cluster.node(node)["spec"].get("unschedulable")


def test_after_a_reboot_to_reapply_the_taint_and_the_cordon_come_back_before_anything_runs(
    cluster: Cluster,
) -> None:
    """REAPPLY_ON_REBOOT with autoTaintNewNodes: a node someone else reboots gets the
    runtime-required taint back before its packages run again, keeps it while they run, and
    is cordoned again as it comes off."""
    assert cluster.operator is not None
    cluster.operator.stop()
    cluster.operator = cluster.start_operator(REAPPLY_ON_REBOOT="true")
    (node,) = cluster.add_nodes(1)
    held_until_done(cluster, "again")
    body = {"spec": {"unschedulable": False}}  # the admin lets workloads in
    cluster.kube.request("PATCH", cluster.kube.node_path(node), body, MERGE_PATCH)
    wait_until(
        lambda: (
            keys.RUNTIME_REQUIRED_CORDON_ANNOTATION
            not in (cluster.node(node)["metadata"].get("annotations") or {})
        ),
        30,
        "the runtime-required cordon ended",
    )
    boot = cluster.node(node)["status"]["nodeInfo"]["bootID"]
    recording = cluster.record("again")
    cluster.sandbox.reboot(node)

    def rebooted() -> list[dict[str, Any]]:
        versions = node_versions(recording, node)
        return [o for o in versions if o["status"]["nodeInfo"]["bootID"] != boot]

    def reapplied() -> bool:
        after = rebooted()
        if not after or not new_pods(rv(after[0])):
            return False
        done = after[-1]["metadata"].get("labels", {}).get(keys.node_status_key("again"))
        return done == "complete"

    def new_pods(since: int) -> list[dict[str, Any]]:
        """Stage pods first seen after `since` (the kept pods of the first run are older)."""
        first: dict[str, dict[str, Any]] = {}
        for _, _, pod in recording.of("pod"):
            first.setdefault(pod["metadata"]["uid"], pod)
        return [p for p in first.values() if rv(p) > since and p["spec"]["nodeName"] == node]

    wait_until(reapplied, 120, "the packages ran again after the reboot")
    after = rebooted()
    assert any(tainted(o) for o in after), "the taint never came back after the reboot"
    taint_rv = min(rv(o) for o in after if tainted(o))
    pods = new_pods(rv(after[0]))
    assert all(rv(p) > taint_rv for p in pods), "a stage pod was created before the taint"
    state = keys.node_state_key("again")
    reset = [o for o in after if "pkg|1.0.0" not in (o["metadata"]["annotations"].get(state) or "")]
    assert reset and all(tainted(o) for o in reset), "the state was reset on an untainted node"
    wait_until(lambda: not tainted(cluster.node(node)), 30, "the taint off again")
    assert cluster.node(node)["spec"].get("unschedulable") is True


def test_batch_state_resets_on_completion_unless_the_policy_says_not_to(
    cluster: Cluster, policies: list[str]
) -> None:
    cluster.add_nodes(2)
    name = cluster.label
    policies.append(name)
    strategy = {"fixed": {"initialBatch": 1}}
    create_policy(
        cluster.kube, name, {"default": {"budget": {"percent": 100}, "strategy": strategy}}
    )
    cluster.skyhook("batches", {"pkg": agentless("1.0.0", sleep=0.5)}, deploymentPolicy=name)
    cluster.wait_complete("batches", timeout=120)
    # Unset: reset once the rollout is complete, as upstream documents.
    reset = wait_until(
        lambda: (
            (state := batch_status(cluster, "batches", keys.DEFAULT_COMPARTMENT)).get(
                "completedNodes", 0
            )
            == 0
            and state
        ),
        30,
        "the batch state reset",
    )
    assert reset.get("currentBatch", 1) == 1

    body = {"spec": {"resetBatchStateOnCompletion": False}}
    cluster.kube.request("PATCH", cluster.kube.policy_path(name), body, MERGE_PATCH)
    cluster.skyhook("batches", {"pkg": agentless("1.0.1", sleep=0.5)}, deploymentPolicy=name)
    cluster.wait_complete("batches", timeout=120)
    kept = batch_status(cluster, "batches", keys.DEFAULT_COMPARTMENT)
    assert kept["completedNodes"] == 2, kept
    assert kept["currentBatch"] > 1, kept


def test_a_batch_threshold_below_100_lets_a_batch_with_a_failed_node_pass(
    cluster: Cluster, policies: list[str]
) -> None:
    assert cluster.operator is not None
    cluster.operator.stop()
    # One attempt per stage: the failing node gives up at once.
    cluster.operator = cluster.start_operator(SKYHOOK_STAGE_RETRIES="0")
    nodes = ordered(cluster, cluster.add_nodes(4))
    package = failing_on(cluster, nodes[:1])
    name = cluster.label
    policies.append(name)
    strategy = {"fixed": {"initialBatch": 2, "batchThreshold": 50, "failureThreshold": 1}}
    create_policy(
        cluster.kube,
        name,
        {
            "default": {"budget": {"percent": 100}, "strategy": strategy},
            "resetBatchStateOnCompletion": False,
        },
    )
    cluster.skyhook("threshold", {"pkg": package}, deploymentPolicy=name)
    wait_until(
        lambda: all(
            cluster.states("threshold")
            .get(n, {})
            .get(keys.package_key("pkg", "1.0.0"), {})
            .get("state")
            == "complete"
            for n in nodes[1:]
        ),
        180,
        "every node but the failing one complete",
    )
    state = batch_status(cluster, "threshold", keys.DEFAULT_COMPARTMENT)
    # Half the first batch succeeded: with batchThreshold 50 it passed, so failureThreshold 1
    # did not stop the compartment and the second batch ran.
    assert not state.get("shouldStop"), state
    assert state.get("consecutiveFailures", 0) == 0, state
    assert state["failedNodes"] == 1, state


def test_one_domain_at_a_time_never_works_on_two_zones_at_once(
    cluster: Cluster, policies: list[str]
) -> None:
    nodes = cluster.add_nodes(4)
    zones = {"a": set(nodes[:2]), "b": set(nodes[2:])}
    label_nodes(cluster, {n: {ZONE: zone} for zone, members in zones.items() for n in members})
    name = cluster.label
    policies.append(name)
    create_policy(
        cluster.kube,
        name,
        {
            "default": {"budget": {"percent": 100}, "strategy": {"fixed": {"initialBatch": 4}}},
            "topology": {"key": ZONE, "oneDomainAtATime": True},
        },
    )
    recording = cluster.record("zones")
    cluster.skyhook("zones", {"pkg": agentless("1.0.0", sleep=1)}, deploymentPolicy=name)
    cluster.wait_complete("zones", timeout=180)

    status: dict[str, bool] = {}
    overlapping = []
    for _, _, obj in recording.of("node"):
        labels = obj["metadata"].get("labels") or {}
        status[obj["metadata"]["name"]] = labels.get(keys.node_status_key("zones")) == "in_progress"
        busy = {zone for zone, members in zones.items() if any(status.get(n) for n in members)}
        if len(busy) > 1:
            overlapping.append(busy)
    assert overlapping == [], "nodes of two zones were in progress at once"
    peak_a, peak_b = in_progress_peaks(recording, "zones", zones.values())
    assert (peak_a, peak_b) == (2, 2), "each zone's nodes went together"
