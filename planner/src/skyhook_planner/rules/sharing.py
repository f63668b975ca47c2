"""Limits that hold across every Skyhook naming one DeploymentPolicy (ours): a shared budget
(`spec.sharedBudget`: at most that many of their nodes in progress at once, whichever Skyhook
runs them) and a topology (`spec.topology`: at most `maxPerDomain` nodes in progress per value
of a node label, or nodes of one domain only).

Both count the policy's *occupancy*: every node in progress for any of its Skyhooks, as the
nodes' own state records it, plus what the Skyhooks planned earlier in this pass started. Each
answers `check(node)` as the other blockers do (rules/blockers.py), and `take(node)` once the
node is admitted, so later candidates and later Skyhooks in the same pass see it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from skyhook_planner.model import nodestate
from skyhook_planner.model.policy import Policy, Topology
from skyhook_planner.model.snapshot import NodeView, SkyhookView
from skyhook_planner.model.waiting import SHARED_BUDGET, TOPOLOGY, Reason
from skyhook_planner.rules import budget
from skyhook_schemas import keys


@dataclass
class SharedBudget:
    policy: str
    limit: int
    occupied: set[str]

    def check(self, node: NodeView) -> Reason | None:
        if node.name in self.occupied or len(self.occupied) < self.limit:
            return None
        return Reason(
            SHARED_BUDGET,
            f"shared budget of policy {self.policy}: all {self.limit} slots in use",
            nodes=tuple(sorted(self.occupied)),
        )

    def take(self, node: NodeView) -> None:
        self.occupied.add(node.name)


@dataclass
class Domains:
    topology: Topology
    occupied: dict[str, set[str]] = field(default_factory=dict)  # domain -> nodes in progress

    def domain(self, node: NodeView) -> str:
        return node.labels.get(self.topology.key, "")

    def check(self, node: NodeView) -> Reason | None:
        key, domain = self.topology.key, self.domain(node)
        if self.topology.one_domain_at_a_time:
            busy = sorted(d for d, nodes in self.occupied.items() if nodes and d != domain)
            if busy:
                return Reason(
                    TOPOLOGY,
                    f"one {key} domain at a time: {key}={busy[0]} is in progress",
                    nodes=tuple(sorted(self.occupied[busy[0]])),
                )
            return None
        limit = self.topology.max_per_domain or 0
        here = self.occupied.get(domain, set())
        if node.name in here or len(here) < limit:
            return None
        return Reason(
            TOPOLOGY,
            f"{key}={domain}: {limit} of its nodes already in progress",
            nodes=tuple(sorted(here)),
        )

    def take(self, node: NodeView) -> None:
        self.occupied.setdefault(self.domain(node), set()).add(node.name)


Limit = SharedBudget | Domains


def limits(
    policy: Policy,
    skyhooks: Sequence[SkyhookView],
    nodes: Sequence[NodeView],
    running: Callable[[str], frozenset[str] | None],
) -> list[Limit]:
    """The policy's shared limits, each holding its occupancy. `running(scr)` is what a
    Skyhook planned earlier in this pass runs (None for one not planned yet: its nodes' state
    says which hold a slot)."""
    if policy.shared_budget is None and policy.topology is None:
        return []
    members = [
        s
        for s in skyhooks
        if s.spec is not None and not s.deleting and s.spec.deployment_policy == policy.name
    ]
    occupied = set(occupancy(members, nodes, running))
    found: list[Limit] = []
    if policy.shared_budget is not None:
        selected = {
            n.name
            for s in members
            for n in nodes
            if s.spec and s.spec.node_selector.matches(n.labels)
        }
        limit = budget.ceiling(policy.shared_budget, len(selected))
        found.append(SharedBudget(policy.name, limit, occupied))
    if policy.topology is not None:
        domains = Domains(policy.topology)
        for node in nodes:
            if node.name in occupied:
                domains.take(node)
        found.append(domains)
    return found


def occupancy(
    members: Iterable[SkyhookView],
    nodes: Sequence[NodeView],
    running: Callable[[str], frozenset[str] | None],
) -> Iterable[str]:
    for scr in members:
        planned = running(scr.name)
        if planned is not None:
            yield from planned
            continue
        recorded = (keys.node_state_key(scr.name), keys.cordon_key(scr.name))
        for node in nodes:
            # Most nodes record nothing for a Skyhook: only those are decoded.
            if any(k in node.annotations for k in recorded) and (
                nodestate.read(node, scr.name).holds_slot
            ):
                yield node.name
