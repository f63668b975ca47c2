"""One Skyhook's share of a pass, as steps that each return what they decided. `decide` runs
them in order and merges each `Decision` before the next step runs, so every step reads what
the earlier ones decided (through the `SkyhookContext`).

1. `bookkeeping`: the finalizer and the operator-version annotation.
2. `prepare`: what the Skyhook needs to run at all (spec, DeploymentPolicy, image artifacts)
   and this pass's fixed facts about it (`Rollout`); one that cannot run is `unrunnable`.
3. learn from its pods (learn.py), keep package ConfigMaps current (configmaps.py).
4. `tidy` each selected node's entries; `select`: each node's work, whether it is done, and
   which blockers (rules/blockers.py) hold it back; the rest occupy a budget slot or are
   candidates.
5. `compartments` (with a DeploymentPolicy) evaluate finished batches; `admit` asks the holds,
   the pause and then the budget or the batches which candidates start now.
6. `advance` (advance.py) each admitted node that may work; `finish` each node's status.
7. `save` node states as annotation changes; `status` writes the Skyhook's status.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from skyhook_planner.model import nodestate, waiting
from skyhook_planner.model import status as statuses
from skyhook_planner.model.actions import AddFinalizer, AnnotateSkyhook, PatchSkyhookStatus
from skyhook_planner.model.nodestate import NodeState
from skyhook_planner.model.policy import Compartment, Policy
from skyhook_planner.model.snapshot import NodeView, SkyhookView
from skyhook_planner.model.spec import Budget, SkyhookSpec
from skyhook_planner.model.waiting import Reason
from skyhook_planner.passes import configmaps, learn
from skyhook_planner.passes.advance import advance
from skyhook_planner.passes.context import PassIndex, SkyhookContext
from skyhook_planner.passes.decision import Decision, SkyhookWork
from skyhook_planner.rules import batches, blockers, budget, holds, ordering, stages
from skyhook_schemas import keys
from skyhook_schemas.nodestate import (
    BLOCKED,
    COMPLETE,
    ERRORING,
    IN_PROGRESS,
    SKIPPED,
    UNINSTALL,
    UNKNOWN,
)
from skyhook_schemas.status import BatchState

# Blockers that make a node's status `blocked` (the rest only make it wait).
SELECTION_BLOCKERS = frozenset({waiting.STATE, waiting.IGNORED, waiting.TAINTS, waiting.IMAGE})


def decide(index: PassIndex, scr: SkyhookView, earlier: Decision) -> Decision:
    """What the pass does for `scr`, given what the Skyhooks before it decided."""
    decided = Decision(
        work=SkyhookWork(config_updates={k: list(v) for k, v in scr.status.config_updates.items()})
    )
    decided.merge(bookkeeping(index, scr))
    prepared = prepare(index, scr)
    if isinstance(prepared, Unrunnable):
        return decided.merge(unrunnable(index, scr, prepared)).released()
    rollout = prepared
    decided.merge(rollout.decided)
    ctx = SkyhookContext(
        index,
        scr,
        spec=rollout.spec,
        matched=rollout.matched,
        earlier=earlier,
        so_far=decided,
        holds=rollout.holds,
    )
    for pod in ctx.pods():
        decided.merge(learn.from_pod(ctx, pod))
    boot_ids, rebooted = learn.track_reboots(ctx)
    decided.merge(rebooted)
    decided.merge(learn.validate_pods(ctx))
    decided.merge(configmaps.reconcile(ctx))
    decided.merge(configmaps.clear_on_version_change(ctx))
    for node in rollout.matched:
        tidied = tidy(ctx, node)
        if tidied is not None:
            decided.work.states[node.name] = tidied
    selection = select(ctx, rollout)
    decided.merge(selection.decided)
    groups = compartments(ctx, rollout, selection) if rollout.policy is not None else None
    if groups is not None:
        decided.merge(groups.decided)
    admission = admit(ctx, rollout, selection, groups)
    decided.merge(admission.decided)
    node_statuses: dict[str, str] = {}
    for node in rollout.matched:
        blocked = selection.blocked(node.name)
        running = node.name in admission.running
        complete = decided.complete[(scr.name, node.name)]
        switched_off = blockers.SwitchedOff(rollout.paused, rollout.disabled).check(node)
        if running and not (switched_off or blocked or node.name in index.writing):
            if node.ready and not complete:
                # Advancing only ever starts stages, so the node stays incomplete.
                decided.merge(advance(ctx, node, selection.work[node.name]))
        elif running and switched_off and not complete:
            decided.wait(scr.name, node.name, (switched_off,))
        node_status, finished = finish(ctx, rollout, node, running=running, blocked=blocked)
        node_statuses[node.name] = node_status
        if finished is not None:
            decided.merge(finished)
    decided.merge(selection_conditions(ctx, rollout, selection))
    matched_names = {n.name for n in rollout.matched}
    for node in index.snap.nodes:  # left the selector: give back a cordon we hold
        if node.name not in matched_names:
            released = release_unselected(ctx, node)
            if released is not None:
                decided.merge(released)
    decided.merge(save(ctx, decided.work.states))
    decided.merge(
        status(
            ctx,
            rollout,
            node_statuses,
            boot_ids=boot_ids,
            groups=groups,
            conditions=decided.work.conditions,
            config_updates=decided.work.config_updates or {},
        )
    )
    return decided.released()


def bookkeeping(index: PassIndex, scr: SkyhookView) -> Decision:
    """Our finalizer, and the annotation naming the operator version that manages the Skyhook."""
    decided = Decision()
    if keys.FINALIZER not in scr.finalizers:
        decided.first.append(AddFinalizer(scr.name, keys.FINALIZER))
    version = index.settings.operator_version
    if scr.annotations.get(keys.SKYHOOK_VERSION_ANNOTATION) != version:
        decided.first.append(AnnotateSkyhook(scr.name, {keys.SKYHOOK_VERSION_ANNOTATION: version}))
    return decided


# --- what the Skyhook needs to run ----------------------------------------------------------------


@dataclass(frozen=True)
class Unrunnable:
    """Why a Skyhook cannot run at all this pass; its status says so in `condition`."""

    condition: str
    reason: str
    message: str
    matched: tuple[NodeView, ...] = ()  # the nodes it selects, which all wait on it


@dataclass(frozen=True)
class Rollout:
    """One Skyhook's fixed facts for this pass."""

    spec: SkyhookSpec
    policy: Policy | None
    holds: holds.Holds
    paused: bool
    disabled: bool
    matched: tuple[NodeView, ...]  # selected nodes, in node order
    decided: Decision  # the spec warning and hold conditions found while preparing


