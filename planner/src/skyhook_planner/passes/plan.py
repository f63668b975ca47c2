"""`plan(snapshot, settings) -> Plan`: one planning pass (the steps are described in
passes/rollout.py). Pure: the same snapshot always gives the same plan.

The pass asks each step for its `Decision` (auto-taint, each Skyhook's share or cleanup, the
runtime-required taint), merges them in order, and turns the result into the ordered actions
of a `Plan`. Between Skyhooks it folds each one's decision into `Earlier` (passes/earlier.py),
the value the next Skyhook reads of what came before; each share's memory for the next pass
(passes/memory.py) is collected apart from the plan output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from skyhook_planner import podbuilder
from skyhook_planner.model.actions import (
    Action,
    PatchNode,
    Plan,
    UpsertConfigMap,
)
from skyhook_planner.model.nodestate import NodeChanges
from skyhook_planner.model.settings import PlannerSettings
from skyhook_planner.model.snapshot import ClusterSnapshot, NodeView, SkyhookView
from skyhook_planner.passes import rollout, uninstall
from skyhook_planner.passes.cleanup import cleanup
from skyhook_planner.passes.context import PassIndex
from skyhook_planner.passes.decision import Decision
from skyhook_planner.passes.earlier import Earlier
from skyhook_planner.passes.memory import PassMemory, SkyhookMemory
from skyhook_planner.rules import ordering
from skyhook_schemas import keys


def plan(snapshot: ClusterSnapshot, settings: PlannerSettings) -> Plan:
    """One pass from nothing but the snapshot."""
    return replan(snapshot, settings, None)[0]


def replan(
    snapshot: ClusterSnapshot, settings: PlannerSettings, memory: PassMemory | None
) -> tuple[Plan, PassMemory]:
    """One pass that reuses what the last one kept (`memory`, passes/memory.py): the same plan
    as `plan(snapshot, settings)`, for the cost of the nodes whose inputs changed. Returns what
    this pass keeps for the next."""
    memory = memory or PassMemory()
    index = PassIndex(snapshot, settings, memory.grouped)
    decision, kept = decide(index, memory)
    return assemble(index, decision), kept


class Replanner:
    """`replan` for a caller that runs one pass after another: it keeps the memory between
    them. Its only state is that memory, which never changes what a pass plans."""

    def __init__(self) -> None:
        self._memory: PassMemory | None = None

    def __call__(self, snapshot: ClusterSnapshot, settings: PlannerSettings) -> Plan:
        result, self._memory = replan(snapshot, settings, self._memory)
        return result


def decide(index: PassIndex, memory: PassMemory) -> tuple[Decision, PassMemory]:
    """Every step's decision, merged in order, and what the pass keeps for the next one. Each
    Skyhook reads what the ones before it decided as a value (`Earlier`), built from their
    decisions between Skyhooks."""
    ordered = ordering.skyhook_order(index.snap.skyhooks)
    decision = auto_taint(index, ordered)
    earlier = Earlier().after(decision)
    remembered: dict[str, SkyhookMemory] = {}
    for scr in ordered:
        running = None
        if scr.deleting and not uninstall.deletion_pending(index, scr):
            decided = cleanup(index, scr, earlier)
        else:
            share = rollout.decide(index, scr, earlier, memory.skyhooks.get(scr.name))
            decided = share.decided
            if share.memory is not None:
                remembered[scr.name] = share.memory
            if share.running is not None:
                running = {scr.name: share.running}
        decision.merge(decided)
        earlier = earlier.after(decided, running)
    decision.merge(runtime_required(index, ordered, earlier))
    return decision, PassMemory(remembered, index.grouped)


def auto_taint(index: PassIndex, skyhooks: Sequence[SkyhookView]) -> Decision:
    """Taint nodes new to Skyhook that a runtimeRequired, autoTaintNewNodes Skyhook selects."""
    decision = Decision()
    taint = index.settings.runtime_required_taint
    runtime_taints = index.settings.runtime_required_taints
    for scr in skyhooks:
        spec = scr.spec
        if (
            scr.deleting
            or spec is None
            or not (spec.runtime_required and spec.auto_taint_new_nodes)
        ):
            continue
        for node in index.snap.nodes:
            new = not any(k.startswith(keys.PREFIX) for k in node.annotations)
            if (
                new
                and spec.node_selector.matches(node.labels)
                # One that joined with the other group's runtime taint is tainted already.
                and not node.carries_any(runtime_taints)
            ):
                decision.node(node.name).taint_as_new(taint)
    return decision


def runtime_required(
    index: PassIndex, skyhooks: Sequence[SkyhookView], earlier: Earlier
) -> Decision:
    """Drop the runtime-required taint where every runtimeRequired Skyhook is complete, and in
    the same write cordon the node if one of them asks to (runtimeRequiredCordonAfter). The
    runtime-required cordon ends when someone uncordons the node: its annotation goes too."""
    decision = Decision()
    marker = keys.RUNTIME_REQUIRED_CORDON_ANNOTATION
    for node in index.snap.nodes:
        if marker in node.annotations and not node.unschedulable:
            decision.node(node.name).changes.annotations[marker] = None
    if not any(s.spec is not None and s.spec.runtime_required for s in skyhooks):
        return decision  # no Skyhook wants the taint dropped anywhere
    runtime_taints = index.settings.runtime_required_taints
    for node in index.snap.nodes:
        present = [t for t in runtime_taints if any(t.same_as(n) for n in node.taints)]
        if not present:
            continue
        wanting = [
            s
            for s in skyhooks
            if s.spec is not None
            and s.spec.runtime_required
            and s.spec.node_selector.matches(node.labels)
        ]
        live = [s for s in wanting if not s.deleting]
        if not (wanting and all(earlier.is_complete(s.name, node.name) for s in live)):
            continue
        out = decision.node(node.name)
        out.remove_taints.extend(present)
        asking = [
            s.name for s in live if s.spec is not None and s.spec.runtime_required_cordon_after
        ]
        if asking:
            out.unschedulable = True
            out.changes.annotations[marker] = "true"
            decision.event(
                "Node",
                node.name,
                "RuntimeRequiredCordon",
                f"runtime-required taint removed and node [{node.name}] cordoned for "
                f"[{keys.SINGULAR}:{', '.join(asking)}] (runtimeRequiredCordonAfter); uncordon it and "
                f"remove the annotation {marker} together",
                action="CordonNode",
            )
    return decision


def assemble(index: PassIndex, decision: Decision) -> Plan:
    """The decision as ordered actions: per node its patch (conditions included), metadata
    ConfigMaps, then pods; SCR-wide actions first and last; events at the very end."""
    actions: list[Action] = list(decision.first)
    for name in sorted(decision.nodes):
        out = decision.nodes[name]
        node = index.nodes.get(name)
        if node is None:
            actions += out.actions
            continue
        unschedulable = out.unschedulable if out.unschedulable != node.unschedulable else None
        patch = PatchNode(
            name,
            annotations=dict(out.changes.annotations),
            labels=dict(out.changes.labels),
            add_taints=tuple(out.add_taints),
            remove_taints=tuple(out.remove_taints),
            unschedulable=unschedulable,
            conditions=tuple(out.conditions),
            remove_conditions=tuple(out.drop_conditions),
        )
        if patch != PatchNode(name):
            actions.append(patch)
        for scr in out.metadata_for:
            cm = _metadata_configmap(index, scr, node, out.changes)
            if cm is not None:
                actions.append(cm)
        actions += out.actions
    return Plan(
        (*actions, *decision.last, *decision.events),
        decision.requeue_after,
        starting=frozenset(decision.starting),
        releasing=frozenset(decision.releasing),
        waiting=decision.waiting,
        looked_at=decision.looked_at,
    )


def _metadata_configmap(
    index: PassIndex, scr: SkyhookView, node: NodeView, changes: NodeChanges
) -> UpsertConfigMap | None:
    def applied(current: Mapping[str, str], delta: Mapping[str, str | None]) -> dict[str, str]:
        merged = {**current, **delta}
        return {k: v for k, v in merged.items() if v is not None}

    manifest = podbuilder.build_metadata_configmap(
        index.settings,
        scr,
        node,
        labels=applied(node.labels, changes.labels),
        annotations=applied(node.annotations, changes.annotations),
    )
    existing = index.configmaps.get(manifest["metadata"]["name"])
    if existing is not None and existing.holds(manifest["data"]):
        return None
    return UpsertConfigMap(manifest)
