"""Upstream's metrics as the pure core computes them, and the text the exporter prints: the
same names, labels and numbers (`1`, not `1.0`) that scripts written against upstream read."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skyhook_operator.observability import Telemetry, go_float
from skyhook_planner.model.snapshot import ClusterSnapshot, NodeView, PolicyView, SkyhookView
from skyhook_planner.passes.plan import plan
from skyhook_planner.sim.driver import START, Driver, package
from skyhook_planner.telemetry import Family, compartments, handoff_delays, skyhook_families
from skyhook_schemas import keys
from skyhook_schemas.nodestate import STAGES, STATES, STATUSES

SELECT = {"matchLabels": {"pool": "gpu"}}


def skyhook(
    name: str = "s",
    packages: Mapping[str, Any] | None = None,
    status: Mapping[str, Any] | None = None,
    deleting: bool = False,
    **spec: Any,
) -> SkyhookView:
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    body = {
        "metadata": meta,
        "spec": {
            "nodeSelectors": SELECT,
            "packages": packages if packages is not None else {"pk": package("1.0.0")},
            **spec,
        },
        "status": dict(status or {}),
    }
    return SkyhookView.from_api(body)


def node(
    name: str,
    entries: Mapping[str, tuple[str, str, int]] | None = None,
    status: str | None = None,
    scr: str = "s",
    labels: Mapping[str, str] | None = None,
) -> NodeView:
    """A node; `entries` maps `name|version` to (stage, state, restarts)."""
    annotations: dict[str, str] = {}
    if entries is not None:
        state = {}
        for key, (stage, entry_state, restarts) in entries.items():
            pkg, version = key.split("|")
            state[key] = {
                "name": pkg,
                "version": version,
                "image": "img",
                "stage": stage,
                "state": entry_state,
                "restarts": restarts,
            }
        annotations[keys.node_state_key(scr)] = json.dumps(state)
    if status is not None:
        annotations[keys.node_status_key(scr)] = status
    return NodeView(name=name, labels=labels or {"pool": "gpu"}, annotations=annotations)


def values(families: tuple[Family, ...], name: str) -> dict[tuple[str, ...], float]:
    (family,) = [f for f in families if f.name == name]
    return {s.labels: s.value for s in family.samples}


def compute(skyhooks: list[SkyhookView], nodes: list[NodeView]) -> tuple[Family, ...]:
    return skyhook_families(ClusterSnapshot(skyhooks=tuple(skyhooks), nodes=tuple(nodes)))


# --- the gauges -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nodes", "metric", "expected"),
    [
        pytest.param(
            [node("a", status="complete"), node("b", status="complete"), node("c")],
            "skyhook_node_status_count",
            {("s", "complete"): 2, ("s", "unknown"): 1, ("s", "in_progress"): 0},
            id="node-without-status-counts-as-unknown",
        ),
        pytest.param(
            [node("a", status="complete"), node("x", status="complete", labels={"pool": "cpu"})],
            "skyhook_node_target_count",
            {("s",): 1},
            id="only-selected-nodes-are-targets",
        ),
        pytest.param(
            [
                node("a", {"pk|1.0.0": ("config", "complete", 0)}),
                node("b", {"pk|1.0.0": ("apply", "complete", 0)}),
            ],
            "skyhook_package_state_count",
            {("s", "pk", "1.0.0", "complete"): 2, ("s", "pk", "1.0.0", "in_progress"): 0},
            id="states-summed-across-stages",
        ),
        pytest.param(
            [
                node("a", {"pk|1.0.0": ("config", "complete", 0)}),
                node("b", {"pk|1.0.0": ("config", "in_progress", 0)}),
                node("c", {"pk|1.0.0": ("apply", "complete", 0)}),
            ],
            "skyhook_package_stage_count",
            {("s", "pk", "1.0.0", "config"): 2, ("s", "pk", "1.0.0", "apply"): 1},
            id="stages-summed-across-states",
        ),
        pytest.param(
            [
                node("a", {"pk|1.0.0": ("apply", "erroring", 2)}),
                node("b", {"pk|1.0.0": ("apply", "erroring", 3)}),
                node("c", {"pk|0.9.0": ("apply", "erroring", 7)}),
            ],
            "skyhook_package_restarts_count",
            {("s", "pk", "1.0.0"): 5},
            id="restarts-summed-for-the-spec-version-only",
        ),
        pytest.param(
            [node("a", {"pk|0.9.0": ("config", "complete", 0)})],
            "skyhook_package_state_count",
            {**{("s", "pk", "1.0.0", state): 0 for state in STATES}},
            id="removed-version-has-no-series",
        ),
    ],
)
def test_node_and_package_gauges(
    nodes: list[NodeView], metric: str, expected: dict[tuple[str, ...], float]
) -> None:
    got = values(compute([skyhook()], nodes), metric)
    assert {k: got.get(k) for k in expected} == expected
    if metric.startswith("skyhook_package"):
        assert {labels[2] for labels in got} == {"1.0.0"}


@pytest.mark.parametrize(
    ("status", "current"),
    [
        pytest.param({"status": "in_progress"}, "in_progress", id="current-status-is-1"),
        pytest.param({}, "unknown", id="no-status-yet-is-unknown"),
    ],
)
def test_skyhook_status_is_one_hot(status: dict[str, Any], current: str) -> None:
    got = values(compute([skyhook(status=status)], []), "skyhook_status")
    assert got == {("s", s): (1 if s == current else 0) for s in STATUSES}


def test_legacy_rollout_reads_the_default_compartment() -> None:
    status = {
        "compartmentStatuses": {
            "__default__": {
                "matched": 6,
                "ceiling": 3,
                "inProgress": 2,
                "completed": 4,
                "progressPercent": 66,
            }
        }
    }
    families = compute([skyhook(status=status)], [])
    labels = ("s", "legacy", "__default__", "fixed")
    got = {f.name: {s.labels: s.value for s in f.samples} for f in families}
    assert got["skyhook_rollout_matched_nodes"] == {labels: 6}
    assert got["skyhook_rollout_ceiling"] == {labels: 3}
    assert got["skyhook_rollout_in_progress"] == {labels: 2}
    assert got["skyhook_rollout_completed"] == {labels: 4}
    assert got["skyhook_rollout_progress_percent"] == {labels: 66}
    for batch in ("current_batch", "consecutive_failures", "should_stop"):
        assert got[f"skyhook_rollout_{batch}"] == {labels: 0}


@pytest.mark.parametrize(
    ("scr", "families_with_series"),
    [
        pytest.param(skyhook(deleting=True), set(), id="deleting-has-no-series"),
        pytest.param(
            skyhook(packages={"pk": {"version": "1.2"}}),
            {"skyhook_status"},
            id="invalid-spec-has-only-its-status",
        ),
        pytest.param(
            skyhook(deploymentPolicy="canary"),
            {
                "skyhook_status",
                "skyhook_node_status_count",
                "skyhook_node_target_count",
                "skyhook_admin_cordoned_nodes",
                "skyhook_package_state_count",
                "skyhook_package_stage_count",
                "skyhook_package_restarts_count",
            },
            id="missing-policy-has-no-rollout-series",
        ),
    ],
)
def test_which_families_a_skyhook_has(scr: SkyhookView, families_with_series: set[str]) -> None:
    families = compute([scr], [node("a", status="complete")])
    assert {f.name for f in families if f.samples} == families_with_series


def test_a_deleted_skyhook_leaves_no_series_behind() -> None:
    telemetry = Telemetry(lambda: ({}, {}), lambda: 0)
    nodes = (node("a", status="complete"),)
    both = ClusterSnapshot(skyhooks=(skyhook("s"), skyhook("t")), nodes=nodes)
    one = ClusterSnapshot(skyhooks=(skyhook("t"),), nodes=nodes)
    telemetry.record_pass(both, plan(both, Driver().settings), written=False, seconds=0.01)
    assert 'skyhook_name="s"' in telemetry.text().decode()
    telemetry.record_pass(one, plan(one, Driver().settings), written=False, seconds=0.01)
    text = telemetry.text().decode()
    assert 'skyhook_name="s"' not in text
    assert 'skyhook_name="t"' in text


entry_strategy = st.tuples(st.sampled_from(STAGES), st.sampled_from(STATES), st.integers(0, 5))


@given(
    st.lists(st.tuples(st.sampled_from((*STATUSES, None)), st.none() | entry_strategy), max_size=12)
)
def test_every_node_counted_once_per_gauge(
    layout: list[tuple[str | None, tuple[str, str, int] | None]],
) -> None:
    nodes = [
        node(f"n{i}", None if entry is None else {"pk|1.0.0": entry}, status)
        for i, (status, entry) in enumerate(layout)
    ]
    families = compute([skyhook()], nodes)
    with_entry = sum(1 for _, entry in layout if entry is not None)
    assert sum(values(families, "skyhook_node_status_count").values()) == len(nodes)
    assert values(families, "skyhook_node_target_count") == {("s",): len(nodes)}
    assert sum(values(families, "skyhook_package_state_count").values()) == with_entry
    assert sum(values(families, "skyhook_package_stage_count").values()) == with_entry


# --- the text -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param(1.0, "1", id="integral"),
        pytest.param(0.0, "0", id="zero"),
        pytest.param(100.0, "100", id="hundred"),
        pytest.param(0.5, "0.5", id="fraction"),
        pytest.param(1e6, "1e+06", id="million-as-go"),
        pytest.param(123456789.0, "1.23456789e+08", id="large-as-go"),
        pytest.param(1e-5, "1e-05", id="small-as-go"),
        pytest.param(float("inf"), "+Inf", id="infinity"),
    ],
)
def test_values_print_as_go_prints_them(value: float, text: str) -> None:
    assert go_float(value) == text


def test_exposition_prints_upstream_lines() -> None:
    nodes = [
        node("a", {"pk|1.0.0": ("config", "complete", 1)}, "complete"),
        node("b", {"pk|1.0.0": ("config", "complete", 0)}, "complete"),
        node("c", {"pk|1.0.0": ("apply", "complete", 0)}, "complete"),
    ]
    status = {"status": "complete", "compartmentStatuses": {"__default__": {"matched": 3}}}
    snapshot = ClusterSnapshot(skyhooks=(skyhook(status=status),), nodes=tuple(nodes))
    telemetry = Telemetry(lambda: ({("PATCH", "nodes"): 4}, {("GET", "pods", "404"): 1}), lambda: 0)
    telemetry.record_pass(snapshot, plan(snapshot, Driver().settings), False, 0.02)
    lines = telemetry.text().decode().splitlines()
    for expected in (
        'skyhook_node_status_count{skyhook_name="s",status="complete"} 3',
        'skyhook_node_status_count{skyhook_name="s",status="unknown"} 0',
        'skyhook_node_target_count{skyhook_name="s"} 3',
        'skyhook_status{skyhook_name="s",status="complete"} 1',
        'skyhook_package_state_count{package_name="pk",package_version="1.0.0",'
        'skyhook_name="s",state="complete"} 3',
        'skyhook_package_stage_count{package_name="pk",package_version="1.0.0",'
        'skyhook_name="s",stage="post-interrupt"} 0',
        'skyhook_package_restarts_count{package_name="pk",package_version="1.0.0",'
        'skyhook_name="s"} 1',
        'skyhook_rollout_matched_nodes{compartment_name="__default__",policy_name="legacy",'
        'skyhook_name="s",strategy="fixed"} 3',
        "# TYPE skyhook_status gauge",
        'skyhook_operator_api_requests_total{resource="nodes",verb="PATCH"} 4',
        'skyhook_operator_api_errors_total{code="404",resource="pods",verb="GET"} 1',
        "skyhook_operator_pass_duration_seconds_count 1",
        'skyhook_operator_pass_duration_seconds_bucket{le="0.025"} 1',
        "skyhook_operator_write_queue_depth 0",
    ):
        assert expected in lines
    assert not [line for line in lines if line.endswith(".0") or "_created" in line]
    assert "skyhook_operator_stage_handoff_seconds_count 0" in lines


# --- stage hand-off -----------------------------------------------------------------------------


def test_handoff_runs_from_the_finish_to_the_next_pods_creation() -> None:
    driver = Driver(nodes=2)
    driver.sim.add_skyhook("s", {"packages": {"pk": package()}})
    driver.step()  # apply pods created
    for key in driver.pending_pods():
        driver.sim.finish_pod(key, at=START.strftime("%Y-%m-%dT%H:%M:%SZ"))
    driver.now = START + timedelta(seconds=1)
    snapshot = driver.sim.snapshot(driver.now)
    result = plan(snapshot, driver.settings)
    created = START + timedelta(seconds=3)
    assert handoff_delays(snapshot, result, created) == (3.0, 3.0)  # config pods, one per node
    # The next pass creates nothing new: no hand-off is counted twice.
    driver.sim.apply(result.actions)
    again = driver.sim.snapshot(driver.now)
    assert handoff_delays(again, plan(again, driver.settings), created) == ()


def test_a_policy_skyhook_reports_each_compartment_with_its_strategy() -> None:
    policy = PolicyView.from_api(
        {
            "metadata": {"name": "rollout"},
            "spec": {
                "default": {"budget": {"count": 2}, "strategy": {"fixed": {}}},
                "compartments": [
                    {
                        "name": "canary",
                        "selector": {"matchLabels": {"tier": "canary"}},
                        "budget": {"count": 1},
                        "strategy": {"exponential": {"initialBatch": 1}},
                    }
                ],
            },
        }
    )
    scr = SkyhookView.from_api(
        {
            "metadata": {"name": "s"},
            "spec": {
                "deploymentPolicy": "rollout",
                "packages": {"pkg": {"version": "1.0.0", "image": "repo/pkg"}},
            },
            "status": {"compartmentStatuses": {"canary": {"matched": 3, "ceiling": 1}}},
        }
    )
    found = compartments(scr, {"rollout": policy})
    assert [(c.policy, c.name, c.strategy) for c in found] == [
        ("rollout", "canary", "exponential"),
        ("rollout", "__default__", "fixed"),
    ]
    assert compartments(scr, {}) == ()  # a missing policy reports nothing
    families = skyhook_families(ClusterSnapshot(skyhooks=(scr,), nodes=(), policies=(policy,)))
    assert values(families, "skyhook_rollout_matched_nodes") == {
        ("s", "rollout", "canary", "exponential"): 3,
        ("s", "rollout", "__default__", "fixed"): 0,
    }
