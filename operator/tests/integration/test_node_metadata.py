"""The node metadata ConfigMap (`safe(<scr>, <node>, "metadata")`, mounted in every stage pod at
/skyhook-package/node-metadata) as a package reads it: the node's labels and annotations,
this Skyhook's nodeState and status included, as of the stage the pod runs."""

from __future__ import annotations

import json

from skyhook_schemas import keys

from .conftest import NAMESPACE
from .helpers import Cluster, agentless


def test_the_metadata_configmap_holds_the_node_s_state_as_of_its_last_stage(
    cluster: Cluster,
) -> None:
    (node,) = cluster.add_nodes(1)
    name = cluster.label
    packages = {
        "first": agentless("1.0.0", sleep=0),
        "second": agentless("1.0.0", sleep=0, dependsOn={"first": "1.0.0"}),
    }
    cluster.skyhook(name, packages)
    cluster.wait_complete(name, timeout=120)

    path = cluster.kube.namespaced_path(
        "configmaps", NAMESPACE, keys.node_metadata_configmap_name(name, node)
    )
    data = cluster.kube.request("GET", path)["data"]
    annotations = json.loads(data["annotations.json"])
    labels = json.loads(data["labels.json"])
    # Written before the last stage pod (second's config): first done, second under way.
    state = json.loads(annotations[keys.node_state_key(name)])
    assert (state["first|1.0.0"]["stage"], state["first|1.0.0"]["state"]) == (
        "config",
        "complete",
    )
    assert (state["second|1.0.0"]["stage"], state["second|1.0.0"]["state"]) == (
        "config",
        "in_progress",
    )
    assert annotations[keys.node_status_key(name)] == "in_progress"
    assert labels[keys.node_status_key(name)] == "in_progress"
    assert labels["kubernetes.io/hostname"] == node
    assert sorted(json.loads(data["packages.json"])["packages"]) == ["first", "second"]
