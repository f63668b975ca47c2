"""Ready, Reconciling and Stalled conditions, judged by the kstatus rules GitOps tools apply
(sigs.k8s.io/cli-utils kstatus, used by Flux): a sync waits while a Skyhook rolls out, passes
when it is complete and fails fast when nodes are erroring or the spec is invalid."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skyhook_planner.model import status as statuses
from skyhook_planner.sim.driver import SETTINGS, Driver, package
from skyhook_schemas import keys
from skyhook_schemas.nodestate import STATUSES

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SEL = {"nodeSelectors": {"matchLabels": {"role": "gpu"}}}
LABELS = {"role": "gpu"}


def kstatus(obj: Mapping[str, Any]) -> str:
    """kstatus' generic rules for a custom resource: an observedGeneration behind the spec,
    or Reconciling True, is InProgress; then Stalled True is Failed; otherwise Current."""
    status = obj.get("status") or {}
    observed = status.get("observedGeneration")
    if observed is not None and observed != obj["metadata"]["generation"]:
        return "InProgress"
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    if conditions.get("Reconciling", {}).get("status") == "True":
        return "InProgress"
    if conditions.get("Stalled", {}).get("status") == "True":
        return "Failed"
    return "Current"


def as_object(status: str, generation: int = 3) -> dict[str, Any]:
    return {
        "metadata": {"generation": generation},
        "status": {
            "status": status,
            "conditions": statuses.kstatus_conditions(status, NOW, generation=generation),
        },
    }


@pytest.mark.parametrize(
    ("overall", "ready", "reconciling", "stalled", "verdict"),
    [
        pytest.param("complete", "True", "False", "False", "Current", id="complete"),
        pytest.param("in_progress", "False", "True", "False", "InProgress", id="in-progress"),
        pytest.param("waiting", "False", "True", "False", "InProgress", id="waiting"),
        pytest.param("unknown", "False", "True", "False", "InProgress", id="unknown"),
        pytest.param("erroring", "False", "False", "True", "Failed", id="erroring"),
        pytest.param("blocked", "False", "False", "True", "Failed", id="blocked"),
        pytest.param("paused", "False", "False", "False", "Current", id="paused"),
        pytest.param("disabled", "False", "False", "False", "Current", id="disabled"),
    ],
)
def test_conditions_per_status(
    overall: str, ready: str, reconciling: str, stalled: str, verdict: str
) -> None:
    obj = as_object(overall)
    by_type = {c["type"]: c for c in obj["status"]["conditions"]}
    assert [by_type[t]["status"] for t in ("Ready", "Reconciling", "Stalled")] == [
        ready,
        reconciling,
        stalled,
    ]
    assert {c["observedGeneration"] for c in by_type.values()} == {3}
    assert kstatus(obj) == verdict


@pytest.mark.parametrize(
    ("overall", "reason"),
    [
        pytest.param("complete", "NodesConverged", id="complete"),
        pytest.param("in_progress", "Progressing", id="in-progress"),
        pytest.param("waiting", "Waiting", id="waiting"),
        pytest.param("unknown", "Unknown", id="unknown"),
        pytest.param("erroring", "Erroring", id="erroring"),
        pytest.param("blocked", "Blocked", id="blocked"),
        pytest.param("paused", "Paused", id="paused"),
        pytest.param("disabled", "Disabled", id="disabled"),
        pytest.param("", "Unknown", id="no-status-yet"),
    ],
)
def test_ready_reason_per_status(overall: str, reason: str) -> None:
    ready = statuses.kstatus_conditions(overall, NOW, generation=1)[0]
    assert (ready["type"], ready["reason"]) == ("Ready", reason)


@pytest.mark.parametrize(
    ("node_statuses", "message"),
    [
        pytest.param({}, "0/0 nodes complete", id="no-nodes"),
        pytest.param(
            {"node-c": "blocked", "node-b": "in_progress", "node-a": "complete"},
            "1/3 nodes complete (node-a), 1 in progress (node-b), 1 blocked (node-c)",
            id="buckets-in-order",
        ),
        pytest.param(
            {"b": "paused", "a": "odd", "c": "unknown", "d": "waiting"},
            "0/4 nodes complete, 1 waiting (d), 1 paused (b), 2 unknown (a, c)",
            id="other-words-are-unknown",
        ),
        pytest.param(
            {f"n{i:03d}": "in_progress" for i in range(800)},
            "0/800 nodes complete, 800 in progress (list truncated; see status.nodeStatus)",
            id="long-lists-counted",
        ),
    ],
)
def test_ready_message_summarises_the_nodes(node_statuses: dict[str, str], message: str) -> None:
    found = statuses.NodeStatuses.of(node_statuses)
    assert statuses.node_summary(found) == message
    ready = statuses.kstatus_conditions("in_progress", NOW, generation=1, node_statuses=found)
    assert ready[0]["message"] == message


@given(st.sampled_from(STATUSES), st.integers(min_value=1, max_value=10**6))
def test_at_most_one_kstatus_condition_is_true(overall: str, generation: int) -> None:
    conditions = statuses.kstatus_conditions(overall, NOW, generation=generation)
    assert [c["type"] for c in conditions] == list(statuses.KSTATUS_CONDITIONS)
    assert sum(c["status"] == "True" for c in conditions) <= 1
    assert all(c["reason"] and c["message"] for c in conditions)


def test_erroring_message_names_the_nodes() -> None:
    nodes = {f"n{i}": "erroring" for i in range(7)} | {"ok": "complete"}
    found = statuses.NodeStatuses.of(nodes)
    assert statuses.erroring_message(found) == "7 node(s) erroring: n0, n1, n2, n3, n4 and 2 more."
    assert statuses.erroring_message(statuses.NodeStatuses.of({"ok": "complete"})) == ""


def skyhook(d: Driver) -> dict[str, Any]:
    return d.sim.skyhooks["scr"]


def condition(d: Driver, type_: str) -> dict[str, Any]:
    return next(c for c in skyhook(d)["status"]["conditions"] if c["type"] == type_)


def test_rollout_is_in_progress_until_complete_then_current() -> None:
    d = Driver(2, LABELS)
    d.sim.add_skyhook("scr", {**SEL, "packages": {"alpha": package()}})
    d.step()
    assert skyhook(d)["status"]["status"] == "in_progress"
    assert kstatus(skyhook(d)) == "InProgress"
    d.run()
    assert skyhook(d)["status"]["status"] == "complete"
    assert kstatus(skyhook(d)) == "Current"
    assert condition(d, "Ready")["status"] == "True"
    assert condition(d, "Ready")["reason"] == "NodesConverged"
    assert condition(d, "Ready")["message"] == "2/2 nodes complete (node-0000, node-0001)"
    assert condition(d, "Ready")["observedGeneration"] == skyhook(d)["metadata"]["generation"]
    # Upstream's transition condition is still written as before.
    assert condition(d, keys.CONDITION_TRANSITION)["reason"] == "complete"


def test_erroring_node_is_failed_and_named() -> None:
    d = Driver(1, LABELS, settings=replace(SETTINGS, stage_retries=0))  # one attempt: it gives up
    d.sim.add_skyhook("scr", {**SEL, "packages": {"alpha": package()}})
    d.step()
    key = d.pending_pods()[0]
    d.sim.finish_pod(key, 1, at=d.now.strftime("%Y-%m-%dT%H:%M:%SZ"), restarts=2, failed_phase=True)
    d.step()
    assert skyhook(d)["status"]["status"] == "erroring"
    assert kstatus(skyhook(d)) == "Failed"
    assert condition(d, "Stalled")["message"] == "1 node(s) erroring: node-0000."


def test_invalid_spec_is_failed_with_the_reason() -> None:
    d = Driver(1, LABELS)
    d.sim.add_skyhook("scr", {**SEL, "packages": {"alpha": package("1.x")}})
    d.run()
    assert kstatus(skyhook(d)) == "Failed"
    assert "'1.x' is not a semver version" in condition(d, "Stalled")["message"]


def test_paused_rollout_is_held_not_failed() -> None:
    d = Driver(1, LABELS)
    d.sim.add_skyhook(
        "scr", {**SEL, "packages": {"alpha": package()}}, {keys.PAUSE_ANNOTATION: "true"}
    )
    d.run()
    assert skyhook(d)["status"]["status"] == "paused"
    assert kstatus(skyhook(d)) == "Current"
    assert condition(d, "Ready")["reason"] == "Paused"
