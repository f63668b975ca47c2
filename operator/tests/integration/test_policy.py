"""DeploymentPolicy rollouts on the sandbox: compartments go batch by batch as their strategy
says (read back from a watch that records every node transition), failing batches stop a
compartment, a policy that appears later unblocks its Skyhook, and the API server itself
refuses malformed policies."""

from __future__ import annotations

from typing import Any

import pytest

from skyhook_dev.harness import wait_until
from skyhook_operator.kube.client import MERGE_PATCH, ApiError, Kube
from skyhook_schemas import keys

from .helpers import (
    Cluster,
    agentless,
    batch_status,
    create_policy,
    failing_on,
    ordered,
)

ZONE = "skyhook.nvidia.com/test-zone"


def test_compartments_follow_their_strategies_batch_by_batch(
    cluster: Cluster, policies: list[str]
) -> None:
    zones = {"fixed": "a", "linear": "b"}  # the rest fall in __default__ (exponential)
    nodes = cluster.add_nodes(30)
    zone_of: dict[str, str] = {}
    for index, node in enumerate(nodes):
        zone = ("a", "b", "c")[index % 3]
        zone_of[node] = {"a": "fixed", "b": "linear"}.get(zone, keys.DEFAULT_COMPARTMENT)
        cluster.kube.request(
            "PATCH",
            cluster.kube.node_path(node),
            {"metadata": {"labels": {ZONE: zone}}},
            MERGE_PATCH,
        )
    name = cluster.label
    policies.append(name)
    create_policy(
        cluster.kube,
        name,
        {
            "default": {"budget": {"percent": 100}, "strategy": {"exponential": {}}},
            "compartments": [
                {
                    "name": compartment,
                    "selector": {"matchLabels": {ZONE: zone}},
                    "budget": budget,
                    "strategy": strategy,
                }
                for compartment, zone, budget, strategy in (
                    ("fixed", zones["fixed"], {"count": 3}, {"fixed": {"initialBatch": 3}}),
                    (
                        "linear",
                        zones["linear"],
                        {"percent": 100},
                        {"linear": {"initialBatch": 1, "delta": 2}},
                    ),
                )
            ],
        },
    )
    recording = cluster.record("rollout")
    cluster.skyhook("rollout", {"pkg": agentless("1.0.0", sleep=1)}, deploymentPolicy=name)
    cluster.wait_complete("rollout", timeout=300)

    # Replay every node version: per compartment, a batch is the nodes that turned
    # in_progress between two moments with none in progress.
    status_key = keys.node_status_key("rollout")
    in_progress: dict[str, bool] = {}
    batches: dict[str, list[set[str]]] = {c: [] for c in set(zone_of.values())}
    open_batch: dict[str, bool] = {}
    peak: dict[str, int] = {}
    for _, kind, obj in recording.of("node"):
        node = obj["metadata"]["name"]
        if node not in zone_of or kind == "DELETED":
            continue
        compartment = zone_of[node]
        now = obj["metadata"].get("annotations", {}).get(status_key) == "in_progress"
        was = in_progress.get(node, False)
        in_progress[node] = now
        running = sum(v for n, v in in_progress.items() if zone_of[n] == compartment)
        peak[compartment] = max(peak.get(compartment, 0), running)
        if now and not was:
            if not open_batch.get(compartment):
                batches[compartment].append(set())
                open_batch[compartment] = True
            batches[compartment][-1].add(node)
        if running == 0:
            open_batch[compartment] = False
    sizes = {c: [len(b) for b in found] for c, found in batches.items()}
    assert sizes == {
        "fixed": [3, 3, 3, 1],
        "linear": [1, 3, 5, 1],
        keys.DEFAULT_COMPARTMENT: [1, 2, 4, 3],
    }
    assert peak == {"fixed": 3, "linear": 5, keys.DEFAULT_COMPARTMENT: 4}
    statuses = cluster.get_skyhook("rollout")["status"]["compartmentStatuses"]
    assert {c: (s["matched"], s["completed"], s["ceiling"]) for c, s in statuses.items()} == {
        "fixed": (10, 10, 3),
        "linear": (10, 10, 10),
        keys.DEFAULT_COMPARTMENT: (10, 10, 10),
    }


