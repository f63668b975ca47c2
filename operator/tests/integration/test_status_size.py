"""A Skyhook's per-node status lists against the real apiserver: past their size limit the
rollout completes, every status write goes through and the lists name the nodes not complete;
managedFields name each list once, not each node, whatever the limit."""

from __future__ import annotations

from typing import Any

from skyhook_dev.harness import wait_until
from skyhook_planner.model.status_size import CONDITION_NODE_LISTS_SHORTENED
from skyhook_schemas.nodestate import COMPLETE

from .helpers import Cluster, agentless

LISTS = ("nodeStatus", "nodeState", "nodeBootIds")


def status_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """The status fields the operator's writes own, as managedFields record them."""
    owned: dict[str, Any] = {}
    for entry in obj["metadata"].get("managedFields", []):
        if entry.get("subresource") == "status":
            owned.update(entry.get("fieldsV1", {}).get("f:status", {}))
    return owned


def shortened(status: dict[str, Any]) -> dict[str, Any] | None:
    return next(
        (c for c in status.get("conditions", []) if c["type"] == CONDITION_NODE_LISTS_SHORTENED),
        None,
    )


def test_lists_are_named_once_in_managed_fields(cluster: Cluster) -> None:
    nodes = cluster.add_nodes(3)
    cluster.skyhook("whole", {"tool": agentless("1.0.0")})
    cluster.wait_complete("whole")
    obj = cluster.get_skyhook("whole")
    status = obj["status"]
    assert set(status["nodeStatus"]) == set(nodes)  # under the limit: every node listed
    assert shortened(status) is None
    owned = status_fields(obj)
    # An atomic map: its entry in managedFields does not grow with the nodes.
    assert {name: owned[f"f:{name}"] for name in LISTS} == {name: {} for name in LISTS}


def test_past_the_limit_the_lists_name_the_pending_nodes_and_writes_go_through(
    cluster: Cluster,
) -> None:
    cluster.operator.stop()  # type: ignore[union-attr]
    cluster.operator = cluster.start_operator(SKYHOOK_STATUS_NODE_LISTS_BYTES="1024")
    cluster.add_nodes(8)
    cluster.skyhook("wide", {"tool": agentless("1.0.0", sleep=2)}, interruptionBudget={"count": 2})
    mid: dict[str, Any] = {}

    def partly_done() -> bool:
        mid.update(cluster.get_skyhook("wide").get("status", {}))
        return shortened(mid) is not None and mid.get("completeNodes") not in (None, "0/8", "8/8")

    wait_until(partly_done, 120, "a status with some nodes complete", interval=0.2)
    assert mid["nodeStatus"] and COMPLETE not in mid["nodeStatus"].values()
    cluster.wait_complete("wide")
    status = cluster.get_skyhook("wide")["status"]
    assert status["completeNodes"] == "8/8"
    assert status["nodeStatus"] == {} and status["nodeState"] == {}
    assert status["nodesPerPackage"] == {"tool|1.0.0": 8}
    condition = shortened(status)
    assert condition is not None and condition["status"] == "True"
    assert "0 of 8 nodes" in condition["message"]
    log = cluster.operator.log_path.read_text()
    assert "PatchSkyhookStatus failed" not in log
