"""Which candidates start now: `compartments` evaluates a DeploymentPolicy's finished batches
and sizes the next, `admit` asks the holds, the pause and then the capacity (the batches, else the
budget) about each candidate in order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from itertools import repeat
from operator import attrgetter

from skyhook_planner.model import status as statuses
from skyhook_planner.model import waiting
from skyhook_planner.model.policy import Compartment
from skyhook_planner.model.snapshot import NodeView, PodView
from skyhook_planner.model.waiting import Reason
from skyhook_planner.passes.context import SkyhookContext
from skyhook_planner.passes.prepare import Rollout
from skyhook_planner.passes.select import Selection
from skyhook_planner.passes.work import SkyhookWork, Step
from skyhook_planner.rules import (
    batches,
    blockers,
    budget,
    drain,
    health,
    ordering,
    sharing,
)
from skyhook_planner.rules.soak import NO_POLICY_GROUP, Soak, soak_time
from skyhook_schemas import keys
from skyhook_schemas.nodestate import (
    COMPLETE,
)
from skyhook_schemas.status import BatchState


@dataclass(frozen=True)
class CompartmentRun:
    """One compartment this pass: its nodes, its batch state after the pass, and how many more
    of its nodes may start."""

    compartment: Compartment
    members: tuple[str, ...]
    batch: BatchState | None
    room: int


@dataclass(frozen=True)
class Compartments:
    runs: Mapping[str, CompartmentRun]
    decided: Step

    def blocker(self) -> blockers.Batches:
        return blockers.Batches(
            compartment_of={n: name for name, run in self.runs.items() for n in run.members},
            room={name: run.room for name, run in self.runs.items()},
            stopped=frozenset(
                name for name, run in self.runs.items() if run.batch and run.batch.should_stop
            ),
        )


def compartments(ctx: SkyhookContext, rollout: Rollout, selection: Selection) -> Compartments:
    """Each compartment evaluates its finished batch and sizes the next (rules/batches.py)."""
    assert rollout.policy is not None
    scr = ctx.scr
    decided = Step()
    previous = scr.status.compartment_statuses
    occupied = {n.name for n in selection.occupied}
    runs: dict[str, CompartmentRun] = {}
    groups = batches.assign(rollout.policy, rollout.matched, ordering.node_order_key)
    for compartment in rollout.policy.all:
        members = {n.name for n in groups[compartment.name]}
        before = None
        if compartment.strategy is not None:
            stored = previous.get(compartment.name)
            before = (stored.batch_state if stored else None) or BatchState()
        found = batches.Found(
            complete=sum(selection.nodes[n].done for n in members),
            failed=len(members & selection.failed),
            active=len((members & occupied) - selection.failed),
            occupied=len(members & occupied),
        )
        after, room = batches.next_batch(
            compartment,
            before,
            len(members),
            found,
            may_evaluate=scr.status.status != COMPLETE,
            may_start=not (rollout.paused or rollout.disabled),
        )
        if after is not None and after.should_stop and not (before and before.should_stop):
            decided.event(
                keys.KIND,
                ctx.name,
                "RolloutStopped",
                f'Compartment "{compartment.name}" stopped after '
                f"{after.consecutive_failures} failed batches in a row.",
                type="Warning",
                action="StopRollout",
            )
        runs[compartment.name] = CompartmentRun(
            compartment, tuple(n.name for n in groups[compartment.name]), after, room
        )
    return Compartments(runs, decided)


@dataclass(frozen=True)
class Admission:
    running: frozenset[str]  # occupied before this pass, or admitted by it
    decided: Step
    batch_starts: Mapping[str, str] | None = None  # status.batchStarts; None without a soak
    deferred: Mapping[str, str] | None = None  # status.interruptDeferred


def admit(
    ctx: SkyhookContext,
    work: SkyhookWork,
    rollout: Rollout,
    selection: Selection,
    *,
    groups: Compartments | None,
    halt: health.Halt | None = None,
) -> Admission:
    """The candidates that start now. Each is asked of the holds, the pause and the health gate's
    halt first, then of the capacity (the policy's batches, else the budget) in order: nodes left half-way (a pause,
    an external status edit) before fresh ones, then node order."""
    decided = Step()
    capacity: blockers.Blocker
    if groups is not None:
        capacity = groups.blocker()
    else:
        limit = budget.ceiling(rollout.spec.budget, len(rollout.matched))
        capacity = blockers.Budget(limit, tuple(n.name for n in selection.occupied))
    gates: tuple[blockers.Blocker, ...] = (
        blockers.OnHold(rollout.holds.stages),
        blockers.SwitchedOff(rollout.paused, rollout.disabled),
        *([halt] if halt is not None else []),
    )
    running = {n.name for n in selection.occupied}
    shared = _shared_limits(ctx, rollout, selection)
    soaking = _soak(ctx, rollout, groups)
    deferral = _deferral(ctx, work, rollout, selection)
    decided.merge(_passed_over(ctx, deferral))
    candidates = selection.candidates
    if deferral.held:
        candidates = tuple(n for n in candidates if n.name not in deferral.held)
    # The holds, the pause and the halt answer alike for every node: asked once.
    held = blockers.reasons(gates, candidates[0]) if candidates else ()
    full_budget = capacity if isinstance(capacity, blockers.Budget) and not capacity.free else None
    if full_budget is not None and not held and not shared and soaking is None:
        # A full budget turns every candidate away alike: no order to find, nothing to ask
        # (most of a large fleet's candidates in most passes).
        turned_away = (full_budget.full,)
        # One wait per candidate, recorded in C: 4,500 of them at 5,000 nodes.
        pairs = zip(repeat(ctx.name), map(attrgetter("name"), candidates))
        decided.out.waiting.update(dict.fromkeys(pairs, turned_away))
        started: list[NodeView] = []
    else:
        started = sorted(candidates, key=lambda n: not work.state(n).started)
    for node in started:
        found = held
        if not found and shared:
            found = blockers.reasons(shared, node, first_only=True)
        if not found:
            full = capacity.check(node)
            if full is None and soaking is not None:
                full = soaking.check(node)  # asked last: a node it lets through starts
            found = () if full is None else (full,)
        if found:
            decided.wait(ctx.name, node.name, found)
            continue
        running.add(node.name)
        for shared_limit in shared:
            shared_limit.take(node)
        state = work.state(node)
        if state.version is None:
            decided.changes.states[node.name] = replace(
                state, version=ctx.settings.operator_version
            )
    if rollout.holds.stages is not None and candidates:
        decided.wake_in(rollout.holds.stages.recheck_s)
    decided.changes.picked.update(_picked(ctx, rollout, selection, running))
    if shared:  # only a shared limit gives the reasons these conditions report
        decided.merge(_shared_conditions(ctx, decided))
    if soaking is None:
        return Admission(frozenset(running), decided, deferred=deferral.since)
    decided.merge(_soak_report(ctx, soaking))
    return Admission(frozenset(running), decided, soaking.starts(), deferral.since)


def _picked(
    ctx: SkyhookContext, rollout: Rollout, selection: Selection, running: set[str]
) -> dict[str, str]:
    """Every node that runs is recorded once, with the time it was picked (rules/ordering.py):
    those not recorded yet, in node order."""
    new = running - ctx.scr.status.node_priority.keys()
    if not new:  # most passes
        return {}
    picked = ordering.picked_at(ctx.now)
    return {
        node.name: picked
        for node in rollout.matched
        if node.name in new and not selection.nodes[node.name].done
    }


def _passed_over(ctx: SkyhookContext, deferral: drain.Deferral) -> Step:
    decided = Step()
    for name, pods in deferral.held.items():
        names = ", ".join(f"{p.namespace}/{p.name}" for p in pods)
        reason = f"passed over, uncordoned, while non-interrupt pods run: {names}"
        decided.wait(ctx.name, name, (Reason(waiting.DRAIN, reason, hold=drain.NON_INTERRUPT),))
    if deferral.recheck_s is not None:
        decided.wake_in(deferral.recheck_s)
    return decided


def _deferral(
    ctx: SkyhookContext, work: SkyhookWork, rollout: Rollout, selection: Selection
) -> drain.Deferral:
    """The candidates passed over because protected pods run on them (rules/drain.py `defer`):
    only nodes whose remaining work includes an interrupt, as `select` found them
    (`Selection.protected`, the pods whether or not they run: asked here)."""
    spec = rollout.spec
    if spec.pod_non_interrupt_labels.empty or spec.non_interrupt_wait_s == 0:
        return drain.Deferral({}, {})
    found: dict[str, tuple[PodView, ...]] = {}
    for name, protected in selection.protected.items():
        pods = tuple(p for p in protected if work.live(p))
        if pods:
            found[name] = pods
    if not found:
        return drain.Deferral({}, {})
    # Another node is left to do: the found ones are candidates, none of them done.
    others_left = selection.unfinished > len(found)
    return drain.defer(
        found, others_left, ctx.scr.status.interrupt_deferred, spec.non_interrupt_wait_s, ctx.now
    )


def _shared_limits(
    ctx: SkyhookContext, rollout: Rollout, selection: Selection
) -> list[sharing.Limit]:
    """The policy's limits over all its Skyhooks (rules/sharing.py), this Skyhook's nodes in
    progress counted."""
    if rollout.policy is None:
        return []
    snap = ctx.index.snap
    found = sharing.limits(rollout.policy, snap.skyhooks, snap.nodes, ctx.running_for)
    for limit in found:
        for node in selection.occupied:
            limit.take(node)
    return found


# The condition each shared limit sets while it holds nodes of the Skyhook back.
_SHARED_CONDITIONS = (
    (waiting.SHARED_BUDGET, statuses.CONDITION_SHARED_BUDGET_FULL, "SharedBudgetFull"),
    (waiting.TOPOLOGY, statuses.CONDITION_TOPOLOGY_LIMIT, "TopologyLimit"),
)


def _shared_conditions(ctx: SkyhookContext, admitted: Step) -> Step:
    """A condition (and, when it is new, an Event) for each shared limit holding nodes back."""
    decided = Step()
    for blocker, kind, reason in _SHARED_CONDITIONS:
        held = sorted(
            (node, r)
            for (scr, node), found in admitted.out.waiting.items()
            for r in found
            if scr == ctx.name and r.blocker == blocker
        )
        if not held:
            continue
        first = held[0][1]
        holders = ", ".join(first.nodes[:10]) + (" ..." if len(first.nodes) > 10 else "")
        message = f"{len(held)} node(s) wait: {first.message} (in progress: {holders})"
        decided.changes.conditions.append(statuses.condition(kind, True, reason, message, ctx.now))
        if ctx.scr.status.condition(kind) is None:
            decided.event(keys.KIND, ctx.name, reason, message, action="HoldNodes")
    return decided


def _soak(ctx: SkyhookContext, rollout: Rollout, groups: Compartments | None) -> Soak | None:
    """The soak blocker (rules/soak.py), None without a soak time."""
    seconds = soak_time(rollout.spec, rollout.policy)
    if seconds is None:
        return None
    recorded = ctx.scr.status.batch_starts
    if groups is None:
        return Soak(seconds, ctx.now, recorded, lambda _: NO_POLICY_GROUP, per_node=True)
    compartment_of = {n: name for name, run in groups.runs.items() for n in run.members}
    return Soak(seconds, ctx.now, recorded, compartment_of.__getitem__, per_node=False)


def _soak_report(ctx: SkyhookContext, soaking: Soak) -> Step:
    """The soak's condition, an Event per batch (or node) start, and a timer for its end."""
    decided = Step()
    decided.changes.conditions.append(soaking.condition(ctx.scr.generation))
    for group in sorted(soaking.started):
        decided.event(
            keys.KIND, ctx.name, "SoakStarted", soaking.start_message(group), action="StartSoak"
        )
    wake = soaking.wake_in()
    if wake is not None:
        decided.wake_in(wake)
    return decided
