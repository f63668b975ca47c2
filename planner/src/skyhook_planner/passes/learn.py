"""What happened since the last pass, for one Skyhook: finished pods (learned into node
entries), reboots (boot id changes) and running pods that no longer match the spec. Each
function returns its `Decision`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace

from skyhook_planner import podbuilder
from skyhook_planner.model.snapshot import PodView
from skyhook_planner.passes.context import SkyhookContext
from skyhook_planner.passes.decision import Decision
from skyhook_planner.rules import results
from skyhook_schemas import keys
from skyhook_schemas.nodestate import (
    COMPLETE,
    ERRORING,
    IN_PROGRESS,
    INTERRUPT,
    UNINSTALL,
    UNINSTALL_INTERRUPT,
)


def from_pod(ctx: SkyhookContext, pod: PodView) -> Decision:
    """Fold one of our pods into its node's entries: a finished stage completes or errors, a
    pod with nothing to report any more is deleted."""
    decision = Decision()
    pkg = ctx.index.pod_package(pod)
    node = ctx.index.nodes.get(pod.node)
    if pkg is None or pod.deleting or pod.node in ctx.index.writing:
        return decision  # a busy node's result is learnt once its writes are done
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
        if node.name in ctx.index.writing:  # decided once its writes are done: keep the record
            if before:
                boot_ids[node.name] = before
            continue
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
