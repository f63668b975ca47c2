"""The chart's Argo CD health check (chart/docs/skyhook-health.lua), run in Lua 5.1 as Argo CD
runs it, against Skyhook objects whose status the planner wrote at each phase of a rollout."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import lupa.lua51 as lua
import pytest

from skyhook_planner.sim.driver import SETTINGS, Driver, package
from skyhook_schemas import keys

REPO = Path(__file__).resolve().parents[3]
SKYHOOK_CHECK = (REPO / "chart/docs/skyhook-health.lua").read_text()
POLICY_CHECK = (REPO / "chart/docs/deploymentpolicy-health.lua").read_text()
SEL = {"nodeSelectors": {"matchLabels": {"role": "gpu"}}}


def health(script: str, obj: dict[str, Any]) -> tuple[str, str]:
    """(status, message) as Argo CD's health check would report them."""
    runtime = lua.LuaRuntime()
    runtime.globals().obj = runtime.table_from(obj, recursive=True)
    result = runtime.execute(script)
    return result["status"], result["message"]


def skyhook(d: Driver) -> dict[str, Any]:
    return copy.deepcopy(d.sim.skyhooks["scr"])


def started(annotations: dict[str, str] | None = None, version: str = "1.0.0") -> Driver:
    # One attempt per stage: a failed stage gives up at once, and its node reads erroring.
    d = Driver(2, {"role": "gpu"}, settings=replace(SETTINGS, stage_retries=0))
    d.sim.add_skyhook("scr", {**SEL, "packages": {"alpha": package(version)}}, annotations)
    d.step()
    return d


def test_new_skyhook_without_status_is_progressing() -> None:
    d = Driver(1, {"role": "gpu"})
    d.sim.add_skyhook("scr", {**SEL, "packages": {"alpha": package()}})
    assert health(SKYHOOK_CHECK, skyhook(d))[0] == "Progressing"


def test_rollout_is_progressing_then_healthy() -> None:
    d = started()
    assert skyhook(d)["status"]["status"] == "in_progress"
    assert health(SKYHOOK_CHECK, skyhook(d)) == (
        "Progressing",
        "Skyhook is in_progress (0/2 nodes complete)",
    )
    d.run()
    assert health(SKYHOOK_CHECK, skyhook(d)) == ("Healthy", "Complete on 2/2 nodes")


def test_spec_edit_not_yet_seen_is_progressing() -> None:
    d = started()
    d.run()
    obj = skyhook(d)
    obj["metadata"]["generation"] += 1  # the edit, before the operator's next pass
    assert health(SKYHOOK_CHECK, obj)[0] == "Progressing"


def test_erroring_nodes_are_degraded_and_named() -> None:
    d = started()
    for key in d.pending_pods():
        at = d.now.strftime("%Y-%m-%dT%H:%M:%SZ")
        d.sim.finish_pod(key, 1, at=at, restarts=2, failed_phase=True)
    d.step()
    assert skyhook(d)["status"]["status"] == "erroring"
    assert health(SKYHOOK_CHECK, skyhook(d)) == (
        "Degraded",
        "2 node(s) erroring: node-0000, node-0001.",
    )


def test_invalid_spec_is_degraded_with_the_reason() -> None:
    d = started(version="1.x")
    status, message = health(SKYHOOK_CHECK, skyhook(d))
    assert status == "Degraded"
    assert "'1.x' is not a semver version" in message


@pytest.mark.parametrize("annotation", [keys.PAUSE_ANNOTATION, keys.DISABLE_ANNOTATION])
def test_paused_or_disabled_is_suspended(annotation: str) -> None:
    d = started({annotation: "true"})
    d.run()
    state = skyhook(d)["status"]["status"]
    assert state in {"paused", "disabled"}
    assert health(SKYHOOK_CHECK, skyhook(d)) == (
        "Suspended",
        f"Skyhook is {state} (0/2 nodes complete)",
    )


def test_status_written_by_an_older_operator_without_kstatus_conditions() -> None:
    d = started()
    d.run()
    obj = skyhook(d)
    obj["status"]["conditions"] = [
        c for c in obj["status"]["conditions"] if c["type"].startswith(keys.GROUP)
    ]
    assert health(SKYHOOK_CHECK, obj)[0] == "Healthy"


def test_deployment_policy_is_healthy_once_stored() -> None:
    policy = {"metadata": {"name": "p", "generation": 1}, "spec": {"default": {}}}
    assert health(POLICY_CHECK, policy)[0] == "Healthy"
