"""The health gate over one Skyhook's selected nodes (rules/health.py): which nodes wait at it
and since when, which fail it, and what that says: the halt `admit` asks each candidate, the
conditions, the Events, a timer for the next wait to run out, and the check pods (created for
the nodes that wait, deleted once they are not needed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from skyhook_planner import podbuilder
from skyhook_planner.model import status as statuses
from skyhook_planner.model.actions import CreatePod
from skyhook_planner.model.health import HealthGate
from skyhook_planner.passes.context import SkyhookContext
from skyhook_planner.passes.prepare import Rollout
from skyhook_planner.passes.select import Selection
from skyhook_planner.passes.work import SkyhookWork, Step
from skyhook_planner.rules import health
from skyhook_schemas import keys


@dataclass(frozen=True)
class Gate:
    halt: health.Halt = field(default_factory=lambda: health.Halt(()))
    waiting: Mapping[str, str] | None = None  # status.healthGateWaiting; None without a gate
    decided: Step = field(default_factory=Step)


def check(ctx: SkyhookContext, work: SkyhookWork, rollout: Rollout, selection: Selection) -> Gate:
    """The gate over `selection` (select.py marks the nodes that wait at it); without a gate,
    only the removal of check pods left from an earlier one."""
    gate = health.gate_of(rollout.spec, rollout.policy)
    if gate is None:
        return Gate(decided=_check_pods(ctx, work, None, {}))
    nodes: dict[str, health.AtGate] = {}
    for node in rollout.matched:
        found = selection.nodes[node.name]
        waits = any(r.hold == health.WAITING for r in found.reasons)
        if waits or found.done:
            nodes[node.name] = health.AtGate(node, waits, found.done, work.check_pod(node.name))
    recorded = ctx.scr.status.health_gate_waiting
    verdict = health.judge(gate, nodes, recorded, ctx.now)
    decided = _check_pods(ctx, work, gate, nodes).merge(_report(ctx, verdict))
    for name in sorted(set(recorded) - set(verdict.waiting_since)):
        if name in nodes and nodes[name].complete:
            decided.event(
                "Node", name, health.PASSED, _passed(ctx.name, gate), action="PassHealthGate"
            )
    if verdict.next_timeout is not None:
        decided.wake_in((verdict.next_timeout - ctx.now).total_seconds())
    return Gate(health.Halt(verdict.failures), verdict.waiting_since, decided)


def _check_pods(
    ctx: SkyhookContext,
    work: SkyhookWork,
    gate: HealthGate | None,
    nodes: Mapping[str, health.AtGate],
) -> Step:
    """A check pod for each node that waits without one; a check pod on a node that no longer
    waits is deleted (a failed one on a node that waits is kept for its logs: deleting it runs
    the check again)."""
    decided = Step()
    check = gate.check_pod if gate is not None else None
    waiting = {name for name, at in nodes.items() if at.waits}
    for pod in ctx.index.check_pods(ctx.name):
        if work.present(pod) and (check is None or pod.node not in waiting):
            decided.delete_pod(pod, "health check no longer needed")
    if check is None:
        return decided
    for name in sorted(waiting):
        at = nodes[name]
        if at.check is not None:
            continue
        manifest = podbuilder.build_check_pod(ctx.settings, ctx.scr, name, check)
        if work.name_taken(ctx.settings.namespace, manifest["metadata"]["name"]):
            decided.wake_in(1.0)  # the last check pod is still going away
            continue
        decided.node(name).actions.append(CreatePod(manifest))
    return decided


def _report(ctx: SkyhookContext, verdict: health.Verdict) -> Step:
    """The conditions while nodes wait or fail, and a Warning Event on the node and the
    Skyhook for each node that newly fails."""
    decided = Step()
    generation = ctx.scr.generation
    waiting = sorted(verdict.waiting_since)
    if waiting:
        listed = ", ".join(waiting[: health.MAX_NAMED]) + (
            " ..." if len(waiting) > health.MAX_NAMED else ""
        )
        decided.changes.conditions.append(
            statuses.condition(
                health.CONDITION_WAITING,
                True,
                health.WAITING,
                f"{len(waiting)} node(s) held cordoned after their interrupt until they show "
                f"the health gate's signals: {listed}",
                ctx.now,
                generation=generation,
            )
        )
    if not verdict.failures:
        return decided
    message = f"No new node starts: {health.named(verdict.failures)}"
    decided.changes.conditions.append(
        statuses.condition(
            health.CONDITION_FAILED, True, health.FAILED, message, ctx.now, generation=generation
        )
    )
    before = ctx.scr.status.condition(health.CONDITION_FAILED)
    told = before.get("message", "") if before and before.get("status") == "True" else ""
    for failure in verdict.failures:
        if f"node [{failure.node}]" in told:
            continue
        decided.event(
            "Node",
            failure.node,
            health.FAILED,
            f"health gate of [{keys.SINGULAR}:{ctx.name}]: {failure.why}",
            type="Warning",
            action="FailHealthGate",
        )
        decided.event(
            keys.KIND,
            ctx.name,
            health.FAILED,
            f"rollout halted: node [{failure.node}] {failure.why}",
            type="Warning",
            action="HaltRollout",
        )
    return decided


def _passed(scr: str, gate: HealthGate) -> str:
    signals = [f"{c.type}={c.status}" for c in gate.conditions]
    signals += [f"label {k}={v}" for k, v in gate.labels]
    if gate.check_pod is not None:
        signals.append("check pod succeeded")
    return f"healthy ({', '.join(signals)}): released by [{keys.SINGULAR}:{scr}]"
