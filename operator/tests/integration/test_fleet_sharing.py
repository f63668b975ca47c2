"""A DeploymentPolicy's shared budget and topology on the sandbox, judged from watches that
record every version of the test's nodes: two Skyhooks sharing a budget of 2 over 10 rebooting
nodes never have more than 2 cordoned at once, and a topology of one node per rack over 3
racks never has two nodes of a rack cordoned at once."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from skyhook_operator.kube.client import MERGE_PATCH, ApiError
from skyhook_schemas import keys

from .helpers import SHELLSCRIPT, Cluster, Recording

RACK = "example.com/rack"


def reboot_package() -> dict[str, Any]:
    return {
        "version": "1.0.0",
        "image": SHELLSCRIPT,
        "interrupt": {"type": "reboot"},
        "configMap": {"apply.sh": "#!/bin/bash\ntrue\n"},
    }


@contextlib.contextmanager
def policy(cluster: Cluster, name: str, **extra: Any) -> Iterator[None]:
    body = {
        "apiVersion": keys.API_VERSION,
        "kind": keys.POLICY_KIND,
        "metadata": {"name": name},
        "spec": {
            "default": {
                "budget": {"percent": 100},
                "strategy": {"fixed": {"initialBatch": 100}},
            },
            **extra,
        },
    }
    cluster.kube.request("POST", cluster.kube.policy_path(), body)
    try:
        yield
    finally:
        # The Skyhooks first: a policy still named by one cannot be deleted.
        cluster.cleanup()
        cluster.skyhooks.clear()
        cluster.nodes.clear()
        with contextlib.suppress(ApiError):
            cluster.kube.request("DELETE", cluster.kube.policy_path(name))


def cordoned_over_time(recording: Recording) -> Iterator[Mapping[str, bool]]:
    """Which nodes are cordoned after each recorded node version, in the order the watch saw
    them (one watch: the apiserver's order of writes)."""
    cordoned: dict[str, bool] = {}
    for _, _, node in recording.of("node"):
        cordoned[node["metadata"]["name"]] = bool(node["spec"].get("unschedulable"))
        yield dict(cordoned)


def test_two_skyhooks_sharing_a_budget_of_two_never_cordon_more_than_two(
    cluster: Cluster,
) -> None:
    name = f"{cluster.label[:40]}-pair"
    cluster.add_nodes(6)  # three times the shared budget
    recording = cluster.record("firmware")
    with policy(cluster, name, sharedBudget={"count": 2}):
        cluster.skyhook("firmware", {"fw": reboot_package()}, deploymentPolicy=name, priority=1)
        cluster.skyhook("driver", {"drv": reboot_package()}, deploymentPolicy=name, priority=2)
        cluster.wait_complete("firmware", timeout=420)
        cluster.wait_complete("driver", timeout=420)
        peak = max(sum(moment.values()) for moment in cordoned_over_time(recording))
        assert peak == 2, f"at most 2 nodes cordoned at once, and 2 at the busiest: {peak}"
        for node in cluster.nodes:
            assert not cluster.node(node)["spec"].get("unschedulable"), f"{node} left cordoned"


def test_one_node_per_rack_over_three_racks(cluster: Cluster) -> None:
    name = f"{cluster.label[:40]}-racks"
    nodes = cluster.add_nodes(6)
    rack = {node: f"r{index % 3}" for index, node in enumerate(nodes)}
    for node, value in rack.items():
        cluster.kube.request(
            "PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": {RACK: value}}}, MERGE_PATCH
        )
    recording = cluster.record("kernel")
    with policy(cluster, name, topology={"key": RACK, "maxPerDomain": 1}):
        cluster.skyhook("kernel", {"kernel": reboot_package()}, deploymentPolicy=name)
        cluster.wait_complete("kernel", timeout=300)
        racks_at_once = 0
        for moment in cordoned_over_time(recording):
            busy = [rack[n] for n, cordoned in moment.items() if cordoned]
            assert len(busy) == len(set(busy)), f"two nodes of one rack cordoned: {moment}"
            racks_at_once = max(racks_at_once, len(busy))
        assert racks_at_once == 3, "the racks were not worked on side by side"
