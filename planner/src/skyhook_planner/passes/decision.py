"""A pass's output for the plan, as a value: each step returns what it decides and its caller
merges it into its own with `Decision.merge`. No step writes into its caller's state.

A decision holds per-node work (`NodeOut`), actions that go first or last, events, pods
deleted, when to plan again, nodes that start and release, which (Skyhook, node) pairs are
complete, and which nodes wait and why: all of it becomes the `Plan` (plan.py `assemble`).
What else a pass carries lives apart: one Skyhook's working state (passes/work.py), what the
Skyhooks before one decided (passes/earlier.py), and what a pass keeps for the next one
(passes/memory.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from skyhook_planner.model.actions import Action, DeletePod, EmitEvent, StopPod
from skyhook_planner.model.nodestate import NodeChanges
from skyhook_planner.model.snapshot import PodView, SkyhookView
from skyhook_planner.model.vocabulary import NodeCondition, Taint
from skyhook_planner.model.waiting import Reason
from skyhook_schemas import keys

PodKey = tuple[str, str]


@dataclass
class NodeOut:
    """Everything a pass does to one node, assembled in a safe order at the end."""

    changes: NodeChanges = field(default_factory=NodeChanges)
    add_taints: list[Taint] = field(default_factory=list)
    remove_taints: list[Taint] = field(default_factory=list)
    unschedulable: bool | None = None
    metadata_for: list[SkyhookView] = field(default_factory=list)  # metadata CMs before pods
    actions: list[Action] = field(default_factory=list)  # after the node patch
    conditions: list[NodeCondition] = field(default_factory=list)
    drop_conditions: list[str] = field(default_factory=list)

    def taint_as_new(self, taint: Taint) -> None:
        """autoTaintNewNodes: add the runtime-required taint, marked as ours to lift."""
        if taint not in self.add_taints:
            self.add_taints.append(taint)
            self.changes.annotations[keys.auto_taint_key(taint.key)] = "true"

    def merge(self, other: NodeOut) -> None:
        self.changes.merge(other.changes)
        self.add_taints += [t for t in other.add_taints if t not in self.add_taints]
        self.remove_taints += [t for t in other.remove_taints if t not in self.remove_taints]
        if other.unschedulable is not None:
            self.unschedulable = other.unschedulable
        self.metadata_for += [s for s in other.metadata_for if s not in self.metadata_for]
        self.actions += other.actions
        self.conditions += other.conditions
        self.drop_conditions += other.drop_conditions


@dataclass
class Decision:
    nodes: dict[str, NodeOut] = field(default_factory=dict)
    first: list[Action] = field(default_factory=list)  # finalizers, new package ConfigMaps
    last: list[Action] = field(default_factory=list)  # status, config edits, deletions
    events: list[EmitEvent] = field(default_factory=list)
    deleted: set[PodKey] = field(default_factory=set)
    requeue_after: float | None = None
    starting: set[str] = field(default_factory=set)
    releasing: set[str] = field(default_factory=set)
    # By Skyhook, then node: has it nothing left to do there? (passes/select.py)
    complete: dict[str, dict[str, bool]] = field(default_factory=dict)
    # (Skyhook, node) -> why the node may not start work now, as the blockers answered
    waiting: dict[tuple[str, str], tuple[Reason, ...]] = field(default_factory=dict)
    # (Skyhook, node) verdicts made again rather than taken over from the last pass
    looked_at: int = field(default=0, compare=False)

    def node(self, name: str) -> NodeOut:
        """This decision's work on `name` (created empty on first use)."""
        if name not in self.nodes:
            self.nodes[name] = NodeOut()
        return self.nodes[name]

    def delete_pod(self, pod: PodView, reason: str) -> None:
        """Decide to delete `pod`; a pod already deleted or on its way out is left alone."""
        key = (pod.namespace, pod.name)
        if key not in self.deleted and not pod.deleting:
            self.deleted.add(key)
            self.node(pod.node).actions.append(DeletePod(pod.namespace, pod.name, pod.node, reason))

    def stop_pod(self, pod: PodView, reason: str, annotations: dict[str, str]) -> None:
        """Decide to stop `pod` where it runs and keep it for its logs (model.actions.StopPod)."""
        self.node(pod.node).actions.append(
            StopPod(pod.namespace, pod.name, pod.node, annotations, reason)
        )

    def event(
        self, kind: str, name: str, reason: str, message: str, type: str = "Normal", *, action: str
    ) -> None:
        self.events.append(EmitEvent(kind, name, reason, message, type, action))

    def wait(self, skyhook: str, node: str, reasons: tuple[Reason, ...]) -> None:
        """Record why `node` waits for `skyhook`, after what was recorded already."""
        key = (skyhook, node)
        self.waiting[key] = self.waiting.get(key, ()) + reasons

    def wake_in(self, seconds: float) -> None:
        seconds = max(0.5, seconds)
        current = self.requeue_after
        self.requeue_after = seconds if current is None else min(current, seconds)

    def merge(self, other: Decision) -> Decision:
        """Fold `other` (a later step's decision) into this one; returns self."""
        for name, out in other.nodes.items():
            self.node(name).merge(out)
        self.first += other.first
        self.last += other.last
        self.events += other.events
        self.deleted |= other.deleted
        if other.requeue_after is not None:
            self.wake_in(other.requeue_after)
        self.starting |= other.starting
        self.releasing |= other.releasing
        for skyhook, nodes in other.complete.items():
            if skyhook in self.complete:
                self.complete[skyhook].update(nodes)
            else:
                self.complete[skyhook] = dict(nodes)
        self.looked_at += other.looked_at
        if not self.waiting:
            self.waiting = dict(other.waiting)
        else:
            for (skyhook, node), reasons in other.waiting.items():
                self.wait(skyhook, node, reasons)
        return self
