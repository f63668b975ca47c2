"""What happened since the last pass, for one Skyhook: finished pods (learned into node
entries), reboots (boot id changes) and running pods that no longer match the spec. Each
function returns its `Decision`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from skyhook_planner import podbuilder
from skyhook_planner.model import status as statuses
from skyhook_planner.model.snapshot import PodView
from skyhook_planner.passes.context import SkyhookContext
from skyhook_planner.passes.decision import Decision
from skyhook_planner.rules import deadlines, interrupts, results
from skyhook_schemas import keys
from skyhook_schemas.nodestate import (
    COMPLETE,
    ERRORING,
    IN_PROGRESS,
    INTERRUPT,
    POST_INTERRUPT,
    UNINSTALL,
    UNINSTALL_INTERRUPT,
    PackageEntry,
)


def from_pod(ctx: SkyhookContext, pod: PodView) -> Decision:
    """Fold one of our pods into its node's entries: a finished stage completes or errors, a
    pod with nothing to report any more is deleted."""
    decision = Decision()
    pkg = ctx.index.pod_package(pod)
    node = ctx.index.nodes.get(pod.node)
    if pkg is None or pod.deleting:
        return decision
    if node is None or pkg.invalid:
        if ctx.present(pod):
            decision.delete_pod(pod, "node gone" if node is None else "marked invalid")
        return decision
    entries = ctx.entries(node)
    key = pkg.key
    entry = entries.get(key)
    if entry is None or entry.stage != pkg.stage or entry.state == COMPLETE:
        if ctx.present(pod):
            same_stage = entry is not None and entry.stage == pkg.stage
            decision.delete_pod(
                pod,
                "result already recorded"
                if same_stage
                else "no matching package entry (stale pod)",
            )
        return decision
    result = results.outcome(pod)
    label = f"[{pkg.name}:{pkg.version}]"
    if result.result == results.SUCCEEDED:
        entries = results.record_success(entries, pkg, result.restarts, ctx.spec.packages)
        if ctx.present(pod):
            decision.delete_pod(pod, "stage complete")
        decision.event(
            "Node", node.name, "Apply", f"Package {label} state complete on [skyhook:{ctx.name}]"
        )
    elif result.result == results.FAILED:
        entries = results.record_failure(entries, pkg, result.restarts)
        if entry.state != ERRORING:
            # A Warning: its own Event on the node, never overwritten by the next Apply.
            decision.event(
                "Node",
                node.name,
                "Apply",
                f"Package {label} state erroring on [skyhook:{ctx.name}]",
                type="Warning",
            )
        if pod.phase == "Failed":  # the kubelet gave up: retry after a backoff
            wait = results.backoff_s(
                entries[key].restarts,
                ctx.settings.retry_backoff_base_s,
                ctx.settings.retry_backoff_max_s,
            )
            since = (ctx.now - result.finished_at).total_seconds() if result.finished_at else wait
            if since >= wait:
                entries[key] = replace(entries[key], restarts=entries[key].restarts + 1)
                if ctx.present(pod):
                    decision.delete_pod(pod, "retrying failed stage")
            else:
                decision.wake_in(wait - since)
    else:
        return decision
    decision.work.states[node.name] = replace(ctx.state(node), entries=entries, error="")
    return decision


def track_reboots(ctx: SkyhookContext) -> tuple[dict[str, str], Decision]:
    """The boot ids to record, and what a reboot decides: a new boot id completes the interrupt
    a node was waiting on (or, with REAPPLY_ON_REBOOT, starts the node over)."""
    decision = Decision()
    recorded = ctx.scr.status.node_boot_ids
    boot_ids: dict[str, str] = {}
    for node in ctx.matched:
        before = recorded.get(node.name)
        if node.boot_id:
            boot_ids[node.name] = node.boot_id
        if not before or not node.boot_id or before == node.boot_id:
            continue
        entries = ctx.entries(node)
        waiting = {
            k: e
            for k, e in entries.items()
            if e.stage in {INTERRUPT, UNINSTALL_INTERRUPT} and e.state != COMPLETE
        }
        # Our own reboot interrupt never counts as "a reboot to reapply after": that would
        # reinstall, reboot again, and loop.
        if ctx.settings.reapply_on_reboot and not waiting:
            decision.work.states[node.name] = replace(ctx.state(node), entries={}, error="")
            decision.event(
                "Node",
                node.name,
                "Reboot",
                f"detected reboot, resetting node for [{ctx.name}] to be reapplied",
            )
            decision.event(
                "Skyhook",
                ctx.name,
                "Reboot",
                f"detected reboot, resetting node [{node.name}] to be reapplied",
            )
            continue
        if not waiting:
            continue
        for key, entry in waiting.items():
            if entry.stage == UNINSTALL_INTERRUPT:
                del entries[key]  # its uninstall is over: no entry
            else:
                entries[key] = replace(entry, state=COMPLETE)
        decision.work.states[node.name] = replace(ctx.state(node), entries=entries, error="")
        for pod in ctx.ours_on(node.name):
            if keys.INTERRUPT_LABEL in pod.labels:
                decision.delete_pod(pod, "reboot detected: interrupt done")
        decision.event(
            "Node",
            node.name,
            "Reboot",
            f"detected reboot of [{node.name}] for [skyhook:{ctx.name}]",
        )
    return boot_ids, decision


def reboot_deadlines(ctx: SkyhookContext, seconds: float | None) -> Decision:
    """Reboots past the Skyhook's rebootDeadline (rules/deadlines.py): the node's entries turn
    erroring, with a Warning Event on the node and the Skyhook the first time; the node waits
    with the reason and the status condition names it. A reboot still within its deadline asks
    for a timer then."""
    decision = Decision()
    if seconds is None:
        return decision
    overdue: list[str] = []
    recorded = ctx.scr.status.node_boot_ids
    for node in ctx.matched:
        state = ctx.state(node)
        if not any(e.stage in {INTERRUPT, POST_INTERRUPT} for e in state.packages.values()):
            continue
        pod = next((p for p in ctx.ours_on(node.name) if keys.INTERRUPT_LABEL in p.labels), None)
        verdict = deadlines.watch(
            node,
            state.packages,
            rebooting={k: _reboots(ctx, e) for k, e in state.packages.items()},
            interrupt_pod_created=pod.created if pod is not None else None,
            recorded_boot_id=recorded.get(node.name),
            seconds=seconds,
        )
        if verdict is None:
            continue
        if not verdict.overdue(ctx.now):
            decision.wake_in((verdict.due - ctx.now).total_seconds())
            continue
        overdue.append(node.name)
        decision.wait(ctx.name, node.name, (verdict.reason(seconds),))
        marked = deadlines.mark(state.packages, verdict)
        if marked is None:
            continue
        decision.work.states[node.name] = replace(state, entries=marked, error="")
        message = verdict.message(seconds)
        decision.event(
            "Node",
            node.name,
            deadlines.EXCEEDED,
            f"{message}: erroring for [skyhook:{ctx.name}]",
            type="Warning",
        )
        decision.event(
            "Skyhook",
            ctx.name,
            deadlines.EXCEEDED,
            f"node [{node.name}]: {message}",
            type="Warning",
        )
    if overdue:
        decision.work.conditions.append(
            statuses.condition(
                deadlines.CONDITION_DEADLINE,
                True,
                deadlines.EXCEEDED,
                f"Node [{', '.join(overdue[:10])}]{' ...' if len(overdue) > 10 else ''} did not "
                f"come back from a reboot within rebootDeadline: marked erroring.",
                ctx.now,
                generation=ctx.scr.generation,
            )
        )
    return decision


def _reboots(ctx: SkyhookContext, entry: PackageEntry) -> bool:
    """Does the package of `entry` interrupt with a reboot (its own or a config edit's)?"""
    package = ctx.spec.packages.get(entry.name)
    if package is None or package.version != entry.version:
        return False
    wanted = interrupts.wanted_interrupts(package, ctx.config_updates.get(entry.name, ()))
    return any(i.type == "reboot" for i in wanted)


def validate_pods(ctx: SkyhookContext, skip: Collection[str] = ()) -> Decision:
    """Delete running pods that no longer do what the spec asks: a node that records another
    stage, a cancelled uninstall, or a changed package spec (image, env, resources), which
    restarts the stage (an uninstall pod too: a fix to a failing uninstall rolls forward). Pods on
    the nodes in `skip` were found valid by an earlier pass from the same inputs."""
    decision = Decision()
    for pod in ctx.pods():
        if pod.node in skip or not ctx.live(pod):
            continue
        pkg = ctx.index.pod_package(pod)
        node = ctx.index.nodes.get(pod.node)
        if pkg is None or node is None:
            continue
        key = pkg.key
        state = decision.work.states.get(node.name) or ctx.state(node)
        entry = state.packages.get(key)
        if entry is None or entry.stage != pkg.stage:
            decision.delete_pod(pod, "stale: the node records another stage")
            continue
        wanted = ctx.node_packages(node).packages.get(pkg.name)
        if pkg.stage in {INTERRUPT, UNINSTALL_INTERRUPT} or wanted is None:
            continue
        if wanted.version != pkg.version:
            continue  # an earlier version's pod: it finishes as it was started
        if pkg.stage == UNINSTALL and not wanted.uninstalling and entry.state != COMPLETE:
            # Cancelled: the package goes back to apply once this pod is gone.
            decision.delete_pod(pod, "uninstall cancelled")
            continue
        manifest = podbuilder.build_stage_pod(ctx.settings, ctx.scr, wanted, node.name, pkg.stage)
        if not podbuilder.matches(pod, manifest):
            decision.delete_pod(pod, "the package spec changed")
            decision.work.states[node.name] = state.with_entry(replace(entry, state=IN_PROGRESS))
    return decision
