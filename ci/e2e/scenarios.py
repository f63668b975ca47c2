"""The end-to-end scenarios, and the runner that plays them on any cluster through kubectl.

One list, run by both `ci/e2e-kind` (a kind cluster with the helm chart installed) and the
operator's sandbox integration suite (operator/tests/integration/test_shared_scenarios.py), so
the two cannot drift. The runner touches the cluster only through the Kubernetes API with the
kubeconfig it is given, and judges only what the API shows: the Skyhook's status and
conditions (every version of them, once recorded), admission refusals, the nodes'
`nodeState_<scr>` annotations, `status_<scr>` labels, taints and cordon, and stage pods.

Nodes under test are those labelled `skyhook.nvidia.com/test-node=demo` (kind's workers, the
sandbox test's nodes); a scenario may label, taint or corrupt one of them for a while. Each
scenario deletes what it created and undoes those edits when it passes; a failing one leaves
everything in place for diagnostics and stops the run.

    python3 ci/e2e/scenarios.py list                    name and summary of each scenario
    python3 ci/e2e/scenarios.py images [--kubeconfig K] image:version of every package used
    python3 ci/e2e/scenarios.py run [--kubeconfig K] [--timeout S] [NAME ...]

Standard library only (the e2e machine needs just python3 besides docker, kind, kubectl, helm).
The judging functions are pure, in scenario_judging.py beside this file, so ci/tests can
exercise them on recorded objects.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scenario_judging import (  # the pure judging, beside this file
    GROUP,
    NODE_LABEL,
    NODE_LABEL_VALUE,
    WORKLOAD_LABEL,
    Obj,
    Recording,
    boot_id_problems,
    by_name,
    completion_problems,
    condition_problems,
    condition_seen,
    drain_blocked_problems,
    drain_problems,
    history_problems,
    leftover_problems,
    mirror_problems,
    never_cordoned,
    no_condition,
    no_drain_blocked,
    node_order_problems,
    node_priority_problems,
    peak_in_progress,
    progress_problems,
    reboot_problems,
    stage_problems,
    status_is,
    status_problems,
    under_test,
)

API_VERSION = f"{GROUP}/v1alpha1"
# What a scenario may create, as kubectl names the resource (clean-up deletes it).
RESOURCES = {
    "Skyhook": f"skyhooks.{GROUP}",
    "DeploymentPolicy": f"deploymentpolicies.{GROUP}",
    "NodeWright": "nodewrights.nodewright.nvidia.com",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies.admissionregistration.k8s.io",
    "ValidatingAdmissionPolicyBinding": (
        "validatingadmissionpolicybindings.admissionregistration.k8s.io"
    ),
}
SHELLSCRIPT = "ghcr.io/nvidia/skyhook-packages/shellscript"
# Workload pods: kind's nodes hold this image already; the sandbox runs it as a pause.
WORKLOAD_IMAGE = "registry.k8s.io/pause:3.10"
WORKLOAD_NAMESPACE = "default"
REPO = Path(__file__).resolve().parents[2]
DEMO_SCR = REPO / "dev" / "src" / "skyhook_dev" / "demo-scr.yaml"


# --- the scenario vocabulary -------------------------------------------------------------


@dataclass(frozen=True)
class Apply:
    """`kubectl apply` a manifest (a dict) or a file (a path relative to the repository)."""

    manifest: Obj | str


@dataclass(frozen=True)
class Refused:
    """`kubectl apply` must fail with a message holding every string of `naming`, and the
    object must not exist afterwards (or, when it existed, keep its spec)."""

    manifest: Obj
    naming: tuple[str, ...]


@dataclass(frozen=True)
class Patch:
    """A JSON merge patch of a Skyhook."""

    scr: str
    patch: Obj


@dataclass(frozen=True)
class Record:
    """From now on, keep every stage pod of `scr`, every version of the nodes under test and
    every version of the Skyhook itself."""

    scr: str


@dataclass(frozen=True)
class Complete:
    """Wait until the Skyhook says complete and every node under test it selects has exactly
    the Skyhook's packages (none of those it uninstalls), each complete, status label complete,
    no taint of ours, no cordon."""

    scr: str


@dataclass(frozen=True)
class OnlyStages:
    """Since `Record`, every node under test ran a pod of each of `stages` and no other stage
    (waits until each node's pods were seen, then until complete)."""

    scr: str
    stages: tuple[str, ...]


@dataclass(frozen=True)
class AtMostAtOnce:
    """Since `Record`, never more than `count` nodes were in progress at the same time."""

    scr: str
    count: int


@dataclass(frozen=True)
class Delete:
    """Delete a Skyhook and wait until it is gone (its finalizer ran); with `wait=False` only
    ask for the deletion."""

    scr: str
    wait: bool = True


@dataclass(frozen=True)
class Clean:
    """Nothing of the deleted Skyhook is left (node keys, conditions, taints, cordon, pods,
    ConfigMaps) but, on every node, the record of the packages still installed (`kept`: the
    entries its nodeState still lists, those whose uninstall is not enabled)."""

    scr: str
    kept: tuple[str, ...] = ()


@dataclass(frozen=True)
class Ran:
    """Since `Record`, every node under test ran a pod of each of `stages` and, once they all
    did, no pod of another stage (for a Skyhook that may be gone, so no wait for complete)."""

    scr: str
    stages: tuple[str, ...]


@dataclass(frozen=True)
class Started:
    """Wait until, since `Record`, every node under test ran a pod of each of `stages`."""

    scr: str
    stages: tuple[str, ...]


@dataclass(frozen=True)
class Expect:
    """Wait until `judge(skyhook, nodes under test)` finds no problem."""

    scr: str
    judge: Callable[[Obj, Sequence[Obj]], list[str]]
    what: str


@dataclass(frozen=True)
class Recorded:
    """Judge what `Record` kept: `judge(Recording, nodes under test now)` must find no
    problem (checked once, when the step runs)."""

    scr: str
    judge: Callable[[Recording, Sequence[Obj]], list[str]]
    what: str


@dataclass(frozen=True)
class Gone:
    """Wait until the Skyhook no longer exists (after `Delete(..., wait=False)`)."""

    scr: str


@dataclass(frozen=True)
class Label:
    """Set (or with None remove) a label on the `node`-th node under test, in name order;
    clean-up removes what the scenario set."""

    node: int
    key: str
    value: str | None


@dataclass(frozen=True)
class Taint:
    """Add (`present`) or remove a NoSchedule taint `key` on the `node`-th node under test;
    clean-up removes what the scenario added."""

    node: int
    key: str
    present: bool = True


@dataclass(frozen=True)
class Corrupt:
    """Overwrite the `node`-th node's `nodeState_<scr>` annotation with text that is not JSON,
    keeping the old value for `Repair` (and clean-up)."""

    scr: str
    node: int


@dataclass(frozen=True)
class Repair:
    """Put back the annotation `Corrupt` overwrote."""

    scr: str
    node: int


@dataclass(frozen=True)
class Workload:
    """A pod labelled `WORKLOAD_LABEL=name` in the default namespace on the `node`-th node
    under test: a ReplicaSet's (`controller`) or a bare one. The runner binds it there as the
    scheduler would (a cluster with a scheduler may have done so already) and waits until it
    runs; from the first `Workload` on every version of these pods is recorded; clean-up
    deletes them."""

    name: str
    node: int
    controller: bool = False


@dataclass(frozen=True)
class Unblock:
    """Delete the pods of workload `name` by hand (not an eviction)."""

    name: str


Step = (
    Apply | Refused | Patch | Record | Complete | OnlyStages | AtMostAtOnce | Delete | Clean
    | Ran | Started | Expect | Recorded | Gone | Label | Taint | Corrupt | Repair | Workload
    | Unblock
)  # fmt: skip


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    steps: tuple[Step, ...]


def shellscript_scr(name: str, version: str, marker: str, **spec: Any) -> dict[str, Any]:
    """A Skyhook whose one shellscript package appends a line per step to `marker` on the host
    and checks it; quick (no sleeps) so the scenarios stay short."""
    return skyhook(name, {"hello": package(version, marker)}, **spec)


def skyhook(name: str, packages: Mapping[str, Any], **spec: Any) -> dict[str, Any]:
    """A Skyhook of `packages` on the nodes under test; `annotations` go in its metadata."""
    metadata: dict[str, Any] = {"name": name}
    if "annotations" in spec:
        metadata["annotations"] = spec.pop("annotations")
    selector = {NODE_LABEL: NODE_LABEL_VALUE, **spec.pop("labels", {})}
    return {
        "apiVersion": API_VERSION,
        "kind": "Skyhook",
        "metadata": metadata,
        "spec": {"nodeSelectors": {"matchLabels": selector}, "packages": dict(packages), **spec},
    }


def package(
    version: str, marker: str, *, uninstall_sleep: int = 0, **fields: Any
) -> dict[str, Any]:
    """A shellscript package: apply and config append a line to `marker` on the host and check
    it; uninstall (after `uninstall_sleep` seconds) removes it, failing with $UNINSTALL_EXIT
    when the package's env sets it, and uninstall-check checks it is gone."""
    scripts = {}
    for step in ("apply", "config"):
        scripts[f"{step}.sh"] = f"#!/bin/bash\necho {step} >> {marker}\n"
        scripts[f"{step}_check.sh"] = f"#!/bin/bash\ngrep -q {step} {marker}\n"
    if "uninstall" in fields:
        pause = f"sleep {uninstall_sleep}\n" if uninstall_sleep else ""
        scripts["uninstall.sh"] = (
            f"#!/bin/bash\n{pause}exit_code=${{UNINSTALL_EXIT:-0}}\n"
            f'[ "$exit_code" = 0 ] || exit "$exit_code"\nrm -f {marker}\n'
        )
        scripts["uninstall_check.sh"] = f"#!/bin/bash\ntest ! -e {marker}\n"
    return {"version": version, "image": SHELLSCRIPT, "configMap": scripts, **fields}


def _invalid_scr() -> dict[str, Any]:
    scr = shellscript_scr("e2e-invalid", "1.1.1", "/skyhook-e2e-invalid")
    scr["spec"]["packages"]["hello"]["dependsOn"] = {"absent": "1.0.0"}
    return scr


POLICY: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "DeploymentPolicy",
    "metadata": {"name": "e2e-one-at-a-time"},
    "spec": {"default": {"budget": {"count": 1}, "strategy": {"fixed": {}}}},
}

