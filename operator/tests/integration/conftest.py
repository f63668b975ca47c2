"""Fixtures for operator tests on the sandbox (the sandbox's pytest plugin gives `sandbox`,
one control plane per session): the CRD installed once, the operator as a real subprocess per
test, and per-test nodes selected through a label unique to the test, so tests never see each
other's work."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from skyhook_dev.harness import OperatorProcess, ensure_namespace, install_crd
from skyhook_operator.kube.client import ApiError, Kube, connect
from skyhook_sandbox.sandbox import Sandbox

from .helpers import Cluster

NAMESPACE = "skyhook"

pytestmark = pytest.mark.sandbox


@pytest.fixture(scope="session")
def kube(sandbox: Sandbox) -> Iterator[Kube]:
    client = connect(str(sandbox.kubeconfig))
    install_crd(client)
    ensure_namespace(client, NAMESPACE)
    yield client
    client.close()


@pytest.fixture
def test_label(request: pytest.FixtureRequest) -> str:
    """A label value unique to this test, used to select its nodes."""
    return re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")


@pytest.fixture
def start_operator(sandbox: Sandbox, tmp_path: Path) -> Iterator[Callable[..., OperatorProcess]]:
    """Start `skyhook-operator run`; call again after a kill to restart it."""
    started: list[OperatorProcess] = []

    def start(
        kubeconfig_flag: bool = False,
        log_name: str = "operator.log",
        wait_ready: bool = True,
        **env: str,
    ) -> OperatorProcess:
        settings = {
            "SKYHOOK_NAMESPACE": NAMESPACE,
            "SKYHOOK_RETRY_INTERVAL": "1",
            "SKYHOOK_EVENT_INTERVAL": "3",  # Event counts grow within a test's patience
            **env,
        }
        process = OperatorProcess(
            sandbox.kubeconfig, tmp_path / log_name, env=settings, kubeconfig_flag=kubeconfig_flag
        ).start()
        started.append(process)
        # Ready: the apiserver now calls this operator's webhooks (not a previous test's).
        return process.wait_ready() if wait_ready else process

    yield start
    for process in started:
        process.stop()
    for path in sorted({p.log_path for p in started}):
        print(f"--- operator log {path} (tail) ---")
        if path.exists():
            print("\n".join(path.read_text(errors="replace").splitlines()[-80:]))


@pytest.fixture
def cluster(
    sandbox: Sandbox,
    kube: Kube,
    test_label: str,
    start_operator: Callable[..., OperatorProcess],
) -> Iterator[Cluster]:
    """This test's view: its nodes, its SCRs (deleted at the end), a running operator."""
    view = Cluster(sandbox=sandbox, kube=kube, label=test_label, start_operator=start_operator)
    view.operator = start_operator()
    yield view
    view.cleanup()


@pytest.fixture
def policies(kube: Kube) -> Iterator[list[str]]:
    """Names of policies the test creates; deleted at the end."""
    names: list[str] = []
    yield names
    for name in names:
        try:
            kube.request("DELETE", kube.policy_path(name))
        except ApiError:
            continue
