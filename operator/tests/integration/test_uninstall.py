"""Explicit uninstall through the sandbox apiserver and a running operator: the `uninstall`
block is admitted and kept (the CRD knows it, so strict field validation takes it), a malformed
one is refused naming its field, and `apply: true` uninstalls the package from the node."""

from __future__ import annotations

import subprocess
from typing import Any

import yaml

from skyhook_dev.harness import wait_until
from skyhook_schemas import keys

from .helpers import TEST_LABEL, Cluster, agentless, pod_stage


def _manifest(name: str, label: str, uninstall: Any) -> dict[str, Any]:
    return {
        "apiVersion": keys.API_VERSION,
        "kind": keys.KIND,
        "metadata": {"name": name},
        "spec": {
            "nodeSelectors": {"matchLabels": {TEST_LABEL: label}},
            "packages": {"foo": agentless("1.0.0", uninstall=uninstall)},
        },
    }


def _kubectl_create(sandbox: Any, manifest: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    # kubectl validates strictly by default: an unknown field would be refused by the apiserver.
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(sandbox.kubeconfig), "create", "-f", "-"],
        input=yaml.safe_dump(manifest),
        capture_output=True,
        text=True,
    )


def test_uninstall_is_admitted_and_a_malformed_one_refused_naming_the_field(
    cluster: Cluster, sandbox: Any
) -> None:
    name = f"{cluster.label[:40]}-admit"
    cluster.skyhooks.append(name)
    created = _kubectl_create(sandbox, _manifest(name, cluster.label, {"enabled": True}))
    assert created.returncode == 0, created.stderr
    stored = cluster.get_skyhook(name)["spec"]["packages"]["foo"]["uninstall"]
    assert stored == {"enabled": True, "apply": False}  # kept, and defaulted

    refused = _kubectl_create(
        sandbox, _manifest(f"{name}-bad", cluster.label, {"enabled": False, "apply": True})
    )
    assert refused.returncode == 1
    assert "spec.packages.foo.uninstall.apply" in refused.stderr
    assert "requires uninstall.enabled to be true" in refused.stderr

    mistyped = _kubectl_create(
        sandbox, _manifest(f"{name}-typed", cluster.label, {"enabled": "yes"})
    )
    assert mistyped.returncode == 1
    assert "spec.packages.foo.uninstall.enabled" in mistyped.stderr


def test_apply_uninstalls_the_package_from_the_node(cluster: Cluster) -> None:
    (node,) = cluster.add_nodes(1)
    cluster.skyhook("uninstall", {"foo": agentless("1.0.0", uninstall={"enabled": True})})
    cluster.wait_complete("uninstall", timeout=90)
    assert list(cluster.states("uninstall")[node]) == ["foo|1.0.0"]
    recording = cluster.record("uninstall")

    cluster.patch_skyhook(
        "uninstall", {"spec": {"packages": {"foo": {"uninstall": {"apply": True}}}}}
    )
    wait_until(lambda: cluster.states("uninstall")[node] == {}, 90, "foo uninstalled")
    cluster.wait_complete("uninstall", timeout=60)

    added = [p for _, kind, p in recording.of("pod") if kind == "ADDED"]
    assert [(pod_stage(p), p["metadata"]["labels"][keys.PACKAGE_LABEL]) for p in added] == [
        ("uninstall", "foo-1.0.0")
    ]
    conditions = {c["type"] for c in cluster.get_skyhook("uninstall")["status"]["conditions"]}
    assert keys.CONDITION_UNINSTALL_IN_PROGRESS not in conditions
