"""The snapshot's pods and ConfigMaps grouped as a pass's steps look them up: pods by node and,
ours, by Skyhook and node; ConfigMaps by name and, ours, by Skyhook (and node, for the node
metadata ones); and which nodes' views or pods differ from the last snapshot's.

A pass hands its `Grouped` to the next (passes/memory.py), which regroups only the views that
are not in the last snapshot: where the snapshot hands over the same view objects (the
object-identity contract: passes/memory.py), a quiet pass at 5,000 nodes compares two tuples
of objects by identity instead of walking every pod and ConfigMap in Python. Each group keeps
its views in (namespace, name) order, whatever the snapshot's order, so a group comes out the
same whether it was regrouped or built from nothing (`tests/test_incremental.py` checks it).
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import compress
from typing import TypeVar

from skyhook_planner.model.snapshot import ClusterSnapshot, ConfigMapView, NodeView, PodView
from skyhook_schemas import keys

View = TypeVar("View", NodeView, PodView, ConfigMapView)
Group = TypeVar("Group", bound=Hashable)
Key = tuple[str, str]  # (namespace, name)

by_key = operator.attrgetter("namespace", "name")


@dataclass(frozen=True)
class Grouped:
    """One snapshot's pods and ConfigMaps, grouped; `namespace` is the operator's, which tells
    our pods and ConfigMaps from anyone's."""

    namespace: str
    nodes: tuple[NodeView, ...] = ()  # the snapshot's, as grouped
    pods: tuple[PodView, ...] = ()
    configmaps: tuple[ConfigMapView, ...] = ()
    pods_on_node: Mapping[str, tuple[PodView, ...]] = field(default_factory=dict)
    # Our stage, interrupt and check pods, by Skyhook, then node ("": not bound to one yet).
    skyhook_pods: Mapping[str, Mapping[str, tuple[PodView, ...]]] = field(default_factory=dict)
    # Our health check pods (rules/health.py), by Skyhook.
    check_pods: Mapping[str, Mapping[Key, PodView]] = field(default_factory=dict)
    terminating: frozenset[Key] = frozenset()
    # ConfigMaps in our namespace, by name.
    configmaps_by_name: Mapping[str, ConfigMapView] = field(default_factory=dict)
    # Labelled with a Skyhook's name (its package ConfigMaps), by Skyhook.
    skyhook_configmaps: Mapping[str, Mapping[Key, ConfigMapView]] = field(default_factory=dict)
    # Node metadata ConfigMaps, by Skyhook, then the node they are annotated with.
    node_metadata: Mapping[str, Mapping[str, tuple[ConfigMapView, ...]]] = field(
        default_factory=dict
    )
    # Node metadata ConfigMaps not named for the node they are annotated with, by Skyhook.
    misnamed_metadata: Mapping[str, Mapping[Key, ConfigMapView]] = field(default_factory=dict)
    # The nodes whose view, or the pods on them, are not the last snapshot's (every node, when
    # grouped from nothing): any other node's view and pods are the same objects as then.
    changed_nodes: frozenset[str] = field(default=frozenset(), compare=False)

    def after(self, snapshot: ClusterSnapshot) -> Grouped:
        """The groups of `snapshot`, regrouping only the views this one does not hold."""
        nodes, pods, configmaps = snapshot.nodes, snapshot.pods, snapshot.configmaps
        nodes_gone, nodes_came = _changes(self.nodes, nodes)
        pods_gone, pods_came = _changes(self.pods, pods)
        gone, came = _changes(self.configmaps, configmaps)
        terminating = self.terminating
        if any(p.deleting for p in pods_gone) or any(p.deleting for p in pods_came):
            terminating = (terminating - {by_key(p) for p in pods_gone if p.deleting}) | {
                by_key(p) for p in pods_came if p.deleting
            }
        by_name = self.configmaps_by_name
        ours_gone = [c for c in gone if c.namespace == self.namespace]
        ours_came = [c for c in came if c.namespace == self.namespace]
        if ours_gone or ours_came:
            by_name = dict(by_name)
            for cm in ours_gone:
                if by_name.get(cm.name) is cm:
                    del by_name[cm.name]
            by_name.update((c.name, c) for c in ours_came)
        changed = {n.name for n in nodes_gone} | {n.name for n in nodes_came}
        changed |= {p.node for p in pods_gone} | {p.node for p in pods_came}
        changed.discard("")
        return Grouped(
            namespace=self.namespace,
            nodes=nodes,
            pods=pods,
            configmaps=configmaps,
            pods_on_node=_regrouped(
                self.pods_on_node, pods_gone, pods_came, lambda p: p.node or None
            ),
            skyhook_pods=_regrouped_within(
                self.skyhook_pods, pods_gone, pods_came, self.skyhook_of, lambda p: p.node
            ),
            check_pods=_rekeyed_within(self.check_pods, pods_gone, pods_came, self._check_of),
            terminating=terminating,
            configmaps_by_name=by_name,
            skyhook_configmaps=_rekeyed_within(
                self.skyhook_configmaps, gone, came, lambda c: c.labels.get(keys.NAME_LABEL)
            ),
            node_metadata=_regrouped_within(
                self.node_metadata, gone, came, _metadata_of, _annotated_node
            ),
            misnamed_metadata=_rekeyed_within(self.misnamed_metadata, gone, came, _misnamed_of),
            changed_nodes=frozenset(changed),
        )

    def skyhook_of(self, pod: PodView) -> str | None:
        """The Skyhook of one of our pods: labelled by us and in our namespace. Anyone who may
        create pods elsewhere could copy the labels; such a pod is an ordinary pod to us."""
        if pod.namespace != self.namespace:
            return None
        return pod.labels.get(keys.NAME_LABEL)

    def _check_of(self, pod: PodView) -> str | None:
        """The Skyhook of one of our health check pods."""
        return self.skyhook_of(pod) if keys.HEALTH_CHECK_LABEL in pod.labels else None


