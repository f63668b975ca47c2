"""An in-memory cluster that applies plans: for planner tests, benchmarks and the forecast
behind `kubectl skyhook plan` (sim/forecast.py).

`SimCluster` holds API-shaped dicts for nodes, pods, ConfigMaps, Skyhooks and DeploymentPolicies,
applies every `Action` idempotently with the rules the writer's requests leave the objects by
(model/effects.py), and can play kubelet:
`finish_pod` writes init container statuses as a node would. Deliberately simple: pods start
the moment they are created and disappear the moment they are deleted.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from skyhook_planner import podbuilder
from skyhook_planner.model.actions import (
    STOP_DEADLINE_S,
    Action,
    AddFinalizer,
    AnnotateSkyhook,
    CreatePod,
    DeleteConfigMap,
    DeletePod,
    EmitEvent,
    EvictPod,
    PatchNode,
    PatchSkyhookStatus,
    RemoveFinalizer,
    StopPod,
    UpsertConfigMap,
)
from skyhook_planner.model.effects import finalizers_after, merged, patch_node_object
from skyhook_planner.model.snapshot import (
    ClusterSnapshot,
    ConfigMapView,
    EvictionRefusal,
    NodeView,
    PodView,
    PolicyView,
    SkyhookView,
)
from skyhook_planner.model.status import merge_patched
from skyhook_planner.rules import results


def make_node(
    name: str, labels: Mapping[str, str] | None = None, created: str = "2026-01-01T00:00:00Z"
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": dict(labels or {}),
            "annotations": {},
            "creationTimestamp": created,
        },
        "spec": {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"bootID": f"boot-{name}-0"},
        },
    }


class SimCluster:
    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.configmaps: dict[tuple[str, str], dict[str, Any]] = {}
        self.skyhooks: dict[str, dict[str, Any]] = {}
        self.policies: dict[str, dict[str, Any]] = {}
        self.events: list[EmitEvent] = []
        self.created_pods: list[dict[str, Any]] = []  # every pod ever created, in order
        # What the operator would have fetched for image compatibility sources, by source key.
        self.image_artifacts: dict[str, Any] = {}
        # The last snapshot's views by (kind, namespace, name): a view equal to the last one is
        # handed over as the same object, as the operator's store does until an object changes
        # (the object-identity contract: passes/memory.py).
        self._views: dict[tuple[str, str, str], Any] = {}
        # Pods a PodDisruptionBudget protects: their eviction is refused (a delete is not),
        # and the refusal shows in the snapshot as the operator's evictor records it.
        self.budgeted: dict[tuple[str, str], str] = {}  # pod -> the refusal's message
        # Pods whose removal, eviction or delete, the apiserver refuses for another reason (a
        # 403, a 500): the pod -> the apiserver's answer.
        self.failing: dict[tuple[str, str], str] = {}
        self.eviction_refusals: dict[tuple[str, str], EvictionRefusal] = {}
        # The time of the last snapshot: pods created after it are stamped with it.
        self.clock: datetime | None = None

    # --- building ----------------------------------------------------------------------------

    @classmethod
    def from_objects(
        cls,
        *,
        nodes: Iterable[Mapping[str, Any]] = (),
        pods: Iterable[Mapping[str, Any]] = (),
        configmaps: Iterable[Mapping[str, Any]] = (),
        skyhooks: Iterable[Mapping[str, Any]] = (),
        policies: Iterable[Mapping[str, Any]] = (),
    ) -> SimCluster:
        """A cluster holding copies of these API objects (as JSON dicts, camelCase keys)."""
        sim = cls()
        for node in nodes:
            body = copy.deepcopy(dict(node))
            body.setdefault("spec", {})
            body.setdefault("status", {})
            sim.add_node(body)
        for pod in pods:
            sim.add_pod(copy.deepcopy(dict(pod)))
        for configmap in configmaps:
            meta = configmap["metadata"]
            sim.configmaps[(meta["namespace"], meta["name"])] = copy.deepcopy(dict(configmap))
        for skyhook in skyhooks:
            body = copy.deepcopy(dict(skyhook))
            meta = body.setdefault("metadata", {})
            meta.setdefault("annotations", {})
            meta.setdefault("finalizers", [])
            body.setdefault("status", {})
            sim.skyhooks[meta["name"]] = body
        for policy in policies:
            body = copy.deepcopy(dict(policy))
            sim.policies[body["metadata"]["name"]] = body
        return sim

    def add_node(self, node: dict[str, Any]) -> None:
        self.nodes[node["metadata"]["name"]] = node

    def add_skyhook(
        self, name: str, spec: Mapping[str, Any], annotations: Mapping[str, str] | None = None
    ) -> None:
        self.skyhooks[name] = {
            "metadata": {
                "name": name,
                "uid": f"uid-{name}",
                "generation": 1,
                "annotations": dict(annotations or {}),
                "finalizers": [],
            },
            "spec": copy.deepcopy(dict(spec)),
            "status": {},
        }

    def add_policy(self, name: str, spec: Mapping[str, Any]) -> None:
        self.policies[name] = {"metadata": {"name": name}, "spec": copy.deepcopy(dict(spec))}

    def add_pod(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        self.pods[(meta.get("namespace", "default"), meta["name"])] = pod

    # --- snapshot ----------------------------------------------------------------------------

    def snapshot(self, now: datetime) -> ClusterSnapshot:
        self.clock = now
        last, self._views = self._views, {}
        return ClusterSnapshot(
            skyhooks=self._kept(last, "skyhook", map(SkyhookView.from_api, self.skyhooks.values())),
            nodes=self._kept(last, "node", map(NodeView.from_api, self.nodes.values())),
            pods=self._kept(last, "pod", map(PodView.from_api, self.pods.values())),
            configmaps=self._kept(
                last, "configmap", map(ConfigMapView.from_api, self.configmaps.values())
            ),
            policies=self._kept(last, "policy", map(PolicyView.from_api, self.policies.values())),
            image_artifacts=dict(self.image_artifacts),
            now=now,
            eviction_refusals={k: r for k, r in self.eviction_refusals.items() if k in self.pods},
        )

    def _kept(
        self, last: Mapping[tuple[str, str, str], Any], kind: str, views: Iterable[Any]
    ) -> tuple[Any, ...]:
        found = []
        for fresh in views:
            key = (kind, getattr(fresh, "namespace", ""), fresh.name)
            before = last.get(key)
            view = before if before == fresh else fresh
            self._views[key] = view
            found.append(view)
        return tuple(found)

    # --- the writer ---------------------------------------------------------------------------

    def apply(self, actions: Iterable[Action]) -> None:
        for action in actions:
            self._apply(action)

    def _remove_pod(self, action: EvictPod) -> None:
        """An eviction or delete, refused as `failing` or, for an eviction, `budgeted` say."""
        key = (action.namespace, action.name)
        at = self.clock or datetime.now(UTC)
        if key in self.failing and key in self.pods:
            self.eviction_refusals[key] = EvictionRefusal(
                *key, action.node, "", self.failing[key], at, by_budget=False, delete=action.delete
            )
        elif key in self.budgeted and key in self.pods and not action.delete:
            self.eviction_refusals[key] = EvictionRefusal(
                *key, action.node, "", self.budgeted[key], at
            )
        else:
            self.pods.pop(key, None)
            self.eviction_refusals.pop(key, None)

    def _stop_pod(self, action: StopPod) -> None:
        pod = self.pods.get((action.namespace, action.name))
        if pod is not None:  # the kubelet fails it at once: its deadline has passed
            pod["metadata"].setdefault("annotations", {}).update(action.annotations)
            pod["spec"]["activeDeadlineSeconds"] = STOP_DEADLINE_S
            pod["status"] = {
                **pod.get("status", {}),
                "phase": "Failed",
                "reason": results.DEADLINE_EXCEEDED,
            }

    def _apply(self, action: Action) -> None:
        if isinstance(action, PatchNode):
            if action.name in self.nodes:
                patch_node_object(self.nodes[action.name], action)
        elif isinstance(action, CreatePod):
            key = (action.namespace, action.name)
            if key not in self.pods:
                pod = copy.deepcopy(dict(action.manifest))
                pod["status"] = {"phase": "Pending"}
                if self.clock is not None:  # as the apiserver stamps it
                    pod["metadata"].setdefault(
                        "creationTimestamp", self.clock.strftime("%Y-%m-%dT%H:%M:%SZ")
                    )
                self.pods[key] = pod
                self.created_pods.append(pod)
        elif isinstance(action, StopPod):
            self._stop_pod(action)
        elif isinstance(action, EvictPod):
            self._remove_pod(action)
        elif isinstance(action, DeletePod):
            self.pods.pop((action.namespace, action.name), None)
            self.eviction_refusals.pop((action.namespace, action.name), None)
        elif isinstance(action, UpsertConfigMap):
            meta = action.manifest["metadata"]
            self.configmaps[(meta["namespace"], meta["name"])] = copy.deepcopy(
                dict(action.manifest)
            )
        elif isinstance(action, DeleteConfigMap):
            self.configmaps.pop((action.namespace, action.name), None)
        elif isinstance(action, PatchSkyhookStatus):
            scr = self.skyhooks.get(action.name)
            if scr is not None:
                scr["status"] = merge_patched(scr.get("status", {}), action.patch)
        elif isinstance(action, AddFinalizer | RemoveFinalizer):
            scr = self.skyhooks.get(action.name)
            if scr is not None:
                meta = scr["metadata"]
                meta["finalizers"] = finalizers_after(meta["finalizers"], action)
                if meta.get("deletionTimestamp") and not meta["finalizers"]:
                    del self.skyhooks[action.name]
        elif isinstance(action, AnnotateSkyhook):
            scr = self.skyhooks.get(action.name)
            if scr is not None:
                meta = scr["metadata"]
                meta["annotations"] = dict(merged(meta.get("annotations", {}), action.annotations))
        elif isinstance(action, EmitEvent):
            self.events.append(action)

    # --- the kubelet ----------------------------------------------------------------------------

    def ready_condition(self, name: str) -> dict[str, Any]:
        """The node's Ready condition, as the kubelet keeps it (change it in place)."""
        conditions = self.nodes[name]["status"]["conditions"]
        return next(c for c in conditions if c["type"] == "Ready")

    def reboot(self, name: str, boot_id: str) -> None:
        """The node comes back with a new boot id (its interrupt pod never reports an exit)."""
        self.nodes[name]["status"].setdefault("nodeInfo", {})["bootID"] = boot_id

    def finish_pod(
        self,
        key: tuple[str, str],
        exit_code: int = 0,
        *,
        at: str = "2026-01-01T00:00:00Z",
        restarts: int = 0,
        failed_phase: bool = False,
    ) -> None:
        """Run all init containers of a pod: every one exits 0, or the first one exits `exit_code`."""
        pod = self.pods[key]
        statuses: list[dict[str, Any]] = []
        for container in pod["spec"].get("initContainers", []):
            code = 0 if exit_code == 0 or statuses else exit_code
            statuses.append(
                {
                    "name": container["name"],
                    "restartCount": restarts,
                    "state": {"terminated": {"exitCode": code, "finishedAt": at}},
                }
            )
            if code:
                break
        # restartPolicy Never (stage pods): a failed container fails the pod, as a kubelet does;
        # a stage pod's app container (`done`) exits at once after its steps passed.
        never = pod["spec"].get("restartPolicy") == "Never"
        ends = [c["name"] for c in pod["spec"].get("containers", [])] == [podbuilder.DONE_CONTAINER]
        phase = "Succeeded" if ends and not exit_code else "Running"
        pod["status"] = {
            "phase": "Failed" if (exit_code and (failed_phase or never)) else phase,
            "initContainerStatuses": statuses,
        }
