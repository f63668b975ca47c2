"""Kubernetes Events about Skyhooks and Nodes, posted only when something changed.

The writer calls `post` once per applied transition (a stage started, a package completed, a
status changed); nothing here is called on a pass that changed nothing. Events are
best-effort: a failure is logged and never fails the write that caused it.
"""

from __future__ import annotations

import datetime
import logging
import uuid
from dataclasses import dataclass

from skyhook_operator.kube.client import ApiError, Kube
from skyhook_schemas import keys

log = logging.getLogger(__name__)

COMPONENT = "skyhook-controller"
# Events about cluster-scoped objects live in `default`, where kubectl describe finds them.
EVENT_NAMESPACE = "default"


@dataclass(frozen=True)
class Subject:
    """The object an event is about."""

    kind: str  # "Node" or "Skyhook"
    name: str
    uid: str = ""

    @property
    def api_version(self) -> str:
        return "v1" if self.kind == "Node" else f"{keys.API_VERSION}"


def post(
    kube: Kube, subject: Subject, reason: str, message: str, event_type: str = "Normal"
) -> None:
    """Post one event; logs instead of raising."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{subject.name}.{uuid.uuid4().hex[:16]}",
            "namespace": EVENT_NAMESPACE,
        },
        "involvedObject": {
            "kind": subject.kind,
            "name": subject.name,
            "apiVersion": subject.api_version,
            **({"uid": subject.uid} if subject.uid else {}),
        },
        "reason": reason,
        "message": message,
        "type": event_type,
        "source": {"component": COMPONENT},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "reportingComponent": COMPONENT,
    }
    try:
        kube.request("POST", kube.namespaced_path("events", EVENT_NAMESPACE), body)
    except ApiError as error:
        log.debug("event %s on %s %s not posted: %s", reason, subject.kind, subject.name, error)
