"""What a Skyhook's share of the pass writes: each node's status, conditions and given-back
cordon (`finish`, `release_unselected`), the selection conditions, node states as annotation
changes (`save`), and the Skyhook's status (`status`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from skyhook_planner.model import nodestate, status_size, waiting
from skyhook_planner.model import status as statuses
from skyhook_planner.model.actions import PatchSkyhookStatus
from skyhook_planner.model.nodestate import NodeState
from skyhook_planner.model.snapshot import NodeView
from skyhook_planner.model.spec import Budget
from skyhook_planner.passes.admit import Compartments
from skyhook_planner.passes.context import SkyhookContext
from skyhook_planner.passes.prepare import Rollout
from skyhook_planner.passes.select import Selection
from skyhook_planner.passes.work import SkyhookWork, Step
from skyhook_planner.rules import batches, budget, deadlines, drain, health, holds, soak
from skyhook_planner.rules.drain import Drain
from skyhook_schemas import keys
from skyhook_schemas.nodestate import (
    COMPLETE,
    DISABLED,
    IN_PROGRESS,
    PAUSED,
    WAITING,
)
from skyhook_schemas.status import BatchState


def finish(
    ctx: SkyhookContext,
    work: SkyhookWork,
    rollout: Rollout,
    node: NodeView,
    *,
    complete: bool,
    running: bool,
    blocked: bool,
) -> tuple[str, Step | None]:
    """The node's status for this Skyhook after the pass, and what that decides (None for
    most nodes: nothing): its conditions, its state, its cordon given back once complete."""
    decided = None
    state = work.state(node)
    erroring = work.failed_for_good(state)
    value = statuses.node_status(
        complete=complete,
        blocked=blocked,
        erroring=erroring,
        in_progress=running,
        paused=rollout.paused,
        disabled=rollout.disabled,
    )
    if complete and state.cordoned:
        decided = decided or Step()
        _uncordon(ctx, node, decided)
        state = replace(state, cordoned=False)
    if complete and (state.drain_start or state.drain_blocked):
        # A drain no interrupt needs any more (its package left the spec) leaves no trace.
        state = replace(state, drain_start=None, drain_blocked=None)
    if complete and state.status != COMPLETE and state.entries is not None:
        decided = decided or Step()
        decided.event(
            "Node", node.name, "State", f"{keys.KIND} [{ctx.name}] complete.", action="MarkComplete"
        )
        cordoned, holders = ctx.cordon_of(node)
        if cordoned and not holders:
            decided.event(
                "Node", node.name, ADMIN_CORDON_KEPT, _kept_message(ctx.name), action="KeepCordon"
            )
    # Most nodes are as their annotations and status label say: nothing to save for them.
    if not (
        state is ctx.before(node)
        and state.status == value
        and node.labels.get(keys.node_status_key(ctx.name)) == value
    ):
        decided = decided or Step()
        decided.changes.states[node.name] = replace(state, status=value)
    wanted = nodestate.conditions_for(ctx.name, complete, erroring)
    stale = nodestate.stale_conditions(node, wanted)
    if stale:
        decided = decided or Step()
        decided.node(node.name).conditions += stale
    return value, decided


def mirrored(state: NodeState) -> dict[str, Any] | None:
    """A node's entries as the status's nodeState mirror shows them; None for a node that
    records nothing for the Skyhook."""
    if state.entries is None:
        return None
    return {k: e.to_json() for k, e in sorted(state.packages.items())}


def release_unselected(ctx: SkyhookContext, work: SkyhookWork, node: NodeView) -> Step | None:
    """A node the Skyhook no longer selects gets back the cordon we put on it, once no pod of
    ours runs there; None when there is nothing to give back."""
    state = work.state(node)
    if not state.cordoned or any(
        p.labels.get(keys.NAME_LABEL) == ctx.name and ctx.index.is_ours(p) and work.live(p)
        for p in ctx.index.pods_on_node.get(node.name, ())
    ):
        return None
    decided = Step()
    _uncordon(ctx, node, decided)
    decided.changes.states[node.name] = replace(state, cordoned=False)
    return decided


# Ours (docs/fleet-safety.md#admin-cordons-kept): nodes an administrator cordoned stay so.
ADMIN_CORDON_KEPT = "AdminCordonKept"
CONDITION_ADMIN_CORDONS = f"{keys.GROUP}/{ADMIN_CORDON_KEPT}"


def _kept_message(scr: str) -> str:
    return f"cordoned by someone else before [{keys.SINGULAR}:{scr}] ran: left cordoned"


def _named(nodes: Sequence[str]) -> str:
    if len(nodes) > MAX_NAMED_NODES:
        return f"{len(nodes)} nodes were"
    return f"Node [{', '.join(nodes)}] " + ("was" if len(nodes) == 1 else "were")


def _uncordon(ctx: SkyhookContext, node: NodeView, decided: Step) -> None:
    """Lift our cordon (the caller drops our marker), unless another Skyhook's marker is still
    on the node: the last Skyhook to let go of a shared cordon lifts it."""
    _, holders = ctx.cordon_of(node)
    if not holders - {ctx.name}:
        decided.node(node.name).unschedulable = False


def admin_cordons(ctx: SkyhookContext, rollout: Rollout) -> Step:
    """A condition naming the selected nodes someone else cordoned (no Skyhook's marker on
    them), while there are any: the rollout runs there and leaves them cordoned."""
    decided = Step()
    kept = [n.name for n in rollout.matched if ctx.admin_cordoned(n)]
    if kept:
        decided.changes.conditions.append(
            statuses.condition(
                CONDITION_ADMIN_CORDONS,
                True,
                ADMIN_CORDON_KEPT,
                f"{_named(kept)} cordoned by someone else (no {keys.cordon_key('')} "
                "marker): the rollout runs there and leaves them cordoned.",
                ctx.now,
                generation=ctx.scr.generation,
            )
        )
    return decided


def selection_conditions(ctx: SkyhookContext, rollout: Rollout, selection: Selection) -> Step:
    """The status conditions naming ignored, untolerating and unmatched nodes, and nodes whose
    state annotation cannot be read (only while there are any)."""
    decided = Step()
    now = ctx.now
    malformed = selection.with_reason(waiting.STATE)
    if malformed:
        decided.changes.conditions.append(
            statuses.condition(
                statuses.CONDITION_NODE_STATE_MALFORMED,
                True,
                "ParseError",
                statuses.malformed_message(malformed),
                now,
            )
        )
    ignored = sorted(selection.with_reason(waiting.IGNORED))
    untolerated = sorted(selection.with_reason(waiting.TAINTS))
    unmatched = selection.with_reason(waiting.IMAGE)
    decided.changes.conditions.append(
        statuses.condition(
            keys.CONDITION_NODES_IGNORED,
            bool(ignored),
            "NodesIgnored",
            _skipping(ignored, "has ignore label set", "have ignore label set")
            if ignored
            else "No nodes have ignore label set.",
            now,
        )
    )
    decided.changes.conditions.append(
        statuses.condition(
            keys.CONDITION_TAINT_NOT_TOLERABLE,
            bool(untolerated),
            "TaintNotTolerable",
            _skipping(
                untolerated,
                "has taints that are not tolerable",
                "have taints that are not tolerable",
            )
            if untolerated
            else "All nodes have tolerable taints.",
            now,
        )
    )
    if unmatched or any(p.image_compatibility for p in rollout.spec.packages.values()):
        decided.changes.conditions.append(
            statuses.condition(
                statuses.CONDITION_NO_COMPATIBLE_IMAGE,
                bool(unmatched),
                "NoCompatibleImage",
                f"Node [{', '.join(unmatched)}] matches no candidate of an image compatibility "
                f"artifact (reason in its {keys.image_selection_key('')} annotation). Skipping."
                if unmatched
                else "Every node matches a candidate image.",
                now,
            )
        )
    return decided


# Past this many nodes a condition message counts them instead of naming them.
MAX_NAMED_NODES = 10


def _skipping(nodes: Sequence[str], one: str, many: str) -> str:
    if len(nodes) > MAX_NAMED_NODES:
        return f"{len(nodes)} nodes {many}. Skipping."
    return f"Node [{', '.join(nodes)}] {one}. Skipping."


def drain_conditions(
    ctx: SkyhookContext, rollout: Rollout, drains: Mapping[str, Drain], blocked_already: bool
) -> Step:
    """`Blocked` (reason NonInterruptPodsRunning) while protected pods hold nodes' interrupts,
    unless another Blocked reason (`blocked_already`) is up; `DrainBlocked` while drains
    cannot go on. Each with a Warning Event when it comes up; both are dropped when they no
    longer hold (statuses.WHILE_TRUE_CONDITIONS)."""
    decided = Step()
    held = sorted(n for n, d in drains.items() if d.protected)
    if held and not blocked_already:
        count = f"{len(held)} node{'s' if len(held) != 1 else ''}"
        message = f"{count} blocked by non-interrupt pods ({_listed(held)}). Waiting."
        _raise(ctx, decided, keys.CONDITION_BLOCKED, drain.NON_INTERRUPT, message)
    blocked = sorted(n for n, d in drains.items() if d.blocked and not d.protected)
    if blocked:
        reasons = {drains[n].blocked_reason for n in blocked}
        reason = reasons.pop() if len(reasons) == 1 else drain.MULTIPLE
        named = [
            f"{b.namespace}/{b.name} on {n}: {b.detail or b.reason}"
            for n in blocked[: statuses.SUMMARY_NAMES_MAX]
            for b in drains[n].blocked
        ]
        # Bounded: a refused grant blocks every pod of every draining node, each with its
        # answer, and a condition's message holds 32 KiB.
        pods = "; ".join(named[: statuses.SUMMARY_NAMES_MAX])
        if len(named) > statuses.SUMMARY_NAMES_MAX:
            pods += f"; ... ({len(named) - statuses.SUMMARY_NAMES_MAX} more pods)"
        message = (
            f"{len(blocked)}/{len(rollout.matched)} nodes blocked draining "
            f"({_listed(blocked)}); {pods}"
        )
        _raise(ctx, decided, keys.CONDITION_DRAIN_BLOCKED, reason, message)
    return decided


def _listed(nodes: Sequence[str]) -> str:
    shown = ", ".join(nodes[: statuses.SUMMARY_NAMES_MAX])
    return shown if len(nodes) <= statuses.SUMMARY_NAMES_MAX else f"{shown}, ... (list truncated)"


def _raise(ctx: SkyhookContext, decided: Step, kind: str, reason: str, message: str) -> None:
    """Report condition `kind`, with a Warning Event when it was not up (or had another
    reason) before this pass."""
    before = ctx.scr.status.condition(kind)
    if before is None or before.get("reason") != reason or before.get("status") != "True":
        decided.event(keys.KIND, ctx.name, "Drain", message, type="Warning", action="BlockDrain")
    decided.changes.conditions.append(
        statuses.condition(kind, True, reason, message, ctx.now, generation=ctx.scr.generation)
    )


def save(ctx: SkyhookContext, states: Mapping[str, NodeState]) -> Step:
    """Node states become annotation and label changes; a node whose status turns in_progress
    from anything else is one this pass starts, one that stops holding a budget slot one it
    releases."""
    decided = Step()
    for name, after in states.items():
        node = ctx.index.nodes[name]
        before = ctx.before(node)
        decided.node(name).changes.merge(nodestate.diff(node, ctx.name, before, after))
        if after.status == IN_PROGRESS and before.status != IN_PROGRESS:
            decided.out.starting.add(name)
        if before.holds_slot and not after.holds_slot:
            decided.out.releasing.add(name)
    return decided


def status(
    ctx: SkyhookContext,
    rollout: Rollout,
    node_statuses: statuses.NodeStatuses,
    *,
    lists: status_size.NodeLists,
    gated: bool = False,
    node_order: tuple[Mapping[str, str], int] = ({}, 0),
    groups: Compartments | None,
    conditions: Sequence[dict[str, Any]],
    config_updates: Mapping[str, list[str]],
    batch_starts: Mapping[str, str] | None = None,
    health_waiting: Mapping[str, str] | None = None,
    deferred: Mapping[str, str] | None = None,
) -> Step:
    """The Skyhook's status as a merge patch, with a Transition condition and Event when its
    overall status changes; its per-node lists as `lists` has them (model/status_size.py)."""
    decided = Step()
    scr = ctx.scr
    current = scr.status.to_json()
    overall = statuses.skyhook_status(
        node_statuses, paused=rollout.paused, disabled=rollout.disabled
    )
    if gated and overall not in {COMPLETE, DISABLED, PAUSED}:
        overall = WAITING  # behind a Skyhook with sequencing: all that is not done everywhere
    complete, in_progress = statuses.counts(node_statuses)
    found = list(conditions)
    # A gate removed from the spec takes its condition with it.
    dropped = set(holds.HOLD_CONDITIONS) - {c["type"] for c in rollout.holds.conditions}
    dropped |= set(statuses.WHILE_TRUE_CONDITIONS) - {c["type"] for c in conditions}
    refused = write_refused(ctx)  # only while a write for this spec is refused
    found += refused
    dropped |= {statuses.CONDITION_WRITE_REFUSED} - {c["type"] for c in refused}
    dropped |= {CONDITION_ADMIN_CORDONS} - {c["type"] for c in conditions}  # only while any
    dropped |= {deadlines.CONDITION_DEADLINE} - {c["type"] for c in conditions}
    dropped |= {soak.CONDITION_SOAK} - {c["type"] for c in conditions}  # no soakTime any more
    dropped |= {health.CONDITION_WAITING, health.CONDITION_FAILED} - {c["type"] for c in conditions}
    if lists.shortened:
        found.append(
            statuses.condition(
                status_size.CONDITION_NODE_LISTS_SHORTENED,
                True,
                "StatusSizeLimit",
                lists.message(),
                ctx.now,
                generation=scr.generation,
            )
        )
    else:
        dropped.add(status_size.CONDITION_NODE_LISTS_SHORTENED)
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
            keys.KIND,
            ctx.name,
            "State",
            f"{keys.KIND} transitioned [{old_status or ''}] -> [{overall}]",
            action="Transition",
        )
    found += statuses.kstatus_conditions(
        overall,
        ctx.now,
        generation=scr.generation,
        message=statuses.erroring_message(node_statuses),
        node_statuses=node_statuses,
    )
    desired: dict[str, Any] = {
        "status": overall,
        "nodeState": dict(lists.node_state),
        "nodeStatus": dict(lists.node_status),
        "nodeBootIds": dict(lists.boot_ids),
        "configUpdates": {k: v for k, v in config_updates.items() if v},
        "completeNodes": f"{complete}/{len(rollout.matched)}",
        "nodesInProgress": in_progress,
        "packageList": statuses.package_list(rollout.spec.packages),
        "compartmentStatuses": compartment_statuses(ctx, rollout, node_statuses, overall, groups),
        "conditions": statuses.merge_conditions(
            [
                c
                for c in current.get("conditions") or []
                if c.get("type") not in statuses.UNRUNNABLE_CONDITIONS
                and c.get("type") not in dropped
            ],
            found,
            generation=scr.generation,
        ),
    }
    if lists.package_nodes is not None or "nodesPerPackage" in current:
        desired["nodesPerPackage"] = (
            dict(lists.package_nodes) if lists.package_nodes is not None else None
        )
    node_priority, node_order_offset = node_order
    if node_priority or "nodePriority" in current:
        desired["nodePriority"] = dict(node_priority)
    if node_order_offset or "nodeOrderOffset" in current:
        desired["nodeOrderOffset"] = node_order_offset
    if batch_starts is not None or "batchStarts" in current:
        desired["batchStarts"] = dict(batch_starts) if batch_starts is not None else None
    if deferred or "interruptDeferred" in current:
        desired["interruptDeferred"] = dict(deferred) if deferred else None
    if health_waiting or "healthGateWaiting" in current:
        desired["healthGateWaiting"] = dict(health_waiting) if health_waiting else None
    if overall == COMPLETE:
        desired["observedGeneration"] = scr.generation
    elif "observedGeneration" in current:
        desired["observedGeneration"] = current["observedGeneration"]
    keep = {k: current[k] for k in desired if k in current}
    patch = statuses.merge_patch(keep, desired)
    if patch:
        decided.out.last.append(PatchSkyhookStatus(ctx.name, patch))
    return decided


@dataclass(frozen=True)
class _Group:
    budget: Budget
    members: Collection[str]
    batch: BatchState | None = None
    reset: bool = False


def compartment_statuses(
    ctx: SkyhookContext,
    rollout: Rollout,
    node_statuses: statuses.NodeStatuses,
    overall: str,
    groups: Compartments | None,
) -> dict[str, dict[str, Any]]:
    """status.compartmentStatuses: per compartment its nodes and batch state; a legacy Skyhook
    reports all its nodes in `__default__`."""
    found: dict[str, _Group]
    if groups is None or rollout.policy is None:
        everyone = node_statuses.by_node.keys()
        found = {keys.DEFAULT_COMPARTMENT: _Group(rollout.spec.budget, everyone)}
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
    complete_nodes = node_statuses.by_status.get(COMPLETE, frozenset())
    in_progress_nodes = node_statuses.by_status.get(IN_PROGRESS, frozenset())
    for name, group in found.items():
        matched = len(group.members)
        complete = len(complete_nodes.intersection(group.members))
        entry: dict[str, Any] = {
            "matched": matched,
            "ceiling": budget.reported_ceiling(group.budget, matched),
            "inProgress": len(in_progress_nodes.intersection(group.members)),
            "completed": complete,
            "progressPercent": complete * 100 // matched if matched else 0,
        }
        if group.batch is not None:
            entry["batchState"] = (BatchState() if group.reset else group.batch).to_json()
        result[name] = entry
    return result


_REFUSALS_LISTED = 3


def write_refused(ctx: SkyhookContext) -> list[dict[str, Any]]:
    """The WriteRefused condition while the apiserver refuses some write of this Skyhook's
    current spec as invalid (the operator does not send it again until the spec changes);
    none once that write went through or the spec changed."""
    refused = sorted(
        (r for r in ctx.index.snap.refusals if r.skyhook == ctx.name),
        key=lambda r: (r.kind, r.namespace, r.name),
    )
    refused = [r for r in refused if r.generation == ctx.scr.generation]
    if not refused:
        return []
    listed = "; ".join(f"{r.object}: {r.message}" for r in refused[:_REFUSALS_LISTED])
    more = len(refused) - _REFUSALS_LISTED
    return [
        statuses.condition(
            statuses.CONDITION_WRITE_REFUSED,
            True,
            "WriteRefused",
            f"The apiserver refused {len(refused)} write(s) as invalid, not sent again until "
            f"the spec changes: {listed}" + (f"; and {more} more" if more > 0 else ""),
            ctx.now,
            generation=ctx.scr.generation,
        )
    ]
