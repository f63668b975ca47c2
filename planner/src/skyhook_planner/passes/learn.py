"""What happened since the last pass, for one Skyhook: finished pods (learned into node
entries), reboots (boot id changes) and running pods that no longer match the spec. Each
function reads the Skyhook's working state (`SkyhookWork`) and returns its `Step`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from skyhook_planner import podbuilder
from skyhook_planner.model import status as statuses
from skyhook_planner.model.snapshot import NodeView, PodView
from skyhook_planner.model.vocabulary import FINISHED_PHASES
from skyhook_planner.passes.context import SkyhookContext
from skyhook_planner.passes.work import SkyhookWork, Step
from skyhook_planner.rules import deadlines, results, stages
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


def from_pod(ctx: SkyhookContext, work: SkyhookWork, pod: PodView) -> Step:
    """Fold one of our pods into its node's entries: a finished stage completes or errors, a
    pod with nothing to report any more is deleted. A failed stage pod is kept for its logs
    (`_failed_attempt`); one whose failure is already counted is only looked after (`_kept`)."""
    decision = Step()
    pkg = ctx.index.pod_package(pod)
    node = ctx.index.nodes.get(pod.node)
    if pkg is None or pod.deleting:
        return decision
    if node is None or pkg.invalid:
        if work.present(pod):
            decision.delete_pod(pod, "node gone" if node is None else "marked invalid")
        return decision
    key = pkg.key
    entry = work.state(node).packages.get(key)
    interrupt = keys.INTERRUPT_LABEL in pod.labels
    if pod.phase == "Failed" and entry is not None and work.present(pod):
        counted = (
            _interrupt_parked(pod, pkg.stage, entry)
            if interrupt
            else (
                entry.stage != pkg.stage
                or entry.state == COMPLETE
                or entry.restarts > podbuilder.pod_attempt(pod)
            )
        )
        if counted:
            return _kept(ctx, pod, node, entry)
    if (
        not interrupt
        and stages.records_done(entry, pkg.stage)
        and results.outcome(pod).result == results.SUCCEEDED
        and podbuilder.ends_when_done(pod)
    ):
        return decision  # its result is recorded: it stays for its logs (expire_finished)
    if entry is None or entry.stage != pkg.stage or entry.state == COMPLETE:
        if work.present(pod):
            same_stage = entry is not None and entry.stage == pkg.stage
            decision.delete_pod(
                pod,
                "result already recorded"
                if same_stage
                else "no matching package entry (stale pod)",
            )
        return decision
    entries = work.entries(node)
    result = results.outcome(pod)
    label = f"[{pkg.name}:{pkg.version}]"
    if result.result == results.SUCCEEDED:
        # A stage pod's restarts are its failed attempts; an interrupt pod's, its container's.
        restarts = result.restarts if interrupt else max(result.restarts, entry.restarts)
        entries = results.record_success(entries, pkg, restarts, ctx.spec.packages)
        kept = podbuilder.ends_when_done(pod) and stages.records_done(entries.get(key), pkg.stage)
        if work.present(pod) and not kept:
            decision.delete_pod(pod, "stage complete")
        decision.event(
            "Node",
            node.name,
            "State",
            f"Package {label} state complete on [{keys.SINGULAR}:{ctx.name}]",
            action="JobComplete",
        )
    elif result.result == results.FAILED and pod.phase == "Failed" and not interrupt:
        return _failed_attempt(ctx, work, pod, node, entries, result=result)
    elif result.result == results.FAILED:
        if interrupt and pod.reason == results.DEADLINE_EXCEEDED:
            return _interrupt_stopped(ctx, work, pod, node, entries)
        # The container's failed runs: its restarts, and the run that just failed.
        entries = results.record_failure(entries, pkg, result.restarts + 1)
        retries = ctx.settings.stage_retries
        if interrupt and pod.phase != "Failed" and result.restarts >= retries:
            given_up = _restart_limit(ctx, work, pod, node, entries, failed=result.restarts + 1)
            if given_up is not None:
                return given_up
        if entry.state != ERRORING:
            # A Warning: its own Event on the node, never overwritten by the next Apply.
            decision.event(
                "Node",
                node.name,
                "State",
                f"Package {label} stage {pkg.stage} failed on [{keys.SINGULAR}:{ctx.name}]",
                type="Warning",
                action="JobFailed",
            )
        if pod.phase == "Failed":  # an interrupt pod its node lost: again after a backoff
            wait = results.backoff_s(
                entries[key].restarts,
                ctx.settings.retry_backoff_base_s,
                ctx.settings.retry_backoff_max_s,
            )
            since = (ctx.now - result.finished_at).total_seconds() if result.finished_at else wait
            if since >= wait:
                entries[key] = replace(entries[key], restarts=entries[key].restarts + 1)
                if work.present(pod):
                    decision.delete_pod(pod, "retrying failed stage")
            else:
                decision.wake_in(wait - since)
    else:
        return decision
    decision.changes.states[node.name] = replace(work.state(node), entries=entries, error="")
    return decision


def _failed_attempt(
    ctx: SkyhookContext,
    work: SkyhookWork,
    pod: PodView,
    node: NodeView,
    entries: dict[str, PackageEntry],
    *,
    result: results.Outcome,
) -> Step:
    """A stage pod failed (restartPolicy Never: the pod is the attempt). The failure is
    counted once: the entry's restarts become the number of failed attempts, which the next
    attempt's number is (passes/advance.py starts it after the backoff). After
    `stage_retries` retries the stage gives up: it stays erroring, parked, until the package
    is edited, rerun or reset. The pod stays for its logs; of the failed attempts only the
    first and the last are kept. A pod its node lost counts for nothing: it goes, and the same
    attempt runs again."""
    decision = Step()
    pkg = ctx.index.pod_package(pod)
    assert pkg is not None
    key = pkg.key
    entry = entries[key]
    label = f"[{pkg.name}:{pkg.version}]"
    if not results.spent_an_attempt(pod):
        lost = "disrupted (DisruptionTarget)" if pod.disrupted else "lost by its node"
        decision.delete_pod(pod, f"{lost}: the attempt runs again")
        entries[key] = replace(entry, state=IN_PROGRESS)
        decision.changes.states[node.name] = replace(work.state(node), entries=entries, error="")
        return decision
    failed = podbuilder.pod_attempt(pod) + 1
    entries[key] = replace(entry, stage=pkg.stage, state=ERRORING, restarts=failed)
    decision.changes.states[node.name] = replace(work.state(node), entries=entries, error="")
    why = "timed out (stageTimeout)" if pod.reason == results.DEADLINE_EXCEEDED else "failed"
    retries = ctx.settings.stage_retries
    if failed > retries:
        container = result.container or f"{pkg.name[:43]}-{pkg.stage}"
        message = (
            f"Package {label} stage [{pkg.stage}] gave up on node [{node.name}] after "
            f"{failed} failed attempt{'s' if failed != 1 else ''} (the last {why}); "
            f"its logs: kubectl logs -n {pod.namespace} {pod.name} -c {container}, or "
            f"kubectl skyhook package logs {pkg.name} --skyhook {ctx.name} -n {pod.namespace}; "
            f"it runs again "
            f"once the package is edited, rerun or reset"
        )
        decision.event("Node", node.name, "State", message, type="Warning", action="JobFailed")
        decision.event(keys.KIND, ctx.name, "State", message, type="Warning", action="JobFailed")
    else:
        decision.event(
            "Node",
            node.name,
            "State",
            f"Package {label} stage {pkg.stage} failed on [{keys.SINGULAR}:{ctx.name}]: attempt "
            f"{failed} of {retries + 1} {why} (pod {pod.name})",
            type="Warning",
            action="JobFailed",
        )
    for other in _failed_pods(ctx, work, node, pod):
        attempt = podbuilder.pod_attempt(other)
        if 0 < attempt < failed - 1:
            decision.delete_pod(other, "a failed attempt between the first and the last")
    return decision


def _failed_pods(
    ctx: SkyhookContext, work: SkyhookWork, node: NodeView, pod: PodView
) -> list[PodView]:
    """The failed pods kept on `node` for the package version and stage of `pod`."""
    pkg = ctx.index.pod_package(pod)
    return [
        p
        for p in ctx.index.pods_on_node.get(node.name, ())
        if p.phase == "Failed"
        and p.labels.get(keys.PACKAGE_LABEL) == pod.labels.get(keys.PACKAGE_LABEL)
        and p.labels.get(keys.NAME_LABEL) == ctx.name
        and ctx.index.is_ours(p)
        and work.present(p)
        and (found := ctx.index.pod_package(p)) is not None
        and pkg is not None
        and found.stage == pkg.stage
    ]


def _interrupt_parked(pod: PodView, stage: str, entry: PackageEntry) -> bool:
    """An interrupt pod stopped at its stageTimeout or its restart limit stays while its stage
    is erroring."""
    return (
        pod.reason == results.DEADLINE_EXCEEDED and entry.stage == stage and entry.state == ERRORING
    )


def _interrupt_stopped(
    ctx: SkyhookContext,
    work: SkyhookWork,
    pod: PodView,
    node: NodeView,
    entries: dict[str, PackageEntry],
) -> Step:
    """An interrupt pod the kubelet stopped at its deadline while its stage is not erroring:
    its stageTimeout, or the stop at its restart limit from before a rerun (the pod goes)."""
    if keys.RESTART_LIMIT_ANNOTATION not in pod.annotations:
        return _interrupt_timed_out(ctx, work, pod, node, entries)
    decision = Step()
    if work.present(pod):
        decision.delete_pod(pod, "stopped at its restart limit before a rerun")
    return decision


def _interrupt_timed_out(
    ctx: SkyhookContext,
    work: SkyhookWork,
    pod: PodView,
    node: NodeView,
    entries: dict[str, PackageEntry],
) -> Step:
    """stageTimeout bounds a whole interrupt: past it, the stage is erroring and stays so, its
    pod kept for its logs, until the package is edited, rerun or reset."""
    decision = Step()
    pkg = ctx.index.pod_package(pod)
    assert pkg is not None
    entry = entries[pkg.key]
    # No restarts: a stop, not an attempt to retry (rules/results.py).
    entries[pkg.key] = replace(entry, state=ERRORING, restarts=0)
    decision.changes.states[node.name] = replace(work.state(node), entries=entries, error="")
    message = (
        f"Package [{pkg.name}:{pkg.version}] stage [{pkg.stage}] timed out (stageTimeout) on "
        f"node [{node.name}]; its logs: kubectl logs -n {pod.namespace} {pod.name} -c interrupt"
    )
    decision.event("Node", node.name, "Interrupt", message, type="Warning", action="StageTimeout")
    decision.event(keys.KIND, ctx.name, "Interrupt", message, type="Warning", action="StageTimeout")
    return decision


def _restart_limit(
    ctx: SkyhookContext,
    work: SkyhookWork,
    pod: PodView,
    node: NodeView,
    entries: dict[str, PackageEntry],
    *,
    failed: int,
) -> Step | None:
    """A non-reboot interrupt (service, restartAllServices, noop) whose container failed
    `failed` times, past SKYHOOK_STAGE_RETRIES + 1: its pod is stopped where it is (no more
    restarts) and kept for its logs, the stage stays erroring with the failed runs as restarts
    (results.restart_limit_spent), Warning Events say so. None for a reboot interrupt: the
    reboot's own shutdown kills its container, so its restarts are never counted."""
    pkg = ctx.index.pod_package(pod)
    assert pkg is not None
    waiting = [e for e in entries.values() if e.stage == pkg.stage and e.state != COMPLETE]
    if any(work.reboots(e) for e in waiting):
        return None
    decision = Step()
    if keys.RESTART_LIMIT_ANNOTATION in pod.annotations:
        return decision  # stopped already: the kubelet has yet to fail it
    entries[pkg.key] = replace(entries[pkg.key], state=ERRORING, restarts=failed)
    decision.changes.states[node.name] = replace(work.state(node), entries=entries, error="")
    decision.stop_pod(
        pod, "interrupt restart limit exceeded", {keys.RESTART_LIMIT_ANNOTATION: str(failed)}
    )
    message = (
        f"Interrupt of package [{pkg.name}:{pkg.version}] on node [{node.name}] failed "
        f"{failed} times (restart limit {ctx.settings.stage_retries + 1}): erroring until the "
        f"package is rerun or reset; its pod is stopped and kept, its logs: kubectl logs -n "
        f"{pod.namespace} {pod.name} -c interrupt (--previous for the run before)"
    )
    decision.event(
        "Node", node.name, "Interrupt", message, type="Warning", action="RestartLimitExceeded"
    )
    decision.event(
        keys.KIND, ctx.name, "Interrupt", message, type="Warning", action="RestartLimitExceeded"
    )
    return decision


