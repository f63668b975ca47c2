"""A package's state on nodes, as `package rerun` and `reset --package` rewrite it: which pods
run the package, and the write of each node's new nodeState."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from skyhook_cli.app import App
from skyhook_cli.kube import KubeError
from skyhook_schemas import keys
from skyhook_schemas.nodestate import Entries, encode_entries

VERSION_START = re.compile(r"v?\d")


def runs_package(pod: Any, package: str) -> bool:
    """Whether a Skyhook pod runs `package`: by its package annotation, else by its label
    `<package>-<version>` (so `foo` does not match the pods of `foo-bar`)."""
    raw = (pod.metadata.annotations or {}).get(keys.PACKAGE_ANNOTATION)
    try:
        described = json.loads(raw) if raw else None
    except ValueError:
        described = None
    if isinstance(described, dict) and described.get("name"):
        return bool(described["name"] == package)
    label = (pod.metadata.labels or {}).get(keys.PACKAGE_LABEL, "")
    if label == package:
        return True
    rest = label.removeprefix(f"{package}-")
    return rest != label and bool(VERSION_START.match(rest))


def write_states(app: App, skyhook: str, states: Mapping[str, Entries], package: str) -> list[str]:
    """Write each node's new nodeState for `skyhook` (an empty one removes the annotation);
    the failures, as `<node>: <error>` lines.

    The package's finished pods on the node (kept for their logs) go first: a new round of
    attempts must neither count a failed one nor take a succeeded one for its own result."""
    kube = app.kube
    annotation = keys.node_state_key(skyhook)
    failures = []
    finished = [
        pod
        for pod in kube.list_pods(app.namespace, f"{keys.NAME_LABEL}={skyhook}")
        if runs_package(pod, package)
        and (pod.status.phase if pod.status else "") in ("Failed", "Succeeded")
    ]
    for node, state in states.items():
        try:
            for pod in finished:
                if pod.spec.node_name == node:
                    kube.delete_pod(app.namespace, pod.metadata.name)
        except KubeError as error:
            failures.append(f"{node}: {error}")
            continue
        value = encode_entries(state) if state else None
        try:
            kube.patch_node(node, {"metadata": {"annotations": {annotation: value}}})
        except KubeError as error:
            failures.append(f"{node}: {error}")
    return failures
