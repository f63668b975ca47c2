"""A stage a user can debug, on real pods: stageTimeout stops an attempt (the kubelet's
activeDeadlineSeconds), a failed stage is retried a bounded number of times then left
erroring with its failed pods kept and their logs readable through the apiserver; pausing a
Skyhook stops the stage that runs, and resuming runs it again."""

from __future__ import annotations

import json
import time
from typing import Any

from skyhook_dev.harness import node_state, node_status, wait_until
from skyhook_sandbox.kubeapi import core_v1
from skyhook_schemas import keys

from .conftest import NAMESPACE
from .helpers import Cluster, agentless, entry


def _phase(pod: dict[str, Any]) -> str:
    return str(pod.get("status", {}).get("phase", ""))


def _stage_events(cluster: Cluster, scr: str) -> list[dict[str, Any]]:
    query = {"fieldSelector": f"involvedObject.name={scr}"}
    found = cluster.kube.request(
        "GET", cluster.kube.namespaced_path("events", "default"), query=query
    )
    return list(found["items"])


def applying(cluster: Cluster, scr: str) -> dict[str, Any] | None:
    """The stage pod of `scr` whose package `pkg` runs its apply step now, if any."""
    for pod in cluster.pods(scr):
        statuses = pod.get("status", {}).get("initContainerStatuses") or []
        if any(s["name"] == "pkg-apply" and "running" in s["state"] for s in statuses):
            return pod
    return None


def test_a_stage_past_its_timeout_is_retried_then_left_erroring_with_its_logs(
    cluster: Cluster,
) -> None:
    cluster.operator.stop()  # type: ignore[union-attr]
    cluster.operator = cluster.start_operator(
        SKYHOOK_STAGE_RETRIES="1", SKYHOOK_RETRY_BACKOFF_BASE="1"
    )
    (node,) = cluster.add_nodes(1)
    # Each stage step sleeps 60 s: far past the 2 s stageTimeout.
    cluster.skyhook("slow", {"slow": agentless("1.0.0", sleep=60, stageTimeout="2s")})

    def gave_up() -> bool:
        found = entry(node_state(cluster.node(node), "slow"), "slow", "1.0.0")
        return found.get("state") == "erroring" and found.get("restarts") == 2

    wait_until(gave_up, 120, "the stage to give up after 2 attempts", interval=0.5)
    assert node_status(cluster.node(node), "slow") == "erroring"
    pods = cluster.pods("slow")
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]  # the first and the last
    for pod in pods:
        assert _phase(pod) == "Failed"
        assert pod["status"]["reason"] == "DeadlineExceeded"
        assert pod["spec"]["activeDeadlineSeconds"] == 2
    attempts = sorted(
        int(p["metadata"]["annotations"].get(keys.ATTEMPT_ANNOTATION, "0")) for p in pods
    )
    assert attempts == [0, 1]
    # Its logs, as `kubectl logs <pod> -c slow-apply` reads them.
    api = core_v1(cluster.sandbox)
    for pod in pods:
        text = api.read_namespaced_pod_log(
            pod["metadata"]["name"], NAMESPACE, container="slow-apply"
        )
        assert text.startswith("agentless: apply"), text

    def gave_up_event() -> str | None:
        found = [e["message"] for e in _stage_events(cluster, "slow") if "gave up" in e["message"]]
        return found[0] if found else None

    message = wait_until(gave_up_event, 30, "the Warning Event that the stage gave up")
    last = next(p for p in pods if keys.ATTEMPT_ANNOTATION in p["metadata"]["annotations"])
    assert f"kubectl logs -n {NAMESPACE} {last['metadata']['name']} -c slow-apply" in message
    # Parked: no new attempt starts.
    time.sleep(5)
    assert sorted(p["metadata"]["name"] for p in cluster.pods("slow")) == sorted(
        p["metadata"]["name"] for p in pods
    )
    assert entry(node_state(cluster.node(node), "slow"), "slow", "1.0.0")["restarts"] == 2


