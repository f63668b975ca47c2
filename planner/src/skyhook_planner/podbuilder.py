"""Every object the operator creates for a package, built in one place: stage pods, interrupt pods, package and node-metadata ConfigMaps, with
their names, and beside each builder its inverse (`decode_pod_package`, `matches`).

Builders return plain dicts in API form, ready for the writer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from skyhook_planner.model.health import CheckPod
from skyhook_planner.model.settings import PlannerSettings
from skyhook_planner.model.snapshot import NodeView, PodView, SkyhookView
from skyhook_planner.model.spec import Interrupt, Package, parse_quantity
from skyhook_schemas import keys, podpackage
from skyhook_schemas.gojson import go_json, sorted_map
from skyhook_schemas.nodestate import INTERRUPT
from skyhook_schemas.podpackage import (
    AGENT_INTERRUPT_TYPES,
    INTERRUPT_CONTAINER,
    PodPackage,
    encode_interrupt_argument,
)

ROOT_MOUNT = "root-mount"
DONE_CONTAINER = "done"  # a stage pod's app container, which exits once the steps passed
# Every stage of a generation copies into the same directory. -f: the node metadata is a
# configMap volume, whose files are symlinks, and busybox's cp (the package images' base)
# refuses to replace a symlink an earlier stage left there ("File exists").
PACKAGE_COPY_COMMAND = (
    "mkdir -p /root/${SKYHOOK_DIR} && cp -rf /skyhook-package/* /root/${SKYHOOK_DIR}"
)
OP_ENV_NAMES = (
    "SKYHOOK_LOG_DIR",
    "SKYHOOK_ROOT_DIR",
    "COPY_RESOLV",
    "SKYHOOK_RESOURCE_ID",
    "SKYHOOK_NODE_ORDER",
)
# Every variable we set rather than the package: SKYHOOK_DIR (the init container's) carries the
# SCR generation, so comparing it would restart running stages on any spec edit.
_OUR_ENV_NAMES = frozenset({*OP_ENV_NAMES, "SKYHOOK_DIR"})
LIMIT_RANGER_ANNOTATION = "kubernetes.io/limit-ranger"


# --- names -------------------------------------------------------------------------------------


def stage_pod_name(
    scr: str, package: str, version: str, stage: str, node: str, *, attempt: int = 0
) -> str:
    """Each attempt at a stage is a pod of its own (the first keeps upstream's name), so a
    retry never waits on the name of a failed attempt kept for its logs."""
    if attempt:
        return keys.safe_name(63, scr, package, version, stage, node, f"retry{attempt}")
    return keys.safe_name(63, scr, package, version, stage, node)


def ends_when_done(pod: PodView) -> bool:
    """Does the stage pod end (Succeeded) once its steps are done, so that it may stay for its
    logs? Its app container is `done`; a pod an earlier operator built idles in `pause`
    until deleted, and would hold its node."""
    return pod.containers == (DONE_CONTAINER,)


def pod_attempt(pod: PodView) -> int:
    """Which attempt at its stage a stage pod is (0: the first)."""
    text = pod.annotations.get(keys.ATTEMPT_ANNOTATION, "0")
    return int(text) if text.isdigit() else 0


# The most activeDeadlineSeconds takes (an int32).
MAX_DEADLINE_S = 2147483647


def active_deadline_s(settings: PlannerSettings, package: Package) -> int | None:
    """The pod's activeDeadlineSeconds: the package's stageTimeout, else the operator's default,
    in whole seconds rounded up; None for 0 (no limit)."""
    seconds = package.stage_timeout_s
    if seconds is None:
        seconds = settings.stage_timeout_s
    if seconds <= 0:
        return None
    return min(max(math.ceil(seconds), 1), MAX_DEADLINE_S)


def interrupt_pod_name(scr: str, interrupt_type: str, node: str, stage: str = INTERRUPT) -> str:
    """`stage`: interrupt, or uninstall-interrupt for the interrupt that ends an uninstall."""
    return keys.safe_name(63, scr, stage, interrupt_type, node)


def check_pod_name(scr: str, node: str) -> str:
    return keys.safe_name(63, scr, "health-check", node)


def metadata_volume_name(node: str) -> str:
    return keys.safe_name(63, "metadata", node)


# Where a stage sees its package's configMap, one file per key.
CONFIGMAPS_DIR = "/skyhook-package/configmaps"

_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def package_label(package: str, version: str) -> str:
    """The pods' `package` label, `<package>-<version>` as upstream writes it. A label value
    allows only letters, digits, `-`, `_` and `.`: build metadata's `+` becomes `_`
    (`dexter-1.2.3_b1`), where upstream's pod creation would be refused. The package name is
    at most 43 characters, so only a version over 19 characters needs the hashed short form."""
    label = _LABEL_UNSAFE.sub("_", f"{package}-{version}")
    return label if len(label) <= 63 else keys.safe_name(63, label)


def copy_dir(settings: PlannerSettings, scr: SkyhookView, package: Package) -> str:
    """`D`: where the package content lands on the host, unique per SCR generation."""
    return f"{settings.copy_dir_root}/{scr.name}/{package.name}-{package.version}-{scr.uid}-{scr.generation}"


def decode_pod_package(pod: PodView) -> PodPackage | None:
    """The package a Skyhook pod runs, or None for a pod that is not one of ours."""
    return podpackage.decode_pod_package(pod.labels, pod.annotations)


# --- pods ----------------------------------------------------------------------------------------


def resource_id(scr: SkyhookView, package: Package) -> str:
    """What the agent keys its interrupt flags and logs by; unique per SCR generation."""
    return f"{scr.name}-{scr.uid}-{scr.generation}_{package.name}_{package.version}"


def _work_labels(scr: SkyhookView, stage: str, node: str) -> dict[str, str]:
    """The stage, node and generation a pod works for. A node name is a valid label value
    up to 63 characters; a longer one gets the hashed short form."""
    return {
        keys.STAGE_LABEL: stage,
        keys.NODE_LABEL: node if len(node) <= 63 else keys.safe_name(63, node),
        keys.GENERATION_LABEL: str(scr.generation),
    }


def _op_env(
    settings: PlannerSettings, scr: SkyhookView, package: Package, node_order: int
) -> list[dict[str, str]]:
    return [
        {"name": "SKYHOOK_LOG_DIR", "value": f"{settings.agent_log_root}/{scr.name}"},
        {"name": "SKYHOOK_ROOT_DIR", "value": f"{settings.copy_dir_root}/{scr.name}"},
        {"name": "COPY_RESOLV", "value": "false"},
        {"name": "SKYHOOK_RESOURCE_ID", "value": resource_id(scr, package)},
        {"name": "SKYHOOK_NODE_ORDER", "value": str(node_order)},
    ]


def _owner_reference(scr: SkyhookView) -> dict[str, Any]:
    return {
        "apiVersion": keys.API_VERSION,
        "kind": keys.KIND,
        "name": scr.name,
        "uid": scr.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


NODE_DOWN_TOLERATIONS = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
)


def _tolerations(settings: PlannerSettings, scr: SkyhookView) -> list[dict[str, Any]]:
    tolerations: list[dict[str, Any]] = [
        {"key": keys.UNSCHEDULABLE_TAINT_KEY, "operator": "Exists"},
        # Without a limit: the taint manager would otherwise delete the pod of a node NotReady
        # for 300 s (a slow reboot), and its stage would start over.
        *NODE_DOWN_TOLERATIONS,
        *(
            {"key": taint.key, "operator": "Equal", "value": taint.value, "effect": taint.effect}
            for taint in settings.runtime_required_taints
        ),
    ]
    if scr.spec is not None:
        tolerations += [t.to_api() for t in scr.spec.additional_tolerations]
    return tolerations


def _done_container(package: Package) -> dict[str, Any]:
    """A stage pod's app container: it exits at once, so the pod ends Succeeded when its steps
    pass and stays, with its logs, for SKYHOOK_POD_TTL_SUCCEEDED. The package image always has
    the shell (its init container copies with it), and the init container pulled it."""
    amount = {"cpu": "100m", "memory": "20Mi"}
    return {
        "name": DONE_CONTAINER,
        "image": pull_reference(package),
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", "exit 0"],
        "resources": {"limits": dict(amount), "requests": dict(amount)},
    }


def _pause_container(settings: PlannerSettings) -> dict[str, Any]:
    amount = {"cpu": "100m", "memory": "20Mi"}
    return {
        "name": "pause",
        "image": settings.pause_image,
        "resources": {"limits": dict(amount), "requests": dict(amount)},
    }


def pull_reference(package: Package) -> str:
    """The image reference the package's init container pulls."""
    if package.chosen_image:
        return package.chosen_image
    if package.container_sha:
        return f"{package.image}@{package.container_sha}"
    return f"{package.image}:{package.version}"


def _base_pod(
    settings: PlannerSettings,
    scr: SkyhookView,
    name: str,
    node: str,
    *,
    labels: dict[str, str],
    annotation: PodPackage | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeName": node,
        "restartPolicy": "OnFailure",
        "hostPID": True,
        "hostNetwork": True,
        # Stage and interrupt pods never call the apiserver: no token on the node's host.
        "automountServiceAccountToken": False,
        "tolerations": _tolerations(settings, scr),
        "containers": [_pause_container(settings)],
        "volumes": [{"name": ROOT_MOUNT, "hostPath": {"path": "/"}}],
    }
    if settings.image_pull_secret:
        spec["imagePullSecrets"] = [{"name": settings.image_pull_secret}]
    if settings.package_priority_class_name:
        spec["priorityClassName"] = settings.package_priority_class_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": settings.namespace,
            "labels": labels,
            "annotations": {keys.PACKAGE_ANNOTATION: annotation.to_json()} if annotation else {},
            "ownerReferences": [_owner_reference(scr)],
        },
        "spec": spec,
    }


