"""`plan(snapshot, settings) -> Plan`: one planning pass (the steps are described in
planner/__init__.py). Pure: the same snapshot always gives the same plan.

This module holds what a pass shares across Skyhooks (`Pass`: indexes, per-node output, the
final ordering of actions); skyhook.py does one Skyhook's share.
"""

from __future__ import annotations

import gc
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from skyhook_operator import podbuilder
from skyhook_operator.nodestate import (
    NodeChanges,
)
from skyhook_operator.planner import gates, ordering
from skyhook_operator.planner.cleanup import cleanup
from skyhook_operator.planner.model import (
    Action,
    ClusterSnapshot,
    DeletePod,
    EmitEvent,
    NodeCondition,
    NodeView,
    PatchNode,
    Plan,
    PlannerSettings,
    PodView,
    SetNodeConditions,
    SkyhookView,
    Taint,
    UpsertConfigMap,
)
from skyhook_operator.planner.skyhook import SkyhookPass
from skyhook_schemas import keys


def plan(snapshot: ClusterSnapshot, settings: PlannerSettings) -> Plan:
    # A pass allocates many short-lived objects next to a large snapshot; cyclic GC runs in
    # the middle of it would scan the whole snapshot again and again (3x slower at 1,000
    # nodes). The pass creates no reference cycles, so pausing the collector is safe.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return Pass(snapshot, settings).run()
    finally:
        if collecting:
            gc.enable()


@dataclass
class NodeOut:
    """Everything one pass does to one node, assembled in a safe order at the end."""

    changes: NodeChanges = field(default_factory=NodeChanges)
    add_taints: list[Taint] = field(default_factory=list)
    remove_taints: list[Taint] = field(default_factory=list)
    unschedulable: bool | None = None
    metadata_for: list[SkyhookView] = field(default_factory=list)  # metadata CMs before pods
    actions: list[Action] = field(default_factory=list)  # after the node patch
    conditions: list[NodeCondition] = field(default_factory=list)
    drop_conditions: list[str] = field(default_factory=list)


