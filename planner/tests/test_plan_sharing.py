"""A DeploymentPolicy's shared budget and topology: limits that hold over every Skyhook naming
the policy, at every moment of the rollout."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyhook_planner import telemetry
from skyhook_planner.model.actions import lane_of
from skyhook_planner.model.policy import PolicyError, decode_policy
from skyhook_planner.sim.driver import Driver, package
from skyhook_schemas import keys

RACK = "example.com/rack"
# Batches as large as the budget: only the shared limits hold nodes back.
BASE_POLICY: dict[str, Any] = {
    "default": {"budget": {"percent": 100}, "strategy": {"fixed": {"initialBatch": 100}}}
}
REBOOT = {"type": "reboot"}


def skyhook(policy: str, priority: int = 200, **spec: Any) -> dict[str, Any]:
    return {
        "deploymentPolicy": policy,
        "priority": priority,
        "packages": {"kernel": package(interrupt=REBOOT)},
        **spec,
    }


def interrupted(d: Driver, skyhooks: list[str]) -> set[str]:
    """Nodes in progress for any of `skyhooks`, as their annotations and cordon say."""
    found = set()
    for name, node in d.sim.nodes.items():
        annotations = node["metadata"]["annotations"]
        for scr in skyhooks:
            if annotations.get(keys.node_status_key(scr)) in {"in_progress", "erroring"}:
                found.add(name)
            if annotations.get(keys.cordon_key(scr)):
                found.add(name)
    return found


def test_two_skyhooks_sharing_a_budget_of_two_never_interrupt_more_than_two_nodes() -> None:
    d = Driver(10)
    d.sim.add_policy("pair-safe", {**BASE_POLICY, "sharedBudget": {"count": 2}})
    d.sim.add_skyhook("firmware", skyhook("pair-safe", 1))
    d.sim.add_skyhook("driver", skyhook("pair-safe", 2))
    peak = 0

    def check(driver: Driver) -> None:
        nonlocal peak
        now = interrupted(driver, ["firmware", "driver"])
        assert len(now) <= 2, now
        peak = max(peak, len(now))

    d.mid_write = check
    d.run(on_step=check, max_steps=800)
    assert peak == 2
    for scr in ("firmware", "driver"):
        assert d.status(scr)["status"] == "complete"


def test_a_skyhook_held_by_the_shared_budget_says_so() -> None:
    d = Driver(3)
    first_node, *others = sorted(d.sim.nodes)
    d.sim.nodes[first_node]["metadata"]["labels"]["pool"] = "a"
    for node in others:
        d.sim.nodes[node]["metadata"]["labels"]["pool"] = "b"
    d.sim.add_policy("shared", {**BASE_POLICY, "sharedBudget": {"count": 1}})
    d.sim.add_skyhook("first", skyhook("shared", 1, nodeSelectors={"matchLabels": {"pool": "a"}}))
    d.sim.add_skyhook("second", skyhook("shared", 2, nodeSelectors={"matchLabels": {"pool": "b"}}))
    plan = d.step()
    held = [
        (scr, node)
        for (scr, node), reasons in plan.waiting.items()
        if any(r.blocker == "shared-budget" for r in reasons)
    ]
    assert ("second", "node-0001") in held
    status = d.status("second")
    found = [c for c in status["conditions"] if c["type"] == f"{keys.GROUP}/SharedBudgetFull"]
    assert found and found[0]["status"] == "True"
    assert "shared budget of policy shared: all 1 slots in use" in found[0]["message"]
    assert any(e.reason == "SharedBudgetFull" and e.name == "second" for e in d.sim.events)
    d.run(max_steps=400)
    final = d.status("second")["conditions"]
    assert not [c for c in final if c["type"] == f"{keys.GROUP}/SharedBudgetFull"]


def racked(racks: int, per_rack: int) -> Driver:
    d = Driver(racks * per_rack)
    for index, node in enumerate(sorted(d.sim.nodes)):
        d.sim.nodes[node]["metadata"]["labels"][RACK] = f"r{index % racks}"
    return d


def rack_of(d: Driver, node: str) -> str:
    return str(d.sim.nodes[node]["metadata"]["labels"][RACK])


def test_at_most_one_node_per_rack() -> None:
    d = racked(3, 3)
    d.sim.add_policy("racks", {**BASE_POLICY, "topology": {"key": RACK, "maxPerDomain": 1}})
    d.sim.add_skyhook("kernel", skyhook("racks"))
    peak = 0

    def check(driver: Driver) -> None:
        nonlocal peak
        per_rack = Counter(rack_of(driver, n) for n in interrupted(driver, ["kernel"]))
        assert all(count <= 1 for count in per_rack.values()), per_rack
        peak = max(peak, sum(per_rack.values()))

    d.mid_write = check
    d.run(on_step=check, max_steps=400)
    assert peak == 3  # one per rack, all three racks at once
    assert d.status("kernel")["status"] == "complete"


def test_one_rack_at_a_time() -> None:
    d = racked(3, 2)
    d.sim.add_policy("racks", {**BASE_POLICY, "topology": {"key": RACK, "oneDomainAtATime": True}})
    d.sim.add_skyhook("kernel", skyhook("racks"))
    order: list[str] = []

    def check(driver: Driver) -> None:
        racks = {rack_of(driver, n) for n in interrupted(driver, ["kernel"])}
        assert len(racks) <= 1, racks
        for rack in racks:
            if not order or order[-1] != rack:
                order.append(rack)

    d.mid_write = check
    d.run(on_step=check, max_steps=400)
    assert sorted(order) == ["r0", "r1", "r2"]  # each rack once, whole, then the next
    assert d.status("kernel")["status"] == "complete"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    skyhooks=st.integers(1, 3),
    nodes=st.integers(2, 8),
    count=st.integers(1, 3),
    racks=st.integers(1, 3),
    per_domain=st.integers(1, 2),
    seed=st.integers(0, 2**16),
    lagging=st.booleans(),
)
def test_shared_limits_are_never_exceeded(  # noqa: PLR0917 (hypothesis passes every strategy by name)
    skyhooks: int, nodes: int, count: int, racks: int, per_domain: int, seed: int, lagging: bool
) -> None:
    rng = random.Random(seed)
    d = Driver(nodes)
    for index, node in enumerate(sorted(d.sim.nodes)):
        d.sim.nodes[node]["metadata"]["labels"][RACK] = f"r{index % racks}"
    d.sim.add_policy(
        "shared",
        {
            **BASE_POLICY,
            "sharedBudget": {"count": count},
            "topology": {"key": RACK, "maxPerDomain": per_domain},
        },
    )
    names = [f"scr-{i}" for i in range(skyhooks)]
    for priority, name in enumerate(names, start=1):
        d.sim.add_skyhook(name, skyhook("shared", priority))
    if lagging:
        d.lag = lambda plan: {
            n for n in sorted({lane_of(a) or "" for a in plan.actions}) if rng.random() < 0.5
        }

    def check(driver: Driver) -> None:
        now = interrupted(driver, names)
        assert len(now) <= count, now
        per_rack = Counter(rack_of(driver, n) for n in now)
        assert all(c <= per_domain for c in per_rack.values()), per_rack

    d.mid_write = check
    d.run(
        on_step=check,
        finish=lambda pods: [p for p in pods if rng.random() < 0.6],
        max_steps=1500,
    )
    for name in names:
        assert d.status(name)["status"] == "complete"


@pytest.mark.parametrize(
    ("extra", "naming"),
    [
        ({"sharedBudget": {"count": 0}}, "spec.sharedBudget.count"),
        ({"sharedBudget": {}}, "spec.sharedBudget"),
        ({"topology": {"key": RACK}}, "spec.topology"),
        ({"topology": {"key": "bad key", "maxPerDomain": 1}}, "spec.topology.key"),
        ({"topology": {"key": RACK, "maxPerDomain": 0}}, "spec.topology.maxPerDomain"),
        ({"topology": {"key": RACK, "spread": 1}}, "spec.topology"),
    ],
)
def test_malformed_shared_limits_are_refused_naming_the_field(
    extra: dict[str, Any], naming: str
) -> None:
    with pytest.raises(PolicyError) as refused:
        decode_policy("p", {**BASE_POLICY, **extra})
    assert naming in str(refused.value)


def test_the_waiting_metric_counts_nodes_held_by_the_shared_budget() -> None:
    d = Driver(4)
    d.sim.add_policy("shared", {**BASE_POLICY, "sharedBudget": {"count": 1}})
    d.sim.add_skyhook("only", skyhook("shared"))
    family = telemetry.waiting_family(d.step())
    assert family.name == "skyhook_waiting_nodes"
    counts = {s.labels: s.value for s in family.samples}
    assert counts[("only", "shared-budget")] == 3
