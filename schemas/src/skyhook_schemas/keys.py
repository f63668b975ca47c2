"""Every name Skyhook writes into a cluster, in one table.

These match upstream exactly: an SCR, node or tool written for upstream reads and writes the
same keys. ``<scr>`` below is a Skyhook object's name, verbatim.

Upstream renamed its API group: `skyhook.nvidia.com` (kind `Skyhook`) until v0.17,
`nodewright.nvidia.com` (kind `NodeWright`) from v0.18, with every key below moved to the new
prefix. A process speaks one of them, chosen by `SKYHOOK_API_GROUP` before it starts (default
`skyhook.nvidia.com`): the operator reconciles that group's objects and writes its keys.
"""

from __future__ import annotations

import hashlib
import os
import re
from functools import lru_cache

SKYHOOK_GROUP = "skyhook.nvidia.com"
NODEWRIGHT_GROUP = "nodewright.nvidia.com"
# Per group: the kind, its plural and singular (the singular also names the finalizer).
KINDS = {
    SKYHOOK_GROUP: ("Skyhook", "skyhooks", "skyhook"),
    NODEWRIGHT_GROUP: ("NodeWright", "nodewrights", "nodewright"),
}
API_GROUP_VARIABLE = "SKYHOOK_API_GROUP"


def _spoken_group() -> str:
    group = os.environ.get(API_GROUP_VARIABLE) or SKYHOOK_GROUP
    if group not in KINDS:
        # The process cannot speak any API: say why in one line rather than a traceback.
        raise SystemExit(f"{API_GROUP_VARIABLE}={group!r}: must be one of {', '.join(KINDS)}")
    return group


GROUP = _spoken_group()
# The group this process does not speak: what it carries state over from, and whose default
# runtime-required taint it tolerates and removes too (never applies).
OTHER_GROUP = next(group for group in KINDS if group != GROUP)
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND, PLURAL, SINGULAR = KINDS[GROUP]
CRD_NAME = f"{PLURAL}.{GROUP}"
POLICY_KIND = "DeploymentPolicy"
POLICY_PLURAL = "deploymentpolicies"
FINALIZER = f"{GROUP}/{SINGULAR}"
PREFIX = f"{GROUP}/"

# Annotations a user (or the kubectl plugin) sets on a Skyhook object.
PAUSE_ANNOTATION = f"{GROUP}/pause"
DISABLE_ANNOTATION = f"{GROUP}/disable"
# Written by the operator once, with its version.
SKYHOOK_VERSION_ANNOTATION = f"{GROUP}/version"

# Node labels and taints.
IGNORE_LABEL = f"{GROUP}/ignore"
RUNTIME_REQUIRED_TAINT_KEY = GROUP
RUNTIME_REQUIRED_TAINT_VALUE = "runtime-required"
RUNTIME_REQUIRED_TAINT_EFFECT = "NoSchedule"
RUNTIME_REQUIRED_TAINT = (
    f"{RUNTIME_REQUIRED_TAINT_KEY}={RUNTIME_REQUIRED_TAINT_VALUE}:{RUNTIME_REQUIRED_TAINT_EFFECT}"
)
UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"
# A node cordoned when its runtime-required taint came off (spec.runtimeRequiredCordonAfter):
# no Skyhook lifts that cordon; whoever uncordons the node removes this annotation with it.
RUNTIME_REQUIRED_CORDON_ANNOTATION = f"{GROUP}/runtimeRequiredCordon"


def node_state_key(scr: str) -> str:
    """Annotation holding per-package progress on a node (compact JSON)."""
    return f"{GROUP}/nodeState_{scr}"


def node_status_key(scr: str) -> str:
    """Annotation *and* label holding the node's overall status for one SCR."""
    return f"{GROUP}/status_{scr}"


def cordon_key(scr: str) -> str:
    """Annotation marking that this SCR cordoned the node (so only it uncordons)."""
    return f"{GROUP}/cordon_{scr}"


def drain_start_key(scr: str) -> str:
    """Annotation with the time (RFC 3339) this SCR's drain of the node began; gone once the
    node is drained. drainConfig.timeout counts from it."""
    return f"{GROUP}/drainStart_{scr}"


def drain_blocked_key(scr: str) -> str:
    """Annotation listing, while this SCR's drain of the node cannot go on, the pods that
    block it: a JSON list of ``{"namespace", "name", "reason", "detail"}``."""
    return f"{GROUP}/drainBlocked_{scr}"