# --- upstream's newest behaviours: explicit uninstall, its admission gates, sequencing, node
# order, malformed node state, blocked deletion, and the status as a user reads it.

ENABLED = {"enabled": True, "apply": False}
APPLY = {"enabled": True, "apply": True}
PAUSE = f"{GROUP}/pause"
DISABLE = f"{GROUP}/disable"
GATE_LABEL = f"{GROUP}/e2e-gate"


def uninstall_apply(*names: str, apply: bool = True) -> dict[str, Any]:
    """A merge patch setting `uninstall.apply` on the named packages."""
    return {"spec": {"packages": {n: {"uninstall": {"apply": apply}} for n in names}}}


def _mixed() -> dict[str, Any]:
    return skyhook(
        "e2e-mixed",
        {
            "plain": package("1.1.1", "/skyhook-e2e-plain", uninstall=ENABLED),
            "noop": package(
                "1.1.1", "/skyhook-e2e-noop", uninstall=ENABLED, interrupt={"type": "noop"}
            ),
            "kept": package("1.1.1", "/skyhook-e2e-kept"),
        },
        # One node cordoned and drained at a time, so on kind an operator pod drained off a
        # worker always has the other one to go to.
        interruptionBudget={"count": 1},
    )


def _mixed_history(recording: Recording, nodes: Sequence[Obj]) -> list[str]:
    names = sorted(n["metadata"]["name"] for n in nodes)
    return (
        never_cordoned(recording, names)
        + condition_seen(recording, "UninstallInProgress", "UninstallInProgress")
        # the first rollout retired both nodes from nodePriority: this one numbers on from 2
        + node_order_problems(recording, names, offset=2)
    )


def _gated(version: str, uninstall: Mapping[str, bool]) -> dict[str, Any]:
    return skyhook(
        "e2e-gates",
        {
            "hello": package(version, "/skyhook-e2e-gates", uninstall=dict(uninstall)),
            "other": package("1.1.1", "/skyhook-e2e-gates-other"),
        },
    )


def _sequenced(name: str, priority: int, **spec: Any) -> dict[str, Any]:
    return skyhook(name, {"hello": package("1.1.1", f"/skyhook-{name}")}, priority=priority, **spec)


def workload_manifest(name: str, node: str, controller: bool) -> dict[str, Any]:
    """A pause pod meant for `node` (its hostname label), bare or as a one-pod ReplicaSet."""
    labels = {WORKLOAD_LABEL: name}
    spec = {
        "nodeSelector": {"kubernetes.io/hostname": node},
        "terminationGracePeriodSeconds": 5,
        "containers": [{"name": "pause", "image": WORKLOAD_IMAGE}],
    }
    metadata = {"name": name, "namespace": WORKLOAD_NAMESPACE, "labels": labels}
    if not controller:
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    template = {"metadata": {"labels": labels}, "spec": spec}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": metadata,
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": template},
    }


