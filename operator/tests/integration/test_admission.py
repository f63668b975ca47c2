"""The admission webhooks as a user meets them: real create, update and delete requests to the
sandbox apiserver, which calls the operator's webhooks over HTTPS on loopback (registered by
the operator itself, with a certificate it issued into the `webhook-cert` Secret)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from unit.admission_cases import BAD_POLICIES, BAD_SKYHOOKS, Case

from skyhook_dev.harness import wait_until
from skyhook_operator.kube.client import ApiError, Kube
from skyhook_operator.kube.webhooks import (
    MUTATING_CONFIGURATION,
    VALIDATE_POLICY_DELETE,
    VALIDATING_CONFIGURATION,
)
from skyhook_schemas import keys

from .conftest import NAMESPACE
from .helpers import Cluster, create_policy
from .test_package_readmes import readme_scr

REPO = Path(__file__).resolve().parents[3]
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def refusal(kube: Kube, path: str, body: dict[str, Any]) -> str:
    """The apiserver's message for a create that must fail; fails the test if it succeeds."""
    try:
        kube.request("POST", path, body)
    except ApiError as error:
        assert error.status in (400, 403, 422), error
        return error.reason
    kube.request("DELETE", f"{path}/{body['metadata']['name']}")
    return "<created>"


def mismatches(kube: Kube, path: str, table: list[Case]) -> list[str]:
    found = []
    for case in table:
        message = refusal(kube, path, case.body)
        if case.field not in message:
            found.append(f"{case.id}: expected {case.field!r} in {message!r}")
    return found


def test_every_bad_skyhook_and_policy_is_refused_naming_its_field(cluster: Cluster) -> None:
    kube = cluster.kube
    policy = {
        "apiVersion": keys.API_VERSION,
        "kind": "DeploymentPolicy",
        "metadata": {"name": "admission-policy"},
        "spec": {"default": {"budget": {"count": 1}, "strategy": {"fixed": {}}}},
    }
    kube.request("POST", kube.policy_path(), policy)
    try:
        wrong = mismatches(kube, kube.skyhook_path(), BAD_SKYHOOKS)
        wrong += mismatches(kube, kube.policy_path(), BAD_POLICIES)
    finally:
        kube.request("DELETE", kube.policy_path("admission-policy"))
    assert wrong == []
    # And none of them reached the cluster.
    names = {c.body["metadata"]["name"] for c in BAD_SKYHOOKS}
    assert not names & {
        s["metadata"]["name"] for s in kube.request("GET", kube.skyhook_path())["items"]
    }


