"""Which of a Skyhook's selected nodes may start work: `tidy` each node's entries, then `select`
works out each node's work, whether it is done, and what the blockers (rules/blockers.py) say
about it; the rest occupy a budget slot or are candidates for `admit`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from skyhook_planner.model import waiting
from skyhook_planner.model.nodestate import NodeState
from skyhook_planner.model.snapshot import NodeView
from skyhook_planner.model.waiting import Reason
from skyhook_planner.passes.context import SkyhookContext
from skyhook_planner.passes.decision import Decision
from skyhook_planner.passes.prepare import Rollout
from skyhook_planner.rules import blockers, ordering, stages
from skyhook_schemas.nodestate import (
    COMPLETE,
    ERRORING,
    IN_PROGRESS,
    UNINSTALL,
)

# Blockers that make a node's status `blocked` (the rest only make it wait).
SELECTION_BLOCKERS = frozenset({waiting.STATE, waiting.IGNORED, waiting.TAINTS, waiting.IMAGE})


def tidy(ctx: SkyhookContext, node: NodeView) -> NodeState | None:
    """The node's state with same-version entries spelled differently re-keyed, finished
    uninstall markers of packages that are gone dropped, and a note why no candidate image
    matches (dropped once one does); None when nothing changes. What ran is recorded when a
    stage starts (advance.py)."""
    state = before = ctx.state(node)
    packages = ctx.spec.packages
    if not all(
        e.name in packages and e.version == packages[e.name].version
        for e in state.packages.values()
    ):
        entries = ctx.entries(node)
        changed = False
        renames = stages.node_work(packages, entries, ctx.config_updates).renames
        for old, new in renames.items():
            entry = entries.pop(old)
            if new not in entries:
                entries[new] = replace(entry, version=packages[entry.name].version)
            changed = True
        for key, entry in list(entries.items()):
            wanted = packages.get(entry.name)
            if (
                entry.stage == UNINSTALL
                and entry.state == COMPLETE
                and (wanted is None or wanted.key != key)
            ):
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

    work: Mapping[str, stages.NodeWork]
    reasons: Mapping[str, tuple[Reason, ...]]  # why a node may not start, any node
    occupied: tuple[NodeView, ...]  # in progress: holding a budget slot
    candidates: tuple[NodeView, ...]  # may start if admitted
    failed: frozenset[str]  # a package erroring or retrying
    decided: Decision

    def blocked(self, node: str) -> bool:
        return any(r.blocker in SELECTION_BLOCKERS for r in self.reasons.get(node, ()))

    def with_reason(self, blocker: str) -> list[str]:
        return [n for n, found in self.reasons.items() if any(r.blocker == blocker for r in found)]


def select(ctx: SkyhookContext, rollout: Rollout) -> Selection:
    index, name = ctx.index, ctx.name
    decided = Decision()
    work: dict[str, stages.NodeWork] = {}
    reasons: dict[str, tuple[Reason, ...]] = {}
    failed: set[str] = set()
    occupied: list[NodeView] = []
    candidates: list[NodeView] = []
    selection_blockers = (
        blockers.IgnoreLabel(),
        blockers.Taints.of(rollout.spec, index.settings.runtime_required_taint),
    )
    readiness = (
        blockers.NotReady(),
        blockers.EarlierSkyhooks.of(
            ordering.skyhook_order(index.snap.skyhooks),
            name,
            lambda other, node: ctx.complete(other, node, default=True),
        ),
    )
    for node in rollout.matched:
        state = ctx.state(node)
        node_packages = ctx.node_packages(node)
        node_work = stages.node_work(
            node_packages.packages, state.packages, ctx.config_updates, ctx.reselected(node)
        )
        work[node.name] = node_work
        done = node_work.complete and not state.error
        decided.complete[(name, node.name)] = done
        found = blockers.reasons(selection_blockers, node)
        if state.error:
            found = (Reason(waiting.STATE, f"node state unreadable: {state.error}"), *found)
        if node_packages.unmatched:
            listed = ", ".join(f"{p} ({why})" for p, why in sorted(node_packages.unmatched.items()))
            found = (*found, Reason(waiting.IMAGE, f"no compatible image for {listed}"))
        if found:
            reasons[node.name] = found
        holding = node.name in index.holding  # being started or released
        if done and not holding:
            continue
        if any(
            e.state == ERRORING or (e.state == IN_PROGRESS and e.restarts)
            for e in state.packages.values()
        ):
            failed.add(node.name)
        if state.holds_slot or ctx.ours_on(node.name) or holding:
            occupied.append(node)
        elif node.name not in index.writing and not found:
            waits = blockers.reasons(readiness, node, first_only=True)
            if waits:
                reasons[node.name] = waits
            else:
                candidates.append(node)
    for node_name, why in reasons.items():
        if not decided.complete[(name, node_name)]:
            decided.wait(name, node_name, why)
    return Selection(work, reasons, tuple(occupied), tuple(candidates), frozenset(failed), decided)
