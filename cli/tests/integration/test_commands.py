"""Every command against the sandbox apiserver, with state written on nodes by the test.

Each test owns its nodes (labelled and named after it) and its Skyhooks, so node patterns
and listings only ever see its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from kubernetes import client

from skyhook_cli import __version__
from skyhook_schemas import keys
from skyhook_schemas.podpackage import INTERRUPT_CONTAINER, PodPackage

from ..conftest import NAMESPACE, TEST_LABEL, Result, node_state, wait_for

pytestmark = pytest.mark.sandbox

Cli = Callable[..., Result]


def annotate(
    core: client.CoreV1Api,
    node: str,
    annotations: dict[str, Any],
    labels: dict[str, Any] | None = None,
    **spec: Any,
) -> None:
    patch: dict[str, Any] = {"metadata": {"annotations": annotations, "labels": labels or {}}}
    if spec:
        patch["spec"] = spec
    core.patch_node(node, patch)


def node_meta(core: client.CoreV1Api, node: str) -> tuple[dict[str, str], dict[str, str], bool]:
    obj = core.read_node(node)
    return obj.metadata.annotations or {}, obj.metadata.labels or {}, bool(obj.spec.unschedulable)


def skyhook(custom: client.CustomObjectsApi, name: str) -> dict[str, Any]:
    return dict(custom.get_cluster_custom_object(keys.GROUP, keys.VERSION, keys.PLURAL, name))


def set_compartments(custom: client.CustomObjectsApi, name: str, statuses: dict[str, Any]) -> None:
    custom.patch_cluster_custom_object_status(
        keys.GROUP,
        keys.VERSION,
        keys.PLURAL,
        name,
        {"status": {"compartmentStatuses": statuses}},
    )


def test_version_finds_the_operator_deployment(
    *, cli: Cli, api: client.ApiClient, label: str
) -> None:
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    core.create_namespace({"metadata": {"name": label}})
    try:
        missing = cli("version", "-n", label)
        assert missing.code == 0
        assert missing.out == (
            f"Skyhook plugin:\t{__version__}\nSkyhook operator:\tunknown (unable to determine operator "
            f'version; no skyhook operator deployment found in namespace "{label}")\n'
        )
        labels = {"app": "other"}
        apps.create_namespaced_deployment(
            label,
            {
                "metadata": {"name": "operator", "labels": labels},
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "containers": [
                                {
                                    "name": "manager",
                                    "image": "ghcr.io/nvidia/skyhook/operator:v0.9.1@sha256:"
                                    + "0" * 64,
                                },
                            ]
                        },
                    },
                },
            },
        )
        found = cli("version", "-n", label, "--timeout", "5s")
        assert (found.code, found.out.splitlines()[1]) == (0, "Skyhook operator:\tv0.9.1")
    finally:
        core.delete_namespace(label)


def test_lifecycle_sets_and_removes_annotations(
    *, cli: Cli, custom: client.CustomObjectsApi, skyhooks: Callable[..., Any], label: str
) -> None:
    skyhooks(label, {})

    def annotations() -> dict[str, str]:
        return skyhook(custom, label)["metadata"].get("annotations") or {}

    assert cli("pause", label, "--confirm").out == f'Skyhook "{label}" paused\n'
    assert cli("disable", label, "-y").out == f'Skyhook "{label}" disabled\n'
    assert annotations()[keys.PAUSE_ANNOTATION] == "true"
    assert annotations()[keys.DISABLE_ANNOTATION] == "true"

    aborted = cli("resume", label)  # no --confirm and no input: abort, exit 0, nothing changed
    assert (aborted.code, aborted.out) == (
        0,
        f'This will resume Skyhook "{label}". Continue? [y/N]: Aborted.\n',
    )
    assert keys.PAUSE_ANNOTATION in annotations()

    dry = cli("--dry-run", "resume", label, "-y")
    assert (dry.code, dry.out) == (0, f'[dry-run] Would resume Skyhook "{label}"\n')
    assert keys.PAUSE_ANNOTATION in annotations()

    resumed = cli("resume", label, stdin="y\n")
    assert (
        resumed.out
        == f'This will resume Skyhook "{label}". Continue? [y/N]: Skyhook "{label}" resumed\n'
    )
    assert keys.PAUSE_ANNOTATION not in annotations()
    assert annotations()[keys.DISABLE_ANNOTATION] == "true"  # resume leaves disable alone
    assert cli("enable", label, "-y").code == 0
    assert keys.DISABLE_ANNOTATION not in annotations()

    missing = cli("pause", "no-such-skyhook", "-y")
    assert (missing.code, missing.err) == (
        1,
        'getting skyhook "no-such-skyhook": skyhooks.skyhook.nvidia.com "no-such-skyhook" not found\n',
    )


def test_lifecycle_refuses_operators_before_annotations(
    *, cli: Cli, custom: client.CustomObjectsApi, skyhooks: Callable[..., Any], label: str
) -> None:
    skyhooks(label, {})
    custom.patch_cluster_custom_object(
        keys.GROUP,
        keys.VERSION,
        keys.PLURAL,
        label,
        {"metadata": {"annotations": {keys.SKYHOOK_VERSION_ANNOTATION: "v0.7.2"}}},
    )
    paused = cli("pause", label, "-y")
    assert (paused.code, paused.err) == (
        1,
        f"operator version v0.7.2 uses spec.pause instead of annotations; use 'kubectl edit skyhook {label}' and set spec.pause: true\n",
    )
    disabled = cli("disable", label, "-y")
    assert (disabled.code, disabled.err) == (
        1,
        "operator version v0.7.2 does not support disable; this feature was added in v0.8.0\n",
    )


def test_node_list_and_status_outputs(
    *, cli: Cli, core: client.CoreV1Api, nodes: Callable[[int], list[str]], label: str
) -> None:
    first, second, third = nodes(3)
    other = label + "-other"
    annotate(
        core,
        first,
        {
            keys.node_state_key(label): node_state(
                aa=("1.0.0", "config", "complete"), bb=("2.0.0", "config", "complete", 1)
            )
        },
    )
    annotate(
        core,
        second,
        {
            keys.node_state_key(label): node_state(
                aa=("1.0.0", "apply", "erroring", 3), bb=("2.0.0", "apply", "complete")
            ),
            keys.node_state_key(other): node_state(cc=("0.1.0", "apply", "in_progress")),
        },
    )
    annotate(core, third, {keys.node_state_key(label): "not json"})
    # The second node is held by the runtime-required cordon.
    core.patch_node(
        second,
        {
            "spec": {"unschedulable": True},
            "metadata": {"annotations": {keys.RUNTIME_REQUIRED_CORDON_ANNOTATION: "true"}},
        },
    )

    listed = cli("node", "list", "--skyhook", label)
    width = max(len(first), len(second)) + 2
    assert (listed.code, listed.out) == (
        0,
        (
            f"Skyhook: {label}\n\nSummary: 2 nodes (1 complete, 1 erroring, 0 in progress)\n\n"
            f"{'NODE'.ljust(width)}STATUS    PACKAGES\n{'----'.ljust(width)}------    --------\n"
            f"{first.ljust(width)}complete  2/2\n{second.ljust(width)}ERRORING  1/2\n"
        ),
    )
    verbose = cli("node", "list", "--skyhook", label, "-v", "-o", "json")
    assert verbose.err.startswith(f'Warning: skipping node "{third}" - invalid annotation: ')
    assert json.loads(verbose.out) == {
        "skyhookName": label,
        "nodes": [
            {
                "nodeName": first,
                "status": "complete",
                "packagesComplete": 2,
                "packagesTotal": 2,
                "restarts": 1,
            },
            {
                "nodeName": second,
                "status": "erroring",
                "packagesComplete": 1,
                "packagesTotal": 2,
                "restarts": 3,
            },
        ],
    }
    wide = cli("node", "list", "--skyhook", label, "-o", "wide").out.splitlines()
    assert wide[4].split() == ["NODE", "STATUS", "PACKAGES", "RESTARTS"]
    assert cli("node", "list", "--skyhook", "nobody").out == 'No nodes found for Skyhook "nobody"\n'

    status = cli("node", "status", f"{label}-.*")
    rows = [line.split() for line in status.out.splitlines()]
    assert rows == [
        ["NODE", "SKYHOOK", "STATUS", "PACKAGES", "CORDONED", "RUNTIME-REQUIRED-CORDON"],
        ["----", "-------", "------", "--------", "--------", "-----------------------"],
        [first, label, "complete", "2/2", "false", "false"],
        [second, label, "erroring", "1/2", "true", "true"],
        [second, other, "in_progress", "0/1", "true", "true"],
    ]
    filtered = yaml.safe_load(cli("node", "status", second, "--skyhook", other, "-o", "yaml").out)
    assert filtered == [
        {
            "nodeName": second,
            "skyhookName": other,
            "status": "in_progress",
            "packagesComplete": 0,
            "packagesTotal": 1,
            "packages": [
                {
                    "name": "cc",
                    "version": "0.1.0",
                    "stage": "apply",
                    "state": "in_progress",
                    "restarts": 0,
                    "image": "ghcr.io/x/cc",
                }
            ],
            "cordoned": True,
            "runtimeRequiredCordon": True,
        }
    ]
    wide_rows = [
        line.split() for line in cli("node", "status", second, "-o", "wide").out.splitlines()
    ]
    assert wide_rows[0] == [
        "NODE",
        "SKYHOOK",
        "PACKAGE",
        "VERSION",
        "STAGE",
        "STATE",
        "RESTARTS",
        "IMAGE",
        "CORDONED",
        "RUNTIME-REQUIRED-CORDON",
    ]
    assert wide_rows[2] == [
        second, label, "aa", "1.0.0", "apply", "erroring", "3", "ghcr.io/x/aa", "true", "true",
    ]  # fmt: skip
    assert len(wide_rows) == 5
    assert cli("node", "status", "no-such-node").out == "No nodes matched the specified patterns\n"
    assert cli("node", "status", third).out == "No Skyhook activity found on specified nodes\n"
    bad = cli("node", "status", "[")
    assert (bad.code, bad.err.startswith('matching nodes: invalid regex pattern "["')) == (1, True)


def test_node_ignore_and_unignore(
    *, cli: Cli, core: client.CoreV1Api, nodes: Callable[[int], list[str]], label: str
) -> None:
    first, second = nodes(2)
    ignored = cli("node", "ignore", first)
    assert ignored.out == f"Ignoring 1 node(s):\n  - {first}\n\nSuccessfully ignored 1 node(s)\n"
    again = cli("node", "ignore", f"{label}.*")
    assert (
        again.out
        == f"Ignoring 2 node(s):\n  - {first}\n  - {second}\n  {first}: already ignored\n\nSuccessfully ignored 1 node(s)\n"
    )
    assert all(node_meta(core, n)[1].get(keys.IGNORE_LABEL) == "true" for n in (first, second))
    assert cli("--dry-run", "node", "unignore", first).out.endswith(
        "\n[dry-run] No changes applied\n"
    )
    unignored = cli("node", "unignore", first, second)
    assert unignored.out.endswith("\nSuccessfully unignored 2 node(s)\n")
    assert all(keys.IGNORE_LABEL not in node_meta(core, n)[1] for n in (first, second))
    assert cli("node", "unignore", first).out.endswith(f"  {first}: not ignored\n")


def test_reset_forgets_the_skyhook_and_restarts_batches(
    *,
    cli: Cli,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    nodes: Callable[[int], list[str]],
    skyhooks: Callable[..., Any],
    label: str,
) -> None:
    first, second, third, fourth = nodes(4)
    auto_taint = keys.auto_taint_key(keys.RUNTIME_REQUIRED_TAINT_KEY)
    owned = {
        keys.node_state_key(label): node_state(
            aa=("1.0.0", "config", "complete"), bb=("1.0.0", "apply", "erroring")
        ),
        keys.node_status_key(label): "erroring",
        keys.cordon_key(label): "true",
        keys.version_key(label): "dev",
    }
    annotate(
        core,
        first,
        {**owned, auto_taint: "true"},
        {keys.node_status_key(label): "erroring"},
        unschedulable=True,
    )
    annotate(
        core,
        second,
        {
            keys.node_state_key(label): node_state(aa=("1.0.0", "config", "complete")),
            keys.node_state_key("another"): "{}",
            auto_taint: "true",
        },
    )
    # Cordoned by the Skyhook, which no longer selects it: nothing will re-run there.
    annotate(
        core,
        third,
        {keys.node_state_key(label): node_state(aa=("1.0.0", "interrupt", "in_progress")),
         keys.cordon_key(label): "true"},
        {TEST_LABEL: "elsewhere"},
        unschedulable=True,
    )  # fmt: skip
    # Only the cordon is left (its Skyhook force-deleted once), on a node no longer selected.
    annotate(
        core,
        fourth,
        {keys.cordon_key(label): "true"},
        {TEST_LABEL: "elsewhere"},
        unschedulable=True,
    )
    skyhooks(label, {})
    set_compartments(
        custom,
        label,
        {
            "__default__": {
                "matched": 2,
                "ceiling": 1,
                "inProgress": 0,
                "completed": 1,
                "progressPercent": 50,
                "batchState": {
                    "currentBatch": 3,
                    "consecutiveFailures": 2,
                    "completedNodes": 1,
                    "failedNodes": 1,
                    "shouldStop": True,
                    "lastBatchSize": 1,
                    "lastBatchFailed": True,
                },
            }
        },
    )

    custom.patch_cluster_custom_object_status(
        keys.GROUP,
        keys.VERSION,
        keys.PLURAL,
        label,
        {"status": {"nodeOrderOffset": 7, "nodePriority": {first: "2026-01-01T00:00:00Z"}}},
    )
    summary = f"Skyhook: {label}\nNodes to reset (4):\n  - {first} (2 packages)\n  - {second} (1 packages)\n  - {third} (1 packages)\n  - {fourth} (0 packages)\n\nBatch state will also be reset (use --skip-batch-reset to preserve)\n"
    dry = cli("reset", label, "--dry-run")
    assert (dry.code, dry.out) == (0, summary + "\n[dry-run] No changes applied\n")
    question = f'\nThis will remove ALL package state for Skyhook "{label}" on 4 node(s).\nAll packages will re-run from the beginning.\nBatch state will be reset to start from batch 1.\nContinue? [y/N]: '
    no_answer = cli("reset", label)
    assert (no_answer.code, no_answer.out, no_answer.err) == (
        1,
        summary + question,
        "reading confirmation: EOF\n",
    )
    declined = cli("reset", label, stdin="nope\n")
    assert (declined.code, declined.out) == (0, summary + question + "Aborted\n")
    assert keys.node_state_key(label) in node_meta(core, first)[0]

    done = cli("reset", label, stdin="YES\n")
    assert done.code == 0, done.err
    assert done.out.endswith(
        f'\nSuccessfully reset 4 node(s) for Skyhook "{label}"\nBatch state reset for Skyhook "{label}"\n'
    )
    annotations, labels, cordoned = node_meta(core, first)
    assert set(owned) & set(annotations) == {keys.cordon_key(label)}
    assert auto_taint not in annotations  # no Skyhook keeps state: the node looks new again
    assert keys.node_status_key(label) not in labels
    # Its cordon stays, with the marker: the re-run lifts it, and no workload returns before.
    assert cordoned
    annotations, _, cordoned = node_meta(core, third)
    assert keys.cordon_key(label) not in annotations
    assert not cordoned  # it was this Skyhook's cordon, and no re-run will come there
    annotations, _, cordoned = node_meta(core, fourth)
    assert (keys.cordon_key(label) in annotations, cordoned) == (False, False)
    assert auto_taint in node_meta(core, second)[0]  # "another" still has state there
    state = skyhook(custom, label)["status"]["compartmentStatuses"]["__default__"]["batchState"]
    order = skyhook(custom, label)["status"]
    assert order["nodeOrderOffset"] == 0
    assert "nodePriority" not in order
    assert state == {
        "currentBatch": 1,
        "consecutiveFailures": 0,
        "completedNodes": 0,
        "failedNodes": 0,
        "shouldStop": False,
        "lastBatchSize": 0,
        "lastBatchFailed": False,
    }
    assert cli("reset", label, "-y").out == f'No nodes have state for Skyhook "{label}"\n'


def test_reset_package_forgets_one_package_and_keeps_the_batch_state(
    *,
    cli: Cli,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    nodes: Callable[[int], list[str]],
    skyhooks: Callable[..., Any],
    label: str,
) -> None:
    first, second = nodes(2)
    state = keys.node_state_key(label)
    annotate(
        core,
        first,
        {state: node_state(aa=("1.0.0", "config", "complete"), bb=("2.0.0", "apply", "erroring"))},
    )
    annotate(core, second, {state: node_state(bb=("1.0.0", "config", "complete"))})
    skyhooks(label, {})
    batch = {
        "currentBatch": 3,
        "consecutiveFailures": 1,
        "completedNodes": 1,
        "failedNodes": 1,
        "shouldStop": False,
        "lastBatchSize": 1,
        "lastBatchFailed": True,
    }
    compartment = {"matched": 2, "ceiling": 1, "inProgress": 0, "completed": 1}
    set_compartments(
        custom, label, {"__default__": {**compartment, "progressPercent": 50, "batchState": batch}}
    )

    missing = cli("reset", label, "--package", "bb:9.9.9", "-y")
    assert missing.out == f'No nodes have state for package "bb:9.9.9" of Skyhook "{label}"\n'
    dry = cli("--dry-run", "reset", label, "--package", "bb")
    assert dry.out == (
        f"Skyhook: {label}\nPackage: bb\nNodes to reset (2):\n"
        f"  - {first} (2.0.0: apply erroring)\n  - {second} (1.0.0: config complete)\n"
        "\nBatch state is kept (a package reset never resets it)\n"
        "\n[dry-run] No changes applied\n"
    )
    one = cli("reset", label, "--package", "bb:2.0.0", "-y")
    assert (one.code, one.out.splitlines()[-1]) == (
        0,
        'Successfully reset package "bb:2.0.0" on 1 node(s)',
    )
    assert json.loads(node_meta(core, first)[0][state]).keys() == {"aa|1.0.0"}
    assert json.loads(node_meta(core, second)[0][state]).keys() == {"bb|1.0.0"}
    every = cli("reset", label, "--package", "bb", "-y")
    assert every.out.splitlines()[-1] == 'Successfully reset package "bb" on 1 node(s)'
    assert state not in node_meta(core, second)[0]  # no package left: the annotation goes
    assert json.loads(node_meta(core, first)[0][state]).keys() == {"aa|1.0.0"}
    kept = skyhook(custom, label)["status"]["compartmentStatuses"]["__default__"]["batchState"]
    assert kept["currentBatch"] == 3 and kept["failedNodes"] == 1
    bad = cli("reset", label, "--package", ":1.0.0")
    assert bad.code == 2 and "give a package name, NAME or NAME:VERSION" in bad.err


def test_update_state_sets_an_entry_on_chosen_nodes_and_adds_it_with_add(
    *,
    cli: Cli,
    core: client.CoreV1Api,
    nodes: Callable[[int], list[str]],
    skyhooks: Callable[..., Any],
    label: str,
) -> None:
    first, second, third = nodes(3)
    state = keys.node_state_key(label)
    annotate(core, first, {state: node_state(aa=("1.0.0", "apply", "erroring", 2))})
    annotate(core, second, {state: node_state(aa=("1.0.0", "config", "complete"))})
    annotate(core, third, {}, {"repair": "yes"})
    skyhooks(label, {"aa": {"version": "1.0.0", "image": "ghcr.io/x/aa"}})

    def entry(node: str) -> dict[str, Any]:
        return dict(json.loads(node_meta(core, node)[0][state])["aa|1.0.0"])

    command = ("update-state", label, "aa", "1.0.0")
    dry = cli("--dry-run", *command, "apply", "complete", "--node", first)
    assert dry.out == (
        f"Skyhook: {label}\nPackage: aa (version 1.0.0)\nNodes to update (1):\n"
        f"  - {first} (apply erroring -> apply complete)\n\n[dry-run] No changes applied\n"
    )
    assert entry(first)["state"] == "erroring"
    done = cli(*command, "apply", "complete", "--node", first, "-y")
    assert done.out.splitlines()[-1] == 'Successfully updated package "aa|1.0.0" on 1 node(s)'
    assert entry(first) == {
        "name": "aa", "version": "1.0.0", "image": "ghcr.io/x/aa", "stage": "apply",
        "state": "complete", "restarts": 2,
    }  # fmt: skip
    assert entry(second)["stage"] == "config"
    # A node without the entry is left alone unless --add; then it gets the Skyhook's image.
    missing = cli(*command, "config", "complete", "-l", "repair=yes", "-y")
    assert missing.out == f'No chosen node has package "aa|1.0.0" of Skyhook "{label}"\n'
    added = cli(*command, "config", "complete", "-l", "repair=yes", "--add", "-y")
    assert added.code == 0, added.err
    assert entry(third) == {
        "name": "aa", "version": "1.0.0", "image": "ghcr.io/x/aa", "stage": "config",
        "state": "complete",
    }  # fmt: skip
    # Without --node or -l: every node that has the entry.
    every = cli(*command, "config", "complete", "-y")
    assert every.out.splitlines()[-1] == 'Successfully updated package "aa|1.0.0" on 3 node(s)'
    assert {entry(n)["stage"] for n in (first, second, third)} == {"config"}
    bad = cli(*command, "config", "done", "-y")
    assert bad.code == 2 and 'invalid state "done": must be one of' in bad.err
    refused = cli(*command, "config", "complete", "--add", "-y")
    assert refused.code == 2 and "--add needs --node or -l/--selector" in refused.err


def test_reset_can_keep_batch_state(
    *,
    cli: Cli,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    nodes: Callable[[int], list[str]],
    skyhooks: Callable[..., Any],
    label: str,
) -> None:
    (node,) = nodes(1)
    annotate(core, node, {keys.node_state_key(label): "{}"})
    skyhooks(label, {})
    set_compartments(
        custom,
        label,
        {
            "__default__": {
                "matched": 1,
                "ceiling": 1,
                "inProgress": 0,
                "completed": 1,
                "progressPercent": 100,
                "batchState": {"currentBatch": 2, "completedNodes": 1},
            }
        },
    )
    done = cli("reset", label, "--skip-batch-reset", "--confirm")
    assert (
        done.out
        == f'Skyhook: {label}\nNodes to reset (1):\n  - {node} (0 packages)\n\nSuccessfully reset 1 node(s) for Skyhook "{label}"\n'
    )
    assert (
        skyhook(custom, label)["status"]["compartmentStatuses"]["__default__"]["batchState"][
            "currentBatch"
        ]
        == 2
    )


def test_deployment_policy_reset(
    *, cli: Cli, custom: client.CustomObjectsApi, skyhooks: Callable[..., Any], label: str
) -> None:
    skyhooks(label, {})
    assert (
        cli("dp", "reset", label, "-y").out
        == f'Skyhook "{label}" has no compartment statuses to reset\n'
    )
    set_compartments(
        custom,
        label,
        {
            "gpu": {
                "matched": 4,
                "ceiling": 2,
                "inProgress": 0,
                "completed": 3,
                "progressPercent": 75,
                "batchState": {
                    "currentBatch": 3,
                    "completedNodes": 3,
                    "failedNodes": 1,
                    "shouldStop": True,
                    "consecutiveFailures": 2,
                },
            },
            "__default__": {
                "matched": 0,
                "ceiling": 0,
                "inProgress": 0,
                "completed": 0,
                "progressPercent": 0,
            },
        },
    )
    summary = f"Skyhook: {label}\nCompartments: 2 total, 1 with batch state\n\nCurrent batch state:\n  - gpu: batch 3, 3 completed, 1 failed\n"
    dry = cli("deployment-policy", "reset", label, "--dry-run")
    assert dry.out == summary + (
        "\n[dry-run] Would reset batch state to:\n  - CurrentBatch: 1\n  - ConsecutiveFailures: 0\n  - CompletedNodes: 0\n"
        "  - FailedNodes: 0\n  - ShouldStop: false\n\n[dry-run] No changes applied\n"
    )
    done = cli("dp", "reset", label, stdin="y\n")
    assert done.out == summary + (
        f'\nThis will reset the batch state for Skyhook "{label}".\nThe next reconciliation will start from batch 1.\n'
        f'Continue? [y/N]: \nSuccessfully reset batch state for Skyhook "{label}"\n'
    )
    statuses = skyhook(custom, label)["status"]["compartmentStatuses"]
    assert statuses["gpu"]["batchState"]["shouldStop"] is False
    assert statuses["gpu"]["batchState"]["consecutiveFailures"] == 0
    assert statuses["__default__"]["batchState"]["currentBatch"] == 1
    assert cli("dp", "reset", "no-such-skyhook", "-y").code == 1


def test_node_reset(
    *, cli: Cli, core: client.CoreV1Api, nodes: Callable[[int], list[str]], label: str
) -> None:
    first, second = nodes(2)
    annotate(
        core,
        first,
        {
            keys.node_state_key(label): node_state(aa=("1.0.0", "apply", "complete")),
            keys.node_status_key(label): "complete",
        },
        {keys.node_status_key(label): "complete"},
    )
    assert (
        cli("node", "reset", second, "--skyhook", label, "-y").out
        == f'No nodes have state for Skyhook "{label}"\n'
    )
    eof = cli("node", "reset", f"{label}.*", "--skyhook", label)
    assert (eof.code, eof.err) == (1, "reading confirmation: EOF\n")
    done = cli("node", "reset", f"{label}.*", "--skyhook", label, "--confirm")
    assert (
        done.out
        == f'Skyhook: {label}\nNodes to reset (1):\n  - {first} (1 packages)\n\nSuccessfully reset 1 node(s) for Skyhook "{label}"\n'
    )
    annotations, labels, _ = node_meta(core, first)
    assert keys.node_state_key(label) not in annotations
    assert keys.node_status_key(label) not in annotations
    assert keys.node_status_key(label) not in labels


def test_package_status_and_rerun(
    *,
    cli: Cli,
    core: client.CoreV1Api,
    nodes: Callable[[int], list[str]],
    skyhooks: Callable[..., Any],
    label: str,
) -> None:
    first, second = nodes(2)
    skyhooks(
        label,
        {
            "aa": {"version": "1.0.0", "image": "ghcr.io/x/aa"},
            "bb": {"version": "2.0.0", "image": "ghcr.io/x/bb"},
        },
    )
    annotate(
        core,
        first,
        {
            keys.node_state_key(label): node_state(
                aa=("1.0.0", "config", "complete"), bb=("2.0.0", "config", "complete")
            )
        },
    )
    annotate(
        core, second, {keys.node_state_key(label): node_state(aa=("1.0.0", "apply", "erroring", 2))}
    )

    status = cli("package", "status", "aa", "--skyhook", label)
    width = len(second) + 2
    assert status.out == (
        f"Skyhook: {label}\nPackages: aa:1.0.0, bb:2.0.0\n\n"
        f"{'NODE'.ljust(width)}PACKAGE  VERSION  STAGE   STATE\n{'----'.ljust(width)}-------  -------  -----   -----\n"
        f"{first.ljust(width)}aa       1.0.0    config  complete\n{second.ljust(width)}aa       1.0.0    apply   erroring\n"
    )
    as_json = json.loads(
        cli("package", "status", "aa", "--skyhook", label, "--node", second, "-o", "json").out
    )
    assert as_json == [
        {
            "name": "aa",
            "version": "1.0.0",
            "image": "ghcr.io/x/aa",
            "stage": "apply",
            "state": "erroring",
            "restarts": 2,
            "nodeName": second,
        }
    ]
    assert (
        cli("package", "status", "zz", "--skyhook", label).out
        == f'No package status found for skyhook "{label}"\n'
    )
    missing = cli("package", "status", "aa", "--skyhook", "no-such-skyhook")
    assert (missing.code, missing.err.startswith('getting skyhook "no-such-skyhook": ')) == (
        1,
        True,
    )

    assert (
        cli("package", "rerun", "zz", "--skyhook", label, "--node", first).err
        == f'package "zz" not found in skyhook "{label}"\n'
    )
    assert (
        cli("package", "rerun", "aa", "--skyhook", label, "--node", "nothing").out
        == "No nodes matched the specified patterns\n"
    )
    assert (
        cli("package", "rerun", "bb", "--skyhook", label, "--node", second).out
        == 'Package "bb" (version 2.0.0) has no state on matched nodes\n'
    )
    dry = cli(
        "package",
        "rerun",
        "aa",
        "--skyhook",
        label,
        "--node",
        f"{label}.*",
        "--stage",
        "config",
        "--dry-run",
    )
    assert dry.out == (
        f"Package: aa (version 1.0.0)\nSkyhook: {label}\nRe-run from stage: config\nNodes to reset (2):\n"
        f"  - {first} (current state: complete, stage: config)\n  - {second} (current state: erroring, stage: apply)\n\n[dry-run] No changes applied\n"
    )
    staged = cli(
        "package",
        "rerun",
        "aa",
        "--skyhook",
        label,
        "--node",
        second,
        "--stage",
        "config",
        stdin="y\n",
    )
    assert staged.out.endswith(
        "\nThis will reset package state to re-run from the 'config' stage.\nContinue? [y/N]: \nSuccessfully reset package \"aa\" on 1 node(s)\n"
    )
    state = json.loads(node_meta(core, second)[0][keys.node_state_key(label)])
    assert state["aa|1.0.0"] == {
        "name": "aa",
        "version": "1.0.0",
        "image": "ghcr.io/x/aa",
        "stage": "config",
        "state": "in_progress",
    }  # a fresh retry budget: no failed attempts (restarts 0, left out)

    removed = cli(
        "package", "rerun", "aa", "--skyhook", label, "--node", first, "--node", second, "-y"
    )
    assert removed.out.endswith('\nSuccessfully reset package "aa" on 2 node(s)\n')
    assert json.loads(node_meta(core, first)[0][keys.node_state_key(label)]) == json.loads(
        node_state(bb=("2.0.0", "config", "complete"))
    )
    assert (
        keys.node_state_key(label) not in node_meta(core, second)[0]
    )  # the last entry: annotation gone


def test_package_logs(
    *, cli: Cli, core: client.CoreV1Api, nodes: Callable[[int], list[str]], label: str
) -> None:
    (node,) = nodes(1)

    def stage_pod(name: str, package: str, version: str, text: str) -> None:
        core.create_namespaced_pod(
            NAMESPACE,
            {
                "metadata": {
                    "name": name,
                    "labels": {keys.NAME_LABEL: label, keys.PACKAGE_LABEL: f"{package}-{version}"},
                },
                "spec": {
                    "nodeName": node,
                    "restartPolicy": "Never",
                    "initContainers": [
                        {
                            "name": f"{package}-init",
                            "image": "debian",
                            "command": ["sh", "-c", "echo copying"],
                        },
                        {
                            "name": f"{package}-apply",
                            "image": "debian",
                            "command": ["sh", "-c", f"echo {text}"],
                        },
                        {
                            "name": f"{package}-applycheck",
                            "image": "debian",
                            "command": ["sh", "-c", f"echo {text} checked"],
                        },
                    ],
                    "containers": [
                        {"name": "pause", "image": "debian", "command": ["sh", "-c", "true"]}
                    ],
                },
            },
        )

    def interrupt_pod(name: str, package: str, text: str) -> None:
        """As the operator builds it: one container named for the interrupt, and the stage in
        the package annotation."""
        annotation = PodPackage(package, "1.0.0", label, "interrupt", "ghcr.io/x/" + package)
        core.create_namespaced_pod(
            NAMESPACE,
            {
                "metadata": {
                    "name": name,
                    "labels": {
                        keys.NAME_LABEL: label,
                        keys.PACKAGE_LABEL: f"{package}-1.0.0",
                        keys.INTERRUPT_LABEL: "True",
                    },
                    "annotations": {keys.PACKAGE_ANNOTATION: annotation.to_json()},
                },
                "spec": {
                    "nodeName": node,
                    "restartPolicy": "Never",
                    "initContainers": [
                        {
                            "name": INTERRUPT_CONTAINER,
                            "image": "debian",
                            "command": ["sh", "-c", f"echo {text}"],
                        }
                    ],
                    "containers": [
                        {"name": "pause", "image": "debian", "command": ["sh", "-c", "true"]}
                    ],
                },
            },
        )

    assert (
        cli("package", "logs", "foo", "--skyhook", label).out
        == f'No pods found for skyhook "{label}" in namespace "{NAMESPACE}"\n'
    )
    stage_pod(f"{label}-foo", "foo", "1.0.0", "hello-foo")
    stage_pod(f"{label}-foobar", "foo-bar", "1.0.0", "hello-foo-bar")
    try:

        def finished(count: int) -> bool:
            pods = core.list_namespaced_pod(
                NAMESPACE, label_selector=f"{keys.NAME_LABEL}={label}"
            ).items
            return len(pods) == count and all(
                p.status.phase in ("Succeeded", "Failed") for p in pods
            )

        wait_for(lambda: finished(2), 60, "both stage pods to finish")
        shown = cli("package", "logs", "foo", "--skyhook", label)
        assert shown.code == 0, shown.err
        assert shown.out == (
            f"=== Container: foo-apply ===\n==> Pod: {label}-foo, Container: foo-apply [Completed], Node: {node} <==\nhello-foo\n"
            f"\n=== Container: foo-applycheck ===\n==> Pod: {label}-foo, Container: foo-applycheck [Completed], Node: {node} <==\nhello-foo checked\n"
        )
        staged = cli(
            "package",
            "logs",
            "foo-bar",
            "--skyhook",
            label,
            "--stage",
            "apply",
            "--node",
            node,
            "--tail",
            "1",
        )
        assert (
            staged.out
            == f"==> Pod: {label}-foobar, Container: foo-bar-apply [Completed], Node: {node} <==\nhello-foo-bar\n"
        )
        # The interrupt pod's logs, by the stage its annotation records.
        interrupt_pod(f"{label}-foo-interrupt", "foo", "rebooting")
        wait_for(lambda: finished(3), 60, "the interrupt pod to finish")
        interrupted = cli("package", "logs", "foo", "--skyhook", label, "--stage", "interrupt")
        assert interrupted.out == (
            f"==> Pod: {label}-foo-interrupt, Container: interrupt [Completed], Node: {node} <==\n"
            "rebooting\n"
        )
        assert (
            cli("package", "logs", "foo", "--skyhook", label, "--node", "elsewhere").out
            == "No pods matched the specified filters\n"
        )
    finally:
        for name in (f"{label}-foo", f"{label}-foobar", f"{label}-foo-interrupt"):
            core.delete_namespaced_pod(name, NAMESPACE, grace_period_seconds=0)


def test_package_status_shows_the_image_selected_for_each_node(
    *,
    cli: Cli,
    core: client.CoreV1Api,
    nodes: Callable[[int], list[str]],
    skyhooks: Callable[..., Any],
    label: str,
) -> None:
    (node,) = nodes(1)
    skyhooks(label, {"aa": {"version": "1.0.0", "image": "ghcr.io/x/aa"}})
    chosen = {
        "image": "ghcr.io/x/aa:1.0.0-ubuntu22",
        "matched": "compatibilities[0] (Ubuntu 22.04)",
    }
    annotate(
        core,
        node,
        {
            keys.node_state_key(label): node_state(aa=("1.0.0", "config", "complete")),
            keys.image_selection_key(label): json.dumps({"aa": chosen}),
        },
    )
    wide = cli("package", "status", "aa", "--skyhook", label, "-o", "wide").out
    assert wide.splitlines()[-1].split()[-1] == "ghcr.io/x/aa:1.0.0-ubuntu22"
    (row,) = json.loads(cli("package", "status", "aa", "--skyhook", label, "-o", "json").out)
    assert (row["image"], row["selectedImage"], row["matchedCandidate"]) == (
        "ghcr.io/x/aa",
        "ghcr.io/x/aa:1.0.0-ubuntu22",
        "compatibilities[0] (Ubuntu 22.04)",
    )


def test_cluster_and_user_flags_pick_from_the_kubeconfig(
    *,
    sandbox: Any,
    tmp_path: Any,
    core: client.CoreV1Api,
    nodes: Callable[[int], list[str]],
    label: str,
) -> None:
    """A kubeconfig whose current context names an unreachable cluster and an unknown user:
    --cluster and --user pick the sandbox's, as kubectl does; answers come compressed or,
    with --disable-compression, not."""
    (node,) = nodes(1)
    state = node_state(aa=("1.0.0", "config", "complete"))
    annotate(core, node, {keys.node_state_key(label): state})
    config = yaml.safe_load(sandbox.kubeconfig.read_text())
    (real,) = config["clusters"]
    (admin,) = config["users"]
    config["clusters"].append({"name": "gone", "cluster": {"server": "https://127.0.0.1:9"}})
    config["users"].append({"name": "nobody", "user": {"token": "not-a-token"}})
    config["contexts"] = [{"name": "stale", "context": {"cluster": "gone", "user": "nobody"}}]
    config["current-context"] = "stale"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))

    def run(*flags: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "skyhook_cli", "--kubeconfig", str(path), *flags]
        command += ["node", "list", "--skyhook", label]
        return subprocess.run(command, capture_output=True, text=True, timeout=120)

    unreachable = run()
    assert unreachable.returncode == 1 and "127.0.0.1" in unreachable.stderr
    refused = run("--cluster", real["name"])
    assert refused.returncode == 1 and "Unauthorized" in refused.stderr, refused.stderr
    for extra in ((), ("--disable-compression",)):
        found = run("--cluster", real["name"], "--user", admin["name"], *extra)
        assert found.returncode == 0, found.stderr
        assert f"{node}  complete  1/1" in found.stdout, found.stdout
