"""A node patch leaves the apiserver's Node as the planner's replay and the in-memory cluster
show it (model/effects.py): annotations and labels merged, the cordon, taints (one set again
keeps its place, a new one goes last) and conditions (an updated one keeps its place, a new one
goes where the apiserver's merge of the two lists puts it, a removed one goes). The writer sends the patch; the Node is read back, its managed fields naming the operator by its User-Agent."""

from __future__ import annotations

import asyncio
import datetime
import json
import subprocess
from dataclasses import replace
from typing import Any

from skyhook_dev.harness import wait_until
from skyhook_operator.kube.client import STRATEGIC_MERGE_PATCH, ApiError, Kube, connect_async
from skyhook_operator.kube.verbs import ApiVerbs
from skyhook_operator.kube.writer import Writer
from skyhook_operator.store import ClusterStore
from skyhook_planner.model.actions import PatchNode, Plan
from skyhook_planner.model.effects import node_patched
from skyhook_planner.model.snapshot import NodeView
from skyhook_planner.model.vocabulary import NodeCondition, Taint
from skyhook_planner.sim.cluster import SimCluster
from skyhook_sandbox.sandbox import Sandbox

NAME = "node-patch-effects"
RUNTIME = Taint("skyhook.nvidia.com", "NoSchedule", "runtime-required")
GPU = Taint("gpu", "NoExecute", "true")
SPOT = Taint("spot", "PreferNoSchedule")
NOT_READY = "skyhook.nvidia.com/s/NotReady"
ERRORING = "skyhook.nvidia.com/s/Erroring"
OTHER_NOT_READY = "skyhook.nvidia.com/t/NotReady"
THIRD_NOT_READY = "skyhook.nvidia.com/u/NotReady"
# Keys the control plane's own controllers set on a node on their own time (a cordoned node
# gets node.kubernetes.io/unschedulable, for one).
THEIRS = ("node.alpha.kubernetes.io/ttl",)
THEIR_TAINTS = "node.kubernetes.io/"

PATCHES = (
    PatchNode(
        NAME,
        annotations={"a": None, "b": "2"},
        labels={"skyhook.nvidia.com/status_s": "in_progress"},
        add_taints=(Taint("skyhook.nvidia.com", "NoSchedule", "v2"), Taint("y", "NoExecute")),
        remove_taints=(GPU,),
        unschedulable=True,
        conditions=(
            NodeCondition(NOT_READY, "False", "Complete", "all packages complete"),
            NodeCondition(OTHER_NOT_READY, "True", "InProgress", "1 package left"),
        ),
        remove_conditions=(ERRORING,),
    ),
    PatchNode(
        NAME,
        add_taints=(Taint("skyhook.nvidia.com", "NoSchedule", "v3"),),
        remove_taints=(Taint("skyhook.nvidia.com", "NoSchedule"),),
        unschedulable=False,
        conditions=(NodeCondition(NOT_READY, "True", "InProgress", "a new version"),),
    ),
    PatchNode(NAME, conditions=(NodeCondition(THIRD_NOT_READY, "True", "InProgress", "new"),)),
)


def test_the_writers_patch_leaves_the_node_as_the_replay_and_the_simulator_show(
    sandbox: Sandbox, kube: Kube
) -> None:
    _create_node(kube)
    try:
        for patch in PATCHES:
            before = _settled(kube)
            asyncio.run(_write(str(sandbox.kubeconfig), patch))
            after = kube.request("GET", kube.node_path(NAME))
            replayed = node_patched(_view(before), patch)
            simulated = SimCluster.from_objects(nodes=[before])
            simulated.apply([patch])
            assert _view(after) == replayed, "the replay shows what the apiserver left"
            assert _view(simulated.nodes[NAME]) == replayed, "the simulator leaves the same"
        # What the two patches did, spelled out.
        last = _view(after)
        assert last.taints == (
            Taint("skyhook.nvidia.com", "NoSchedule", "v3"),
            SPOT,
            Taint("y", "NoExecute"),
        )
        assert [c.type for c in last.conditions] == [
            THIRD_NOT_READY,
            "Ready",
            NOT_READY,
            OTHER_NOT_READY,
            "MemoryPressure",
        ]
        assert not last.unschedulable
        # The apiserver names a writer without a fieldManager by its User-Agent's product:
        # the Node's managed fields, read by kubectl, credit the writer's label to the operator.
        shown = subprocess.run(
            ["kubectl", "--kubeconfig", str(sandbox.kubeconfig), "get", "node", NAME,
             "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields}"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        managers = {
            entry["manager"]
            for entry in json.loads(shown.stdout)
            if entry["operation"] == "Update"
            and "f:skyhook.nvidia.com/status_s" in json.dumps(entry.get("fieldsV1", {}))
        }
        assert managers == {"skyhook-operator"}
    finally:
        kube.request("DELETE", kube.node_path(NAME))


def _create_node(kube: Kube) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NAME, "labels": {"pool": "gpu"}, "annotations": {"a": "1"}},
        "spec": {"taints": [RUNTIME.to_api(), GPU.to_api(), SPOT.to_api()]},
    }
    kube.request("POST", "/api/v1/nodes", body)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"},
        {"type": NOT_READY, "status": "True", "reason": "InProgress", "message": "started"},
        {"type": ERRORING, "status": "False", "reason": "NotErroring", "message": "fine"},
        {"type": "MemoryPressure", "status": "False", "reason": "Sufficient", "message": "ok"},
    ]
    for condition in conditions:
        condition |= {"lastHeartbeatTime": now, "lastTransitionTime": now}
    kube.request(
        "PATCH",
        kube.node_path(NAME, "status"),
        {"status": {"conditions": conditions}},
        STRATEGIC_MERGE_PATCH,
    )