def prepare(index: PassIndex, scr: SkyhookView) -> Rollout | Unrunnable:
    spec = scr.spec
    if spec is None:
        return Unrunnable(
            statuses.CONDITION_SPEC_INVALID, "SpecInvalid", statuses.summarize(scr.spec_errors)
        )
    matched = tuple(
        sorted(
            (n for n in index.snap.nodes if spec.node_selector.matches(n.labels)),
            key=ordering.node_order_key,
        )
    )
    policy: Policy | None = None
    if spec.deployment_policy:
        found = index.policies.get(spec.deployment_policy)
        if found is None:  # fail closed, as upstream does
            message = f'DeploymentPolicy "{spec.deployment_policy}" not found'
            return Unrunnable(
                statuses.CONDITION_POLICY_NOT_FOUND, "DeploymentPolicyNotFound", message, matched
            )
        if found.policy is None:
            prefix = f'DeploymentPolicy "{found.name}": '
            message = prefix + statuses.summarize(
                found.errors, statuses.MAX_CONDITION_MESSAGE - len(prefix)
            )
            return Unrunnable(
                statuses.CONDITION_POLICY_INVALID, "DeploymentPolicyInvalid", message, matched
            )
        policy = found.policy
    unavailable = _unavailable_artifacts(index, spec)
    if unavailable:
        return Unrunnable(
            statuses.CONDITION_IMAGE_COMPATIBILITY,
            "ImageCompatibilityUnavailable",
            unavailable,
            matched,
        )
    decided = spec_warnings(index, scr, spec)
    window, gate = spec.maintenance_window, spec.alert_gate
    if policy is not None:  # the Skyhook's own gates, else its policy's
        window = window or policy.maintenance_window
        gate = gate or policy.alert_gate
    found_holds = holds.evaluate(
        window,
        gate,
        index.alerts,
        index.now,
        alert_recheck_s=index.settings.alert_recheck_s,
        generation=scr.generation,
    )
    decided.work.conditions += found_holds.conditions
    return Rollout(
        spec=spec,
        policy=policy,
        holds=found_holds,
        paused=scr.annotations.get(keys.PAUSE_ANNOTATION) == "true" or spec.pause,
        disabled=scr.annotations.get(keys.DISABLE_ANNOTATION) == "true",
        matched=matched,
        decided=decided,
    )