def test_pause_stops_the_running_stage_and_resume_runs_it_again(cluster: Cluster) -> None:
    (node,) = cluster.add_nodes(1)
    cluster.skyhook("pausing", {"pkg": agentless("1.0.0", sleep=5)})

    running = wait_until(lambda: applying(cluster, "pausing"), 60, "the apply step to run")
    name = running["metadata"]["name"]
    cluster.patch_skyhook("pausing", {"metadata": {"annotations": {keys.PAUSE_ANNOTATION: "true"}}})
    wait_until(lambda: not cluster.pods("pausing"), 60, "the stage pod to be gone", interval=0.2)
    time.sleep(4)  # paused: nothing starts again
    assert not cluster.pods("pausing")
    found = entry(node_state(cluster.node(node), "pausing"), "pkg", "1.0.0")
    assert (found["stage"], found["state"], found.get("restarts", 0)) == ("apply", "in_progress", 0)

    def paused_event() -> bool:
        messages = [e["message"] for e in _stage_events(cluster, "pausing")]
        return any("paused: stopping 1 running stage pod" in m for m in messages)

    wait_until(paused_event, 30, "the Event saying the stage was stopped")
    cluster.patch_skyhook("pausing", {"metadata": {"annotations": {keys.PAUSE_ANNOTATION: None}}})

    def restarted() -> bool:
        return any(p["metadata"]["name"] == name for p in cluster.pods("pausing"))

    wait_until(restarted, 60, "the same attempt to start again", interval=0.2)
    cluster.wait_complete("pausing", timeout=120)
    found = entry(node_state(cluster.node(node), "pausing"), "pkg", "1.0.0")
    assert found.get("restarts", 0) == 0, json.dumps(found)


def test_a_stage_pod_the_cluster_evicts_spends_no_attempt_and_runs_again(
    cluster: Cluster,
) -> None:
    """An eviction is the cluster's doing, not the package's: with no retries at all, the
    stage runs again and completes, and no failure is reported. The evicted pod ends Failed
    with the apiserver's DisruptionTarget condition kept, as a kubelet leaves it."""
    cluster.operator.stop()  # type: ignore[union-attr]
    cluster.operator = cluster.start_operator(SKYHOOK_STAGE_RETRIES="0")
    (node,) = cluster.add_nodes(1)
    recording = cluster.record("evicted")
    cluster.skyhook("evicted", {"pkg": agentless("1.0.0", sleep=5)})

    running = wait_until(lambda: applying(cluster, "evicted"), 60, "the apply step to run")
    meta = running["metadata"]
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
    }
    path = cluster.kube.namespaced_path("pods", meta["namespace"], meta["name"])
    cluster.kube.request("POST", f"{path}/eviction", eviction)
    cluster.wait_complete("evicted", timeout=120)

    found = entry(node_state(cluster.node(node), "evicted"), "pkg", "1.0.0")
    assert found.get("restarts", 0) == 0, json.dumps(found)
    ended = [
        p
        for _, _, p in recording.of("pod")
        if p["metadata"]["uid"] == meta["uid"] and _phase(p) == "Failed"
    ]
    assert ended, "the evicted pod never read Failed"
    conditions = {c["type"]: c.get("status") for c in ended[-1]["status"].get("conditions", [])}
    assert conditions.get("DisruptionTarget") == "True", conditions
    failures = [e for e in _stage_events(cluster, "evicted") if e.get("action") == "JobFailed"]
    assert not failures, [e["message"] for e in failures]


def test_succeeded_stage_pods_stay_with_their_logs_then_go(cluster: Cluster) -> None:
    """Each stage's pod ends Succeeded (its `done` container exits) and stays, holding
    nothing back, with its logs readable, until SKYHOOK_POD_TTL_SUCCEEDED has passed."""
    cluster.operator.stop()  # type: ignore[union-attr]
    cluster.operator = cluster.start_operator(SKYHOOK_POD_TTL_SUCCEEDED="60")
    (node,) = cluster.add_nodes(1)
    cluster.skyhook("kept", {"kept": agentless("1.0.0", sleep=1)})
    cluster.wait_complete("kept", timeout=120)
    completed_at = time.monotonic()
    pods = cluster.pods("kept")
    stages = sorted(
        json.loads(p["metadata"]["annotations"][keys.PACKAGE_ANNOTATION])["stage"] for p in pods
    )
    assert stages == ["apply", "config"], stages
    assert {_phase(p) for p in pods} == {"Succeeded"}
    assert node_status(cluster.node(node), "kept") == "complete"
    api = core_v1(cluster.sandbox)
    for pod in pods:
        stage = json.loads(pod["metadata"]["annotations"][keys.PACKAGE_ANNOTATION])["stage"]
        text = api.read_namespaced_pod_log(
            pod["metadata"]["name"], NAMESPACE, container=f"kept-{stage}"
        )
        assert text.startswith(f"agentless: {stage}"), text
    wait_until(lambda: not cluster.pods("kept"), 120, "the kept pods to go after 60 s")
    assert time.monotonic() - completed_at >= 60 - 10, "gone before their retention was over"