def _changes(last: tuple[View, ...], views: tuple[View, ...]) -> tuple[list[View], list[View]]:
    """The views of `last` not in `views` and those new in `views`, by identity. The snapshot
    keeps its views in key order, where a changed object's new view takes the old one's
    place: with as many views as before, the places that differ are compared (a view that
    only moved is then both gone and come, which regroups it where it was)."""
    if views is last:
        return [], []
    if len(views) == len(last):
        moved = list(compress(range(len(views)), map(operator.is_not, last, views)))
        return [last[i] for i in moved], [views[i] for i in moved]
    # The ids stay valid: both snapshots' views are alive while they are compared.
    last_ids = dict(zip(map(id, last), last, strict=True))
    ids = dict(zip(map(id, views), views, strict=True))
    return [last_ids[i] for i in last_ids.keys() - ids.keys()], [
        ids[i] for i in ids.keys() - last_ids.keys()
    ]


def _regrouped(
    groups: Mapping[Group, tuple[View, ...]],
    gone: Iterable[View],
    came: Iterable[View],
    group_of: Callable[[View], Group | None],
) -> Mapping[Group, tuple[View, ...]]:
    """`groups` without the views `gone` and with those that `came`, each group in
    (namespace, name) order; a view whose group is None is in none."""
    leaving: dict[Group, set[int]] = defaultdict(set)
    for view in gone:
        group = group_of(view)
        if group is not None:
            leaving[group].add(id(view))
    joining: dict[Group, list[View]] = defaultdict(list)
    for view in came:
        group = group_of(view)
        if group is not None:
            joining[group].append(view)
    if not leaving and not joining:
        return groups
    regrouped = dict(groups)
    for group in leaving.keys() | joining.keys():
        left = leaving.get(group, ())
        members = [v for v in regrouped.get(group, ()) if id(v) not in left]
        members += joining.get(group, ())
        if members:
            regrouped[group] = tuple(sorted(members, key=by_key))
        else:
            regrouped.pop(group, None)
    return regrouped


def _regrouped_within(
    outer: Mapping[str, Mapping[Group, tuple[View, ...]]],
    gone: Iterable[View],
    came: Iterable[View],
    outer_of: Callable[[View], str | None],
    group_of: Callable[[View], Group | None],
) -> Mapping[str, Mapping[Group, tuple[View, ...]]]:
    """`_regrouped` for groups within groups: only the outer groups a view left or joined."""
    touched: dict[str, tuple[list[View], list[View]]] = defaultdict(lambda: ([], []))
    for view in gone:
        name = outer_of(view)
        if name is not None:
            touched[name][0].append(view)
    for view in came:
        name = outer_of(view)
        if name is not None:
            touched[name][1].append(view)
    if not touched:
        return outer
    regrouped = dict(outer)
    for name, (left, joined) in touched.items():
        inner = _regrouped(outer.get(name, {}), left, joined, group_of)
        if inner:
            regrouped[name] = inner
        else:
            regrouped.pop(name, None)
    return regrouped


def _rekeyed_within(
    outer: Mapping[str, Mapping[Key, View]],
    gone: Iterable[View],
    came: Iterable[View],
    outer_of: Callable[[View], str | None],
) -> Mapping[str, Mapping[Key, View]]:
    """Views by (namespace, name) within groups: those `gone` out, those that `came` in."""
    touched: dict[str, dict[Key, View]] = {}

    def inner(name: str) -> dict[Key, View]:
        if name not in touched:
            touched[name] = dict(outer.get(name, {}))
        return touched[name]

    for view in gone:
        name = outer_of(view)
        if name is not None and inner(name).get(by_key(view)) is view:
            del touched[name][by_key(view)]
    for view in came:
        name = outer_of(view)
        if name is not None:
            inner(name)[by_key(view)] = view
    if not touched:
        return outer
    rekeyed = {**outer, **touched}
    for name, views in touched.items():
        if not views:
            del rekeyed[name]
    return rekeyed


def _metadata_of(cm: ConfigMapView) -> str | None:
    return cm.labels.get(keys.NODE_META_LABEL)


def _annotated_node(cm: ConfigMapView) -> str:
    return cm.annotations.get(keys.NODE_NAME_ANNOTATION, "")


def _misnamed_of(cm: ConfigMapView) -> str | None:
    """The Skyhook of a node metadata ConfigMap not named for the node it is annotated with."""
    skyhook = _metadata_of(cm)
    if skyhook is None or cm.name == keys.node_metadata_configmap_name(
        skyhook, _annotated_node(cm)
    ):
        return None
    return skyhook