def _kept(ctx: SkyhookContext, pod: PodView, node: NodeView, entry: PackageEntry) -> Step:
    """A failed pod whose failure is counted: kept for its logs for SKYHOOK_POD_TTL_FAILED
    (expire_finished), unless a later failed attempt supersedes it (only the first and the
    last stay) or the package was edited since (its logs no longer tell about what runs)."""
    decision = Step()
    pkg = ctx.index.pod_package(pod)
    assert pkg is not None
    attempt = podbuilder.pod_attempt(pod)
    if entry.stage == pkg.stage and 0 < attempt < entry.restarts - 1:
        decision.delete_pod(pod, "a failed attempt between the first and the last")
        return decision
    wanted = ctx.node_packages(node).packages.get(pkg.name)
    if wanted is None or wanted.version != pkg.version:
        decision.delete_pod(pod, "the package changed")
        return decision
    if keys.INTERRUPT_LABEL not in pod.labels:
        manifest = podbuilder.build_stage_pod(ctx.settings, ctx.scr, wanted, node.name, pkg.stage)
        if not podbuilder.matches(pod, manifest):
            decision.delete_pod(pod, "the package spec changed")
            return decision
    return decision


def expire_finished(
    ctx: SkyhookContext, work: SkyhookWork, known: Mapping[str, datetime | None]
) -> tuple[Step, dict[str, datetime | None]]:
    """Finished pods kept for their logs go when their retention is over:
    SKYHOOK_POD_TTL_SUCCEEDED after the stage succeeded, SKYHOOK_POD_TTL_FAILED after it
    failed. Looked at on every pass, whichever nodes the pass memory keeps, with one timer for
    the next to go: a node waiting only for its pods' retention is not planned again for it.

    `known`: for nodes whose pods are as the last pass saw them, when the first of them is due
    to go (None: none kept), from that pass; only a node whose time has come is looked at again.
    Returns the decision and, per node with a kept pod or in `known`, that time as it is now."""
    decision = Step()
    settings = ctx.settings
    due: dict[str, datetime | None] = {
        node: at for node, at in known.items() if at is None or at > ctx.now
    }
    for pod in ctx.pods(skip=due):
        if pod.phase not in FINISHED_PHASES:
            continue
        if keys.PACKAGE_LABEL not in pod.labels or not work.present(pod):
            continue
        finished = results.outcome(pod).finished_at or pod.created
        if finished is None:
            continue
        kept_for = (
            settings.pod_ttl_succeeded_s if pod.phase == "Succeeded" else settings.pod_ttl_failed_s
        )
        goes_at = finished + timedelta(seconds=kept_for)
        if goes_at <= ctx.now:
            decision.delete_pod(pod, "kept for its logs long enough")
        else:
            first = due.get(pod.node)
            due[pod.node] = goes_at if first is None else min(first, goes_at)
    soonest = min((at for at in due.values() if at is not None), default=None)
    if soonest is not None:
        decision.wake_in((soonest - ctx.now).total_seconds())
    return decision, due