def _unavailable_artifacts(index: PassIndex, spec: SkyhookSpec) -> str:
    """Why some package's image compatibility artifact cannot be used ("" when all can): no
    node gets a guessed image, so the Skyhook waits until every artifact is readable."""
    problems = []
    for name, package in sorted(spec.packages.items()):
        source = package.image_compatibility
        if source is None or source.inline is not None:
            continue
        found = index.snap.image_artifacts.get(source.source)
        if found is None:
            problems.append(f"package {name}: {source.source} not fetched yet")
        elif isinstance(found, str):
            problems.append(f"package {name}: {found}")
    return "; ".join(problems)


def unrunnable(index: PassIndex, scr: SkyhookView, why: Unrunnable) -> Decision:
    """A Skyhook that cannot run at all: status blocked, with a condition saying why and a
    Warning Event when that reason is new; every node it selects waits on it."""
    decided = Decision()
    previous = scr.status.condition(why.condition)
    if (
        previous is None
        or previous.get("status") != "True"
        or previous.get("message") != why.message
    ):
        decided.event("Skyhook", scr.name, why.reason, why.message, type="Warning")
    wanted = {
        "status": BLOCKED,
        "conditions": statuses.merge_conditions(
            list(scr.status.conditions),
            [
                statuses.condition(why.condition, True, why.reason, why.message, index.now),
                *statuses.kstatus_conditions(
                    BLOCKED, index.now, generation=scr.generation, message=why.message
                ),
            ],
        ),
    }
    stored = scr.status.to_json()
    patch = statuses.merge_patch({k: stored.get(k) for k in wanted}, wanted)
    if patch:
        decided.last.append(PatchSkyhookStatus(scr.name, patch))
    label = "policy" if why.condition in statuses.POLICY_BLOCKED_CONDITIONS else "image"
    reason = Reason(waiting.SKYHOOK, f"{label}: {why.message}")
    for node in why.matched:
        decided.wait(scr.name, node.name, (reason,))
    return decided


def spec_warnings(index: PassIndex, scr: SkyhookView, spec: SkyhookSpec) -> Decision:
    """Spellings upstream runs that we read differently are reported in a condition, and in a
    Warning Event when they change."""
    decided = Decision()
    previous = scr.status.condition(statuses.CONDITION_SPEC_WARNING)
    message = "; ".join(spec.warnings)
    if not message and (previous is None or previous.get("status") == "False"):
        return decided
    if message and (previous is None or previous.get("message") != message):
        decided.event("Skyhook", scr.name, "SpecWarning", message, type="Warning")
    decided.work.conditions.append(
        statuses.condition(
            statuses.CONDITION_SPEC_WARNING,
            bool(message),
            "SpecWarning" if message else "NoSpecWarning",
            message or "The spec is read as written.",
            index.now,
            generation=scr.generation,
        )
    )
    return decided