REBOOT_STAND_IN = "/usr/local/sbin/reboot"


def _interrupt_package(marker: str) -> dict[str, Any]:
    """A package with a reboot interrupt whose `reboot` is its own: apply puts a stand-in
    ahead of the host's on PATH that only records the call in `marker`, so the drain
    scenarios play the whole interrupt path (cordon, drain, the interrupt pod with the reboot
    payload, post-interrupt) without a reboot each. Post-interrupt checks the stand-in was
    called and removes it. `reboot-interrupt` reboots for real (`_reboot_package`)."""
    found = package("1.1.1", marker, interrupt={"type": "reboot"})
    scripts = found["configMap"]
    scripts["apply.sh"] += (
        f"mkdir -p {REBOOT_STAND_IN.rsplit('/', 1)[0]}\n"
        f"printf '#!/bin/sh\\necho reboot >> {marker}\\n' > {REBOOT_STAND_IN}\n"
        f"chmod 755 {REBOOT_STAND_IN}\n"
    )
    scripts["apply_check.sh"] += f"test -x {REBOOT_STAND_IN}\n"
    scripts["post_interrupt.sh"] = (
        f"#!/bin/bash\ngrep -qx reboot {marker} && rm -f {REBOOT_STAND_IN}\n"
    )
    scripts["post_interrupt_check.sh"] = f"#!/bin/bash\ntest ! -e {REBOOT_STAND_IN}\n"
    return found


def _reboot_package(marker: str) -> dict[str, Any]:
    """A package whose reboot interrupt reboots the node; post-interrupt appends a line to
    `marker`, as apply and config do, and checks it."""
    found = package("1.1.1", marker, interrupt={"type": "reboot"})
    found["configMap"]["post_interrupt.sh"] = f"#!/bin/bash\necho post-interrupt >> {marker}\n"
    found["configMap"]["post_interrupt_check.sh"] = (
        f"#!/bin/bash\ngrep -q post-interrupt {marker}\n"
    )
    return found


def _first_node(nodes: Sequence[Obj]) -> str:
    return str(by_name(nodes)[0]["metadata"]["name"])


def _node_order(recording: Recording, nodes: Sequence[Obj]) -> list[str]:
    names = sorted(n["metadata"]["name"] for n in nodes)
    return node_order_problems(recording, names) + node_priority_problems(recording, len(names))


