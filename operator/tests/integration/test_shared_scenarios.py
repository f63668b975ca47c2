"""The end-to-end scenario list `ci/e2e-kind` runs on kind (ci/e2e/scenarios.py), played here
by the same runner on the sandbox against the operator as the chart deploys it
(skyhook_dev.chart_deployment): the chart rendered by helm with its default values, its
Deployment's two replicas under the chart's ServiceAccount token with leader election, secure
metrics and the URL webhooks of both API groups, and two nodes labelled
`skyhook.nvidia.com/test-node=demo` for the whole list. The runner talks to the apiserver only
through kubectl with `sandbox.kubeconfig`. The sandbox serves every shellscript tag from
packages/shellscript, as kind is served the images ci/e2e-kind builds from it. After the list,
a Forbidden answer in either replica's log, a replica that exited or a Lease held by neither
fails the run."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skyhook_dev.chart_deployment import ChartDeployment, describe_forbidden, kubectl
from skyhook_sandbox.sandbox import Sandbox

from .helpers import TEST_LABEL

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "ci" / "e2e"))
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "ci"))
import scenarios
from _helm import ensure_helm

REPO = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.sandbox

GROUPS = ("skyhook.nvidia.com", "nodewright.nvidia.com")
# The operator's metrics certificate is its own, signed by no CA a client knows.
SELF_SIGNED = ssl.create_default_context()
SELF_SIGNED.check_hostname = False
SELF_SIGNED.verify_mode = ssl.CERT_NONE


@pytest.fixture(scope="module")
def deployment(
    sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ChartDeployment]:
    """The chart installed and its replicas running, shared by every scenario. At the end a
    replica that exited, a Lease held by neither, or a Forbidden answer in either log fails
    the module (an error on its last test)."""
    work = tmp_path_factory.mktemp("chart-deployment")
    deployed = ChartDeployment(ensure_helm(), REPO / "chart", sandbox.kubeconfig, work)
    try:
        deployed.install().start()
        yield deployed
        problems = [f"{r.log_path.name}: exited" for r in deployed.replicas if not r.running]
        if deployed.leader() not in deployed.names:
            problems.append(f"the Lease is held by {deployed.leader()!r}, none of {deployed.names}")
    finally:
        deployed.stop()
        print(deployed.log_tails())
    forbidden = deployed.forbidden()
    if forbidden:
        problems.append("the chart's ServiceAccount was refused:\n" + describe_forbidden(forbidden))
    if problems:
        pytest.fail("\n".join(problems))


@pytest.fixture(scope="module")
def runner(sandbox: Sandbox, deployment: ChartDeployment) -> Iterator[scenarios.Runner]:
    """Two demo-labelled nodes and the runner of the scenario list."""
    assert TEST_LABEL == scenarios.NODE_LABEL
    nodes = sandbox.add_nodes(
        2, labels={TEST_LABEL: scenarios.NODE_LABEL_VALUE}, prefix="shared-scenarios"
    )
    try:
        yield scenarios.Runner(scenarios.Kubectl(str(sandbox.kubeconfig)), timeout=180)
    finally:
        sandbox.remove_nodes(nodes)


def test_the_chart_runs_two_replicas_one_leading(deployment: ChartDeployment) -> None:
    """Both replicas up, one of them the Lease holder (read with kubectl), metrics behind
    authentication, and the webhooks of both API groups registered at their loopback URL and
    called by the apiserver (the other group's answers with its notice; ours in the
    invalid-scr-refused scenario)."""
    assert len(deployment.replicas) == 2
    assert all(replica.running for replica in deployment.replicas)
    assert deployment.leader() in deployment.names
    for replica in deployment.replicas:
        assert replica.metrics_url.startswith("https://")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(replica.metrics_url, context=SELF_SIGNED)
        assert refused.value.code == 401
    configurations = json.loads(
        kubectl(deployment.admin, "get", "validatingwebhookconfigurations", "-o", "json")
    )["items"]
    ours = f"https://{deployment.replicas[0].webhook_address}/"
    called = {
        group
        for configuration in configurations
        for webhook in configuration["webhooks"]
        if webhook["clientConfig"].get("url", "").startswith(ours)
        for rule in webhook["rules"]
        for group in rule["apiGroups"]
    }
    assert called >= set(GROUPS), called


@pytest.mark.parametrize("scenario", scenarios.SCENARIOS, ids=lambda s: s.name)
def test_shared_scenario(runner: scenarios.Runner, scenario: Any) -> None:
    try:
        runner.play(scenario)
    finally:
        runner.clean_up()


def test_the_apiserver_calls_the_other_groups_webhook(deployment: ChartDeployment) -> None:
    """A NodeWright (the other API group) created with a server-side dry run comes back with
    the operator's notice that it speaks skyhook.nvidia.com: the apiserver called the replicas'
    webhook for that group."""
    nodewright = {
        "apiVersion": "nodewright.nvidia.com/v1alpha1",
        "kind": "NodeWright",
        "metadata": {"name": "chart-shape-probe"},
        "spec": {"packages": {}},
    }
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(deployment.admin), "create", "--dry-run=server", "-f", "-"],
        input=json.dumps(nodewright),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "is not reconciled by this operator, which speaks skyhook.nvidia.com" in result.stderr