class Pass:
    """What one pass knows and has decided so far, shared by every Skyhook's share."""

    def __init__(self, snapshot: ClusterSnapshot, settings: PlannerSettings) -> None:
        self.snap = snapshot
        self.settings = settings
        self.now = snapshot.now
        self.nodes = {n.name: n for n in snapshot.nodes}
        self.pods_on_node: dict[str, list[PodView]] = defaultdict(list)
        self.skyhook_pods: dict[str, list[PodView]] = defaultdict(list)
        for pod in snapshot.pods:
            if pod.node:
                self.pods_on_node[pod.node].append(pod)
            if keys.NAME_LABEL in pod.labels:
                self.skyhook_pods[pod.labels[keys.NAME_LABEL]].append(pod)
        self.configmaps = {
            c.name: c for c in snapshot.configmaps if c.namespace == settings.namespace
        }
        self.out: dict[str, NodeOut] = defaultdict(NodeOut)
        self.first: list[Action] = []  # finalizers, new package ConfigMaps
        self.last: list[Action] = []  # status, accepted config edits, deletions, events
        self.events: list[EmitEvent] = []
        self.gone: set[tuple[str, str]] = set()  # pods deleted by this pass
        self.terminating = {(p.namespace, p.name) for p in snapshot.pods if p.deleting}
        self._decoded: dict[tuple[str, str], podbuilder.PodPackage | None] = {}
        self.started: set[str] = set()  # nodes where this pass creates a pod
        self.complete: dict[tuple[str, str], bool] = {}
        self.requeue: float | None = None

    # --- small helpers ---------------------------------------------------------------------

    def wake_in(self, seconds: float) -> None:
        seconds = max(0.5, seconds)
        self.requeue = seconds if self.requeue is None else min(self.requeue, seconds)

    def delete_pod(self, pod: PodView, reason: str) -> None:
        if (pod.namespace, pod.name) not in self.gone and not pod.deleting:
            self.gone.add((pod.namespace, pod.name))
            self.out[pod.node].actions.append(DeletePod(pod.namespace, pod.name, reason))

    def pod_package(self, pod: PodView) -> podbuilder.PodPackage | None:
        key = (pod.namespace, pod.name)
        if key not in self._decoded:
            self._decoded[key] = podbuilder.decode_pod_package(pod)
        return self._decoded[key]

    def present(self, pod: PodView) -> bool:
        """Still there after this pass (finished pods kept for a retry backoff included)."""
        return (pod.namespace, pod.name) not in self.gone and not pod.deleting

    def name_taken(self, namespace: str, name: str) -> bool:
        """A pod of that name is on its way out: creating it again now would collide."""
        return (namespace, name) in self.gone or (namespace, name) in self.terminating

    def live(self, pod: PodView) -> bool:
        return (
            (pod.namespace, pod.name) not in self.gone
            and not pod.deleting
            and pod.phase not in gates.FINISHED_PHASES
        )

    def event(self, kind: str, name: str, reason: str, message: str) -> None:
        self.events.append(EmitEvent(kind, name, reason, message))

    # --- the pass ---------------------------------------------------------------------------

    def run(self) -> Plan:
        ordered = ordering.skyhook_order(self.snap.skyhooks)
        self._auto_taint(ordered)
        for scr in ordered:
            if scr.deleting:
                cleanup(self, scr)
            else:
                SkyhookPass(self, scr).run()
        self._runtime_required(ordered)
        return Plan(tuple(self._assemble()), self.requeue)

    def _auto_taint(self, skyhooks: Sequence[SkyhookView]) -> None:
        taint = self.settings.runtime_required_taint
        for scr in skyhooks:
            spec = scr.spec
            if (
                scr.deleting
                or spec is None
                or not (spec.runtime_required and spec.auto_taint_new_nodes)
            ):
                continue
            for node in self.snap.nodes:
                new = not any(k.startswith(keys.PREFIX) for k in node.annotations)
                if (
                    new
                    and spec.node_selector.matches(node.labels)
                    and not any(t.same_as(taint) for t in node.taints)
                ):
                    out = self.out[node.name]
                    if taint not in out.add_taints:
                        out.add_taints.append(taint)
                        out.changes.annotations[keys.auto_taint_key(taint.key)] = "true"

    def _runtime_required(self, skyhooks: Sequence[SkyhookView]) -> None:
        """Drop the runtime-required taint where every runtimeRequired Skyhook is complete."""
        taint = self.settings.runtime_required_taint
        for node in self.snap.nodes:
            if not any(t.same_as(taint) for t in node.taints):
                continue
            wanting = [
                s
                for s in skyhooks
                if s.spec is not None
                and s.spec.runtime_required
                and s.spec.node_selector.matches(node.labels)
            ]
            live = [s for s in wanting if not s.deleting]
            if wanting and all(self.complete.get((s.name, node.name), False) for s in live):
                self.out[node.name].remove_taints.append(taint)

    def _assemble(self) -> list[Action]:
        actions = list(self.first)
        for name in sorted(self.out):
            out = self.out[name]
            node = self.nodes.get(name)
            if node is None:
                actions += out.actions
                continue
            if out.changes or out.add_taints or out.remove_taints or out.unschedulable is not None:
                unschedulable = (
                    out.unschedulable if out.unschedulable != node.unschedulable else None
                )
                actions.append(
                    PatchNode(
                        name,
                        annotations=dict(out.changes.annotations),
                        labels=dict(out.changes.labels),
                        add_taints=tuple(out.add_taints),
                        remove_taints=tuple(out.remove_taints),
                        unschedulable=unschedulable,
                    )
                )
            for scr in out.metadata_for:
                cm = self._metadata_configmap(scr, node, out.changes)
                if cm is not None:
                    actions.append(cm)
            actions += out.actions
            if out.conditions or out.drop_conditions:
                actions.append(
                    SetNodeConditions(name, tuple(out.conditions), tuple(out.drop_conditions))
                )
        return actions + self.last + self.events

    def _metadata_configmap(
        self, scr: SkyhookView, node: NodeView, changes: NodeChanges
    ) -> UpsertConfigMap | None:
        def applied(current: Mapping[str, str], delta: Mapping[str, str | None]) -> dict[str, str]:
            merged = {**current, **delta}
            return {k: v for k, v in merged.items() if v is not None}

        manifest = podbuilder.build_metadata_configmap(
            self.settings,
            scr,
            node,
            labels=applied(node.labels, changes.labels),
            annotations=applied(node.annotations, changes.annotations),
        )
        existing = self.configmaps.get(manifest["metadata"]["name"])
        if existing is not None and dict(existing.data) == manifest["data"]:
            return None
        return UpsertConfigMap(manifest)