# --- nodes ------------------------------------------------------------------------------------


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
        in_progress = state.status in {IN_PROGRESS, ERRORING} or state.cordoned
        if in_progress or ctx.ours_on(node.name) or holding:
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
    decided: Decision

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
    decided = Decision()
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
            complete=sum(ctx.complete(ctx.name, n, default=False) for n in members),
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
                "Skyhook",
                ctx.name,
                "RolloutStopped",
                f'Compartment "{compartment.name}" stopped after '
                f"{after.consecutive_failures} failed batches in a row.",
                type="Warning",
            )
        runs[compartment.name] = CompartmentRun(
            compartment, tuple(n.name for n in groups[compartment.name]), after, room
        )
    return Compartments(runs, decided)


@dataclass(frozen=True)
class Admission:
    running: frozenset[str]  # occupied before this pass, or admitted by it
    decided: Decision


def admit(
    ctx: SkyhookContext, rollout: Rollout, selection: Selection, groups: Compartments | None
) -> Admission:
    """The candidates that start now. Each is asked of the holds and the pause first, then of
    the capacity (the policy's batches, else the budget) in order: nodes left half-way (a pause,
    an external status edit) before fresh ones, then node order."""
    decided = Decision()
    capacity: blockers.Blocker
    if groups is not None:
        capacity = groups.blocker()
    else:
        limit = budget.ceiling(rollout.spec.budget, len(rollout.matched))
        capacity = blockers.Budget(limit, tuple(n.name for n in selection.occupied))
    gates = (
        blockers.Held(rollout.holds.stages),
        blockers.SwitchedOff(rollout.paused, rollout.disabled),
    )
    running = {n.name for n in selection.occupied}
    started = sorted(selection.candidates, key=lambda n: not _started(ctx, n))
    for node in started:
        found = blockers.reasons(gates, node)
        if not found:
            full = capacity.check(node)
            found = () if full is None else (full,)
        if found:
            decided.wait(ctx.name, node.name, found)
            continue
        running.add(node.name)
        state = ctx.state(node)
        if state.version is None:
            decided.work.states[node.name] = replace(state, version=ctx.settings.operator_version)
    if rollout.holds.stages is not None and started:
        decided.wake_in(rollout.holds.stages.recheck_s)
    return Admission(frozenset(running), decided)


def _started(ctx: SkyhookContext, node: NodeView) -> bool:
    return any(
        e.state in {IN_PROGRESS, ERRORING, SKIPPED} for e in ctx.state(node).packages.values()
    )


def finish(
    ctx: SkyhookContext, rollout: Rollout, node: NodeView, *, running: bool, blocked: bool
) -> tuple[str, Decision | None]:
    """The node's status for this Skyhook after the pass, and what that decides (None for
    most nodes: nothing): its conditions, its state, its cordon given back once complete."""
    decided = None
    state = ctx.state(node)
    complete = ctx.complete(ctx.name, node.name, default=False)
    erroring = any(e.state in {ERRORING, UNKNOWN} for e in state.packages.values())
    value = statuses.node_status(
        complete=complete,
        blocked=blocked,
        erroring=erroring,
        in_progress=running,
        paused=rollout.paused,
        disabled=rollout.disabled,
    )
    if complete and state.cordoned:
        decided = decided or Decision()
        decided.node(node.name).unschedulable = False
        state = replace(state, cordoned=False)
    if complete and state.status != COMPLETE and state.entries is not None:
        decided = decided or Decision()
        decided.event("Node", node.name, "State", f"Skyhook [{ctx.name}] complete.")
    # Most nodes are as their annotations and status label say: nothing to save for them.
    if not (
        state is ctx.before(node)
        and state.status == value
        and node.labels.get(keys.node_status_key(ctx.name)) == value
    ):
        decided = decided or Decision()
        decided.work.states[node.name] = replace(state, status=value)
    wanted = nodestate.conditions_for(ctx.name, complete, erroring)
    stale = nodestate.stale_conditions(node, wanted)
    if stale:
        decided = decided or Decision()
        decided.node(node.name).conditions += stale
    return value, decided