UPSTREAM_HEAD: tuple[Scenario, ...] = (
    Scenario(
        "uninstall-mixed-packages",
        "uninstall.apply on two of three packages removes them (the one with an interrupt "
        "cordoned, uninstall-interrupt run) and keeps the third",
        (
            Apply(_mixed()),
            Complete("e2e-mixed"),
            Record("e2e-mixed"),
            Patch("e2e-mixed", uninstall_apply("plain", "noop")),
            OnlyStages("e2e-mixed", ("uninstall", "uninstall-interrupt")),
            Recorded(
                "e2e-mixed",
                _mixed_history,
                "every node cordoned for the interrupt, UninstallInProgress shown meanwhile, "
                "SKYHOOK_NODE_ORDER 2 and 3 on uninstall and uninstall-interrupt pods",
            ),
            Expect(
                "e2e-mixed",
                lambda scr, nodes: (
                    no_condition(scr, "UninstallInProgress") + mirror_problems(scr, nodes)
                ),
                "UninstallInProgress gone, status mirrors the nodes",
            ),
        ),
    ),
    Scenario(
        "uninstall-cancel",
        "uninstall.apply back to false while uninstalling installs the package again",
        (
            Apply(
                skyhook(
                    "e2e-cancel",
                    {
                        "hello": package(
                            "1.1.1", "/skyhook-e2e-cancel", uninstall=ENABLED, uninstall_sleep=5
                        )
                    },
                )
            ),
            Complete("e2e-cancel"),
            Record("e2e-cancel"),
            Patch("e2e-cancel", uninstall_apply("hello")),
            Started("e2e-cancel", ("uninstall",)),
            Patch("e2e-cancel", uninstall_apply("hello", apply=False)),
            OnlyStages("e2e-cancel", ("uninstall", "apply", "config")),
        ),
    ),
    Scenario(
        "uninstall-fix-failing",
        "a failing uninstall shows UninstallFailed; fixing the package's env finishes it",
        (
            Apply(
                skyhook(
                    "e2e-fix",
                    {
                        "hello": package(
                            "1.1.1",
                            "/skyhook-e2e-fix",
                            uninstall=ENABLED,
                            env=[{"name": "UNINSTALL_EXIT", "value": "3"}],
                        )
                    },
                )
            ),
            Complete("e2e-fix"),
            Patch("e2e-fix", uninstall_apply("hello")),
            Expect(
                "e2e-fix",
                lambda scr, nodes: (
                    condition_problems(scr, "UninstallFailed", "UninstallPodFailing")
                    + condition_problems(scr, "UninstallInProgress", "UninstallInProgress")
                ),
                "UninstallFailed and UninstallInProgress",
            ),
            Patch(
                "e2e-fix",
                {
                    "spec": {
                        "packages": {"hello": {"env": [{"name": "UNINSTALL_EXIT", "value": "0"}]}}
                    }
                },
            ),
            Complete("e2e-fix"),
            Expect(
                "e2e-fix",
                lambda scr, nodes: (
                    no_condition(scr, "UninstallFailed") + no_condition(scr, "UninstallInProgress")
                ),
                "UninstallFailed and UninstallInProgress gone",
            ),
        ),
    ),
    Scenario(
        "uninstall-on-delete",
        "deleting a Skyhook uninstalls its uninstall-enabled package from every node first",
        (
            Apply(
                skyhook(
                    "e2e-ondelete",
                    {
                        "hello": package("1.1.1", "/skyhook-e2e-ondelete", uninstall=ENABLED),
                        "kept": package("1.1.1", "/skyhook-e2e-ondelete-kept"),
                    },
                )
            ),
            Complete("e2e-ondelete"),
            Record("e2e-ondelete"),
            Delete("e2e-ondelete"),
            Ran("e2e-ondelete", ("uninstall",)),
            Clean("e2e-ondelete", kept=("kept|1.1.1",)),
        ),
    ),
    Scenario(
        "uninstall-gates-removal-and-downgrade",
        "removing or downgrading an uninstall-enabled package still installed is refused "
        "naming the field; after uninstall.apply the downgrade goes through",
        (
            Apply(_gated("1.1.1", ENABLED)),
            Complete("e2e-gates"),
            Refused(
                skyhook("e2e-gates", {"other": package("1.1.1", "/skyhook-e2e-gates-other")}),
                ("spec.packages.hello", "uninstall.apply=true"),
            ),
            Refused(_gated("1.1.0", ENABLED), ("spec.packages.hello.version", "downgrade")),
            Patch("e2e-gates", uninstall_apply("hello")),
            Complete("e2e-gates"),
            Expect("e2e-gates", mirror_problems, "status mirrors the uninstalled nodes"),
            Apply(_gated("1.1.0", ENABLED)),
            Complete("e2e-gates"),
        ),
    ),
    Scenario(
        "delete-blocked-paused-or-disabled",
        "deleting a paused, then disabled, Skyhook with an enabled package installed waits "
        "with DeletionBlocked; re-enabled, it uninstalls and goes",
        (
            Apply(
                skyhook(
                    "e2e-blocked",
                    {
                        "hello": package("1.1.1", "/skyhook-e2e-blocked", uninstall=ENABLED),
                    },
                )
            ),
            Complete("e2e-blocked"),
            Patch("e2e-blocked", {"metadata": {"annotations": {PAUSE: "true"}}}),
            Delete("e2e-blocked", wait=False),
            Expect(
                "e2e-blocked",
                lambda scr, nodes: condition_problems(
                    scr, "DeletionBlocked", "PausedWithPendingUninstall"
                ),
                "DeletionBlocked while paused",
            ),
            Patch("e2e-blocked", {"metadata": {"annotations": {PAUSE: None, DISABLE: "true"}}}),
            Expect(
                "e2e-blocked",
                lambda scr, nodes: condition_problems(
                    scr, "DeletionBlocked", "DisabledWithPendingUninstall"
                ),
                "DeletionBlocked while disabled",
            ),
            Patch("e2e-blocked", {"metadata": {"annotations": {DISABLE: None}}}),
            Gone("e2e-blocked"),
            Clean("e2e-blocked"),
        ),
    ),
    Scenario(
        "malformed-node-state",
        "a nodeState annotation that is not JSON sets NodeStateMalformed (ParseError); "
        "repaired, the condition goes",
        (
            Apply(shellscript_scr("e2e-malformed", "1.1.1", "/skyhook-e2e-malformed")),
            Complete("e2e-malformed"),
            Corrupt("e2e-malformed", 0),
            Expect(
                "e2e-malformed",
                lambda scr, nodes: condition_problems(
                    scr, "NodeStateMalformed", "ParseError", ("cannot be parsed on 1 node(s)",)
                ),
                "NodeStateMalformed",
            ),
            Repair("e2e-malformed", 0),
            Expect(
                "e2e-malformed",
                lambda scr, nodes: (
                    no_condition(scr, "NodeStateMalformed") + completion_problems(scr, nodes)
                ),
                "NodeStateMalformed gone, still complete",
            ),
        ),
    ),
    Scenario(
        "sequencing-all-then-node",
        "behind an unfinished sequencing: all Skyhook no node starts a later one, even a "
        "node the gate does not select; with sequencing: node only the gate's nodes wait",
        (
            Label(0, GATE_LABEL, "yes"),
            Apply(
                _sequenced(
                    "e2e-gate",
                    1,
                    sequencing="all",
                    labels={GATE_LABEL: "yes"},
                    annotations={PAUSE: "true"},
                )
            ),
            Apply(_sequenced("e2e-after", 2)),
            Expect(
                "e2e-after",
                lambda scr, nodes: (
                    status_is(scr, "waiting")
                    + progress_problems("e2e-after", nodes, (False, False))
                ),
                "e2e-after waiting on every node",
            ),
            Patch("e2e-gate", {"spec": {"sequencing": "node"}}),
            Expect(
                "e2e-after",
                lambda scr, nodes: progress_problems("e2e-after", nodes, (False, True)),
                "e2e-after complete on the node the gate does not select, and only there",
            ),
            Patch("e2e-gate", {"metadata": {"annotations": {PAUSE: None}}}),
            Complete("e2e-gate"),
            Complete("e2e-after"),
            Label(0, GATE_LABEL, None),
        ),
    ),
    Scenario(
        "node-order",
        "stage pods carry SKYHOOK_NODE_ORDER 0, 1 in the order nodes start, the same on every "
        "pod of a node; status.nodePriority while running, nodeOrderOffset 2 at the end",
        (
            Apply(POLICY),
            Record("e2e-order"),
            Apply(
                shellscript_scr(
                    "e2e-order",
                    "1.1.1",
                    "/skyhook-e2e-order",
                    deploymentPolicy=POLICY["metadata"]["name"],
                )
            ),
            Complete("e2e-order"),
            Recorded("e2e-order", _node_order, "node order"),
        ),
    ),
    Scenario(
        "status-mirror",
        "the status as a user reads it: NodesIgnored and TaintNotTolerable (bare and "
        "prefixed) while nodes are skipped, then every version consistent through "
        "in_progress to complete, Ready NodesConverged, nodeState/nodeStatus/nodeBootIds",
        (
            Taint(0, "e2e-untolerated"),
            Label(1, f"{GROUP}/ignore", "true"),
            Record("e2e-status"),
            Apply(shellscript_scr("e2e-status", "1.1.1", "/skyhook-e2e-status")),
            Expect(
                "e2e-status",
                lambda scr, nodes: (
                    condition_problems(scr, "NodesIgnored", "NodesIgnored")
                    + condition_problems(scr, f"{GROUP}/NodesIgnored", "NodesIgnored")
                    + condition_problems(scr, "TaintNotTolerable", "TaintNotTolerable")
                    + condition_problems(scr, f"{GROUP}/TaintNotTolerable", "TaintNotTolerable")
                    + status_problems(scr)
                ),
                "both nodes skipped, named by both conditions",
            ),
            Taint(0, "e2e-untolerated", present=False),
            Label(1, f"{GROUP}/ignore", None),
            Complete("e2e-status"),
            Expect(
                "e2e-status",
                lambda scr, nodes: (
                    mirror_problems(scr, nodes)
                    + condition_problems(scr, "Ready", "NodesConverged", ("2/2 nodes complete",))
                    + condition_problems(scr, f"{GROUP}/Ready", "NodesConverged")
                    + no_condition(scr, "NodesIgnored")
                    + no_condition(scr, "TaintNotTolerable")
                ),
                "complete status mirroring the nodes",
            ),
            Recorded(
                "e2e-status",
                lambda rec, nodes: history_problems(rec, ("blocked", "in_progress", "complete")),
                "every recorded status",
            ),
        ),
    ),
)

# --- the drain before an interrupt (upstream's drainConfig and DrainBlocked) -----------------