def build_stage_pod(
    settings: PlannerSettings,
    scr: SkyhookView,
    package: Package,
    node: str,
    stage: str,
    *,
    node_order: int = 0,
    attempt: int = 0,
) -> dict[str, Any]:
    """The pod that runs `<stage>` then `<stage>-check` of `package` on `node`, as attempt
    `attempt` (0: the first) at that stage.

    An uninstall pod too is built from the spec's package, with its env, configMap and
    resources. A failed container fails the pod (restartPolicy Never): the planner decides
    whether another attempt follows (passes/learn.py), and the failed pod keeps its logs.
    stageTimeout bounds the attempt (activeDeadlineSeconds).
    """
    directory = copy_dir(settings, scr, package)
    short = package.name[:43]
    agent_image = package.agent_image_override or settings.agent_image
    mounts: list[dict[str, Any]] = [
        {"name": ROOT_MOUNT, "mountPath": "/root", "mountPropagation": "HostToContainer"},
        {"name": metadata_volume_name(node), "mountPath": "/skyhook-package/node-metadata"},
    ]
    # One read-only file per key: a directory mount would hide the image's own files there.
    mounts += [
        {
            "name": package.name,
            "mountPath": f"{CONFIGMAPS_DIR}/{key}",
            "subPath": key,
            "readOnly": True,
        }
        for key in sorted(package.config_map)
    ]
    env = [dict(e) for e in package.env] + _op_env(settings, scr, package, node_order)
    security = {"privileged": True}

    def agent(suffix: str, mode: str) -> dict[str, Any]:
        return {
            "name": f"{short}-{suffix}",
            "image": agent_image,
            "imagePullPolicy": "Always",
            "args": [mode, "/root", directory],
            "env": [dict(e) for e in env],
            "securityContext": dict(security),
            "volumeMounts": [dict(m) for m in mounts],
        }

    init = [
        {
            "name": f"{short}-init",
            "image": pull_reference(package),
            "imagePullPolicy": "Always",
            "command": ["/bin/sh"],
            "args": ["-c", PACKAGE_COPY_COMMAND],
            "env": [{"name": "SKYHOOK_DIR", "value": directory}],
            "securityContext": dict(security),
            "volumeMounts": [dict(m) for m in mounts],
        },
        agent(stage, stage),
        agent(f"{stage}check", f"{stage}-check"),
    ]
    if package.resources is not None:
        res = package.resources
        for container in init:
            container["resources"] = {
                "limits": {"cpu": res.cpu_limit, "memory": res.memory_limit},
                "requests": {"cpu": res.cpu_request, "memory": res.memory_request},
            }
    labels = {
        keys.NAME_LABEL: scr.name,
        keys.PACKAGE_LABEL: package_label(package.name, package.version),
        **_work_labels(scr, stage, node),
    }
    annotation = PodPackage(
        package.name, package.version, scr.name, stage, package.image, package.container_sha
    )
    pod = _base_pod(
        settings,
        scr,
        stage_pod_name(scr.name, package.name, package.version, stage, node, attempt=attempt),
        node,
        labels=labels,
        annotation=annotation,
    )
    pod["metadata"]["annotations"][keys.RESOURCE_ID_ANNOTATION] = resource_id(scr, package)
    if attempt:
        pod["metadata"]["annotations"][keys.ATTEMPT_ANNOTATION] = str(attempt)
    pod["spec"]["restartPolicy"] = "Never"
    if (deadline := active_deadline_s(settings, package)) is not None:
        pod["spec"]["activeDeadlineSeconds"] = deadline
    pod["spec"]["initContainers"] = init
    pod["spec"]["containers"] = [_done_container(package)]
    pod["spec"]["volumes"].append(
        {
            "name": metadata_volume_name(node),
            "configMap": {"name": keys.node_metadata_configmap_name(scr.name, node)},
        }
    )
    if package.config_map:
        cm_name = keys.package_configmap_name(scr.name, package.name, package.version)
        pod["spec"]["volumes"].append({"name": package.name, "configMap": {"name": cm_name}})
    if package.graceful_shutdown_s is not None:
        pod["spec"]["terminationGracePeriodSeconds"] = package.graceful_shutdown_s
    return pod