def test_failing_batches_stop_at_the_failure_threshold(
    cluster: Cluster, policies: list[str]
) -> None:
    nodes = ordered(cluster, cluster.add_nodes(10))
    # One node of the second batch, and the whole third batch, fail.
    package = failing_on(cluster, nodes[2:4])
    name = cluster.label
    policies.append(name)
    # The Skyhook comes first: blocked until its policy exists, which a watch notices. Only
    # possible with the webhooks off, since they refuse a Skyhook naming a missing policy.
    assert cluster.operator is not None
    cluster.operator.stop()
    # One attempt per stage: a failing node gives up at once, so the batches fail quickly.
    cluster.operator = cluster.start_operator(ENABLE_WEBHOOKS="false", SKYHOOK_STAGE_RETRIES="0")
    cluster.skyhook("stops", {"pkg": package}, deploymentPolicy=name)
    wait_until(
        lambda: cluster.get_skyhook("stops").get("status", {}).get("status") == "blocked",
        60,
        "stops blocked on its missing policy",
    )
    create_policy(
        cluster.kube,
        name,
        {
            "default": {
                "budget": {"percent": 100},
                "strategy": {"linear": {"initialBatch": 1, "delta": 1, "failureThreshold": 2}},
            }
        },
    )
    wait_until(
        lambda: batch_status(cluster, "stops", keys.DEFAULT_COMPARTMENT).get("shouldStop"),
        240,
        "the compartment stopped",
    )
    assert batch_status(cluster, "stops", keys.DEFAULT_COMPARTMENT) == {
        "currentBatch": 4,
        "consecutiveFailures": 2,
        "completedNodes": 2,
        "failedNodes": 2,
        "shouldStop": True,
        "lastBatchSize": 1,
        "lastBatchFailed": True,
    }
    status = cluster.get_skyhook("stops")["status"]
    assert all(c["type"] != f"{keys.GROUP}/DeploymentPolicyNotFound" for c in status["conditions"])
    started = {n for n in nodes if cluster.states("stops").get(n)}
    assert started == set(nodes[:4])
    assert [status["nodeStatus"][n] for n in nodes[4:]] == ["waiting"] * 6


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(
            {"default": {"budget": {"count": 1}, "strategy": {"fixed": {}, "linear": {}}}},
            "exactly one of fixed, linear, or exponential must be set",
            id="two-strategies",
        ),
        pytest.param(
            {"default": {"budget": {"count": 1, "percent": 5}, "strategy": {"fixed": {}}}},
            "exactly one of percent or count must be set",
            id="percent-and-count",
        ),
        pytest.param(
            {
                "default": {"budget": {"count": 1}, "strategy": {"fixed": {}}},
                "compartments": [{"name": "__default__", "selector": {}, "budget": {"count": 1}}],
            },
            '"__default__" is reserved',
            id="reserved-name",
        ),
        pytest.param(
            {
                "default": {"budget": {"count": 1}, "strategy": {"fixed": {}}},
                "compartments": [
                    {"name": "a", "selector": {}, "budget": {"count": 1}},
                    {"name": "a", "selector": {}, "budget": {"count": 2}},
                ],
            },
            "Duplicate value",
            id="duplicate-name",
        ),
        pytest.param(
            {"default": {"budget": {"count": 1}, "strategy": {"linear": {"batchThreshold": 0}}}},
            "batchThreshold",
            id="threshold-0",
        ),
    ],
)
def test_the_api_server_refuses_bad_policies(
    kube: Kube, spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(ApiError) as refused:
        create_policy(kube, "refused", spec)
    assert refused.value.status == 422
    assert message in refused.value.reason, refused.value.reason