def release_unselected(ctx: SkyhookContext, node: NodeView) -> Decision | None:
    """A node the Skyhook no longer selects gets back the cordon we put on it, once no pod of
    ours runs there; None when there is nothing to give back."""
    state = ctx.state(node)
    if not state.cordoned or any(
        p.labels.get(keys.NAME_LABEL) == ctx.name and ctx.index.is_ours(p) and ctx.live(p)
        for p in ctx.index.pods_on_node.get(node.name, ())
    ):
        return None
    decided = Decision()
    decided.node(node.name).unschedulable = False
    decided.work.states[node.name] = replace(state, cordoned=False)
    return decided


def selection_conditions(ctx: SkyhookContext, rollout: Rollout, selection: Selection) -> Decision:
    """The status conditions naming ignored, untolerating and unmatched nodes."""
    decided = Decision()
    now = ctx.now
    ignored = selection.with_reason(waiting.IGNORED)
    untolerated = selection.with_reason(waiting.TAINTS)
    unmatched = selection.with_reason(waiting.IMAGE)
    decided.work.conditions.append(
        statuses.condition(
            keys.CONDITION_NODES_IGNORED,
            bool(ignored),
            "NodesIgnored",
            f"Node [{', '.join(ignored)}] has ignore label set. Skipping."
            if ignored
            else "No nodes have ignore label set.",
            now,
        )
    )
    decided.work.conditions.append(
        statuses.condition(
            keys.CONDITION_TAINT_NOT_TOLERABLE,
            bool(untolerated),
            "TaintNotTolerable",
            f"Node [{', '.join(untolerated)}] has taints that are not tolerable. Skipping."
            if untolerated
            else "All nodes have tolerable taints.",
            now,
        )
    )
    if unmatched or any(p.image_compatibility for p in rollout.spec.packages.values()):
        decided.work.conditions.append(
            statuses.condition(
                statuses.CONDITION_NO_COMPATIBLE_IMAGE,
                bool(unmatched),
                "NoCompatibleImage",
                f"Node [{', '.join(unmatched)}] matches no candidate of an image compatibility "
                "artifact (reason in its skyhook.nvidia.com/imageSelection_ annotation). Skipping."
                if unmatched
                else "Every node matches a candidate image.",
                now,
            )
        )
    return decided


# --- saving ---------------------------------------------------------------------------------------


def _holds_slot(state: NodeState) -> bool:
    return state.status in {IN_PROGRESS, ERRORING} or state.cordoned


def save(ctx: SkyhookContext, states: Mapping[str, NodeState]) -> Decision:
    """Node states become annotation and label changes; a node whose status turns in_progress
    from anything else is one this pass starts, one that stops holding a budget slot one it
    releases."""
    decided = Decision()
    for name, after in states.items():
        node = ctx.index.nodes[name]
        before = ctx.before(node)
        decided.node(name).changes.merge(nodestate.diff(node, ctx.name, before, after))
        if after.status == IN_PROGRESS and before.status != IN_PROGRESS:
            decided.starting.add(name)
        if _holds_slot(before) and not _holds_slot(after):
            decided.releasing.add(name)
    return decided


