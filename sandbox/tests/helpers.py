"""Shared helpers for the sandbox tests: pod manifests and waiting on the real API."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from kubernetes.client import CoreV1Api
from kubernetes.client.rest import ApiException

NAMESPACE = "default"


def pod_manifest(name: str, node: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"nodeName": node, **spec},
    }


def shell(name: str, script: str, image: str = "busybox:1.36", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": image, "command": ["/bin/sh", "-c", script], **extra}


def pod_dict(api: CoreV1Api, name: str) -> dict[str, Any]:
    raw = api.read_namespaced_pod(name, NAMESPACE, _preload_content=False)
    return dict(json.loads(raw.data))


def wait_for(
    check: Callable[[], Any], timeout: float = 30.0, what: str = "condition", interval: float = 0.2
) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} (last: {last!r})")


def wait_phase(
    api: CoreV1Api, name: str, phases: tuple[str, ...], timeout: float = 30.0
) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        pod = pod_dict(api, name)
        return pod if pod.get("status", {}).get("phase") in phases else None

    return dict(wait_for(check, timeout, f"pod {name} in {phases}"))


def pod_gone(api: CoreV1Api, name: str) -> bool:
    try:
        api.read_namespaced_pod(name, NAMESPACE)
    except ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


def terminated(status: dict[str, Any]) -> dict[str, Any]:
    return dict(status["state"].get("terminated") or {})
