"""Small synchronous reads of the sandbox's API (readiness checks, status), plus a
configured `kubernetes` client for tests."""

from __future__ import annotations

import json
import ssl
import urllib.request
from pathlib import Path
from typing import Any, Protocol

import yaml
from kubernetes import client, config

NOT_READY_TAINT = "node.kubernetes.io/not-ready"


class ClusterAccess(Protocol):
    """What these reads need of a sandbox: a Protocol rather than `Sandbox` itself, because
    sandbox.py imports this module (a `Sandbox` fits it)."""

    @property
    def state_dir(self) -> Path: ...

    @property
    def kubeconfig(self) -> Path: ...

    @property
    def server(self) -> str: ...


def _credentials(sandbox: ClusterAccess) -> tuple[str, ssl.SSLContext]:
    config = yaml.safe_load(sandbox.kubeconfig.read_text())
    token = config["users"][0]["user"]["token"]
    context = ssl.create_default_context(cafile=str(sandbox.state_dir / "pki" / "ca.crt"))
    return token, context


def get(sandbox: ClusterAccess, path: str) -> Any:
    token, context = _credentials(sandbox)
    request = urllib.request.Request(
        sandbox.server + path, headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, context=context, timeout=30) as response:
        return json.loads(response.read())


def node_is_ready(node: dict[str, Any]) -> bool:
    """Ready condition True and the lifecycle controller has lifted the not-ready taint."""
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    tainted = any(t["key"] == NOT_READY_TAINT for t in (node.get("spec") or {}).get("taints") or [])
    return ready and not tainted


def ready_nodes(sandbox: ClusterAccess) -> set[str]:
    items = get(sandbox, "/api/v1/nodes")["items"]
    return {node["metadata"]["name"] for node in items if node_is_ready(node)}


def core_v1(sandbox: ClusterAccess) -> Any:
    """A kubernetes.client.CoreV1Api bound to the sandbox's kubeconfig."""
    api_client = config.new_client_from_config(config_file=str(sandbox.kubeconfig))
    return client.CoreV1Api(api_client)
