"""What the operator hands a stage or interrupt pod, and how each reader gets it back: the
package annotation (which package, version, Skyhook and stage the pod runs), read by the planner
and the forecast, and the interrupt argument (the 4th argument of `agent interrupt`,
base64-encoded JSON), read by the agent and the forecast."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from skyhook_schemas import keys
from skyhook_schemas.gojson import go_json

# An interrupt pod's one container, named for what it does: it may act for several packages.
INTERRUPT_CONTAINER = "interrupt"

# --- the package annotation -------------------------------------------------------------------


@dataclass(frozen=True)
class PodPackage:
    """The `skyhook.nvidia.com/package` pod annotation, decoded."""

    name: str
    version: str
    skyhook: str
    stage: str
    image: str = ""
    container_sha: str = ""
    invalid: bool = False

    @property
    def key(self) -> str:
        return keys.package_key(self.name, self.version)

    def to_json(self) -> str:
        body: dict[str, Any] = {
            "name": self.name,
            "version": self.version,
            "skyhook": self.skyhook,
            "stage": self.stage,
            "image": self.image,
        }
        if self.container_sha:
            body["containerSHA"] = self.container_sha
        if self.invalid:
            body["invalid"] = True
        return go_json(body)


def decode_pod_package(
    labels: Mapping[str, str], annotations: Mapping[str, str]
) -> PodPackage | None:
    """The package a Skyhook pod runs, or None for a pod that is not one of ours (no name
    label, or no readable annotation)."""
    raw = annotations.get(keys.PACKAGE_ANNOTATION)
    if keys.NAME_LABEL not in labels or not raw:
        return None
    return _decode(raw)


@lru_cache(maxsize=8192)
def _decode(raw: str) -> PodPackage | None:
    """One annotation text decoded once: every pass reads every kept pod's, unchanged."""
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(body, Mapping) or not all(
        isinstance(body.get(k), str) for k in ("name", "version", "skyhook", "stage")
    ):
        return None
    return PodPackage(
        name=body["name"],
        version=body["version"],
        skyhook=body["skyhook"],
        stage=body["stage"],
        image=str(body.get("image") or ""),
        container_sha=str(body.get("containerSHA") or ""),
        invalid=body.get("invalid") is True,
    )


# --- the interrupt argument -------------------------------------------------------------------

# An SCR's interrupt type -> the agent's word for it.
AGENT_INTERRUPT_TYPES = {
    "reboot": "node_restart",
    "service": "service_restart",
    "restartAllServices": "restart_all_services",
    "noop": "no_op",
}
NODE_RESTART = AGENT_INTERRUPT_TYPES["reboot"]


class InterruptArgumentError(ValueError):
    """An interrupt argument that is not the base64 JSON object it should be."""


def encode_interrupt_argument(kind: str, **fields: Any) -> str:
    """`base64({"type": kind, ...fields})`, the JSON written as Go writes it."""
    return base64.b64encode(go_json({"type": kind, **fields}).encode()).decode()


def decode_interrupt_argument(text: str) -> dict[str, Any]:
    """The argument's JSON object, `type` included; InterruptArgumentError says what is wrong.
    Which fields each type takes is the agent's to check."""
    try:
        document = json.loads(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError):
        raise InterruptArgumentError(
            'interrupt: argument is not base64-encoded JSON like {"type": "node_restart"}'
        ) from None
    if not isinstance(document, dict) or "type" not in document:
        raise InterruptArgumentError(
            'interrupt.type: required (the payload must be {"type": ..., ...})'
        )
    return document
