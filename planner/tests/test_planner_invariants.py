"""Invariants of the planner, over random clusters, specs and pod completion orders."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyhook_planner.model.actions import lane_of
from skyhook_planner.model.spec import Budget
from skyhook_planner.rules import budget, stages
from skyhook_planner.sim.driver import Driver, package, pod_stage
from skyhook_schemas import keys

NAMES = ["alpha", "bravo", "charlie", "delta"]
INTERRUPTS = [None, {"type": "reboot"}, {"type": "service", "services": ["cron"]}, {"type": "noop"}]


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(1, 4))
    packages: dict[str, Any] = {}
    for index, name in enumerate(NAMES[:count]):
        deps = draw(st.lists(st.sampled_from(NAMES[:index]), unique=True)) if index else []
        extra: dict[str, Any] = {"dependsOn": dict.fromkeys(deps, "1.0.0")} if deps else {}
        interrupt = draw(st.sampled_from(INTERRUPTS))
        if interrupt:
            extra["interrupt"] = interrupt
        packages[name] = package("1.0.0", **extra)
    spec: dict[str, Any] = {"packages": packages}
    if draw(st.booleans()):
        spec["interruptionBudget"] = {"count": draw(st.integers(0, 4))}
    else:
        spec["interruptionBudget"] = {"percent": draw(st.integers(0, 100))}
    return spec


def _budget(spec: dict[str, Any]) -> Budget:
    raw = spec["interruptionBudget"]
    return Budget(percent=raw.get("percent"), count=raw.get("count"))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=specs(),
    nodes=st.integers(1, 9),
    seed=st.integers(0, 2**16),
    fail_rate=st.sampled_from([0.0, 0.2]),
    replan=st.booleans(),
    lagging=st.booleans(),
)
def test_rollout_invariants(  # noqa: PLR0917 (hypothesis passes every strategy by name)
    spec: dict[str, Any], nodes: int, seed: int, fail_rate: float, replan: bool, lagging: bool
) -> None:
    """`lagging`: some nodes' writes of each pass are still going out when the next pass
    plans (the operator plans while it writes); the invariants hold at every step."""
    rng = random.Random(seed)
    d = Driver(nodes)
    if lagging:
        d.lag = lambda plan: {
            n for n in sorted({lane_of(a) or "" for a in plan.actions}) if rng.random() < 0.5
        }
    d.sim.add_skyhook("scr", spec)
    limit = budget.ceiling(_budget(spec), nodes)
    failed_once: set[tuple[str, str]] = set()
    history: dict[tuple[str, str], list[str]] = {}

    def exit_code(pod: dict[str, Any]) -> int:
        key = (pod["metadata"]["name"], pod["spec"]["nodeName"])
        if key not in failed_once and rng.random() < fail_rate:
            failed_once.add(key)
            return 1
        return 0

    checked = 0  # pods created so far in the cluster (a lagging pass's pods land later)

    def in_budget(driver: Driver) -> list[str]:
        in_progress = [
            n
            for n in driver.sim.nodes
            if driver.node_status("scr", n) in {"in_progress", "erroring"}
        ]
        assert len(in_progress) <= limit, f"{len(in_progress)} nodes in progress, budget {limit}"
        return in_progress

    d.mid_write = in_budget  # a watcher sees the budget held while writes are out, too

    def check(driver: Driver) -> None:
        nonlocal checked
        created, checked = driver.sim.created_pods[checked:], len(driver.sim.created_pods)
        in_progress = in_budget(driver)
        # A failed pod kept for its logs runs nothing.
        busy = {
            pod_stage(p)[0]
            for p in driver.sim.pods.values()
            if p.get("status", {}).get("phase") not in {"Succeeded", "Failed"}
        }
        assert busy <= set(in_progress), "a node runs a pod without holding a budget slot"
        for pod in created:
            node, key, stage = pod_stage(pod)
            if stage == "interrupt":  # one merged interrupt covers every package waiting for it
                for (other_node, _), runs in history.items():
                    if other_node == node and runs and runs[-1] == "config":
                        runs.append("interrupt")
                continue
            runs = history.setdefault((node, key), [])
            assert stages.legal_successor(runs[-1] if runs else None, stage), f"{runs} then {stage}"
            runs.append(stage)
            name = key.split("|")[0]
            entries = driver.entries("scr", node)
            for dep in spec["packages"][name].get("dependsOn", {}):
                dep_key = f"{dep}|1.0.0"
                assert entries.get(dep_key, ("", ""))[1] == "complete", (
                    f"{name} started before {dep}"
                )
                assert entries[dep_key][0] in {"config", "post-interrupt"}

    def finish(pods: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return [p for p in pods if rng.random() < 0.6]

    d.run(max_steps=600, exit_code=exit_code, finish=finish, on_step=check, replan=replan)
    assert d.status("scr")["status"] == "complete"
    runs = d.stages_run()
    assert len(runs) - len(set(runs)) <= len(failed_once), "a stage ran again without failing"
    for node in d.sim.nodes.values():
        assert not node["spec"].get("unschedulable"), "left cordoned"
        assert keys.cordon_key("scr") not in node["metadata"]["annotations"]
