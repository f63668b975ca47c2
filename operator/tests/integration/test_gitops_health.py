"""GitOps health from real objects: Skyhooks captured from the sandbox at each phase of a
rollout, judged by the chart's Argo CD health check (Lua 5.1, as Argo CD runs it) and by the
kstatus rules Flux applies to their conditions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lupa.lua51 as lua

from skyhook_dev.harness import wait_until
from skyhook_schemas import keys

from .helpers import SHELLSCRIPT, Cluster, agentless

REPO = Path(__file__).resolve().parents[3]
SKYHOOK_CHECK = (REPO / "chart/docs/skyhook-health.lua").read_text()


def argo_health(obj: dict[str, Any]) -> str:
    runtime = lua.LuaRuntime()
    runtime.globals().obj = runtime.table_from(obj, recursive=True)
    return str(runtime.execute(SKYHOOK_CHECK)["status"])


def kstatus(obj: dict[str, Any]) -> str:
    """kstatus's verdict from the conditions: Failed (Stalled), InProgress (Reconciling or not
    yet observed), Current (Ready)."""
    conditions = {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}
    generation = obj["metadata"]["generation"]
    if conditions.get("Stalled", {}).get("status") == "True":
        return "Failed"
    if conditions.get("Reconciling", {}).get("status") == "True":
        return "InProgress"
    ready = conditions.get("Ready", {})
    if ready.get("status") == "True" and ready.get("observedGeneration") == generation:
        return "Current"
    return "InProgress"


def captured(cluster: Cluster, name: str, status: str) -> dict[str, Any]:
    found: dict[str, Any] = {}

    def reached() -> bool:
        found.update(cluster.get_skyhook(name))
        return found.get("status", {}).get("status") == status

    wait_until(reached, 120, f"{name} {status}", interval=0.2)
    return found


def test_captured_skyhooks_are_judged_by_phase(cluster: Cluster) -> None:
    cluster.operator.stop()  # type: ignore[union-attr]
    # One attempt per stage: "broken" reads erroring at its first failure, not after retries.
    cluster.operator = cluster.start_operator(SKYHOOK_STAGE_RETRIES="0")
    cluster.add_nodes(2)
    cluster.skyhook("health", {"slow": agentless("1.0.0", sleep=4)})
    rolling = captured(cluster, "health", "in_progress")
    complete = captured(cluster, "health", "complete")
    failing = {
        "version": "1.0.0",
        "image": SHELLSCRIPT,
        "configMap": {"apply.sh": "#!/bin/bash\nexit 3\n", "apply_check.sh": "#!/bin/bash\n"},
    }
    cluster.skyhook("broken", {"broken": failing})
    erroring = captured(cluster, "broken", "erroring")
    cluster.patch_skyhook(
        "health",
        {
            "metadata": {"annotations": {keys.PAUSE_ANNOTATION: "true"}},
            "spec": {"packages": {"slow": agentless("1.1.0", sleep=4)}},
        },
    )
    paused = captured(cluster, "health", "paused")

    assert [argo_health(o) for o in (rolling, complete, erroring, paused)] == [
        "Progressing",
        "Healthy",
        "Degraded",
        "Suspended",
    ]
    assert [kstatus(o) for o in (rolling, complete, erroring)] == [
        "InProgress",
        "Current",
        "Failed",
    ]