def interrupt_payload(interrupt: Interrupt) -> str:
    """The agent's 4th argument: base64 of `{"type": <agent type>, "services": [...]}`."""
    services = {"services": list(interrupt.services)} if interrupt.services else {}
    return encode_interrupt_argument(AGENT_INTERRUPT_TYPES[interrupt.type], **services)


def build_interrupt_pod(
    settings: PlannerSettings,
    scr: SkyhookView,
    package: Package,
    node: str,
    interrupt: Interrupt,
    *,
    stage: str = INTERRUPT,
    node_order: int = 0,
) -> dict[str, Any]:
    """The one pod that performs a node's merged interrupt, on behalf of `package`; `stage`
    (interrupt or uninstall-interrupt) is the stage its package annotation records. The agent
    runs it in interrupt mode either way. Its container restarts in place (a reboot kills it,
    it completes once the node is back), and stageTimeout bounds the whole interrupt."""
    labels = {
        keys.NAME_LABEL: scr.name,
        keys.PACKAGE_LABEL: package_label(package.name, package.version),
        keys.INTERRUPT_LABEL: "True",
        **_work_labels(scr, stage, node),
    }
    annotation = PodPackage(
        package.name, package.version, scr.name, stage, package.image, package.container_sha
    )
    pod = _base_pod(
        settings,
        scr,
        interrupt_pod_name(scr.name, interrupt.type, node, stage),
        node,
        labels=labels,
        annotation=annotation,
    )
    pod["metadata"]["annotations"][keys.RESOURCE_ID_ANNOTATION] = resource_id(scr, package)
    if (deadline := active_deadline_s(settings, package)) is not None:
        pod["spec"]["activeDeadlineSeconds"] = deadline
    # 256Mi: 64Mi was killed for memory mid-reboot on arm64 kernels with 64K pages.
    amount = {"cpu": "500m", "memory": "256Mi"}
    pod["spec"]["initContainers"] = [
        {
            "name": INTERRUPT_CONTAINER,
            "image": package.agent_image_override or settings.agent_image,
            "args": [
                INTERRUPT,
                "/root",
                copy_dir(settings, scr, package),
                interrupt_payload(interrupt),
            ],
            "env": _op_env(settings, scr, package, node_order),
            "securityContext": {"privileged": True},
            "volumeMounts": [
                {"name": ROOT_MOUNT, "mountPath": "/root", "mountPropagation": "HostToContainer"}
            ],
            "resources": {"limits": dict(amount), "requests": dict(amount)},
        }
    ]
    return pod


