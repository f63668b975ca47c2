"""Events on the sandbox: a drain held back by a PodDisruptionBudget reports "draining node"
on every pass, and those repeats are one Event whose count grows, not one Event each."""

from __future__ import annotations

import contextlib
from typing import Any

from skyhook_dev.harness import wait_until
from skyhook_operator.kube.client import ApiError

from .helpers import SHELLSCRIPT, Cluster

PDB_PATH = "/apis/policy/v1/namespaces/default/poddisruptionbudgets"


def test_a_repeated_drain_event_is_one_event_with_a_growing_count(cluster: Cluster) -> None:
    (node,) = cluster.add_nodes(1)
    guarded = f"guarded-{node}"
    kube = cluster.kube
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": guarded, "namespace": "default", "labels": {"app": guarded}},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "work",
                    "image": "docker.io/library/busybox:1",
                    "command": ["sleep", "600"],
                }
            ],
        },
    }
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": guarded, "namespace": "default"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": guarded}}},
    }
    kube.request("POST", kube.namespaced_path("pods", "default"), pod)
    kube.request("POST", PDB_PATH, budget)
    try:
        reboot = {
            "version": "1.0.0",
            "image": SHELLSCRIPT,
            "interrupt": {"type": "reboot"},
            "configMap": {"apply.sh": "#!/bin/bash\ntrue\n"},
        }
        cluster.skyhook("held-drain", {"kernel": reboot})

        def draining() -> list[dict[str, Any]]:
            events = kube.request(
                "GET",
                kube.namespaced_path("events", "default"),
                query={"fieldSelector": f"involvedObject.kind=Node,involvedObject.name={node}"},
            )["items"]
            return [e for e in events if e["message"].startswith(f"draining node [{node}]")]

        repeated = wait_until(
            lambda: [e for e in draining() if e["count"] >= 3] or None,
            90,
            "a draining Event with count >= 3",
            interval=1.0,
        )
        assert len(draining()) == 1, "each repeat became an Event of its own"
        (event,) = repeated
        assert (event["reason"], event["type"]) == ("Drain", "Normal")
        assert event["lastTimestamp"] >= event["firstTimestamp"]
        assert event["source"]["component"] == "skyhook-controller"
    finally:
        with contextlib.suppress(ApiError):
            kube.request("DELETE", f"{PDB_PATH}/{guarded}")
        with contextlib.suppress(ApiError):
            kube.request("DELETE", kube.namespaced_path("pods", "default", guarded))
