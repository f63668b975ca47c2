"""The rollout forecast behind `kubectl skyhook plan`: waves, blocked nodes and durations."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skyhook_planner.model.settings import PlannerSettings
from skyhook_planner.sim.cluster import SimCluster, make_node
from skyhook_planner.sim.forecast import Forecast, Timing, forecast, observed_durations
from skyhook_schemas import keys

START = datetime(2026, 1, 1, tzinfo=UTC)
POOL = {"pool": "gpu"}
IMAGE = "ghcr.io/nvidia/skyhook/agentless"
PLAIN = {"plain": {"version": "1.0.0", "image": IMAGE}}
DEFAULT_TIMING = Timing(stage_s=10, reboot_s=60)
REBOOT = {"kernel": {"version": "1.0.0", "image": IMAGE, "interrupt": {"type": "reboot"}}}


def cluster(count: int, packages: dict[str, Any], **spec: Any) -> SimCluster:
    sim = SimCluster()
    for i in range(count):
        sim.add_node(make_node(f"node-{i}", POOL))
    sim.add_skyhook(
        "fleet",
        {
            "nodeSelectors": {"matchLabels": POOL},
            "podNonInterruptLabels": {"matchLabels": {"job": "train"}},
            "packages": copy.deepcopy(packages),
            **spec,
        },
    )
    return sim


def run(sim: SimCluster, timing: Timing = DEFAULT_TIMING) -> Forecast:
    return forecast(sim, "fleet", settings=PlannerSettings(), timing=timing, start=START)


def waves(result: Forecast) -> list[set[str]]:
    return [set(w.nodes) for w in result.waves]


def busy_pod(sim: SimCluster, node: str) -> None:
    sim.add_pod(
        {
            "metadata": {"name": f"training-{node}", "namespace": "ml", "labels": {"job": "train"}},
            "spec": {"nodeName": node},
            "status": {"phase": "Running"},
        }
    )


def taint(sim: SimCluster, node: str) -> None:
    sim.nodes[node]["spec"]["taints"] = [{"key": "gpu", "value": "bad", "effect": "NoSchedule"}]


def ignore(sim: SimCluster, node: str) -> None:
    sim.nodes[node]["metadata"]["labels"][keys.IGNORE_LABEL] = "true"


def budget(count: int) -> dict[str, Any]:
    return {"interruptionBudget": {"count": count}}


@pytest.mark.parametrize(
    ("count", "packages", "spec", "change", "want_waves", "want_blocked", "want_total"),
    [
        pytest.param(
            6,
            PLAIN,
            budget(2),
            lambda sim: None,
            [{"node-0", "node-1"}, {"node-2", "node-3"}, {"node-4", "node-5"}],
            {},
            60.0,  # three waves of apply + config, 10 s each
            id="budget-2-of-6",
        ),
        pytest.param(
            3,
            PLAIN,
            {},
            lambda sim: None,
            [{"node-0", "node-1", "node-2"}],
            {},
            20.0,
            id="no-budget-all-at-once",
        ),
        pytest.param(
            2,
            REBOOT,
            budget(1),
            lambda sim: None,
            [{"node-0"}, {"node-1"}],
            {},
            2 * (10 + 10 + 60 + 10),  # apply, config, reboot, post-interrupt
            id="reboot-takes-reboot-seconds",
        ),
        pytest.param(
            3,
            REBOOT,
            {**budget(2), "podNonInterruptWait": "0"},
            lambda sim: busy_pod(sim, "node-0"),
            [{"node-1"}, {"node-2"}],
            {"node-0": "non-interrupt pods: ml/training-node-0"},
            180.0,
            id="never-passed-over-a-non-interrupt-pod-holds-its-node-and-a-slot",
        ),
        pytest.param(
            3,
            REBOOT,
            budget(2),
            lambda sim: busy_pod(sim, "node-0"),
            [{"node-1", "node-2"}],
            {"node-0": "non-interrupt pods: ml/training-node-0"},
            90.0,
            id="a-node-with-a-non-interrupt-pod-is-passed-over",
        ),
        pytest.param(
            3,
            REBOOT,
            {**budget(1), "podNonInterruptWait": "0"},
            lambda sim: busy_pod(sim, "node-0"),
            [],
            {
                "node-0": "non-interrupt pods: ml/training-node-0",
                "node-1": "budget: every slot held by nodes that never finish (node-0)",
                "node-2": "budget: every slot held by nodes that never finish (node-0)",
            },
            0.0,
            id="never-passed-over-a-stuck-node-holds-the-only-slot",
        ),
        pytest.param(
            3,
            REBOOT,
            budget(1),
            lambda sim: busy_pod(sim, "node-0"),
            [{"node-1"}, {"node-2"}],
            {"node-0": "non-interrupt pods: ml/training-node-0"},
            180.0,
            id="the-others-go-before-a-node-with-a-non-interrupt-pod",
        ),
        pytest.param(
            2,
            PLAIN,
            {},
            lambda sim: taint(sim, "node-1"),
            [{"node-0"}],
            {"node-1": "taints not tolerated: gpu=bad:NoSchedule"},
            20.0,
            id="untolerated-taint",
        ),
        pytest.param(
            2,
            PLAIN,
            {},
            lambda sim: ignore(sim, "node-0"),
            [{"node-1"}],
            {"node-0": f"ignored (label {keys.IGNORE_LABEL}=true)"},
            20.0,
            id="ignored-node",
        ),
        pytest.param(
            1,
            PLAIN,
            {},
            lambda sim: sim.skyhooks["fleet"]["metadata"]["annotations"].update(
                {keys.PAUSE_ANNOTATION: "true"}
            ),
            [],
            {"node-0": "skyhook paused"},
            0.0,
            id="paused",
        ),
        pytest.param(
            1,
            PLAIN,
            {"deploymentPolicy": "missing"},
            lambda sim: None,
            [],
            {"node-0": 'policy: DeploymentPolicy "missing" not found'},
            0.0,
            id="policy-not-found",
        ),
    ],
)
def test_forecast(
    *,
    count: int,
    packages: dict[str, Any],
    spec: dict[str, Any],
    change: Callable[[SimCluster], None],
    want_waves: list[set[str]],
    want_blocked: dict[str, str],
    want_total: float,
) -> None:
    sim = cluster(count, packages, **spec)
    change(sim)
    result = run(sim)
    assert waves(result) == want_waves
    assert {b.node: b.reason for b in result.blocked} == want_blocked
    assert result.total_s == want_total


def test_policy_batches_set_the_waves() -> None:
    sim = cluster(6, PLAIN, deploymentPolicy="batches")
    sim.add_policy(
        "batches",
        {
            "default": {
                "budget": {"count": 6},
                "strategy": {"fixed": {"initialBatch": 1, "batchThreshold": 100}},
            }
        },
    )
    result = run(sim)
    assert [len(w) for w in waves(result)] == [1, 1, 1, 1, 1, 1]
    assert not result.blocked


def test_observed_durations_replace_the_default() -> None:
    timing = Timing(stage_s=10, observed={("plain", "apply"): 100.0})
    result = run(cluster(1, PLAIN), timing)
    stages = [(r.stage, r.start_s, r.end_s) for r in result.waves[0].runs]
    assert stages == [("apply", 0.0, 100.0), ("config", 100.0, 110.0)]


def test_complete_nodes_are_not_planned_again() -> None:
    sim = cluster(2, PLAIN)
    first = run(sim)  # leaves the finished rollout in `sim`
    assert (waves(first), first.already_complete) == ([{"node-0", "node-1"}], ())
    second = run(sim)
    assert second.already_complete == ("node-0", "node-1")
    assert (second.waves, second.blocked, second.total_s) == ((), (), 0.0)


def test_observed_durations_from_finished_stage_pods() -> None:
    def pod(stage: str, start: str, end: str) -> dict[str, Any]:
        body = json.dumps({"name": "plain", "version": "1.0.0", "skyhook": "fleet", "stage": stage})
        return {
            "metadata": {
                "labels": {keys.NAME_LABEL: "fleet"},
                "annotations": {keys.PACKAGE_ANNOTATION: body},
            },
            "status": {
                "initContainerStatuses": [
                    {
                        "state": {
                            "terminated": {"exitCode": 0, "startedAt": start, "finishedAt": end}
                        }
                    }
                ]
            },
        }

    pods = [
        pod("apply", "2026-01-01T00:00:00Z", "2026-01-01T00:00:10Z"),
        pod("apply", "2026-01-01T00:00:00Z", "2026-01-01T00:00:20Z"),
        pod("config", "2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z"),
        {"metadata": {"name": "not-ours"}},
    ]
    assert observed_durations(pods) == {("plain", "apply"): 15.0, ("plain", "config"): 5.0}


@settings(max_examples=40, deadline=None)
@given(
    count=st.integers(1, 7),
    limit=st.integers(1, 4),
    reboot=st.booleans(),
    busy=st.sets(st.integers(0, 6)),
    tainted=st.sets(st.integers(0, 6)),
)
def test_budget_is_never_exceeded_and_every_node_is_accounted_for(
    count: int, limit: int, reboot: bool, busy: set[int], tainted: set[int]
) -> None:
    sim = cluster(count, REBOOT if reboot else PLAIN, **budget(limit))
    for i in busy & set(range(count)):
        busy_pod(sim, f"node-{i}")
    for i in tainted & set(range(count)):
        taint(sim, f"node-{i}")
    result = run(sim)

    started = [n for w in result.waves for n in w.nodes]
    blocked = [b.node for b in result.blocked]
    assert sorted(started + blocked) == sorted(result.selected)
    assert len(set(started + blocked)) == len(started) + len(blocked)

    # Each node holds a budget slot from its first stage to its last one's end (for ever
    # when it never finishes).
    spans = {b.node: (b.started_s, float("inf")) for b in result.blocked if b.started_s is not None}
    for wave in result.waves:
        for r in wave.runs:
            first, last = spans.get(r.node, (r.start_s, r.end_s))
            spans[r.node] = (min(first, r.start_s), max(last, r.end_s))
    for moment in {start for start, _ in spans.values()}:
        running = sum(1 for start, end in spans.values() if start <= moment < end)
        assert running <= result.ceiling