def build_check_pod(
    settings: PlannerSettings, scr: SkyhookView, node: str, check: CheckPod
) -> dict[str, Any]:
    """A health gate's check pod (rules/health.py): its one container runs the check on the
    node, with the host's root at /host, and its result is read as a stage's is."""
    labels = {keys.NAME_LABEL: scr.name, keys.HEALTH_CHECK_LABEL: "True"}
    pod = _base_pod(settings, scr, check_pod_name(scr.name, node), node, labels=labels)
    pod["spec"]["restartPolicy"] = "Never"
    container: dict[str, Any] = {
        "name": "health-check",
        "image": check.image,
        "securityContext": {"privileged": True},
        "volumeMounts": [
            {"name": ROOT_MOUNT, "mountPath": "/host", "mountPropagation": "HostToContainer"}
        ],
    }
    if check.command:
        container["command"] = list(check.command)
    if check.args:
        container["args"] = list(check.args)
    pod["spec"]["initContainers"] = [container]
    return pod


def _env_without_op(
    env: tuple[Mapping[str, Any], ...] | list[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    return [dict(e) for e in env if e.get("name") not in _OUR_ENV_NAMES]


def _same_resources(actual: Mapping[str, Any], expected: Mapping[str, Any]) -> bool:
    """Equal after quantity normalisation (the API server rewrites "0.5" as "500m")."""

    def norm(body: Mapping[str, Any]) -> dict[str, dict[str, object]]:
        return {
            part: {k: parse_quantity(v) for k, v in (body.get(part) or {}).items()}
            for part in ("limits", "requests")
            if body.get(part)
        }

    return norm(actual) == norm(expected)


def matches(pod: PodView, expected: Mapping[str, Any]) -> bool:
    """Does a running pod still do what `expected` (a freshly built manifest) would?

    Compares init container names, images, env apart from the operator's own variables, and
    resources (a pod defaulted by a LimitRange passes when the package sets none). Arguments are
    not compared: the copy dir carries the SCR generation, and an unrelated spec edit must not
    restart running work.
    """
    wanted = expected["spec"].get("initContainers") or []
    if len(wanted) != len(pod.init_containers):
        return False
    limit_ranged = LIMIT_RANGER_ANNOTATION in pod.annotations
    for actual, want in zip(pod.init_containers, wanted, strict=True):
        if actual.name != want["name"] or actual.image != want["image"]:
            return False
        if want["name"] != INTERRUPT_CONTAINER and _env_without_op(actual.env) != _env_without_op(
            want.get("env") or []
        ):
            return False
        want_resources = want.get("resources") or {}
        if want["name"] == INTERRUPT_CONTAINER:
            continue
        if want_resources:
            if not _same_resources(actual.resources, want_resources):
                return False
        elif actual.resources and not limit_ranged:
            return False
    return True


# --- config maps -------------------------------------------------------------------------------


def build_package_configmap(
    settings: PlannerSettings, scr: SkyhookView, package: Package
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": keys.package_configmap_name(scr.name, package.name, package.version),
            "namespace": settings.namespace,
            "labels": {keys.NAME_LABEL: scr.name},
            "annotations": {
                keys.NAME_LABEL: scr.name,
                keys.PACKAGE_NAME_ANNOTATION: package.name,
                keys.PACKAGE_VERSION_ANNOTATION: package.version,
            },
            "ownerReferences": [_owner_reference(scr)],
        },
        "data": dict(package.config_map),
    }


def packages_json(settings: PlannerSettings, scr: SkyhookView) -> str:
    """`packages.json` of the node-metadata ConfigMap: what the agent may know about its SCR."""
    packages: dict[str, Any] = {}
    spec_packages = scr.spec.packages if scr.spec is not None else {}
    for name, pkg in spec_packages.items():
        body: dict[str, Any] = {"name": pkg.name, "version": pkg.version, "image": pkg.image}
        if pkg.agent_image_override:
            body["agentImageOverride"] = pkg.agent_image_override
        if pkg.interrupt is not None:
            body["interrupt"] = _interrupt_json(pkg.interrupt)
        if pkg.config_interrupts:
            body["configInterrupts"] = sorted_map(
                {k: _interrupt_json(v) for k, v in pkg.config_interrupts.items()}
            )
        packages[name] = body
    return go_json({"agentVersion": settings.agent_version, "packages": sorted_map(packages)})


def _interrupt_json(interrupt: Interrupt) -> dict[str, Any]:
    body: dict[str, Any] = {"type": interrupt.type}
    if interrupt.services:
        body["services"] = list(interrupt.services)
    return body


def build_metadata_configmap(
    settings: PlannerSettings,
    scr: SkyhookView,
    node: NodeView,
    *,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
) -> dict[str, Any]:
    """The per node x SCR ConfigMap mounted at /skyhook-package/node-metadata. `labels` and
    `annotations` are the node's as they will be after this pass's patch, progress included
    (every Skyhook's nodeState and status): it is rewritten before each stage pod, so a
    package reads its node's state as of the stage it runs."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": keys.node_metadata_configmap_name(scr.name, node.name),
            "namespace": settings.namespace,
            "labels": {keys.NODE_META_LABEL: scr.name},
            "annotations": {keys.NAME_LABEL: scr.name, keys.NODE_NAME_ANNOTATION: node.name},
            "ownerReferences": [_owner_reference(scr)],
        },
        "data": {
            "labels.json": go_json(sorted_map(labels)),
            "annotations.json": go_json(sorted_map(annotations)),
            "packages.json": packages_json(settings, scr),
        },
    }