# Refuses the eviction of one pod, as a policy engine might: the drain must say so, not loop.
REFUSED_POD = "e2e-refused"
REFUSING_POLICY: Obj = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": "e2e-refuse-eviction"},
    "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["pods/eviction"],
                }
            ]
        },
        "validations": [
            {
                "expression": f"object.metadata.name != '{REFUSED_POD}'",
                "message": "refused by e2e-refuse-eviction",
                # 422, not 403: a Forbidden answer in the operator's log fails the run.
                "reason": "Invalid",
            }
        ],
    },
}
REFUSING_BINDING: Obj = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicyBinding",
    "metadata": {"name": "e2e-refuse-eviction"},
    "spec": {"policyName": "e2e-refuse-eviction", "validationActions": ["Deny"]},
}


def _other_group_invalid() -> dict[str, Any]:
    """A NodeWright (the other API group) whose package version is not semver."""
    scr = shellscript_scr("e2e-other-invalid", "latest", "/skyhook-e2e-other-invalid")
    return {**scr, "apiVersion": "nodewright.nvidia.com/v1alpha1", "kind": "NodeWright"}


DRAINS: tuple[Scenario, ...] = (
    Scenario(
        "drain-before-interrupt",
        "an interrupt package's drain evicts a ReplicaSet's pod and a bare pod off the node "
        "(the eviction API, not a delete), and the interrupt starts only once both are gone",
        (
            Workload("e2e-drain-replicated", 0, controller=True),
            Workload("e2e-drain-bare", 0),
            Record("e2e-drain"),
            Apply(skyhook("e2e-drain", {"hello": _interrupt_package("/skyhook-e2e-drain")})),
            Complete("e2e-drain"),
            Recorded(
                "e2e-drain",
                lambda rec, nodes: drain_problems(
                    rec, _first_node(nodes), evicted=("e2e-drain-replicated", "e2e-drain-bare")
                ),
                "both pods evicted and gone before the interrupt",
            ),
        ),
    ),
    Scenario(
        "drain-blocked-by-an-unmanaged-pod",
        "with drainConfig.force false a bare pod blocks the drain: DrainBlocked UnmanagedPod "
        "and the node's drainBlocked annotation name it, it is never evicted; deleted by hand, "
        "both clear and the interrupt runs",
        (
            Workload("e2e-unmanaged", 0),
            Record("e2e-drainblock"),
            Apply(
                skyhook(
                    "e2e-drainblock",
                    {"hello": _interrupt_package("/skyhook-e2e-drainblock")},
                    drainConfig={"force": False},
                )
            ),
            Expect(
                "e2e-drainblock",
                lambda scr, nodes: drain_blocked_problems(
                    scr, by_name(nodes)[0], f"{WORKLOAD_NAMESPACE}/e2e-unmanaged", "UnmanagedPod"
                ),
                "the drain blocked by the bare pod",
            ),
            Unblock("e2e-unmanaged"),
            Complete("e2e-drainblock"),
            Expect("e2e-drainblock", no_drain_blocked, "DrainBlocked and its annotation gone"),
            Recorded(
                "e2e-drainblock",
                lambda rec, nodes: drain_problems(rec, _first_node(nodes), kept=("e2e-unmanaged",)),
                "the bare pod never evicted, gone before the interrupt",
            ),
        ),
    ),
    Scenario(
        "drain-by-delete",
        "with drainConfig.disableEviction the drain deletes a ReplicaSet's pod and a bare pod "
        "(no eviction), under the operator's own account, and the interrupt starts once both "
        "are gone",
        (
            Workload("e2e-delete-replicated", 0, controller=True),
            Workload("e2e-delete-bare", 0),
            Record("e2e-drain-delete"),
            Apply(
                skyhook(
                    "e2e-drain-delete",
                    {"hello": _interrupt_package("/skyhook-e2e-drain-delete")},
                    drainConfig={"disableEviction": True},
                )
            ),
            Complete("e2e-drain-delete"),
            Recorded(
                "e2e-drain-delete",
                lambda rec, nodes: drain_problems(
                    rec, _first_node(nodes), kept=("e2e-delete-replicated", "e2e-delete-bare")
                ),
                "both pods deleted, not evicted, and gone before the interrupt",
            ),
        ),
    ),
    Scenario(
        "drain-eviction-refused",
        "an eviction the apiserver refuses (an admission policy) is a blocked pod: DrainBlocked "
        "EvictionFailed and the node's drainBlocked annotation name it with the answer; "
        "removed by hand, the drain goes on",
        (
            Apply(REFUSING_POLICY),
            Apply(REFUSING_BINDING),
            Workload(REFUSED_POD, 0),
            Record("e2e-drain-refused"),
            Apply(
                skyhook(
                    "e2e-drain-refused",
                    {"hello": _interrupt_package("/skyhook-e2e-drain-refused")},
                )
            ),
            Expect(
                "e2e-drain-refused",
                lambda scr, nodes: (
                    drain_blocked_problems(
                        scr,
                        by_name(nodes)[0],
                        f"{WORKLOAD_NAMESPACE}/{REFUSED_POD}",
                        "EvictionFailed",
                    )
                    + condition_problems(scr, "DrainBlocked", None, ("e2e-refuse-eviction",))
                ),
                "the drain blocked by the refused eviction, with the apiserver's answer",
            ),
            Unblock(REFUSED_POD),
            Complete("e2e-drain-refused"),
            Expect("e2e-drain-refused", no_drain_blocked, "DrainBlocked and its annotation gone"),
        ),
    ),
)

# --- a real reboot ---------------------------------------------------------------------------

# Selects the one node the reboot scenario reboots. A kind node's container is restarted after
# a reboot at most once (kind runs it with --restart=on-failure:1), so the list reboots one.
REBOOT_LABEL = f"{GROUP}/e2e-reboot"

