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

import base64
import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

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


def test_helm_test_passes_against_the_replicas_webhooks(
    deployment: ChartDeployment, tmp_path: Path
) -> None:
    """`helm test`'s pod, as the chart renders it, run here: its command and environment with
    the Service's address replaced by the replicas' loopback one and the CA read from the
    webhook Secret (the pod mounts that Secret's ca.crt). It must pass against our validating
    webhook, and fail against the mutating one, which refuses nothing."""
    rendered = subprocess.run(
        [
            *(str(deployment.helm), "template", "skyhook-operator", str(deployment.chart)),
            *("-n", "skyhook", "--show-only", "templates/tests/webhooks.yaml"),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    container = yaml.safe_load(rendered)["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    ca = kubectl(
        deployment.admin, "get", "secret", "webhook-cert", "-n", "skyhook",
        "-o", "jsonpath={.data.ca\\.crt}",
    )  # fmt: skip
    (tmp_path / "ca.crt").write_bytes(base64.b64decode(ca))
    path = urllib.parse.urlsplit(env["WEBHOOK_URL"]).path
    address = deployment.replicas[0].webhook_address

    def helm_test(webhook_path: str) -> subprocess.CompletedProcess[str]:
        program, *args = container["command"]
        assert program == "python3"
        local = {
            "WEBHOOK_URL": f"https://{address}{webhook_path}",
            "CA_FILE": str(tmp_path / "ca.crt"),
        }
        return subprocess.run(
            [sys.executable, *args], env=env | local, capture_output=True, text=True, timeout=60
        )

    passed = helm_test(path)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "valid admitted" in passed.stdout
    wrong = helm_test(path.replace("/validate-", "/mutate-"))
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    assert "was not refused" in wrong.stdout


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
