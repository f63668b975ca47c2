"""Soak time (rules/soak.py): a minimum time between batch starts, or between node starts without
a DeploymentPolicy; refused at admission when malformed, shown in the status, the plan's
waiting reasons and the held-nodes count."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyhook_planner import admission, telemetry
from skyhook_planner.model import waiting
from skyhook_planner.model.actions import EmitEvent, Plan
from skyhook_planner.rules import soak
from skyhook_planner.sim.driver import Driver, package
from skyhook_planner.sim.forecast import Timing, forecast

SEL = {"nodeSelectors": {"matchLabels": {"role": "gpu"}}}
POLICY = {"default": {"budget": {"percent": 100}, "strategy": {"fixed": {"initialBatch": 2}}}}


def _rollout(
    d: Driver,
    finish_after: Callable[[int], int] = lambda step: 0,
    max_steps: int = 2000,
) -> list[tuple[datetime, list[str], Plan]]:
    """Run until nothing moves; each pod finishes `finish_after(step)` passes (one second
    each) after it was created, and an idle pass with a timer moves the clock to it. Returns
    (time, nodes started, plan) for each pass that started nodes."""
    starts: list[tuple[datetime, list[str], Plan]] = []
    born: dict[tuple[str, str], int] = {}
    for step in range(max_steps):
        result = d.step()
        if result.starting:
            starts.append((d.now, sorted(result.starting), result))
        pending = d.pending_pods()
        if not result.actions and not pending:
            if result.requeue_after is None:
                return starts
            d.now += timedelta(seconds=result.requeue_after)
            continue
        for key in pending:
            born.setdefault(key, step)
            if step - born[key] >= finish_after(step):
                d.sim.finish_pod(key, at=d.now.strftime("%Y-%m-%dT%H:%M:%SZ"))
                born.pop(key)
        d.now += timedelta(seconds=1)
    raise AssertionError("no steady state")


def _gaps(starts: list[tuple[datetime, list[str], Plan]]) -> list[float]:
    return [(b[0] - a[0]).total_seconds() for a, b in itertools.pairwise(starts)]


def test_without_a_policy_nodes_start_one_soak_apart() -> None:
    d = Driver(3, {"role": "gpu"})
    spec = {**SEL, "interruptionBudget": {"count": 3}, "soakTime": "10m"}
    d.sim.add_skyhook("scr", {**spec, "packages": {"tools": package()}})
    starts = _rollout(d)
    assert [nodes for _, nodes, _ in starts] == [["node-0000"], ["node-0001"], ["node-0002"]]
    assert all(gap >= 600 for gap in _gaps(starts)), _gaps(starts)
    assert d.status("scr")["completeNodes"] == "3/3"
    assert set(d.status("scr")["batchStarts"]) == {"__default__"}


def test_a_waiting_node_names_the_soak_and_counts_as_held() -> None:
    d = Driver(2, {"role": "gpu"})
    spec = {**SEL, "interruptionBudget": {"count": 2}, "soakTime": "1h30m"}
    d.sim.add_skyhook("scr", {**spec, "packages": {"tools": package()}})
    first = d.step()
    assert first.starting == {"node-0000"}
    (reason,) = first.waiting[("scr", "node-0001")]
    assert reason.blocker == waiting.SOAK
    assert reason.message == (
        "soak: the next node starts at 2026-01-01T01:30:00Z (soakTime 1h30m after the last start)"
    )
    assert telemetry.held(first) == {("scr", soak.SOAKING): 1}
    assert first.requeue_after == 5400
    condition = next(c for c in d.status("scr")["conditions"] if c["type"] == soak.CONDITION_SOAK)
    assert (condition["status"], condition["reason"]) == ("True", "Soaking")
    events = [a for a in first.actions if isinstance(a, EmitEvent) and a.reason == "SoakStarted"]
    assert [e.message for e in events] == [
        "Started a node; the next node waits for the soak time (1h30m) until 2026-01-01T01:30:00Z."
    ]
    assert d.status("scr")["batchStarts"] == {"__default__": "2026-01-01T00:00:00Z"}


def test_with_a_policy_a_batch_starts_together_and_the_next_waits() -> None:
    d = Driver(6, {"role": "gpu"})
    d.sim.add_policy("p", {**POLICY, "soakTime": "30m"})
    d.sim.add_skyhook("scr", {**SEL, "deploymentPolicy": "p", "packages": {"tools": package()}})
    starts = _rollout(d)
    assert [nodes for _, nodes, _ in starts] == [
        ["node-0000", "node-0001"],
        ["node-0002", "node-0003"],
        ["node-0004", "node-0005"],
    ]
    assert all(gap >= 1800 for gap in _gaps(starts)), _gaps(starts)


def test_the_skyhook_s_soak_wins_over_its_policy_s() -> None:
    d = Driver(4, {"role": "gpu"})
    d.sim.add_policy("p", {**POLICY, "soakTime": "30m"})
    spec = {**SEL, "deploymentPolicy": "p", "soakTime": "5m"}
    d.sim.add_skyhook("scr", {**spec, "packages": {"tools": package()}})
    gaps = _gaps(_rollout(d))
    assert gaps and all(300 <= gap < 1800 for gap in gaps), gaps


def test_a_slow_batch_is_not_held_further() -> None:
    """The soak counts from the batch's start: a batch that ran longer than it does not wait."""
    d = Driver(4, {"role": "gpu"})
    d.sim.add_policy("p", {**POLICY, "soakTime": "1m"})
    d.sim.add_skyhook("scr", {**SEL, "deploymentPolicy": "p", "packages": {"tools": package()}})
    starts = _rollout(d, finish_after=lambda step: 120)
    assert len(starts) == 2
    assert starts[1][2].waiting.get(("scr", "node-0002")) is None