def status(
    ctx: SkyhookContext,
    rollout: Rollout,
    node_statuses: Mapping[str, str],
    *,
    boot_ids: Mapping[str, str],
    groups: Compartments | None,
    conditions: Sequence[dict[str, Any]],
    config_updates: Mapping[str, list[str]],
) -> Decision:
    """The Skyhook's status as a merge patch, with a Transition condition and Event when its
    overall status changes."""
    decided = Decision()
    scr = ctx.scr
    current = scr.status.to_json()
    overall = statuses.skyhook_status(
        node_statuses, paused=rollout.paused, disabled=rollout.disabled
    )
    complete, in_progress = statuses.counts(node_statuses)
    found = list(conditions)
    # A gate removed from the spec takes its condition with it.
    dropped = set(holds.HOLD_CONDITIONS) - {c["type"] for c in rollout.holds.conditions}
    old_status = current.get("status")
    if old_status != overall:
        found.append(
            statuses.condition(
                keys.CONDITION_TRANSITION,
                overall == COMPLETE,
                overall,
                f"Transitioned [{old_status or ''}] -> [{overall}]",
                ctx.now,
                generation=scr.generation,
            )
        )
        decided.event(
            "Skyhook",
            ctx.name,
            "State",
            f"Skyhook transitioned [{old_status or ''}] -> [{overall}]",
        )
    found += statuses.kstatus_conditions(
        overall,
        ctx.now,
        generation=scr.generation,
        message=statuses.erroring_message(node_statuses),
    )
    node_state = {
        n.name: {k: e.to_json() for k, e in sorted(ctx.state(n).packages.items())}
        for n in rollout.matched
        if ctx.state(n).entries is not None
    }
    desired: dict[str, Any] = {
        "status": overall,
        "nodeState": node_state,
        "nodeStatus": dict(node_statuses),
        "nodeBootIds": dict(boot_ids),
        "configUpdates": {k: v for k, v in config_updates.items() if v},
        "completeNodes": f"{complete}/{len(rollout.matched)}",
        "nodesInProgress": in_progress,
        "packageList": statuses.package_list(rollout.spec.packages),
        "compartmentStatuses": compartment_statuses(ctx, rollout, node_statuses, overall, groups),
        "conditions": statuses.merge_conditions(
            [
                c
                for c in current.get("conditions") or []
                if c.get("type") not in statuses.POLICY_BLOCKED_CONDITIONS
                and c.get("type") not in dropped
            ],
            found,
        ),
    }
    if overall == COMPLETE:
        desired["observedGeneration"] = scr.generation
    elif "observedGeneration" in current:
        desired["observedGeneration"] = current["observedGeneration"]
    keep = {k: current[k] for k in desired if k in current}
    patch = statuses.merge_patch(keep, desired)
    if patch:
        decided.last.append(PatchSkyhookStatus(ctx.name, patch))
    return decided


@dataclass(frozen=True)
class _Group:
    budget: Budget
    members: Sequence[str]
    batch: BatchState | None = None
    reset: bool = False


def compartment_statuses(
    ctx: SkyhookContext,
    rollout: Rollout,
    node_statuses: Mapping[str, str],
    overall: str,
    groups: Compartments | None,
) -> dict[str, dict[str, Any]]:
    """status.compartmentStatuses: per compartment its nodes and batch state; a legacy Skyhook
    reports all its nodes in `__default__`."""
    found: dict[str, _Group]
    if groups is None or rollout.policy is None:
        found = {keys.DEFAULT_COMPARTMENT: _Group(rollout.spec.budget, list(node_statuses))}
    else:
        stored = ctx.scr.status.to_json()
        old_status = stored.get("status")
        old_packages = stored.get("packageList")
        # Reset on completion, or once when the package versions change.
        reset = batches.reset_enabled(rollout.spec.reset_batch_state, rollout.policy) and (
            (overall == COMPLETE and old_status != COMPLETE)
            or old_packages not in (None, statuses.package_list(rollout.spec.packages))
        )
        found = {
            name: _Group(run.compartment.budget, run.members, run.batch, reset)
            for name, run in groups.runs.items()
        }
    result: dict[str, dict[str, Any]] = {}
    for name, group in found.items():
        matched = len(group.members)
        complete = sum(node_statuses[n] == COMPLETE for n in group.members)
        entry: dict[str, Any] = {
            "matched": matched,
            "ceiling": budget.reported_ceiling(group.budget, matched),
            "inProgress": sum(node_statuses[n] == IN_PROGRESS for n in group.members),
            "completed": complete,
            "progressPercent": complete * 100 // matched if matched else 0,
        }
        if group.batch is not None:
            entry["batchState"] = (BatchState() if group.reset else group.batch).to_json()
        result[name] = entry
    return result
