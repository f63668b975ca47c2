"""Which of a Skyhook's selected nodes may start work: `tidy` each node's entries, then `select`
works out each node's work, whether it is done, and what the blockers (rules/blockers.py) say
about it; the rest occupy a budget slot or are candidates for `admit`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from skyhook_planner.model import waiting
from skyhook_planner.model.health import HealthGate
from skyhook_planner.model.nodestate import NodeState
from skyhook_planner.model.snapshot import NodeView, PodView
from skyhook_planner.model.waiting import Reason
from skyhook_planner.passes.context import SkyhookContext
from skyhook_planner.passes.memory import CANDIDATE, OCCUPIED, NodeSelection, NodeVerdict
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
    """Each selected node as `select` found it."""

    nodes: Mapping[str, NodeSelection]
    occupied: tuple[NodeView, ...]  # in progress: holding a budget slot
    candidates: tuple[NodeView, ...]  # may start if admitted
    decided: Step
    # The candidates with protected pods, each with them (`NodeSelection.protected`), in
    # node order, and how many nodes are not done: what admit's deferral reads
    protected: Mapping[str, tuple[PodView, ...]] = field(default_factory=dict)
    unfinished: int = 0

    @cached_property
    def reasons(self) -> dict[str, tuple[Reason, ...]]:
        """Why a node may not start, for every node something holds back."""
        return {name: found.reasons for name, found in self.nodes.items() if found.reasons}

    @cached_property
    def failed(self) -> frozenset[str]:
        return frozenset(name for name, found in self.nodes.items() if found.failed)

    def blocked(self, node: str) -> bool:
        return any(r.blocker in SELECTION_BLOCKERS for r in self.nodes[node].reasons)

    def with_reason(self, blocker: str) -> list[str]:
        return [n for n, found in self.reasons.items() if any(r.blocker == blocker for r in found)]


def select(
    ctx: SkyhookContext,
    work: SkyhookWork,
    rollout: Rollout,
    kept: Mapping[str, NodeVerdict] | None = None,
    closed_gates: frozenset[str] = frozenset(),
) -> Selection:
    """`kept`: the verdicts of nodes whose inputs have not changed since an earlier pass
    (passes/memory.py); they count as that pass found them, without being looked at again.
    `closed_gates`: the Skyhooks ahead with `sequencing: all` not yet complete everywhere."""
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
    nodes: dict[str, NodeSelection] = {}
    occupied: list[NodeView] = []
    candidates: list[NodeView] = []
    protected: dict[str, tuple[PodView, ...]] = {}
    unfinished = 0
    decided = Step()
    complete = decided.out.complete
    for node in rollout.matched:
        verdict = kept.get(node.name)
        found = nodes[node.name] = (
            verdict.selected
            if verdict is not None
            else _select_node(ctx, work, node, selection_blockers, readiness, gate=gate)
        )
        complete[(ctx.name, node.name)] = found.done
        if not found.done:
            unfinished += 1
            if found.reasons:
                decided.wait(ctx.name, node.name, found.reasons)
        if found.slot == OCCUPIED:
            occupied.append(node)
        elif found.slot == CANDIDATE:
            candidates.append(node)
            if found.protected:
                protected[node.name] = found.protected
    return Selection(nodes, tuple(occupied), tuple(candidates), decided, protected, unfinished)


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