def test_removing_the_soak_time_drops_its_condition_and_record() -> None:
    d = Driver(2, {"role": "gpu"})
    d.sim.add_skyhook(
        "scr",
        {
            **SEL,
            "interruptionBudget": {"count": 2},
            "soakTime": "1h",
            "packages": {"tools": package()},
        },
    )
    d.step()
    assert "batchStarts" in d.status("scr")
    scr = d.sim.skyhooks["scr"]
    del scr["spec"]["soakTime"]
    scr["metadata"]["generation"] += 1
    result = d.step()
    assert result.starting == {"node-0001"}
    assert "batchStarts" not in d.status("scr")
    types = {c["type"] for c in d.status("scr")["conditions"]}
    assert soak.CONDITION_SOAK not in types


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        pytest.param(
            {"soakTime": "30 minutes"}, "spec.soakTime: '30 minutes' is not a duration", id="words"
        ),
        pytest.param({"soakTime": 1800}, "spec.soakTime: 1800 is not a string", id="number"),
        pytest.param({"soakTime": "-5m"}, "spec.soakTime: '-5m' is not a duration", id="negative"),
    ],
)
def test_a_malformed_soak_time_is_refused_naming_the_field(
    spec: dict[str, Any], problem: str
) -> None:
    skyhook = {"metadata": {"name": "scr"}, "spec": {**spec, "packages": {"tools": package()}}}
    verdict = admission.review_skyhook("CREATE", skyhook, None, ())
    assert not verdict.allowed
    assert problem in verdict.message
    policy = {"metadata": {"name": "p"}, "spec": {**POLICY, **spec}}
    verdict = admission.review_policy("CREATE", policy, None, ())
    assert not verdict.allowed
    assert problem in verdict.message


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.integers(1, 7),
    soak_s=st.sampled_from([30, 90, 600]),
    batch=st.integers(1, 3),
    policy=st.booleans(),
    work=st.lists(st.integers(0, 60), min_size=1, max_size=5),
    offset_ms=st.integers(0, 999),
)
def test_the_soak_is_honoured_between_batch_starts(
    *, nodes: int, soak_s: int, batch: int, policy: bool, work: list[int], offset_ms: int
) -> None:
    """Whatever the batch sizes, however long nodes take and wherever within a second the
    first start falls, two passes that start nodes are at least the soak time apart, and every
    node completes."""
    d = Driver(nodes, {"role": "gpu"})
    d.now += timedelta(milliseconds=offset_ms)
    spec: dict[str, Any] = {**SEL, "soakTime": f"{soak_s}s", "packages": {"tools": package()}}
    if policy:
        d.sim.add_policy(
            "p",
            {
                "default": {
                    "budget": {"count": batch},
                    "strategy": {"fixed": {"initialBatch": batch}},
                }
            },
        )
        spec["deploymentPolicy"] = "p"
    else:
        spec["interruptionBudget"] = {"count": batch}
    d.sim.add_skyhook("scr", spec)
    starts = _rollout(d, finish_after=lambda step: work[step % len(work)])
    assert all(gap >= soak_s for gap in _gaps(starts)), _gaps(starts)
    assert d.status("scr")["completeNodes"] == f"{nodes}/{nodes}"
    if not policy:
        assert all(len(started) == 1 for _, started, _ in starts)


def test_the_forecast_spaces_batches_by_the_soak_and_names_it() -> None:
    """`kubectl skyhook plan` runs the forecast: waves a soak apart; a node that waits at the
    horizon names the soak as its blocker."""
    d = Driver(3, {"role": "gpu"})
    spec = {**SEL, "interruptionBudget": {"count": 3}, "soakTime": "10m"}
    d.sim.add_skyhook("scr", {**spec, "packages": {"tools": package()}})
    timing = Timing(stage_s=10, reboot_s=60)
    found = forecast(copy.deepcopy(d.sim), "scr", settings=d.settings, timing=timing, start=d.now)
    assert [w.start_s for w in found.waves] == [0, 600, 1200]
    short = forecast(
        copy.deepcopy(d.sim), "scr", settings=d.settings, timing=timing, start=d.now, horizon_s=300
    )
    assert [b.reasons[0].blocker for b in short.blocked] == [waiting.SOAK, waiting.SOAK]
