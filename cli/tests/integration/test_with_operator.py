"""Upstream's CLI scenarios that need the operator: it must act on what the plugin wrote."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from skyhook_dev.harness import OperatorProcess
from skyhook_schemas import keys

from ..conftest import NAMESPACE, TEST_LABEL, Result, agentless, wait_for

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]


def node_annotations(core: client.CoreV1Api, node: str) -> dict[str, str]:
    return core.read_node(node).metadata.annotations or {}


def apply_pod_uids(core: client.CoreV1Api, label: str) -> set[str]:
    """The uids of the Skyhook's apply pods (a succeeded one stays for its logs)."""
    pods = core.list_pod_for_all_namespaces(label_selector=f"{keys.NAME_LABEL}={label}").items
    return {
        p.metadata.uid
        for p in pods
        if json.loads(p.metadata.annotations[keys.PACKAGE_ANNOTATION])["stage"] == "apply"
    }


def test_rerun_and_reset_are_picked_up_by_the_operator(
    *,
    cli: Callable[..., Result],
    core: client.CoreV1Api,
    nodes: Callable[[int], list[str]],
    skyhooks: Callable[..., Any],
    operator: Any,
    label: str,
) -> None:
    (node,) = nodes(1)
    status_key = keys.node_status_key(label)
    skyhooks(label, {"pkg": agentless("1.0.0")})
    wait_for(
        lambda: node_annotations(core, node).get(status_key) == "complete",
        180,
        "the package complete on the node",
    )

    (kept,) = apply_pod_uids(core, label)
    assert cli("package", "rerun", "pkg", "--skyhook", label, "--node", node, "--dry-run").code == 0
    rerun = cli(
        "package",
        "rerun",
        "pkg",
        "--skyhook",
        label,
        "--node",
        node,
        "--stage",
        "apply",
        "--confirm",
    )
    assert rerun.code == 0, rerun.err
    wait_for(
        lambda: node_annotations(core, node).get(status_key) == "in_progress",
        60,
        "the operator to rerun apply",
    )
    wait_for(
        lambda: node_annotations(core, node).get(status_key) == "complete",
        180,
        "the rerun to complete",
    )
    # Apply ran again in a pod of its own: the kept one's result was not taken for it.
    rerun_uids = apply_pod_uids(core, label)
    assert len(rerun_uids) == 1 and kept not in rerun_uids, (kept, rerun_uids)

    assert cli("disable", label, "--confirm").code == 0
    reset = cli("reset", label, "--confirm")
    assert reset.code == 0, reset.err

    def rewritten_disabled() -> bool:
        annotations = node_annotations(core, node)
        return (
            annotations.get(status_key) == "disabled" and keys.cordon_key(label) not in annotations
        )

    wait_for(rewritten_disabled, 60, "the operator to mark the reset node disabled")
    state = node_annotations(core, node).get(keys.node_state_key(label))
    assert state is None or json.loads(state) == {}
    listed = cli("node", "list", "--skyhook", label, "-o", "json")
    assert listed.code == 0


NODEWRIGHT = "nodewright.nvidia.com"


def nodewright_cli(sandbox: Any, *args: str) -> Result:
    """`kubectl-nodewright --kubeconfig <sandbox> ARGS`, through its entry point."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from skyhook_cli.nodewright import main; main()",
            "--kubeconfig",
            str(sandbox.kubeconfig),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def test_kubectl_nodewright_steers_a_nodewright(
    *,
    sandbox: Any,
    cli: Callable[..., Result],
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    nodes: Callable[[int], list[str]],
    label: str,
    tmp_path: Path,
) -> None:
    (node,) = nodes(1)
    env = {"SKYHOOK_NAMESPACE": NAMESPACE, "SKYHOOK_RETRY_INTERVAL": "1"}
    env["SKYHOOK_API_GROUP"] = NODEWRIGHT
    operator = OperatorProcess(sandbox.kubeconfig, tmp_path / "nw.log", env=env).start()
    scr = {
        "apiVersion": f"{NODEWRIGHT}/v1alpha1",
        "kind": "NodeWright",
        "metadata": {"name": label},
        "spec": {
            "nodeSelectors": {"matchLabels": {TEST_LABEL: label}},
            "packages": {"pkg": agentless("1.0.0")},
        },
    }
    try:
        operator.wait_ready()
        custom.create_cluster_custom_object(NODEWRIGHT, "v1alpha1", "nodewrights", scr)
        status_key = f"{NODEWRIGHT}/status_{label}"
        wait_for(
            lambda: node_annotations(core, node).get(status_key) == "complete",
            180,
            "the package complete on the node under the nodewright key",
        )
        shown = nodewright_cli(sandbox, "node", "status", node, "-o", "json")
        assert shown.code == 0, shown.err
        assert label in shown.out and "complete" in shown.out, shown.out
        listed = nodewright_cli(sandbox, "node", "list", "--nodewright", label)
        assert listed.code == 0, listed.err
        assert listed.out.splitlines()[0] == f"Skyhook: {label}", listed.out

        paused = nodewright_cli(sandbox, "pause", label, "--confirm")
        assert paused.code == 0, paused.err
        found = custom.get_cluster_custom_object(NODEWRIGHT, "v1alpha1", "nodewrights", label)
        assert found["metadata"]["annotations"].get(f"{NODEWRIGHT}/pause") == "true"
        # kubectl skyhook speaks skyhook.nvidia.com: it does not find the NodeWright.
        assert cli("pause", label, "--confirm").code == 1
        unknown = nodewright_cli(sandbox, "frobnicate")
        assert 'unknown command "frobnicate" for "nodewright"' in unknown.err
    finally:
        with contextlib.suppress(client.ApiException):
            custom.delete_cluster_custom_object(NODEWRIGHT, "v1alpha1", "nodewrights", label)
        wait_for(
            lambda: (
                label
                not in {
                    o["metadata"]["name"]
                    for o in custom.list_cluster_custom_object(
                        NODEWRIGHT, "v1alpha1", "nodewrights"
                    )["items"]
                }
            ),
            60,
            "the NodeWright deleted",
        )
        operator.stop()
