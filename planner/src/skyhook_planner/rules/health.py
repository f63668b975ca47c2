"""Health gates (ours, docs/fleet-safety.md#health-gates): after its interrupt, a node stays
cordoned, holding its budget slot and its batch, until it shows the gate's signals (node
conditions, labels); and the rollout halts, starting no new node, while a node fails the gate.
Pure: decided from the nodes, what this Skyhook recorded on them, the waits recorded in the
Skyhook's status, its check pods and the pass's clock.

- A node *waits* when its packages are all complete but our cordon is still on it (it was
  interrupted in this rollout) and it does not show every signal (with a `checkPod`: until
  that pod, run on the node once it waits, has succeeded). It is not complete: its slot, its
  batch and the Skyhooks after it on the node wait with it. Once it shows them it is released
  (uncordoned) as usual.
- A node *fails* the gate when it has waited `timeout` without showing the signals, when its
  check pod fails, or when the Skyhook is complete on it and a condition or label turns bad.
  (A failed check pod is kept for its logs; deleting it runs the check again.) While any node
  fails, no new node starts
  (the nodes already running go on), and the status names each failing node and why. The
  rollout resumes by itself once they show the signals again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from skyhook_planner.model.health import HealthGate
from skyhook_planner.model.nodestate import NodeState
from skyhook_planner.model.policy import Policy
from skyhook_planner.model.snapshot import NodeView, PodView
from skyhook_planner.model.spec import SkyhookSpec
from skyhook_planner.model.times import describe, exact_stamp, parse_stamp, stamp
from skyhook_planner.model.waiting import HEALTH, Reason
from skyhook_planner.rules import results
from skyhook_schemas import keys

WAITING = "HealthGateWaiting"  # condition reason, held-nodes reason
FAILED = "HealthGateFailed"  # condition reason, Event reason, held-nodes reason
PASSED = "HealthGatePassed"  # Event reason
CONDITION_WAITING = f"{keys.GROUP}/{WAITING}"
CONDITION_FAILED = f"{keys.GROUP}/{FAILED}"
MAX_NAMED = 10


def gate_of(spec: SkyhookSpec, policy: Policy | None) -> HealthGate | None:
    """The Skyhook's own healthGate, else its policy's; None when neither sets one."""
    if spec.health_gate is not None:
        return spec.health_gate
    return policy.health_gate if policy is not None else None


def unmet(gate: HealthGate, node: NodeView) -> tuple[str, ...]:
    """The conditions and labels `node` does not show (phrases for a person); empty when it
    shows them all."""
    return gate.unmet(node.labels, {c.type: c.status for c in node.conditions})


def check_result(gate: HealthGate, check: PodView | None) -> str:
    """The check pod's word (results.SUCCEEDED, FAILED, RUNNING or WAITING); SUCCEEDED
    without a checkPod, WAITING for a pod not created yet."""
    if gate.check_pod is None:
        return results.SUCCEEDED
    if check is None:
        return results.WAITING
    return results.outcome(check).result


def problems(gate: HealthGate, node: NodeView, check: PodView | None) -> tuple[str, ...]:
    """Everything that keeps `node` from passing the gate; empty when it passes."""
    found = unmet(gate, node)
    result = check_result(gate, check)
    if result == results.SUCCEEDED:
        return found
    if check is None:
        return (*found, "check pod not run yet")
    word = "failed" if result == results.FAILED else "not finished"
    return (*found, f"check pod {check.name} {word}")


def awaits(
    gate: HealthGate | None, node: NodeView, state: NodeState, check: PodView | None
) -> bool:
    """Is a node whose work is complete still past its interrupt (our cordon on it) without
    passing the gate?"""
    return gate is not None and state.cordoned and bool(problems(gate, node, check))


def waiting_reason(found: tuple[str, ...]) -> Reason:
    """Why a node that waits at the gate stays held: what `problems` found."""
    return Reason(
        HEALTH, f"health gate: held cordoned until healthy: {'; '.join(found)}", hold=WAITING
    )


@dataclass(frozen=True)
class Failure:
    node: str
    why: str


@dataclass(frozen=True)
class Verdict:
    """The gate over one Skyhook's nodes this pass: when each waiting node started waiting
    (status.healthGateWaiting after the pass), the nodes that fail it, and the next time a
    wait runs out."""

    waiting_since: Mapping[str, str]
    failures: tuple[Failure, ...]
    next_timeout: datetime | None


@dataclass(frozen=True)
class AtGate:
    """One selected node as the gate sees it: whether it waits at the gate (`awaits`), whether
    the Skyhook is complete on it, and its check pod."""

    node: NodeView
    waits: bool
    complete: bool
    check: PodView | None = None


def judge(
    gate: HealthGate, nodes: Mapping[str, AtGate], recorded: Mapping[str, str], now: datetime
) -> Verdict:
    """`recorded`: the waits the last pass recorded."""
    timeout = timedelta(seconds=gate.timeout_s)
    since: dict[str, str] = {}
    failures: list[Failure] = []
    next_timeout: datetime | None = None
    for name, at in sorted(nodes.items()):
        node = at.node
        if at.waits:
            started = parse_stamp(recorded.get(name)) or now
            since[name] = exact_stamp(started)
            listed = "; ".join(problems(gate, node, at.check))
            if check_result(gate, at.check) == results.FAILED:
                failures.append(Failure(name, f"failed its health check: {listed}"))
            elif now - started >= timeout:
                failures.append(
                    Failure(
                        name,
                        f"not healthy within timeout {describe(gate.timeout_s)} after its "
                        f"interrupt (since {stamp(started)}): {listed}",
                    )
                )
            elif next_timeout is None or started + timeout < next_timeout:
                next_timeout = started + timeout
        elif at.complete and (turned := unmet(gate, node)):
            failures.append(Failure(name, f"turned unhealthy: {'; '.join(turned)}"))
    return Verdict(since, tuple(failures), next_timeout)


def named(failures: tuple[Failure, ...]) -> str:
    listed = "; ".join(f"node [{f.node}] {f.why}" for f in failures[:MAX_NAMED])
    more = len(failures) - MAX_NAMED
    return listed + (f"; and {more} more" if more > 0 else "")


@dataclass(frozen=True)
class Halt:
    """The blocker of a rollout some node fails the gate of: no candidate starts."""

    failures: tuple[Failure, ...]

    def check(self, node: NodeView) -> Reason | None:
        if not self.failures:
            return None
        return Reason(
            HEALTH,
            f"rollout halted by the health gate: {named(self.failures)}",
            nodes=tuple(f.node for f in self.failures),
            hold=FAILED,
        )
