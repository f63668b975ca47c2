"""The cluster as the writes still queued will leave it (read-your-writes for decisions).

The operator queues a pass's writes and plans the next pass while they go out. That pass must
plan from what the earlier ones decided, or it decides the same writes again (a second stage
pod, a second start past the budget). So the snapshot it plans from shows every queued write
as done: each Skyhook's status patches (`StatusReplay`), and each node's lane, that is its
node patches, stage pods created, stopped or deleted, and metadata ConfigMaps (`NodeReplay`). A write
stops showing once it is done: written, the object as the API returned it is in the snapshot
anyway; failed, the next pass sees the cluster as it is and plans again.

Both replays are kept between passes: while an object and the writes queued for it are the
same objects as last time, the replayed view is the same object too, so a node with writes in
flight stays quiet (the object-identity contract: passes/memory.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from functools import partial
from itertools import compress
from operator import attrgetter
from typing import Any, Generic, TypeVar

from skyhook_planner.model.actions import (
    Action,
    CreatePod,
    DeletePod,
    PatchNode,
    StopPod,
    UpsertConfigMap,
)
from skyhook_planner.model.effects import node_patched
from skyhook_planner.model.snapshot import (
    BY_NAMESPACE_AND_NAME,
    ClusterSnapshot,
    ConfigMapView,
    NodeView,
    PodView,
    SkyhookView,
)
from skyhook_planner.model.status import merge_patched
from skyhook_schemas.status import SkyhookStatus

PodKey = tuple[str, str]  # (namespace, name)
PodWrite = CreatePod | DeletePod | StopPod  # a queued write the replay shows on its pod
Source = TypeVar("Source")
Derived = TypeVar("Derived")


class StatusReplay:
    """Each Skyhook's status as the status patches decided but not written yet leave it,
    applied in order (batch progress, config updates, boot ids).

    While a Skyhook's stored status is the same view and the patches of the last pass are
    still the first ones waiting, only the patches decided since are applied, so a pass costs
    the new patches, not every patch of the last second; with none since, the pass gets the
    last pass's view again, not one decoded anew (a status is a fleet's worth of entries)."""

    def __init__(self) -> None:
        # Skyhook name -> (its view as stored, the patches applied, the view they give: its
        # status's document is the patched status).
        self._kept: dict[str, tuple[SkyhookView, Sequence[Mapping[str, Any]], SkyhookView]] = {}

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
            if len(kept[1]) == len(patches):
                return kept[2]
            status, done = kept[2].status.document, len(kept[1])
        else:
            status, done = scr.status.to_json(), 0
        for patch in patches[done:]:
            status = merge_patched(status, patch)
        patched = replace(scr, status=SkyhookStatus.from_json(status))
        self._kept[scr.name] = (scr, tuple(patches), patched)
        return patched


class _Derived(Generic[Source, Derived]):
    """Views derived from source objects, the same view while its source is the same object.
    A pass asks `of` for each source it still has, then `settle` forgets the others."""

    def __init__(self) -> None:
        self._last: dict[int, tuple[Source, Derived]] = {}
        self._asked: dict[int, tuple[Source, Derived]] = {}

    def of(self, source: Source, derive: Callable[[Source], Derived]) -> Derived:
        found = self._last.get(id(source))
        view = found[1] if found is not None and found[0] is source else derive(source)
        self._asked[id(source)] = (source, view)
        return view

    def settle(self) -> None:
        self._last, self._asked = self._asked, {}


@dataclass(frozen=True, eq=False)
class _Lane:
    """One node's queued actions, sorted by what they replay onto: found once per distinct
    tuple of actions (the writer hands over the same tuple while the node's queue is the
    same), not every pass."""

    actions: Sequence[Action]
    patches: tuple[PatchNode, ...]
    pods: Mapping[PodKey, PodWrite]  # the last action about each pod
    configmaps: tuple[UpsertConfigMap, ...]

    def same(self, actions: Sequence[Action]) -> bool:
        """Whether `actions` are this lane's, the same objects in the same order."""
        return self.actions is actions or (
            len(self.actions) == len(actions)
            and all(ours is theirs for ours, theirs in zip(self.actions, actions, strict=True))
        )

    @classmethod
    def of(cls, actions: Sequence[Action]) -> _Lane:
        patches: list[PatchNode] = []
        pods: dict[PodKey, PodWrite] = {}
        configmaps: list[UpsertConfigMap] = []
        for action in actions:
            if isinstance(action, PatchNode):
                patches.append(action)
            elif isinstance(action, PodWrite):
                # Created after a deletion of the same name: the new pod is what stays.
                pods[(action.namespace, action.name)] = action
            elif isinstance(action, UpsertConfigMap):
                configmaps.append(action)
        return cls(actions, tuple(patches), pods, tuple(configmaps))