def track_reboots(
    ctx: SkyhookContext,
    work: SkyhookWork,
    nodes: Sequence[NodeView],
    known: Mapping[str, str] | None = None,
) -> tuple[dict[str, str], Step]:
    """The boot ids to record, and what a reboot decides: a new boot id completes the interrupt
    a node was waiting on (or, with REAPPLY_ON_REBOOT, starts the node over). `known`: the boot
    ids the last pass found, for every selected node but `nodes` (whose boot id and record
    are as they were then: a reboot decides something, so its node is not kept)."""
    decision = Step()
    recorded = ctx.scr.status.node_boot_ids
    boot_ids: dict[str, str] = dict(known or {})
    for node in nodes:
        before = recorded.get(node.name)
        boot_ids.pop(node.name, None)
        if node.boot_id:
            boot_ids[node.name] = node.boot_id
        if not before or not node.boot_id or before == node.boot_id:
            continue
        entries = work.entries(node)
        waiting = {
            k: e
            for k, e in entries.items()
            if e.stage in {INTERRUPT, UNINSTALL_INTERRUPT} and e.state != COMPLETE
        }
        # Our own reboot interrupt never counts as "a reboot to reapply after": that would
        # reinstall, reboot again, and loop.
        if ctx.settings.reapply_on_reboot and not waiting:
            if _untainted(ctx, node):
                # The runtime-required taint goes back on first, so no workload lands before
                # the packages ran again; the reset waits for it (the old boot id is kept, so
                # the next pass sees the reboot again), and nothing starts here meanwhile.
                boot_ids[node.name] = before
                decision.node(node.name).taint_as_new(ctx.settings.runtime_required_taint)
                continue
            decision.changes.states[node.name] = replace(work.state(node), entries={}, error="")
            decision.event(
                "Node",
                node.name,
                "Reboot",
                f"detected reboot, resetting node for [{ctx.name}] to be reapplied",
                action="ResetOnReboot",
            )
            decision.event(
                keys.KIND,
                ctx.name,
                "Reboot",
                f"detected reboot, resetting node [{node.name}] to be reapplied",
                action="ResetOnReboot",
            )
            continue
        if not waiting:
            continue
        for key, entry in waiting.items():
            if entry.stage == UNINSTALL_INTERRUPT:
                del entries[key]  # its uninstall is over: no entry
            else:
                entries[key] = replace(entry, state=COMPLETE)
        decision.changes.states[node.name] = replace(work.state(node), entries=entries, error="")
        for pod in work.ours_on(node.name):
            if keys.INTERRUPT_LABEL in pod.labels:
                decision.delete_pod(pod, "reboot detected: interrupt done")
        decision.event(
            "Node",
            node.name,
            "Reboot",
            f"detected reboot of [{node.name}] for [{keys.SINGULAR}:{ctx.name}]",
            action="DetectReboot",
        )
    return boot_ids, decision


