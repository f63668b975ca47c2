"""Why a node may not start work now. Every rule that can hold a node back answers one question
the same way: may this node start now, and if not, why. The answer is a `Reason`; the pass
records each node's reasons in the plan (`Plan.waiting`), and that record is what
`kubectl skyhook plan` prints and what the held-nodes metric counts.

A blocker is anything with `check(node) -> Reason | None`. Most look at the node alone (the
ignore label, taints, readiness, a paused Skyhook, a closed window); capacity blockers (the
budget, a compartment's batch) count the nodes they let through, so they are asked last and in
node order, once the others have let a node pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Protocol

from skyhook_planner.model.snapshot import NodeView, PodView, SkyhookView
from skyhook_planner.model.spec import SkyhookSpec
from skyhook_planner.model.times import describe
from skyhook_planner.model.vocabulary import Taint, Toleration
from skyhook_planner.model.waiting import (
    BATCH,
    BUDGET,
    DRAIN,
    HOLD,
    IGNORED,
    NOT_READY,
    ORDERING,
    SWITCHED_OFF,
    TAINTS,
    Reason,
)
from skyhook_planner.rules.drain import NON_INTERRUPT, TIMED_OUT, BlockedPod, Drain
from skyhook_planner.rules.holds import Hold
from skyhook_schemas import keys

# Answers that are the same for every node, made once.
_DISABLED = Reason(SWITCHED_OFF, "skyhook disabled")
_PAUSED = Reason(SWITCHED_OFF, "skyhook paused")
_IGNORED = Reason(IGNORED, f"ignored (label {keys.IGNORE_LABEL}=true)")
_NOT_READY = Reason(NOT_READY, "node not Ready")


class Blocker(Protocol):
    def check(self, node: NodeView) -> Reason | None:
        """None when `node` may start now, else why it may not."""
        ...


@dataclass(frozen=True)
class SwitchedOff:
    paused: bool
    disabled: bool

    def check(self, node: NodeView) -> Reason | None:
        if self.disabled:
            return _DISABLED
        if self.paused:
            return _PAUSED
        return None


class IgnoreLabel:
    def check(self, node: NodeView) -> Reason | None:
        return _IGNORED if node.labels.get(keys.IGNORE_LABEL) == "true" else None


UNSCHEDULABLE_TOLERATION = Toleration(keys.UNSCHEDULABLE_TAINT_KEY, "Exists", effect="NoSchedule")


@dataclass(frozen=True)
class Taints:
    """The node's taints must all be tolerated: the cordon taint always is, the runtime-required
    taints (ours and the other API group's default) when the Skyhook is runtimeRequired, the
    rest by additionalTolerations."""

    tolerations: tuple[Toleration, ...]

    @classmethod
    def of(cls, spec: SkyhookSpec, runtime_taints: Sequence[Taint]) -> Taints:
        tolerations = [UNSCHEDULABLE_TOLERATION, *spec.additional_tolerations]
        if spec.runtime_required:
            tolerations += [Toleration(t.key, "Equal", t.value, t.effect) for t in runtime_taints]
        return cls(tuple(tolerations))

    def untolerated(self, node: NodeView) -> list[Taint]:
        return [t for t in node.taints if not any(o.tolerates(t) for o in self.tolerations)]

    def check(self, node: NodeView) -> Reason | None:
        if not node.taints:
            return None
        untolerated = self.untolerated(node)
        if not untolerated:
            return None
        listed = ", ".join(str(t) for t in untolerated)
        return Reason(TAINTS, f"taints not tolerated: {listed}")


class NotReady:
    def check(self, node: NodeView) -> Reason | None:
        return None if node.ready else _NOT_READY


@dataclass(frozen=True)
class EarlierSkyhooks:
    """A node runs one Skyhook at a time, in priority order: it waits until every Skyhook ahead
    of this one that selects it is complete there; and behind a Skyhook ahead with
    `sequencing: all` (a gate) until that one is complete on every node it selects."""

    ahead: tuple[SkyhookView, ...]
    complete: Callable[[str, str], bool]  # (Skyhook, node) -> complete there
    closed_gates: frozenset[str] = frozenset()  # gates ahead not yet complete everywhere

    @classmethod
    def of(
        cls,
        ordered: Sequence[SkyhookView],
        name: str,
        complete: Callable[[str, str], bool],
        closed_gates: frozenset[str] = frozenset(),
    ) -> EarlierSkyhooks:
        ahead = []
        for other in ordered:
            if other.name == name:
                break
            if not (
                other.spec is None
                or other.deleting
                or other.annotations.get(keys.DISABLE_ANNOTATION) == "true"
            ):
                ahead.append(other)
        return cls(tuple(ahead), complete, closed_gates)

    def check(self, node: NodeView) -> Reason | None:
        for other in self.ahead:
            assert other.spec is not None  # `of` keeps only Skyhooks with a spec
            if other.name in self.closed_gates:
                return gate_reason(other.name)
            if other.spec.node_selector.matches(node.labels) and not self.complete(
                other.name, node.name
            ):
                return Reason(
                    ORDERING, f"waits for Skyhook {other.name}, ahead of it, on this node"
                )
        return None


def gate_reason(gate: str) -> Reason:
    return Reason(
        ORDERING,
        f"waits for Skyhook {gate}, ahead of it with sequencing: all, to be complete on "
        "every node it selects",
    )


def closed_gates(
    ahead: Sequence[SkyhookView],
    nodes: Sequence[NodeView],
    complete: Callable[[str, str], bool],
) -> frozenset[str]:
    """The Skyhooks ahead with `sequencing: all` that are not yet complete on every node they
    select (one that selects no node is complete)."""
    return frozenset(
        other.name
        for other in ahead
        if other.spec is not None
        and other.spec.sequencing == "all"
        and not all(
            complete(other.name, n.name)
            for n in nodes
            if other.spec.node_selector.matches(n.labels)
        )
    )


@dataclass(frozen=True)
class OnHold:
    """A hold (closed window, firing alert) on the work it holds back."""

    hold: Hold | None

    def check(self, node: NodeView) -> Reason | None:
        if self.hold is None:
            return None
        return hold_reason(self.hold)


def hold_reason(hold: Hold) -> Reason:
    return Reason(HOLD, hold.message, hold=hold.reason)


@dataclass
class Budget:
    """The interruption budget: `limit` nodes at once, the `occupied` ones keeping their
    slots. Asked in node order, it lets nodes through while a slot is free."""

    limit: int
    occupied: tuple[str, ...]
    free: int = field(init=False)
    full: Reason = field(init=False)  # one answer for every node turned away

    def __post_init__(self) -> None:
        self.free = max(0, self.limit - len(self.occupied))
        self.full = Reason(BUDGET, f"budget: all {self.limit} slots in use", nodes=self.occupied)

    def check(self, node: NodeView) -> Reason | None:
        if self.free > 0:
            self.free -= 1
            return None
        return self.full


@dataclass
class Batches:
    """A DeploymentPolicy's compartments: how many nodes each may still start (`room`), and
    which start none because their batches failed (`stopped`)."""

    compartment_of: Mapping[str, str]  # node -> compartment
    room: dict[str, int]
    stopped: frozenset[str]

    def check(self, node: NodeView) -> Reason | None:
        name = self.compartment_of[node.name]
        if name in self.stopped:
            return _stopped(name)
        if self.room.get(name, 0) <= 0:
            return _no_room(name)
        self.room[name] -= 1
        return None


@cache
def _stopped(compartment: str) -> Reason:
    return Reason(BATCH, f"policy batch: compartment {compartment} stopped after failed batches")


@cache
def _no_room(compartment: str) -> Reason:
    return Reason(BATCH, f"policy batch: compartment {compartment} has no room in this batch")


def drain_reason(drain: Drain) -> Reason | None:
    """Why a node that needs an interrupt is not yet drained, or None when it is. A hold the drain cannot end by itself names its cause in `hold` (the held-nodes
    metric's reason)."""
    if drain.protected:
        return Reason(
            DRAIN, f"non-interrupt pods: {pod_names(drain.protected)}", hold=NON_INTERRUPT
        )
    if drain.blocked:
        return Reason(
            DRAIN, f"drain blocked: {blocked_pods(drain.blocked)}", hold=drain.blocked_reason
        )
    waiting = len(drain.to_remove) + len(drain.leaving)
    if waiting:
        return Reason(DRAIN, f"draining: {waiting} pods still to leave the node")
    if not drain.cordoned:
        return Reason(DRAIN, "draining: the node is being cordoned")
    return None


def drain_timeout_reason(drain: Drain, timeout_s: float) -> Reason:
    left = len(drain.to_remove) + len(drain.leaving) + len(drain.blocked)
    return Reason(
        DRAIN,
        f"drain timed out after {describe(timeout_s)} with {left} pods left on the node; "
        "the node stays cordoned until they are gone or it is reset",
        hold=TIMED_OUT,
    )


def blocked_pods(blocked: Iterable[BlockedPod]) -> str:
    """`ns/name (reason: detail)` for each blocked pod."""
    return "; ".join(
        f"{b.namespace}/{b.name} ({b.reason}{': ' + b.detail if b.detail else ''})" for b in blocked
    )


def pod_names(pods: Iterable[PodView]) -> str:
    return ", ".join(f"{p.namespace}/{p.name}" for p in pods)


def reasons(
    blockers: Iterable[Blocker], node: NodeView, *, first_only: bool = False
) -> tuple[Reason, ...]:
    """The reasons `blockers` give for `node`, in their order: every one, or only the first
    (for blockers that are costly to ask once one has answered)."""
    found: tuple[Reason, ...] = ()
    for blocker in blockers:
        reason = blocker.check(node)
        if reason is not None:
            found += (reason,)
            if first_only:
                break
    return found
