"""One Skyhook's share of a pass, as steps that each return what they decided. `decide` runs
them in order and merges each `Decision` before the next step runs, so every step reads what
the earlier ones decided (through the `SkyhookContext`):

1. `prepare.bookkeeping` and `prepare.prepare`: the finalizer, the version annotation, and what
   the Skyhook needs to run at all; one that cannot run is `prepare.unrunnable`.
2. learn from its pods (learn.py), keep package ConfigMaps current (configmaps.py).
3. `select.tidy` each selected node's entries; `select.select` each node's work and blockers.
4. `admit.compartments` (with a DeploymentPolicy), then `admit.admit` the candidates.
5. `advance` (advance.py) each admitted node that may work; `report.finish` each node's status.
6. `report.save` node states as annotation changes; `report.status` the Skyhook's status.
"""

from __future__ import annotations

from skyhook_planner.model.snapshot import SkyhookView
from skyhook_planner.passes import admit, configmaps, learn, prepare, report, select
from skyhook_planner.passes.advance import advance
from skyhook_planner.passes.context import PassIndex, SkyhookContext
from skyhook_planner.passes.decision import Decision, SkyhookWork
from skyhook_planner.rules import blockers


def decide(index: PassIndex, scr: SkyhookView, earlier: Decision) -> Decision:
    """What the pass does for `scr`, given what the Skyhooks before it decided."""
    decided = Decision(
        work=SkyhookWork(config_updates={k: list(v) for k, v in scr.status.config_updates.items()})
    )
    decided.merge(prepare.bookkeeping(index, scr))
    prepared = prepare.prepare(index, scr)
    if isinstance(prepared, prepare.Unrunnable):
        return decided.merge(prepare.unrunnable(index, scr, prepared)).released()
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
        tidied = select.tidy(ctx, node)
        if tidied is not None:
            decided.work.states[node.name] = tidied
    selection = select.select(ctx, rollout)
    decided.merge(selection.decided)
    groups = admit.compartments(ctx, rollout, selection) if rollout.policy is not None else None
    if groups is not None:
        decided.merge(groups.decided)
    admission = admit.admit(ctx, rollout, selection, groups)
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
        node_status, finished = report.finish(ctx, rollout, node, running=running, blocked=blocked)
        node_statuses[node.name] = node_status
        if finished is not None:
            decided.merge(finished)
    decided.merge(report.selection_conditions(ctx, rollout, selection))
    matched_names = {n.name for n in rollout.matched}
    for node in index.snap.nodes:  # left the selector: give back a cordon we hold
        if node.name not in matched_names:
            released = report.release_unselected(ctx, node)
            if released is not None:
                decided.merge(released)
    decided.merge(report.save(ctx, decided.work.states))
    decided.merge(
        report.status(
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
