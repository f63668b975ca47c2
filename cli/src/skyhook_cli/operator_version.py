"""Finding the operator's version from its Deployment, as upstream's plugin does.

The first Deployment in the namespace whose container image mentions "skyhook" (else whose
labels do) is taken; its version is the `app.kubernetes.io/version` label, else the tag of its
first container image that has one other than `latest`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from skyhook_cli.kube import Kube
from skyhook_cli.patterns import quote

VERSION_LABEL = "app.kubernetes.io/version"


class VersionNotFound(Exception):
    pass


def image_tag(image: str) -> str:
    """`repo:tag@sha256:...` -> `tag`; no tag -> ''. Everything after the last colon, as
    upstream's `version` command reads it (so `registry:5000/skyhook` reports `5000/skyhook`
    there too); the operator's own reading is `skyhook_schemas.images.image_tag`."""
    image = image.split("@", 1)[0]
    parts = image.split(":")
    return parts[-1].strip() if len(parts) > 1 else ""


def looks_like_skyhook(deployment: Any) -> bool:
    containers = deployment.spec.template.spec.containers or []
    if any("skyhook" in (container.image or "").lower() for container in containers):
        return True
    labels = deployment.metadata.labels or {}
    return any(
        "skyhook" in key.lower() or "skyhook" in value.lower() for key, value in labels.items()
    )


def version_of(deployments: Sequence[Any], namespace: str) -> str:
    for deployment in deployments:
        if not looks_like_skyhook(deployment):
            continue
        label = ((deployment.metadata.labels or {}).get(VERSION_LABEL) or "").strip()
        if label:
            return label
        for container in deployment.spec.template.spec.containers or []:
            tag = image_tag(container.image or "")
            if tag and tag != "latest":
                return tag
    raise VersionNotFound(
        "unable to determine operator version; "
        f"no skyhook operator deployment found in namespace {quote(namespace)}"
    )


def discover(kube: Kube, namespace: str) -> str:
    return version_of(kube.list_deployments(namespace), namespace)
