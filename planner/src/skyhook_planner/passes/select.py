"""Which of a Skyhook's selected nodes may start work: `tidy` each node's entries, then `select`
works out each node's work, whether it is done, and what the blockers (rules/blockers.py) say
about it; the rest occupy a budget slot or are candidates for `admit`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from skyhook_planner.model import waiting
from skyhook_planner.model.health import HealthGate
from skyhook_planner.model.nodestate import NodeState
from skyhook_planner.model.snapshot import NodeView, PodView
from skyhook_planner.model.status import NodeStatuses
from skyhook_planner.model.waiting import Reason
from skyhook_planner.passes.context import SkyhookContext
from skyhook_planner.passes.memory import (
    CANDIDATE,
    OCCUPIED,
    NodeSelection,
    NodeVerdict,
    ShareTotals,
)
from skyhook_planner.passes.prepare import Rollout
from skyhook_planner.passes.work import SkyhookWork, Step
from skyhook_planner.rules import blockers, drain, health, interrupts, ordering, stages
from skyhook_schemas.nodestate import (
    UNINSTALL_CYCLE,
)

# Blockers that make a node's status `blocked` (the rest only make it wait).
SELECTION_BLOCKERS = frozenset({waiting.STATE, waiting.IGNORED, waiting.TAINTS, waiting.IMAGE})


def tidy(ctx: SkyhookContext, work: SkyhookWork, node: NodeView) -> NodeState | None:
    """The node's state with same-version entries spelled differently re-keyed, entries whose
    uninstall cycle is over dropped (rules/stages.py), and a note why no candidate image
    matches (dropped once one does); None when nothing changes. What ran is recorded when a
    stage starts (advance.py)."""
    state = before = work.state(node)
    packages = ctx.spec.packages
    if not all(
        e.name in packages
        and e.version == packages[e.name].version
        and e.stage not in UNINSTALL_CYCLE
        for e in state.packages.values()
    ):
        entries = work.entries(node)
        changed = False
        renames = stages.node_work(packages, entries, work.config_updates).renames
        for old, new in renames.items():
            entry = entries.pop(old)
            if new not in entries:
                entries[new] = replace(entry, version=packages[entry.name].version)
            changed = True
        for key, entry in list(entries.items()):
            if stages.uninstall_over(entry, packages.get(entry.name)):
                del entries[key]
                changed = True
        if changed:
            state = replace(state, entries=entries, error="")
    selection = ctx.node_packages(node)
    images = {k: dict(v) for k, v in (state.images or {}).items()}
    for name in packages:
        record = images.get(name, {})
        if name in selection.unmatched:
            images[name] = {**record, "unmatched": selection.unmatched[name]}
        elif "unmatched" in record:
            record.pop("unmatched")
            if record:
                images[name] = record
            else:
                del images[name]
    if images != (state.images or {}):
        state = replace(state, images=images)
    return None if state is before else state


@dataclass(frozen=True)
class Selection:
    """Each selected node as `select` found it, and what that adds up to."""

    nodes: Mapping[str, NodeSelection]
    occupied: tuple[NodeView, ...]  # in progress: holding a budget slot
    candidates: tuple[NodeView, ...]  # may start if admitted
    decided: Step
    # The candidates with protected pods, each with them (`NodeSelection.protected`), in
    # node order, and how many nodes are not done: what admit's deferral reads
    protected: Mapping[str, tuple[PodView, ...]] = field(default_factory=dict)
    unfinished: int = 0
    # Why a node may not start, for every node something holds back
    reasons: Mapping[str, tuple[Reason, ...]] = field(default_factory=dict)
    failed: frozenset[str] = frozenset()
    order: Mapping[str, int] = field(default_factory=dict)  # each node's place in node order
    names: tuple[str, ...] = ()
    complete: Mapping[str, bool] = field(default_factory=dict)  # by node: is it done?

    def blocked(self, node: str) -> bool:
        return any(r.blocker in SELECTION_BLOCKERS for r in self.nodes[node].reasons)

    def with_reason(self, blocker: str) -> list[str]:
        """The nodes held back by `blocker`, in node order."""
        found = [n for n, why in self.reasons.items() if any(r.blocker == blocker for r in why)]
        return sorted(found, key=self.order.__getitem__)

    def totals(
        self,
        running: frozenset[str],
        node_statuses: NodeStatuses,
        node_state: Mapping[str, Mapping[str, Any]],
        list_sizes: Mapping[str, int],
        boot_ids: Mapping[str, str],
    ) -> ShareTotals:
        """What the next pass starts from, with the nodes admitted, their statuses, the
        status's nodeState mirror, each node's bytes in the status's lists and the boot ids
        found."""
        return ShareTotals(
            names=self.names,
            order=self.order,
            nodes=self.nodes,
            complete=self.complete,
            waiting=self.decided.out.waiting,
            held=self.reasons,
            occupied=self.occupied,
            candidates=self.candidates,
            protected=self.protected,
            unfinished=self.unfinished,
            failed=self.failed,
            running=running,
            node_statuses=node_statuses,
            node_state=node_state,
            list_sizes=list_sizes,
            boot_ids=boot_ids,
        )


def select(
    ctx: SkyhookContext,
    work: SkyhookWork,
    rollout: Rollout,
    kept: Mapping[str, NodeVerdict] | None = None,
    closed_gates: frozenset[str] = frozenset(),
    *,
    last: ShareTotals | None = None,
    again: Sequence[NodeView] = (),
) -> Selection:
    """`kept`: the verdicts of nodes whose inputs have not changed since an earlier pass
    (passes/memory.py); they count as that pass found them, without being looked at again.
    `closed_gates`: the Skyhooks ahead with `sequencing: all` not yet complete everywhere.
    `last`: what the last pass found over the same nodes in the same order, given while some
    verdicts are kept; with it this pass starts from there and selects only the nodes not
    kept (`again`, in node order), so a quiet pass costs the nodes that changed."""
    index = ctx.index
    kept = kept or {}
    selection_blockers = (
        blockers.IgnoreLabel(),
        blockers.Taints.of(rollout.spec, index.settings.runtime_required_taints),
    )
    readiness = (
        blockers.NotReady(),
        blockers.EarlierSkyhooks.of(
            ordering.skyhook_order(index.snap.skyhooks),
            ctx.name,
            lambda other, node: ctx.earlier.is_complete(other, node) is not False,
            closed_gates,
        ),
    )
    gate = health.gate_of(rollout.spec, rollout.policy)
    scr, names = ctx.name, rollout.selected.names
    decided = Step()
    fresh: Sequence[NodeView]
    held_before: dict[str, str] = {}  # the slot each node selected again held
    if last is not None:
        order = last.order
        nodes = dict(last.nodes)
        complete = dict(last.complete)
        decided.out.waiting.update(last.waiting)
        reasons, protected = dict(last.held), dict(last.protected)
        failed, unfinished = set(last.failed), last.unfinished
        fresh = again
        for node in fresh:  # what the last pass found for them no longer counts
            name = node.name
            held_before[name] = nodes[name].slot
            unfinished -= not nodes[name].done
            decided.out.waiting.pop((scr, name), None)
            reasons.pop(name, None)
            protected.pop(name, None)
            failed.discard(name)
    else:
        order = {name: place for place, name in enumerate(names)}
        complete = {}
        nodes, reasons, protected = {}, {}, {}
        failed, unfinished = set(), 0
        fresh = rollout.matched
    waits = decided.out.waiting
    decided.out.complete[scr] = complete
    for node in fresh:
        name = node.name
        verdict = kept.get(name)
        found = nodes[name] = (
            verdict.selected
            if verdict is not None
            else _select_node(ctx, work, node, selection_blockers, readiness, gate=gate)
        )
        complete[name] = found.done
        if found.reasons:
            reasons[name] = found.reasons
            if not found.done:
                waits[(scr, name)] = found.reasons
        unfinished += not found.done
        if found.failed:
            failed.add(name)
        if found.slot == CANDIDATE and found.protected:
            protected[name] = found.protected
    occupied, candidates, protected = _slots(
        rollout.matched, nodes, protected, last, held_before=held_before, fresh=fresh
    )
    return Selection(
        nodes,
        occupied,
        candidates,
        decided,
        protected,
        unfinished,
        reasons,
        frozenset(failed),
        order,
        names,
        complete,
    )


def _slots(
    matched: Sequence[NodeView],
    nodes: Mapping[str, NodeSelection],
    protected: dict[str, tuple[PodView, ...]],
    last: ShareTotals | None,
    *,
    held_before: Mapping[str, str],
    fresh: Sequence[NodeView],
) -> tuple[tuple[NodeView, ...], tuple[NodeView, ...], dict[str, tuple[PodView, ...]]]:
    """The occupied and candidate nodes, and the protected pods, each in node order: found
    over every node without `last`, else from the last pass's with the nodes selected again."""
    if last is None:
        return _in_slot(matched, nodes, OCCUPIED), _in_slot(matched, nodes, CANDIDATE), protected
    occupied, candidates = (
        _kept_slot(slot, kept_in, matched, nodes, held_before=held_before, fresh=fresh)
        for slot, kept_in in ((OCCUPIED, last.occupied), (CANDIDATE, last.candidates))
    )
    if any(n.name in protected for n in fresh):
        order = last.order
        protected = {name: protected[name] for name in sorted(protected, key=order.__getitem__)}
    return occupied, candidates, protected


