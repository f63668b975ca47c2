"""Drains that wait: evict pods through the eviction subresource, then wait until they are gone.

The planner decides what to drain: it cordons through a `PatchNode` and asks for one
`EvictPod` per evictable pod, pass after pass, until the node holds none (its snapshot then
shows the gate open). This module makes each eviction robust and cheap to ask for again:
one thread per pod, started once however often the eviction is requested; a 429 (a
PodDisruptionBudget says not now) or a 5xx is retried with backoff until the deadline; a pod
already gone counts as evicted. After acceptance the thread waits until the pod is really
gone (or replaced by a new one of the same name), then calls `on_change` so the reconciler
runs a pass at once instead of at its next timer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from skyhook_operator.kube.client import ApiError, Kube

log = logging.getLogger(__name__)

_FIRST_BACKOFF = 1.0
_MAX_BACKOFF = 10.0
_GONE_POLL = 0.5


class Evictor:
    """At most one eviction in flight per pod; a finished or failed one may be asked again."""

    def __init__(self, kube: Kube, timeout: float, on_change: Callable[[], None]) -> None:
        self._kube = kube
        self._timeout = timeout
        self._on_change = on_change
        self._lock = threading.Lock()
        self._running: set[tuple[str, str]] = set()

    def ensure(self, namespace: str, name: str) -> bool:
        """Start evicting the pod unless that is already under way; True if started."""
        key = (namespace, name)
        with self._lock:
            if key in self._running:
                return False
            self._running.add(key)
        threading.Thread(target=self._run, args=key, name=f"evict-{name}", daemon=True).start()
        return True

    def _run(self, namespace: str, name: str) -> None:
        deadline = time.monotonic() + self._timeout
        try:
            uid = self._evict(namespace, name, deadline)
            if uid:
                self._wait_gone(namespace, name, uid, deadline)
        except (TimeoutError, ApiError) as error:
            log.warning(
                "eviction of %s/%s failed, the next pass asks again: %s", namespace, name, error
            )
        finally:
            with self._lock:
                self._running.discard((namespace, name))
            self._on_change()

    def _evict(self, namespace: str, name: str, deadline: float) -> str:
        """Post the eviction; the pod's uid once accepted, "" when the pod is gone already."""
        pod_path = self._kube.namespaced_path("pods", namespace, name)
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        backoff = _FIRST_BACKOFF
        while True:
            try:
                uid = self._kube.request("GET", pod_path)["metadata"]["uid"]
                self._kube.request("POST", pod_path + "/eviction", body)
                log.info("evicted pod %s/%s", namespace, name)
                return str(uid)
            except ApiError as error:
                if error.status == 404:
                    return ""
                if error.status not in (429, 500, 503):
                    raise
                if time.monotonic() + backoff > deadline:
                    raise TimeoutError(
                        f"pod {namespace}/{name} could not be evicted before the deadline: "
                        f"{error.status} {error.reason}"
                    ) from error
                log.info(
                    "eviction of %s/%s refused (%s %s), retrying in %.0f s",
                    namespace,
                    name,
                    error.status,
                    error.reason,
                    backoff,
                )
                time.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF)

    def _wait_gone(self, namespace: str, name: str, uid: str, deadline: float) -> None:
        while True:
            try:
                current = self._kube.request(
                    "GET", self._kube.namespaced_path("pods", namespace, name)
                )
            except ApiError as error:
                if error.status == 404:
                    return
                raise
            if current["metadata"]["uid"] != uid:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"pod {namespace}/{name} still exists after its eviction")
            time.sleep(_GONE_POLL)
