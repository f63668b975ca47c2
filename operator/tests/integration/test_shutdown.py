"""SIGTERM mid-rollout: the operator exits within its pod's grace period whatever the apiserver
does, and hands the Lease over when the apiserver answers.

The operator under test leads (leader election on, a Lease of the test's own) and reaches the
apiserver through a proxy the test cuts (proxy.py): a partition (nothing answers, every
request waits for its timeout) or a closed port (every request fails at once). The test's own
client keeps the direct way.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from skyhook_dev.harness import OperatorProcess, lease_holder, wait_until
from skyhook_operator.settings import load_settings
from skyhook_sandbox.sandbox import Sandbox

from .conftest import NAMESPACE
from .helpers import Cluster, agentless
from .proxy import ApiProxy, Cut

# The pod's terminationGracePeriodSeconds: Kubernetes' default (the chart sets none). The
# kubelet SIGKILLs an operator still running after it.
GRACE_PERIOD = 30.0
SHUTDOWN_TIMEOUT = load_settings({}).shutdown_timeout
# What a healthy stop takes at most: the writes going out, one Lease write.
PROMPT = 5.0


@pytest.fixture
def proxy(sandbox: Sandbox) -> Iterator[ApiProxy]:
    server = urlsplit(sandbox.server)
    assert server.hostname and server.port
    running = ApiProxy((server.hostname, server.port)).start()
    yield running
    running.close()


def start_leading(cluster: Cluster, lease: str, kubeconfig: Path | None = None) -> None:
    """The fixture's operator swapped for one with leader election (webhooks off: the test's
    writes must not wait on an operator it cuts off), leading a rollout in progress of the
    Skyhook named as its Lease."""
    assert cluster.operator is not None
    cluster.operator.stop()
    settings = {
        "LEADER_ELECTION": "true",
        "SKYHOOK_LEASE_NAME": lease,
        "SKYHOOK_LEADER_IDENTITY": "under-test",
        "SKYHOOK_ENABLE_WEBHOOKS": "false",
    }
    if kubeconfig is not None:
        settings["KUBECONFIG"] = str(kubeconfig)
    cluster.operator = cluster.start_operator(log_name="leader.log", **settings)
    wait_until(
        lambda: lease_holder(cluster.kube, NAMESPACE, lease).startswith("under-test_"),
        60,
        "the operator leading",
    )
    cluster.add_nodes(4)
    package = agentless("1.0.0", sleep=1)
    cluster.skyhook(lease, {"sleepy": package}, interruptionBudget={"count": 2})
    wait_until(lambda: cluster.pods(lease), 60, "a stage pod: the rollout is going")


def sigterm(operator: OperatorProcess) -> float:
    """Seconds from SIGTERM to the process's exit (it must exit with 0)."""
    assert operator.process is not None
    sent = time.monotonic()
    operator.terminate()
    code = operator.process.wait(GRACE_PERIOD + 30)
    took = time.monotonic() - sent
    print(f"exit {code} after {took:.1f} s")
    assert code == 0, operator.log_tail()
    return took


@pytest.mark.parametrize("cut", ["blackhole", "refuse"])
def test_sigterm_with_the_apiserver_unreachable_exits_within_the_grace_period(
    cluster: Cluster, proxy: ApiProxy, tmp_path: Path, test_label: str, cut: Cut
) -> None:
    lease = f"{test_label[:30].strip('-')}-{cut}"
    kubeconfig = proxy.kubeconfig(cluster.sandbox.kubeconfig, tmp_path / "through-proxy")
    start_leading(cluster, lease, kubeconfig)
    assert cluster.operator is not None
    proxy.cut(cut)
    # Long enough for the leader's next renewal to be under way (and, cut off, stuck).
    time.sleep(load_settings({}).lease_retry_period + 1)

    took = sigterm(cluster.operator)

    assert took < SHUTDOWN_TIMEOUT + 3 < GRACE_PERIOD, cluster.operator.log_tail()
    if cut == "refuse":  # every request fails at once: nothing to wait for
        assert took < PROMPT, cluster.operator.log_tail()
    # Its Lease could not be released: a successor waits for it to expire.
    assert lease_holder(cluster.kube, NAMESPACE, lease).startswith("under-test_")


def test_sigterm_with_the_apiserver_up_exits_at_once_and_releases_the_lease(
    cluster: Cluster, test_label: str
) -> None:
    start_leading(cluster, test_label)
    assert cluster.operator is not None

    took = sigterm(cluster.operator)

    assert took < PROMPT, cluster.operator.log_tail()
    # Released before the exit: another replica may take it at its next read.
    assert lease_holder(cluster.kube, NAMESPACE, test_label) == ""
    assert "released Lease" in cluster.operator.log_path.read_text()