def _kept_slot(
    slot: str,
    last: tuple[NodeView, ...],
    matched: Sequence[NodeView],
    nodes: Mapping[str, NodeSelection],
    *,
    held_before: Mapping[str, str],
    fresh: Sequence[NodeView],
) -> tuple[NodeView, ...]:
    """The nodes in `slot` in node order, from the last pass's (`last`) and the slots the
    nodes selected again held before (`held_before`): the same tuple when none of those held
    or holds it; the same nodes with the current views when they all stayed; else found over
    every node."""
    was = [name for name, held in held_before.items() if held == slot]
    if any((held == slot) != (nodes[name].slot == slot) for name, held in held_before.items()):
        return _in_slot(matched, nodes, slot)
    if not was:
        return last
    views = {n.name: n for n in fresh}
    return tuple(views.get(n.name, n) for n in last)


def _in_slot(
    matched: Sequence[NodeView], nodes: Mapping[str, NodeSelection], slot: str
) -> tuple[NodeView, ...]:
    """The nodes `select` put in `slot`, in node order."""
    return tuple(n for n in matched if nodes[n.name].slot == slot)


def _select_node(
    ctx: SkyhookContext,
    work: SkyhookWork,
    node: NodeView,
    selection_blockers: Sequence[blockers.Blocker],
    readiness: Sequence[blockers.Blocker],
    *,
    gate: HealthGate | None,
) -> NodeSelection:
    state = work.state(node)
    node_packages = ctx.node_packages(node)
    node_work = stages.node_work(
        node_packages.packages, state.packages, work.config_updates, work.reselected(node)
    )
    done = node_work.complete and not state.error
    found = blockers.reasons(selection_blockers, node)
    if state.error:
        found = (Reason(waiting.STATE, f"node state unreadable: {state.error}"), *found)
    if node_packages.unmatched:
        listed = ", ".join(f"{p} ({why})" for p, why in sorted(node_packages.unmatched.items()))
        found = (*found, Reason(waiting.IMAGE, f"no compatible image for {listed}"))
    check = work.check_pod(node.name)
    if done and health.awaits(gate, node, state, check):
        # Past its interrupt but not healthy: it keeps its cordon and its slot, not complete.
        assert gate is not None
        held = health.waiting_reason(health.problems(gate, node, check))
        return NodeSelection(node_work, False, (held, *found), OCCUPIED, failed=False)
    if done:
        return NodeSelection(node_work, done, found, slot="", failed=False)
    failed = work.failed_for_good(state)
    slot = ""
    if state.holds_slot or work.ours_on(node.name):
        slot = OCCUPIED
    elif not found:
        found = blockers.reasons(readiness, node, first_only=True)
        slot = "" if found else CANDIDATE
    protected = _protected(ctx, work, node, node_work) if slot == CANDIDATE else ()
    return NodeSelection(node_work, done, found, slot, failed, protected)


def _protected(
    ctx: SkyhookContext, work: SkyhookWork, node: NodeView, node_work: stages.NodeWork
) -> tuple[PodView, ...]:
    """The pods on a candidate matching podNonInterruptLabels, when its remaining work
    includes an interrupt (rules/drain.py `defer`), live or not: which of them still run is
    asked at admission, of the pass's deletions as they are then."""
    spec = ctx.spec
    if spec.pod_non_interrupt_labels.empty or spec.non_interrupt_wait_s == 0:
        return ()
    packages = ctx.node_packages(node).packages
    updates = work.config_updates
    if not any(
        name in packages and interrupts.has_interrupt(packages[name], updates.get(name, ()))
        for name in node_work.due
    ):
        return ()
    return drain.protected_pods(
        ctx.index.pods_on_node.get(node.name, ()),
        spec.pod_non_interrupt_labels,
        ctx.index.settings.namespace,
    )
