"""Fleet safety on the sandbox (docs/fleet-safety.md), each read back from a watch that records
every version of the nodes and pods: the soak time is honoured between batch starts."""

from __future__ import annotations

from typing import Any

from skyhook_planner.rules import soak
from skyhook_schemas import keys

from .helpers import Cluster, Recording, agentless
from .test_policy import create_policy, ordered, policies  # noqa: F401 (a fixture)


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
    policies: list[str],  # noqa: F811 (the fixture)
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
