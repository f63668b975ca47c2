"""Two replicas with leader election: one leads, the other stands by with warm watches and
writes nothing; it takes over when the leader is SIGKILLed (after the lease duration) or
SIGTERMed (at once, the Lease released), and the rollout completes with every stage run
exactly once per node (the marker file each step appends to)."""

from __future__ import annotations

import time

from skyhook_dev.harness import OperatorProcess, lease_holder, wait_until
from skyhook_operator.settings import load_settings
from skyhook_sandbox.processes import free_port
from skyhook_schemas import keys

from .conftest import NAMESPACE
from .helpers import SHELLSCRIPT, Cluster, marker_scripts

MARKERS = "/skyhook-markers"
MARKERS_2 = "/skyhook-markers-2"
DEFAULTS = load_settings({})
LEASE_DURATION = DEFAULTS.lease_duration
RETRY_PERIOD = DEFAULTS.lease_retry_period


def start_pair(cluster: Cluster, lease: str) -> tuple[OperatorProcess, OperatorProcess]:
    """Replica a, leading, then replica b, standing by (each with its own log)."""
    assert cluster.operator is not None
    cluster.operator.stop()  # the fixture's operator runs without leader election
    replicas = []
    # Both replicas serve the webhooks on one address, as pods behind one Service would.
    webhooks = f"127.0.0.1:{free_port()}"
    for name in ("replica-a", "replica-b"):
        replicas.append(
            cluster.start_operator(
                log_name=f"{name}.log",
                SKYHOOK_WEBHOOK_PORT=webhooks,
                LEADER_ELECTION="true",
                SKYHOOK_LEASE_NAME=lease,
                SKYHOOK_LEADER_IDENTITY=name,
            )
        )
        if name == "replica-a":
            wait_until(lambda: holder(cluster, lease) == "replica-a", 60, "replica-a leading")
    a, b = replicas
    cluster.operator = a
    wait_until(lambda: "not the leader" in b.log_path.read_text(), 60, "replica-b standing by")
    return a, b


def holder(cluster: Cluster, lease: str) -> str:
    return lease_holder(cluster.kube, NAMESPACE, lease).rsplit("_", 1)[0]


def assert_stood_by(replica: OperatorProcess) -> None:
    """Until it led, the replica planned nothing and wrote nothing."""
    log = replica.log_path.read_text()
    standing_by, _, _ = log.partition("leading: planning from the current indexes")
    assert "not the leader" in standing_by
    assert "pass:" not in standing_by and "not the leader: writes are fenced" not in standing_by


def test_sigkilled_leader_is_replaced_within_the_lease_and_no_stage_runs_twice(
    cluster: Cluster, test_label: str
) -> None:
    nodes = cluster.add_nodes(4)
    a, b = start_pair(cluster, test_label)
    package = {"version": "1.0.0", "image": SHELLSCRIPT, "configMap": marker_scripts(MARKERS)}
    cluster.skyhook("ha-kill", {"markers": package}, interruptionBudget={"count": 2})

    def applying() -> bool:
        return any(
            p["metadata"].get("deletionTimestamp") is None
            and '"stage":"apply"' in p["metadata"]["annotations"][keys.PACKAGE_ANNOTATION]
            for p in cluster.pods("ha-kill")
        )

    wait_until(applying, 60, "an apply pod")
    a.kill()
    killed = time.monotonic()
    wait_until(lambda: holder(cluster, test_label) == "replica-b", 60, "replica-b leading")
    take_over = time.monotonic() - killed
    print(f"SIGKILL take-over: {take_over:.1f} s (lease duration {LEASE_DURATION:.0f} s)")
    assert take_over <= LEASE_DURATION + 2 * RETRY_PERIOD
    cluster.operator = b

    cluster.wait_complete("ha-kill", timeout=180)
    for node in nodes:
        assert cluster.host_file(node, MARKERS) == "apply\nconfig\n", f"on {node}"
    assert_stood_by(b)


def test_sigtermed_leader_hands_over_in_seconds(cluster: Cluster, test_label: str) -> None:
    nodes = cluster.add_nodes(2)
    a, b = start_pair(cluster, test_label)
    package = {"version": "1.0.0", "image": SHELLSCRIPT, "configMap": marker_scripts(MARKERS)}
    cluster.skyhook("ha-term", {"markers": package})
    cluster.wait_complete("ha-term", timeout=180)  # led by a; b wrote nothing meanwhile
    assert "pass:" in a.log_path.read_text()

    a.terminate()
    stopped = time.monotonic()
    wait_until(lambda: holder(cluster, test_label) == "replica-b", 30, "replica-b leading")
    hand_over = time.monotonic() - stopped
    print(f"SIGTERM hand-over: {hand_over:.1f} s (lease duration {LEASE_DURATION:.0f} s)")
    assert hand_over < LEASE_DURATION / 2
    assert "released Lease" in a.log_path.read_text()
    cluster.operator = b
    assert_stood_by(b)

    # The new leader works: another SCR rolls out.
    second = {"version": "1.0.0", "image": SHELLSCRIPT, "configMap": marker_scripts(MARKERS_2)}
    cluster.skyhook("ha-term-2", {"markers": second})
    cluster.wait_complete("ha-term-2", timeout=180)
    for node in nodes:
        assert cluster.host_file(node, MARKERS) == "apply\nconfig\n", f"on {node}"
        assert cluster.host_file(node, MARKERS_2) == "apply\nconfig\n", f"on {node}"