class NodeReplay:
    """Each node's queued lane (`pending`: node name -> its actions, oldest first) applied to
    the snapshot: its node patches to the node, the pods it creates added (as the API would
    first show them: pending, no status), the pods it deletes shown terminating, those it stops
    with the annotations it adds (the kubelet fails them after), and the
    ConfigMaps it writes shown with their new content. Evictions and Events change nothing a
    pass reads back. A pass costs the nodes with writes queued, plus one look-up per stored
    pod while pod writes are queued."""

    def __init__(self) -> None:
        self._lanes: dict[str, _Lane] = {}
        # Node name -> (its view as stored, the lane applied, the view they give).
        self._nodes: dict[str, tuple[NodeView, _Lane, NodeView]] = {}
        # Replayed pod and ConfigMap views, by the action or stored view they come from.
        self._created: _Derived[CreatePod, PodView] = _Derived()
        self._deleting: _Derived[PodView, PodView] = _Derived()
        self._stopping: _Derived[PodView, PodView] = _Derived()
        self._written: _Derived[UpsertConfigMap, ConfigMapView] = _Derived()

    def apply(
        self, snapshot: ClusterSnapshot, pending: Mapping[str, Sequence[Action]]
    ) -> ClusterSnapshot:
        lanes: dict[str, _Lane] = {}
        for node, actions in pending.items():
            last = self._lanes.get(node)
            lanes[node] = last if last is not None and last.same(actions) else _Lane.of(actions)
        self._lanes = lanes
        pods: dict[PodKey, PodWrite] = {}
        configmaps: dict[str, UpsertConfigMap] = {}
        for lane in lanes.values():
            if lane.pods:
                pods.update(lane.pods)
            for configmap in lane.configmaps:
                configmaps[configmap.name] = configmap
        return replace(
            snapshot,
            nodes=self._replay_nodes(snapshot.nodes, lanes),
            pods=self._replay_pods(snapshot.pods, pods),
            configmaps=self._replay_configmaps(snapshot.configmaps, configmaps),
        )

    def _replay_nodes(
        self, nodes: tuple[NodeView, ...], lanes: Mapping[str, _Lane]
    ) -> tuple[NodeView, ...]:
        patched = {name for name, lane in lanes.items() if lane.patches}
        if not patched:
            self._nodes = {}
            return nodes
        kept: dict[str, tuple[NodeView, _Lane, NodeView]] = {}
        replayed = list(nodes)
        for i in _places(nodes, patched):
            node = nodes[i]
            lane = lanes[node.name]
            last = self._nodes.get(node.name)
            if last is None or last[0] is not node or last[1] is not lane:
                view = node
                for patch in lane.patches:
                    view = node_patched(view, patch)
                last = (node, lane, view)
            kept[node.name] = last
            replayed[i] = last[2]
        self._nodes = kept
        return tuple(replayed)

    def _replay_pods(
        self, stored: tuple[PodView, ...], pending: Mapping[PodKey, PodWrite]
    ) -> tuple[PodView, ...]:
        if not pending:
            self._created.settle()
            self._deleting.settle()
            self._stopping.settle()
            return stored
        pods = list(stored)
        seen: set[PodKey] = set()
        for i in _places(stored, {name for _, name in pending}):
            pod = stored[i]
            key = (pod.namespace, pod.name)
            action = pending.get(key)
            if action is not None:
                seen.add(key)
                # Unless deleted, a pod stays as it is: a create of a pod that exists leaves it.
                if isinstance(action, DeletePod) and not pod.deleting:
                    pods[i] = self._deleting.of(pod, lambda p: replace(p, deleting=True))
                elif isinstance(action, StopPod):
                    pods[i] = self._stopping.of(pod, partial(_annotated, action))
        added = False
        for key, action in pending.items():
            if key not in seen and isinstance(action, CreatePod):
                pods.append(self._created.of(action, lambda a: PodView.from_api(a.manifest)))
                added = True
        self._created.settle()
        self._deleting.settle()
        self._stopping.settle()
        if added:
            pods.sort(key=BY_NAMESPACE_AND_NAME)
        return tuple(pods)

    def _replay_configmaps(
        self, stored: tuple[ConfigMapView, ...], pending: Mapping[str, UpsertConfigMap]
    ) -> tuple[ConfigMapView, ...]:
        shown: dict[tuple[str, str], ConfigMapView] = {}
        for action in pending.values():
            view = self._written.of(action, lambda a: ConfigMapView.from_api(a.manifest))
            shown[(view.namespace, view.name)] = view
        self._written.settle()
        if not shown:
            return stored
        configmaps = list(stored)
        for i in _places(stored, {name for _, name in shown}):
            configmaps[i] = shown.pop((stored[i].namespace, stored[i].name), stored[i])
        return (*configmaps, *shown.values())


def _places(views: Sequence[NodeView | PodView | ConfigMapView], names: Set[str]) -> list[int]:
    """Where in `views` the views named in `names` are, found in C: a pass's queued writes
    touch a few of the snapshot's thousands of objects."""
    return list(compress(range(len(views)), map(names.__contains__, map(_NAME, views))))


_NAME = attrgetter("name")


def _annotated(action: StopPod, pod: PodView) -> PodView:
    return replace(pod, annotations={**pod.annotations, **action.annotations})