def test_kubectl_shows_the_webhook_refusal_and_warnings(cluster: Cluster, sandbox: Any) -> None:
    bad = next(c for c in BAD_SKYHOOKS if c.id == "selector-bad-label-value")
    kubectl = ["kubectl", "--kubeconfig", str(sandbox.kubeconfig)]
    refused = subprocess.run(
        [*kubectl, "create", "-f", "-"],
        input=yaml.safe_dump(bad.body),
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 1
    assert 'admission webhook "validate-skyhook.nvidia.com" denied the request' in refused.stderr
    assert "spec.nodeSelectors.matchLabels: label value 'yes please'" in refused.stderr
    # An upstream spelling runs unchanged, with a warning on the spot.
    upstream = yaml.safe_load(yaml.safe_dump(bad.body))
    upstream["metadata"]["name"] = "upstream-spelling"
    upstream["spec"] = {"packages": {"foo": {"version": "1.2", "image": "example.com/foo:1.2"}}}
    cluster.skyhooks.append("upstream-spelling")
    created = subprocess.run(
        [*kubectl, "create", "-f", "-"],
        input=yaml.safe_dump(upstream),
        capture_output=True,
        text=True,
    )
    assert created.returncode == 0, created.stderr
    assert "Warning: spec.packages.foo.version:" in created.stderr


def test_every_skyhook_in_the_repository_is_admitted(cluster: Cluster) -> None:
    manifests = [readme_scr(p) for p in ("shellscript", "tuning", "tuned")]
    manifests.append(yaml.safe_load((REPO / "dev/src/skyhook_dev/demo-scr.yaml").read_text()))
    for manifest in manifests:  # a server-side dry run goes through admission, stores nothing
        cluster.kube.request("POST", cluster.kube.skyhook_path(), manifest, query={"dryRun": "All"})


def test_policies_are_defaulted_and_cannot_be_deleted_while_in_use(cluster: Cluster) -> None:
    kube = cluster.kube
    policy = {
        "apiVersion": keys.API_VERSION,
        "kind": "DeploymentPolicy",
        "metadata": {"name": "admission-in-use"},
        "spec": {"default": {"budget": {"percent": 50}, "strategy": {"exponential": {}}}},
    }
    stored = kube.request("POST", kube.policy_path(), policy)
    try:
        assert stored["spec"]["default"]["strategy"]["exponential"] == {
            "initialBatch": 1,
            "batchThreshold": 100,
            "safetyLimit": 50,
            "growthFactor": 2,
        }
        cluster.skyhook(
            "uses-policy",
            {"foo": {"version": "1.0.0", "image": "ghcr.io/nvidia/skyhook-packages/shellscript"}},
            deploymentPolicy="admission-in-use",
        )
        with pytest.raises(ApiError) as refused:
            kube.request("DELETE", kube.policy_path("admission-in-use"))
        assert refused.value.reason.endswith(
            'cannot delete DeploymentPolicy "admission-in-use": still referenced by 1 '
            "Skyhook(s): uses-policy"
        )
        kube.request("DELETE", kube.skyhook_path("uses-policy"))
        wait_until(lambda: cluster._gone("uses-policy"), 60, "uses-policy deleted")
    finally:
        wait_until(lambda: _deleted(kube, "admission-in-use"), 30, "policy deleted once unused")


def _deleted(kube: Kube, policy: str) -> bool:
    try:
        kube.request("DELETE", kube.policy_path(policy))
    except ApiError as error:
        return error.status == 404
    return True


def test_the_webhook_fails_closed_and_the_certificate_lives_in_a_secret(cluster: Cluster) -> None:
    kube = cluster.kube
    secret = kube.request("GET", kube.namespaced_path("secrets", NAMESPACE, "webhook-cert"))
    assert set(secret["data"]) >= {"ca.crt", "tls.crt", "tls.key"}
    for kind, name in (
        ("validatingwebhookconfigurations", VALIDATING_CONFIGURATION),
        ("mutatingwebhookconfigurations", MUTATING_CONFIGURATION),
    ):
        configuration = kube.request("GET", f"{ADMISSION}/{kind}/{name}")
        for webhook in configuration["webhooks"]:
            # Only the policy delete check lets a request through unchecked.
            assert webhook["failurePolicy"] == (
                "Ignore" if webhook["name"] == VALIDATE_POLICY_DELETE else "Fail"
            )
            assert webhook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    assert cluster.operator is not None
    cluster.operator.kill()  # a crash: the configurations stay, calling nobody
    good = {
        "apiVersion": keys.API_VERSION,
        "kind": keys.KIND,
        "metadata": {"name": "while-down"},
        "spec": {"packages": {"foo": {"version": "1.0.0", "image": "example.com/foo"}}},
    }
    with pytest.raises(ApiError) as refused:  # nobody to check it: not let through unchecked
        kube.request("POST", kube.skyhook_path(), good)
    assert "failed calling webhook" in refused.value.reason
    cluster.operator = cluster.start_operator()  # the same certificate, from the Secret
    assert (
        kube.request("GET", kube.namespaced_path("secrets", NAMESPACE, "webhook-cert"))["data"]
        == secret["data"]
    )
    cluster.skyhooks.append("while-down")
    kube.request("POST", kube.skyhook_path(), good)


def test_metadata_writes_and_deletions_go_through_while_the_operator_is_down(
    cluster: Cluster, sandbox: Any
) -> None:
    kube = cluster.kube
    name = "break-glass"
    create_policy(
        kube,
        "break-glass-policy",
        {"default": {"budget": {"count": 1}, "strategy": {"fixed": {}}}},
    )
    cluster.skyhook(
        name,
        {"foo": {"version": "1.0.0", "image": "example.com/foo"}},
        deploymentPolicy="break-glass-policy",
    )
    wait_until(
        lambda: keys.FINALIZER in (cluster.get_skyhook(name)["metadata"].get("finalizers") or []),
        60,
        "the operator's finalizer",
    )
    assert cluster.operator is not None
    cluster.operator.kill()  # a crash: the configurations stay, calling nobody
    kubectl = ["kubectl", "--kubeconfig", str(sandbox.kubeconfig)]
    scr = f"{keys.PLURAL}.{keys.GROUP}/{name}"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*kubectl, *args], capture_output=True, text=True, timeout=60)

    spec_change = run("patch", scr, "--type=merge", "-p", '{"spec":{"runtimeRequired":true}}')
    assert spec_change.returncode == 1
    assert "failed calling webhook" in spec_change.stderr
    for step in (
        # Still in use: refused while the operator runs, let through while it is down.
        ("delete", f"deploymentpolicies.{keys.GROUP}/break-glass-policy"),
        ("annotate", scr, f"{keys.PAUSE_ANNOTATION}=true"),
        ("annotate", scr, f"{keys.DISABLE_ANNOTATION}=true"),
        ("label", scr, "team=gpu"),
        ("delete", scr, "--wait=false"),
        ("patch", scr, "--type=json", "-p", '[{"op":"remove","path":"/metadata/finalizers"}]'),
    ):
        done = run(*step)
        assert done.returncode == 0, f"kubectl {' '.join(step)}: {done.stderr}"
    assert cluster._gone(name)
    assert _deleted(kube, "break-glass-policy")


def test_crd_rules_hold_with_the_webhooks_off(cluster: Cluster) -> None:
    assert cluster.operator is not None
    cluster.operator.stop()  # a clean stop: the harness removes the webhook configurations
    kube = cluster.kube
    base = {
        "apiVersion": keys.API_VERSION,
        "kind": keys.KIND,
        "spec": {"packages": {"foo": {"version": "1.0.0", "image": "example.com/foo"}}},
    }
    both = {**base, "metadata": {"name": "crd-both"}}
    both["spec"] = {**base["spec"], "interruptionBudget": {"percent": 10, "count": 1}}
    assert "spec.interruptionBudget: Invalid value" in refusal(kube, kube.skyhook_path(), both)
    exclusive = {**base, "metadata": {"name": "crd-exclusive"}}
    exclusive["spec"] = {
        **base["spec"],
        "deploymentPolicy": "p",
        "interruptionBudget": {"count": 1},
    }
    message = refusal(kube, kube.skyhook_path(), exclusive)
    assert "spec.deploymentPolicy: Invalid value" in message
    assert "deploymentPolicy and interruptionBudget are mutually exclusive" in message