REBOOTS: tuple[Scenario, ...] = (
    Scenario(
        "reboot-interrupt",
        "a reboot interrupt reboots the node: it comes back with a new boot id, once, "
        "post-interrupt runs after that, and the Skyhook completes with the new boot id in "
        "status.nodeBootIds",
        (
            Label(0, REBOOT_LABEL, "yes"),
            Record("e2e-reboot"),
            Apply(
                skyhook(
                    "e2e-reboot",
                    {"hello": _reboot_package("/skyhook-e2e-reboot")},
                    labels={REBOOT_LABEL: "yes"},
                )
            ),
            Complete("e2e-reboot"),
            Recorded(
                "e2e-reboot",
                lambda rec, nodes: reboot_problems(rec, _first_node(nodes)),
                "one reboot, after the interrupt pod and before post-interrupt",
            ),
            Expect(
                "e2e-reboot",
                lambda scr, nodes: boot_id_problems(scr, by_name(nodes)[0]),
                "status.nodeBootIds naming the new boot id",
            ),
        ),
    ),
)

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "demo-rollout",
        "the demo SCR, unchanged, completes on every labelled node",
        (Apply(str(DEMO_SCR.relative_to(REPO))), Complete("demo")),
    ),
    Scenario(
        "config-edit-reruns-config-only",
        "a configMap edit runs the config stage again on every node, and not apply",
        (
            Apply(shellscript_scr("e2e-config", "1.1.1", "/skyhook-e2e-config")),
            Complete("e2e-config"),
            Record("e2e-config"),
            Patch(
                "e2e-config",
                {
                    "spec": {
                        "packages": {
                            "hello": {
                                "configMap": {
                                    "config.sh": "#!/bin/bash\n"
                                    "echo config again >> /skyhook-e2e-config\n"
                                }
                            }
                        }
                    }
                },
            ),
            OnlyStages("e2e-config", ("config",)),
        ),
    ),
    Scenario(
        "version-upgrade",
        "raising the package version completes with only the new version on every node",
        (
            Apply(shellscript_scr("e2e-upgrade", "1.1.0", "/skyhook-e2e-upgrade")),
            Complete("e2e-upgrade"),
            Apply(shellscript_scr("e2e-upgrade", "1.1.1", "/skyhook-e2e-upgrade")),
            Complete("e2e-upgrade"),
        ),
    ),
    Scenario(
        "invalid-scr-refused",
        "kubectl apply of an invalid SCR is refused by the admission webhook naming the field",
        (
            Refused(
                _invalid_scr(),
                (
                    'admission webhook "validate-skyhook.nvidia.com" denied the request',
                    "spec.packages.hello.dependsOn.absent",
                ),
            ),
        ),
    ),
    Scenario(
        "other-group-invalid-refused",
        "kubectl apply of an invalid NodeWright (the other API group) is refused naming the "
        "field, whichever group the operator speaks",
        (
            Refused(
                _other_group_invalid(),
                ("denied the request", "spec.packages.hello.version"),
            ),
        ),
    ),
    Scenario(
        "delete-leaves-nodes-clean",
        "deleting a completed SCR leaves no label, condition, taint or cordon, and only the "
        "record of its package, still installed (its uninstall is not enabled)",
        (
            Apply(shellscript_scr("e2e-delete", "1.1.1", "/skyhook-e2e-delete")),
            Complete("e2e-delete"),
            Delete("e2e-delete"),
            Clean("e2e-delete", kept=("hello|1.1.1",)),
        ),
    ),
    Scenario(
        "policy-rollout",
        "a DeploymentPolicy with budget count 1 rolls out one node at a time to completion",
        (
            Apply(POLICY),
            Record("e2e-policy"),
            Apply(
                shellscript_scr(
                    "e2e-policy",
                    "1.1.1",
                    "/skyhook-e2e-policy",
                    deploymentPolicy=POLICY["metadata"]["name"],
                )
            ),
            Complete("e2e-policy"),
            AtMostAtOnce("e2e-policy", 1),
        ),
    ),
    *UPSTREAM_HEAD,
    *DRAINS,
    *REBOOTS,  # last: a kind node is down for a while and reboots once
)


# --- the cluster, through kubectl -------------------------------------------------------


class StepFailed(Exception):
    pass