def _untainted(ctx: SkyhookContext, node: NodeView) -> bool:
    """Does a rebooted node the Skyhook would taint as new (runtimeRequired and
    autoTaintNewNodes) lack the runtime-required taint?"""
    spec = ctx.scr.spec
    if spec is None or not (spec.runtime_required and spec.auto_taint_new_nodes):
        return False
    return not node.carries_any(ctx.settings.runtime_required_taints)


def reboot_deadlines(ctx: SkyhookContext, work: SkyhookWork, seconds: float | None) -> Step:
    """Reboots past the Skyhook's rebootDeadline (rules/deadlines.py): the node's entries turn
    erroring, with a Warning Event on the node and the Skyhook the first time; the node waits
    with the reason and the status condition names it. A reboot still within its deadline asks
    for a timer then."""
    decision = Step()
    if seconds is None:
        return decision
    overdue: list[str] = []
    recorded = ctx.scr.status.node_boot_ids
    for node in ctx.matched:
        state = work.state(node)
        if not any(e.stage in {INTERRUPT, POST_INTERRUPT} for e in state.packages.values()):
            continue
        pod = next((p for p in work.ours_on(node.name) if keys.INTERRUPT_LABEL in p.labels), None)
        verdict = deadlines.watch(
            node,
            state.packages,
            rebooting={k: work.reboots(e) for k, e in state.packages.items()},
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
        decision.changes.states[node.name] = replace(state, entries=marked, error="")
        message = verdict.message(seconds)
        decision.event(
            "Node",
            node.name,
            deadlines.EXCEEDED,
            f"{message}: erroring for [{keys.SINGULAR}:{ctx.name}]",
            type="Warning",
            action="RebootDeadline",
        )
        decision.event(
            keys.KIND,
            ctx.name,
            deadlines.EXCEEDED,
            f"node [{node.name}]: {message}",
            type="Warning",
            action="RebootDeadline",
        )
    if overdue:
        decision.changes.conditions.append(
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


def stop_for_pause(ctx: SkyhookContext, work: SkyhookWork) -> Step:
    """A paused Skyhook runs nothing: its stage and interrupt pods that still run are deleted.
    The agent finishes the step it is in on SIGTERM and stops; the entry stays as it is (in
    progress), so the deletion spends no attempt, and on resume the stage runs again from its
    beginning (the agent skips the steps already done)."""
    decision = Step()
    stopped = []
    for pod in ctx.pods():
        if work.live(pod) and ctx.index.pod_package(pod) is not None:
            decision.delete_pod(pod, "the Skyhook is paused")
            stopped.append(pod.node)
    if stopped:
        nodes = sorted(set(stopped))
        listed = ", ".join(nodes[:10]) + (" ..." if len(nodes) > 10 else "")
        decision.event(
            keys.KIND,
            ctx.name,
            "Paused",
            f"paused: stopping {len(stopped)} running stage pod{'s' if len(stopped) != 1 else ''}"
            f" on node [{listed}]",
            action="StopPods",
        )
    return decision


def validate_pods(ctx: SkyhookContext, work: SkyhookWork, skip: Collection[str] = ()) -> Step:
    """Delete running pods that no longer do what the spec asks: a node that records another
    stage, a cancelled uninstall, or a changed package spec (image, env, resources), which
    restarts the stage (an uninstall pod too: a fix to a failing uninstall rolls forward). Pods on
    the nodes in `skip` were found valid by an earlier pass from the same inputs."""
    decision = Step()
    for pod in ctx.pods(skip):
        if not work.live(pod):
            continue
        pkg = ctx.index.pod_package(pod)
        node = ctx.index.nodes.get(pod.node)
        if pkg is None or node is None:
            continue
        key = pkg.key
        state = decision.changes.states.get(node.name) or work.state(node)
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
            # A new spec, a new round of attempts: the failed ones were of the old spec.
            restarted = replace(entry, state=IN_PROGRESS, restarts=0)
            decision.changes.states[node.name] = state.with_entry(restarted)
    return decision