def _settled(kube: Kube) -> dict[str, Any]:
    """The node once the control plane has lifted the not-ready taint it sets on a new node
    (the node reads Ready): nothing but the writer changes it during the test after that."""

    def ready() -> dict[str, Any] | None:
        node = kube.request("GET", kube.node_path(NAME))
        taints = node["spec"].get("taints") or ()
        return None if any(t["key"] == "node.kubernetes.io/not-ready" for t in taints) else node

    return wait_until(ready, 60, "the control plane lifts the new node's not-ready taint")


def _view(node: dict[str, Any]) -> NodeView:
    view = NodeView.from_api(node)
    return replace(
        view,
        annotations={k: v for k, v in view.annotations.items() if k not in THEIRS},
        taints=tuple(t for t in view.taints if not t.key.startswith(THEIR_TAINTS)),
    )


async def _write(kubeconfig: str, patch: PatchNode) -> None:
    client = connect_async(kubeconfig)
    try:
        writer = Writer(client, ClusterStore(), lambda action: None)
        failed: list[bool] = []
        writer.on_written = failed.append
        assert writer.submit(Plan((patch,))).queued == 1
        await writer.drain()
        assert failed == [False], "the patch went through"
        assert await writer.close(timeout=10)
    finally:
        await client.close()


def test_a_cordon_planned_from_an_older_node_is_not_applied(sandbox: Sandbox, kube: Kube) -> None:
    name = "node-patch-stale-cordon"
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    seen = kube.request("POST", "/api/v1/nodes", body)
    try:
        # Another writer (a replica that took over the Lease) changes the node after this
        # replica last saw it.
        kubectl = ["kubectl", "--kubeconfig", str(sandbox.kubeconfig)]
        subprocess.run([*kubectl, "label", "node", name, "taken-over=yes"], check=True)
        cordon = PatchNode(name, annotations={"b": "2"}, unschedulable=True)
        assert asyncio.run(_send_as_seen(str(sandbox.kubeconfig), seen, cordon)) == 409
        node = kube.request("GET", kube.node_path(name))
        assert not node["spec"].get("unschedulable"), "the stale cordon did not land"
        assert "b" not in (node["metadata"].get("annotations") or {})
        # Planned again from the node as it is now, it goes through. The node lifecycle
        # controller also writes to a new node (its not-ready and unreachable taints): a write
        # of its landing between the read and the patch refuses that try too, so read again.
        for _ in range(5):
            node = kube.request("GET", kube.node_path(name))
            if asyncio.run(_send_as_seen(str(sandbox.kubeconfig), node, cordon)) is None:
                break
        assert kube.request("GET", kube.node_path(name))["spec"]["unschedulable"] is True
    finally:
        kube.request("DELETE", kube.node_path(name))


async def _send_as_seen(kubeconfig: str, node: dict[str, Any], patch: PatchNode) -> int | None:
    """Send `patch` from a store that last saw `node`: the status of the refusal, or None."""
    client = connect_async(kubeconfig)
    store = ClusterStore()
    store.nodes.wrote(node)
    try:
        await ApiVerbs(client, store).send(patch)
    except ApiError as error:
        return error.status
    finally:
        await client.close()
    return None