@dataclass
class Kubectl:
    kubeconfig: str | None = None

    def argv(self, *args: str) -> list[str]:
        config = ["--kubeconfig", self.kubeconfig] if self.kubeconfig else []
        return ["kubectl", *config, *args]

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), input=stdin, capture_output=True, text=True)

    def ok(self, *args: str, stdin: str | None = None) -> str:
        result = self.run(*args, stdin=stdin)
        if result.returncode != 0:
            raise StepFailed(f"kubectl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.ok(*args, "-o", "json"))

    def raw(self, path: str, **query: str) -> Any:
        return json.loads(self.ok("get", "--raw", f"{path}?{urllib.parse.urlencode(query)}"))


class Watch:
    """Every object of a list path from now on, as `kubectl get --raw` streams a watch that
    starts at the list's resourceVersion (so nothing created after construction is missed)."""

    def __init__(self, kubectl: Kubectl, path: str, **selector: str) -> None:
        version = kubectl.raw(path, **selector)["metadata"]["resourceVersion"]
        query = urllib.parse.urlencode({"watch": "1", "resourceVersion": version, **selector})
        self.what = f"{path} watch ({selector})"
        self.events: list[tuple[str, Obj]] = []
        self._lock = threading.Lock()
        self._process = subprocess.Popen(
            kubectl.argv("get", "--raw", f"{path}?{query}"),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            if line.strip():
                event = json.loads(line)
                with self._lock:
                    self.events.append((event["type"], event["object"]))

    def objects(self, kinds: tuple[str, ...] = ("ADDED", "MODIFIED")) -> list[Obj]:
        """What arrived so far; fails if the watch ended, since events may be missing."""
        return [obj for kind, obj in self.versions() if kind in kinds]

    def versions(self) -> list[tuple[str, Obj]]:
        """(event type, object) of everything that arrived so far; fails as `objects`."""
        if self._process.poll() is not None:
            raise StepFailed(f"the {self.what} ended early")
        with self._lock:
            errors = [obj for kind, obj in self.events if kind == "ERROR"]
            if errors:
                raise StepFailed(f"the {self.what} reported an error: {errors[0]}")
            return list(self.events)

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait()


def wait_for(problems: Callable[[], list[str]], timeout: float, what: str) -> None:
    """Ask until there are no problems; fail naming the last ones when `timeout` passes."""
    deadline = time.monotonic() + timeout
    found = problems()
    while found:
        if time.monotonic() > deadline:
            raise StepFailed(f"{what} not reached in {timeout:.0f}s:\n  " + "\n  ".join(found))
        time.sleep(1)
        found = problems()


@dataclass
class Runner:
    kubectl: Kubectl
    timeout: float = 300
    created: list[tuple[str, str]] = field(default_factory=list)
    pods: dict[str, Watch] = field(default_factory=dict)
    nodes: dict[str, Watch] = field(default_factory=dict)
    skyhooks: dict[str, Watch] = field(default_factory=dict)
    workloads: Watch | None = None  # from the first Workload step on
    # node edits to undo at clean-up: ("label" | "taint", node, key); annotations Corrupt kept
    edits: list[tuple[str, str, str]] = field(default_factory=list)
    corrupted: dict[tuple[str, str], str | None] = field(default_factory=dict)

    def nodes_now(self) -> list[Obj]:
        return list(self.kubectl.json("get", "nodes")["items"])

    def node_names(self) -> list[str]:
        return sorted(n["metadata"]["name"] for n in under_test(self.nodes_now()))

    def scr(self, name: str) -> Obj:
        return dict(self.kubectl.json("get", f"skyhooks.{GROUP}", name))

    def exists(self, name: str) -> bool:
        return self.kubectl.run("get", f"skyhooks.{GROUP}", name).returncode == 0

    def recording(self, scr: str) -> Recording:
        return Recording(
            self.skyhooks[scr].objects(),
            self.pods[scr].objects(("ADDED",)),
            self.nodes[scr].objects(),
            self.workloads.versions() if self.workloads is not None else (),
        )

    def ran(self, scr: str, stages: tuple[str, ...], *, final: bool) -> None:
        names = self.node_names()
        wait_for(
            lambda: stage_problems(self.recording(scr).pods, names, stages, final=False),
            self.timeout,
            f"{'/'.join(stages)} pods of {scr} on every node",
        )
        if final:
            problems = stage_problems(self.recording(scr).pods, names, stages, final=True)
            if problems:
                raise StepFailed(f"only {'/'.join(stages)} pods of {scr}: {problems}")

    def step(self, step: Step) -> None:
        match step:
            case Apply(manifest):
                self.apply(manifest)
            case Refused(manifest, naming):
                self.refused(manifest, naming)
            case Patch(scr, patch):
                self.kubectl.ok(
                    "patch", f"skyhooks.{GROUP}", scr, "--type=merge", "-p", json.dumps(patch)
                )
            case Record(scr):
                selector = f"{NODE_LABEL}={NODE_LABEL_VALUE}"
                self.nodes[scr] = Watch(self.kubectl, "/api/v1/nodes", labelSelector=selector)
                self.pods[scr] = Watch(
                    self.kubectl, "/api/v1/pods", labelSelector=f"{GROUP}/name={scr}"
                )
                self.skyhooks[scr] = Watch(
                    self.kubectl,
                    f"/apis/{API_VERSION}/skyhooks",
                    fieldSelector=f"metadata.name={scr}",
                )
            case Complete(scr):
                wait_for(
                    lambda: completion_problems(self.scr(scr), self.nodes_now()),
                    self.timeout,
                    f"{scr} complete",
                )
            case OnlyStages(scr, stages):
                self.ran(scr, stages, final=False)
                self.step(Complete(scr))
                self.ran(scr, stages, final=True)
            case AtMostAtOnce(scr, count):
                peak = peak_in_progress(scr, self.nodes[scr].objects())
                if peak > count:
                    raise StepFailed(
                        f"{peak} nodes were in progress with {scr} at once (at most {count})"
                    )
            case Delete(scr, wait):
                waiting = ("--wait", f"--timeout={self.timeout}s") if wait else ("--wait=false",)
                self.kubectl.ok("delete", f"skyhooks.{GROUP}", scr, *waiting)
            case Clean(scr, kept):
                wait_for(lambda: self.leftovers(scr, kept), 60, f"nothing of {scr} left")
            case Ran(scr, stages):
                self.ran(scr, stages, final=True)
            case Started(scr, stages):
                self.ran(scr, stages, final=False)
            case Expect(scr, judge, what):
                wait_for(
                    lambda: judge(self.scr(scr), under_test(self.nodes_now())), self.timeout, what
                )
            case Recorded(scr, history, what):
                problems = history(self.recording(scr), under_test(self.nodes_now()))
                if problems:
                    raise StepFailed(f"{what}:\n  " + "\n  ".join(problems))
            case Gone(scr):
                wait_for(
                    lambda: [f"{scr} still exists"] if self.exists(scr) else [],
                    self.timeout,
                    f"{scr} gone",
                )
            case Workload(name, index, controller):
                self.workload(name, self.node_names()[index], controller)
            case Unblock(name):
                selector = f"{WORKLOAD_LABEL}={name}"
                self.kubectl.ok(
                    "delete", "pods", "-n", WORKLOAD_NAMESPACE, "-l", selector, "--wait=false"
                )
            case _:
                self.edit_node(step)

    def edit_node(self, step: Step) -> None:
        match step:
            case Label(index, key, value):
                node = self.node_names()[index]
                change = f"{key}-" if value is None else f"{key}={value}"
                self.kubectl.ok("label", "node", node, change, "--overwrite")
                self.edits.append(("label", node, key))
            case Taint(index, key, present):
                node = self.node_names()[index]
                change = f"{key}=e2e:NoSchedule" if present else f"{key}:NoSchedule-"
                self.kubectl.ok("taint", "node", node, change)
                self.edits.append(("taint", node, key))
            case Corrupt(scr, index):
                node = self.node_names()[index]
                key = f"{GROUP}/nodeState_{scr}"
                found = self.kubectl.json("get", "node", node)["metadata"].get("annotations") or {}
                self.corrupted[(scr, node)] = found.get(key)
                self.kubectl.ok("annotate", "node", node, "--overwrite", f"{key}={{not json")
            case Repair(scr, index):
                node = self.node_names()[index]
                self.repair(scr, node, self.corrupted.pop((scr, node)))

    def workload(self, name: str, node: str, controller: bool) -> None:
        if self.workloads is None:
            path = f"/api/v1/namespaces/{WORKLOAD_NAMESPACE}/pods"
            self.workloads = Watch(self.kubectl, path, labelSelector=WORKLOAD_LABEL)
        manifest = workload_manifest(name, node, controller)
        self.kubectl.ok("create", "-f", "-", stdin=json.dumps(manifest))
        selector = f"{WORKLOAD_LABEL}={name}"

        def pods() -> list[Obj]:
            found = self.kubectl.json("get", "pods", "-n", WORKLOAD_NAMESPACE, "-l", selector)
            return list(found["items"])

        wait_for(lambda: [] if pods() else [f"no pod of {name}"], 60, f"a pod of {name}")
        (pod,) = pods()
        if not pod["spec"].get("nodeName"):
            self.bind(pod["metadata"]["name"], node)
        wait_for(
            lambda: [
                f"{p['metadata']['name']} is {p.get('status', {}).get('phase')}"
                for p in pods()
                if p.get("status", {}).get("phase") != "Running"
            ],
            self.timeout,
            f"the pod of {name} running",
        )

    def bind(self, pod: str, node: str) -> None:
        """As the scheduler does (pods/binding); a scheduler that bound it first is fine."""
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod, "namespace": WORKLOAD_NAMESPACE},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        path = f"/api/v1/namespaces/{WORKLOAD_NAMESPACE}/pods/{pod}/binding"
        result = self.kubectl.run("create", "--raw", path, "-f", "-", stdin=json.dumps(binding))
        if result.returncode != 0 and "already assigned" not in result.stderr:
            raise StepFailed(f"binding {pod} to {node}: {result.stderr.strip()}")

    def apply(self, manifest: Obj | str) -> None:
        if isinstance(manifest, str):
            obj = self.kubectl.json("create", "--dry-run=client", "-f", str(REPO / manifest))
            self.kubectl.ok("apply", "-f", str(REPO / manifest))
        else:
            obj = manifest
            self.kubectl.ok("apply", "-f", "-", stdin=json.dumps(manifest))
        if (obj["kind"], obj["metadata"]["name"]) not in self.created:
            self.created.append((obj["kind"], obj["metadata"]["name"]))

    def repair(self, scr: str, node: str, value: str | None) -> None:
        key = f"{GROUP}/nodeState_{scr}"
        change = f"{key}-" if value is None else f"{key}={value}"
        self.kubectl.ok("annotate", "node", node, "--overwrite", change)

    def refused(self, manifest: Obj, naming: Sequence[str]) -> None:
        name = manifest["metadata"]["name"]
        resource = RESOURCES[manifest["kind"]]
        if manifest["kind"] == "Skyhook" and self.exists(name):
            self.refused_update(manifest, naming)
            return
        result = self.kubectl.run("apply", "-f", "-", stdin=json.dumps(manifest))
        if result.returncode == 0:
            self.created.append((manifest["kind"], name))
            raise StepFailed(f"kubectl apply of {name} was accepted")
        missing = [text for text in naming if text not in result.stderr]
        if missing:
            raise StepFailed(f"refusal of {name} lacks {missing}: {result.stderr.strip()}")
        found = self.kubectl.run("get", resource, name)
        if found.returncode == 0:
            raise StepFailed(f"refused {manifest['kind']} {name} exists anyway")

    def refused_update(self, manifest: Obj, naming: Sequence[str]) -> None:
        name = manifest["metadata"]["name"]
        before = self.scr(name)["spec"]
        result = self.kubectl.run("apply", "-f", "-", stdin=json.dumps(manifest))
        if result.returncode == 0:
            raise StepFailed(f"kubectl apply of the change to {name} was accepted")
        missing = [text for text in naming if text not in result.stderr]
        if missing:
            raise StepFailed(f"refusal of {name} lacks {missing}: {result.stderr.strip()}")
        if self.scr(name)["spec"] != before:
            raise StepFailed(f"the refused change to {name} was stored anyway")

    def leftovers(self, name: str, kept: Sequence[str] = ()) -> list[str]:
        labelled = [
            *self.kubectl.json("get", "pods,configmaps", "-A", "-l", f"{GROUP}/name={name}")[
                "items"
            ],
            *self.kubectl.json(
                "get", "configmaps", "-A", "-l", f"{GROUP}/skyhook-node-meta={name}"
            )["items"],
        ]
        return leftover_problems(name, under_test(self.nodes_now()), labelled, kept)

    def play(self, scenario: Scenario) -> None:
        """Every step in order; raises StepFailed naming the first that failed."""
        for index, step in enumerate(scenario.steps, 1):
            try:
                self.step(step)
            except StepFailed as error:
                raise StepFailed(
                    f"{scenario.name} step {index} ({type(step).__name__}): {error}"
                ) from None

    def clean_up(self) -> None:
        """Stop watches; undo node edits; delete what the scenario created, newest first (a
        Skyhook unpaused and enabled first, so its deletion is not held), and wait."""
        for watch in [*self.pods.values(), *self.nodes.values(), *self.skyhooks.values()]:
            watch.stop()
        if self.workloads is not None:
            self.workloads.stop()
            self.workloads = None
            self.kubectl.ok(
                "delete", "replicasets,pods", "-n", WORKLOAD_NAMESPACE, "-l", WORKLOAD_LABEL,
                "--ignore-not-found", "--wait", f"--timeout={self.timeout}s",
            )  # fmt: skip
        self.pods.clear()
        self.nodes.clear()
        self.skyhooks.clear()
        for (scr, node), value in self.corrupted.items():
            self.repair(scr, node, value)
        self.corrupted.clear()
        for what, node, key in reversed(self.edits):
            change = f"{key}-" if what == "label" else f"{key}:NoSchedule-"
            self.kubectl.run(what, "node", node, change)  # may be gone already
        self.edits.clear()
        for kind, name in reversed(self.created):
            resource = RESOURCES[kind]
            if kind == "Skyhook":
                self.kubectl.run("annotate", resource, name, f"{GROUP}/pause-", f"{GROUP}/disable-")
            self.kubectl.ok(
                "delete", resource, name, "--ignore-not-found", "--wait",
                f"--timeout={self.timeout}s",
            )  # fmt: skip
        self.created.clear()


def scenario_named(name: str) -> Scenario:
    for scenario in SCENARIOS:
        if scenario.name == name:
            return scenario
    names = ", ".join(s.name for s in SCENARIOS)
    raise SystemExit(f"scenarios.py: no scenario {name!r} (there are: {names})")


def package_images(kubectl: Kubectl) -> list[str]:
    """image:version of every package any scenario applies, each once, in order."""
    found: list[str] = []
    for scenario in SCENARIOS:
        for step in scenario.steps:
            if not isinstance(step, Apply):
                continue
            obj = step.manifest
            if isinstance(obj, str):
                obj = kubectl.json("create", "--dry-run=client", "-f", str(REPO / obj))
            packages = (obj.get("spec") or {}).get("packages") or {}
            found += [f"{p['image']}:{p['version']}" for p in packages.values()]
    return list(dict.fromkeys(found))


def arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ci/e2e/scenarios.py", description=__doc__)
    parser.add_argument("command", choices=("list", "images", "run"))
    parser.add_argument("names", nargs="*", help="scenarios to run (default: all)")
    parser.add_argument("--kubeconfig", help="default: kubectl's own ($KUBECONFIG, ~/.kube)")
    parser.add_argument(
        "--timeout", type=float, default=300, help="seconds each wait may take (default 300)"
    )
    # Intermixed: `run --timeout 600 NAME` (ci/e2e-kind's order) keeps NAME among the names.
    return parser.parse_intermixed_args(argv)


def main(argv: Sequence[str]) -> int:
    args = arguments(argv)
    kubectl = Kubectl(args.kubeconfig)
    if args.command == "list":
        for scenario in SCENARIOS:
            print(f"{scenario.name}\t{scenario.summary}")
        return 0
    if args.command == "images":
        print("\n".join(package_images(kubectl)))
        return 0
    runner = Runner(kubectl, timeout=args.timeout)
    for scenario in [scenario_named(n) for n in args.names] or SCENARIOS:
        started = time.monotonic()
        print(f"== scenario {scenario.name}: {scenario.summary}", flush=True)
        try:
            runner.play(scenario)
        except StepFailed as error:
            print(f"FAIL {error}", file=sys.stderr)
            return 1
        runner.clean_up()
        print(f"ok: {scenario.name} ({time.monotonic() - started:.0f}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
