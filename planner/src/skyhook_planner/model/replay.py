"""The cluster as the writes still queued will leave it (read-your-writes for decisions).

The operator queues a pass's writes and plans the next pass while they go out. That pass must
plan from what the earlier ones decided, or it decides the same writes again (a second stage
pod, a second start past the budget). So the snapshot it plans from shows every queued write
as done: each Skyhook's status patches (`StatusReplay`), and each node's lane, that is its
node patches, stage pods created or deleted, and metadata ConfigMaps (`NodeReplay`). A write
stops showing once it is done: written, the object as the API returned it is in the snapshot
anyway; failed, the next pass sees the cluster as it is and plans again.

Both replays are kept between passes: while an object and the writes queued for it are the
same objects as last time, the replayed view is the same object too, so the planner's memory
(passes/memory.py) compares it by identity and a node with writes in flight stays quiet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from skyhook_planner.model.actions import (
    Action,
    CreatePod,
    DeletePod,
    PatchNode,
    UpsertConfigMap,
)
from skyhook_planner.model.snapshot import (
    ClusterSnapshot,
    ConfigMapView,
    NodeView,
    PodView,
    SkyhookView,
)
from skyhook_planner.model.status import merge_patched
from skyhook_schemas.status import SkyhookStatus

PodKey = tuple[str, str]  # (namespace, name)


class StatusReplay:
    """Each Skyhook's status as the status patches decided but not written yet leave it,
    applied in order (batch progress, config updates, boot ids).

    While a Skyhook's stored status is the same view and the patches of the last pass are
    still the first ones waiting, only the patches decided since are applied, so a pass costs
    the new patches, not every patch of the last second."""

    def __init__(self) -> None:
        # Skyhook name -> (its view as stored, the patches applied, the status they give).
        self._kept: dict[str, tuple[SkyhookView, Sequence[Mapping[str, Any]], Any]] = {}

    def apply(
        self, snapshot: ClusterSnapshot, pending: Mapping[str, Sequence[Mapping[str, Any]]]
    ) -> ClusterSnapshot:
        self._kept = {name: kept for name, kept in self._kept.items() if name in pending}
        if not pending:
            return snapshot
        skyhooks = tuple(
            self._patched(s, pending[s.name]) if s.name in pending else s for s in snapshot.skyhooks
        )
        return replace(snapshot, skyhooks=skyhooks)

    def _patched(self, scr: SkyhookView, patches: Sequence[Mapping[str, Any]]) -> SkyhookView:
        kept = self._kept.get(scr.name)
        if (
            kept is not None
            and kept[0] is scr
            and len(kept[1]) <= len(patches)
            and all(ours is theirs for ours, theirs in zip(kept[1], patches, strict=False))
        ):
            status, done = kept[2], len(kept[1])
        else:
            status, done = scr.status.to_json(), 0
        for patch in patches[done:]:
            status = merge_patched(status, patch)
        self._kept[scr.name] = (scr, tuple(patches), status)
        return replace(scr, status=SkyhookStatus.from_json(status))


class NodeReplay:
    """Each node's queued lane (`pending`: node name -> its actions, oldest first) applied to
    the snapshot: its node patches to the node, the pods it creates added (as the API would
    first show them: pending, no status), the pods it deletes shown terminating, and the
    ConfigMaps it writes shown with their new content. Evictions and Events change nothing a
    pass reads back."""

    def __init__(self) -> None:
        # Node name -> (its view as stored, the patches applied, the view they give).
        self._nodes: dict[str, tuple[NodeView, tuple[PatchNode, ...], NodeView]] = {}
        # Replayed pod and ConfigMap views, by the action or stored view they come from.
        self._created: dict[int, tuple[CreatePod, PodView]] = {}
        self._deleting: dict[int, tuple[PodView, PodView]] = {}
        self._written: dict[int, tuple[UpsertConfigMap, ConfigMapView]] = {}

    def apply(
        self, snapshot: ClusterSnapshot, pending: Mapping[str, Sequence[Action]]
    ) -> ClusterSnapshot:
        patches: dict[str, tuple[PatchNode, ...]] = {}
        pods: dict[PodKey, CreatePod | DeletePod] = {}
        configmaps: dict[str, UpsertConfigMap] = {}
        for node, actions in pending.items():
            node_patches = []
            for action in actions:
                if isinstance(action, PatchNode):
                    node_patches.append(action)
                elif isinstance(action, CreatePod):
                    key = (action.namespace, action.name)
                    # Created after a deletion of the same name: the new pod is what stays.
                    pods[key] = action
                elif isinstance(action, DeletePod):
                    pods[(action.namespace, action.name)] = action
                elif isinstance(action, UpsertConfigMap):
                    configmaps[action.name] = action
            if node_patches:
                patches[node] = tuple(node_patches)
        return replace(
            snapshot,
            nodes=self._replay_nodes(snapshot.nodes, patches),
            pods=self._replay_pods(snapshot.pods, pods),
            configmaps=self._replay_configmaps(snapshot.configmaps, configmaps),
        )

    def _replay_nodes(
        self, nodes: tuple[NodeView, ...], pending: Mapping[str, tuple[PatchNode, ...]]
    ) -> tuple[NodeView, ...]:
        kept: dict[str, tuple[NodeView, tuple[PatchNode, ...], NodeView]] = {}
        if pending:
            for node in nodes:
                queued = pending.get(node.name)
                if queued:
                    kept[node.name] = self._patched(node, queued)
        self._nodes = kept
        if not kept:
            return nodes
        return tuple(kept[n.name][2] if n.name in kept else n for n in nodes)

    def _patched(
        self, node: NodeView, patches: tuple[PatchNode, ...]
    ) -> tuple[NodeView, tuple[PatchNode, ...], NodeView]:
        last = self._nodes.get(node.name)
        if (
            last is not None
            and last[0] is node
            and len(last[1]) == len(patches)
            and all(ours is theirs for ours, theirs in zip(last[1], patches, strict=True))
        ):
            return last
        view = node
        for patch in patches:
            view = patch.applied_to(view)
        return node, patches, view

    def _replay_pods(
        self, stored: tuple[PodView, ...], pending: Mapping[PodKey, CreatePod | DeletePod]
    ) -> tuple[PodView, ...]:
        created: dict[int, tuple[CreatePod, PodView]] = {}
        deleting: dict[int, tuple[PodView, PodView]] = {}
        pods: list[PodView] = []
        seen: set[PodKey] = set()
        for pod in stored:
            key = (pod.namespace, pod.name)
            action = pending.get(key)
            if action is None:
                pods.append(pod)
                continue
            seen.add(key)
            if isinstance(action, DeletePod):
                if pod.deleting:
                    pods.append(pod)
                else:
                    last = self._deleting.get(id(pod))
                    shown = last[1] if last is not None and last[0] is pod else None
                    if shown is None:
                        shown = replace(pod, deleting=True)
                    deleting[id(pod)] = (pod, shown)
                    pods.append(shown)
            else:  # a create of a pod that exists already: the API keeps the one it has
                pods.append(pod)
        added = False
        for key, action in pending.items():
            if key in seen or not isinstance(action, CreatePod):
                continue
            last_created = self._created.get(id(action))
            if last_created is not None and last_created[0] is action:
                view = last_created[1]
            else:
                view = PodView.from_api(action.manifest)
            created[id(action)] = (action, view)
            pods.append(view)
            added = True
        self._created, self._deleting = created, deleting
        if added:
            pods.sort(key=lambda p: (p.namespace, p.name))
        return tuple(pods) if pending else stored

    def _replay_configmaps(
        self, stored: tuple[ConfigMapView, ...], pending: Mapping[str, UpsertConfigMap]
    ) -> tuple[ConfigMapView, ...]:
        if not pending:
            self._written = {}
            return stored
        written: dict[int, tuple[UpsertConfigMap, ConfigMapView]] = {}
        shown: dict[tuple[str, str], ConfigMapView] = {}
        for action in pending.values():
            last = self._written.get(id(action))
            view = last[1] if last is not None and last[0] is action else None
            if view is None:
                view = ConfigMapView.from_api(action.manifest)
            written[id(action)] = (action, view)
            shown[(view.namespace, view.name)] = view
        self._written = written
        configmaps = [shown.pop((c.namespace, c.name), c) for c in stored]
        return (*configmaps, *shown.values())