def version_key(scr: str) -> str:
    """Annotation with the operator version that first handled the node for this SCR."""
    return f"{GROUP}/version_{scr}"


def image_selection_key(scr: str) -> str:
    """Ours: annotation recording, per package, the image chosen for the node from its image
    compatibility artifact and the candidate matched, or why none matched (JSON)."""
    return f"{GROUP}/imageSelection_{scr}"


def auto_taint_key(taint_key: str) -> str:
    """Annotation marking a node the operator tainted on sight (``autoTaintNewNodes``)."""
    return f"{GROUP}/autoTaint_{taint_key}"


def not_ready_condition(scr: str) -> str:
    """Node condition type: True while the SCR is incomplete on the node."""
    return f"{GROUP}/{scr}/NotReady"


def erroring_condition(scr: str) -> str:
    """Node condition type: True while any package of the SCR is erroring on the node."""
    return f"{GROUP}/{scr}/Erroring"


# Stage and interrupt pods.
NAME_LABEL = f"{GROUP}/name"
PACKAGE_LABEL = f"{GROUP}/package"
INTERRUPT_LABEL = f"{GROUP}/interrupt"
HEALTH_CHECK_LABEL = f"{GROUP}/health-check"  # ours: a health gate's check pod
# Which stage, node and Skyhook generation a pod works for, for selectors (as upstream's Jobs).
STAGE_LABEL = f"{GROUP}/stage"
NODE_LABEL = f"{GROUP}/node"
GENERATION_LABEL = f"{GROUP}/generation"
PACKAGE_ANNOTATION = f"{GROUP}/package"
# The agent's SKYHOOK_RESOURCE_ID, readable without the pod's env.
RESOURCE_ID_ANNOTATION = f"{GROUP}/resource-id"
# Ours: which attempt at its stage a stage pod is (absent: the first, 0); a retry is a new pod.
ATTEMPT_ANNOTATION = f"{GROUP}/attempt"
# On an interrupt pod stopped at its restart limit: how many times its container failed.
RESTART_LIMIT_ANNOTATION = f"{GROUP}/restart-limit-exceeded"

# ConfigMaps.
PACKAGE_NAME_ANNOTATION = f"{GROUP}/Package.Name"
PACKAGE_VERSION_ANNOTATION = f"{GROUP}/Package.Version"
NODE_META_LABEL = f"{GROUP}/skyhook-node-meta"
NODE_NAME_ANNOTATION = f"{GROUP}/Node.name"

# SCR conditions.
CONDITION_TRANSITION = f"{GROUP}/Transition"
CONDITION_APPLY_PACKAGE = f"{GROUP}/ApplyPackage"
CONDITION_TAINT_NOT_TOLERABLE = f"{GROUP}/TaintNotTolerable"
CONDITION_NODES_IGNORED = f"{GROUP}/NodesIgnored"
# Explicit uninstall's conditions carry bare types, without the group prefix.
CONDITION_UNINSTALL_IN_PROGRESS = "UninstallInProgress"
CONDITION_UNINSTALL_FAILED = "UninstallFailed"
CONDITION_BLOCKED = "Blocked"
CONDITION_DRAIN_BLOCKED = "DrainBlocked"
CONDITION_DELETION_BLOCKED = "DeletionBlocked"

DEFAULT_COMPARTMENT = "__default__"


def package_key(name: str, version: str) -> str:
    """Key of a package inside the nodeState annotation: ``<name>|<version>``."""
    return f"{name}|{version}"


def safe_name(limit: int, *parts: str) -> str:
    """A Kubernetes object name from ``parts`` that stays unique after truncation.

    Parts are joined with ``-`` and dots become ``-``; an 8-hex-digit SHA-256 prefix of that
    string is appended after cutting it to ``limit - 9`` characters; the result is lowercased.
    """
    joined = "-".join(parts).replace(".", "-")
    digest = hashlib.sha256(joined.encode()).hexdigest()[:8]
    return f"{joined[: limit - 9]}-{digest}".lower()


def package_configmap_name(scr: str, package: str, version: str) -> str:
    """``<scr>-<package>-<version>``, lowercased. Build metadata's ``+`` is not allowed in an
    object name and becomes ``-`` (upstream's create fails on it)."""
    return re.sub(r"[^a-z0-9.-]", "-", f"{scr}-{package}-{version}".lower())


@lru_cache(maxsize=16384)  # asked for every matched node on every pass
def node_metadata_configmap_name(scr: str, node: str) -> str:
    return safe_name(253, scr, node, "metadata")
