"""Rules that hold across a rollout, checked from watches that record every transition:
the interruption budget and runtime-required (the drain before an interrupt, protected pods
included: test_drain.py)."""

from __future__ import annotations

import json
from typing import Any

from skyhook_dev.harness import node_state
from skyhook_schemas import keys

from .helpers import Cluster, agentless

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
