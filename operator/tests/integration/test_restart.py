"""The operator killed with SIGKILL mid-rollout and restarted finishes the rollout, and every
stage ran exactly once per node: each step appends a line to a marker file in the node's host
root, so a stage run twice (or skipped) shows in the file."""

from __future__ import annotations

from skyhook_dev.harness import wait_until
from skyhook_schemas import keys

from .helpers import SHELLSCRIPT, Cluster, marker_scripts

MARKERS = "/skyhook-markers"


def test_sigkill_mid_rollout_then_restart_runs_every_stage_once(cluster: Cluster) -> None:
    nodes = cluster.add_nodes(4)
    package = {"version": "1.0.0", "image": SHELLSCRIPT, "configMap": marker_scripts(MARKERS)}
    cluster.skyhook("restart", {"markers": package}, interruptionBudget={"count": 2})

    assert cluster.operator is not None
    kills = 0
    for wanted in ("apply", "config", "apply"):
        # Kill while some node is in the middle of the wanted stage, up to three times.
        def in_stage(stage: str = wanted) -> bool:
            return any(
                p["metadata"].get("deletionTimestamp") is None
                and f'"stage":"{stage}"' in p["metadata"]["annotations"][keys.PACKAGE_ANNOTATION]
                for p in cluster.pods("restart")
            )

        try:
            wait_until(in_stage, 60, f"a {wanted} pod")
        except AssertionError:
            break  # the rollout moved past it: enough kills
        cluster.operator.kill()
        kills += 1
        cluster.operator = cluster.start_operator()
    assert kills >= 2

    cluster.wait_complete("restart", timeout=180)
    for node in nodes:
        assert cluster.host_file(node, MARKERS) == "apply\nconfig\n", f"on {node}"
