"""Running the operator against a cluster from outside: for the demo, tests and benchmarks.

Installs the CRD and the operator namespace, starts `skyhook-operator run` as a real
subprocess (so a test can SIGKILL it), and offers watches and deadline-bound waits on what the
operator writes. Nothing here is used by the operator itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import yaml

from skyhook_operator.kube.client import MERGE_PATCH, ApiError, Json, Kube, connect
from skyhook_sandbox.processes import free_port
from skyhook_schemas import keys
from skyhook_schemas.crds import CRD_PATHS

T = TypeVar("T")

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


class WaitTimeout(AssertionError):
    """A condition did not hold before its deadline; the message says what was last seen."""


def install_crd(kube: Kube, timeout: float = 60.0) -> None:
    """Create or update the Skyhook and DeploymentPolicy CRDs and wait until both are served."""
    for path in CRD_PATHS:
        manifest = yaml.safe_load(path.read_text())
        name = manifest["metadata"]["name"]
        try:
            kube.request("POST", CRD_PATH, manifest)
        except ApiError as error:
            if error.status != 409:
                raise
            current = kube.request("GET", f"{CRD_PATH}/{name}")
            manifest["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            kube.request("PUT", f"{CRD_PATH}/{name}", manifest)
        wait_until(partial(_established, kube, name), timeout, f"CRD {name} Established")
    # The apiserver serves a new kind a moment after Established; list once to be sure.
    for resource in (kube.skyhook_path(), kube.policy_path()):
        wait_until(partial(serves, kube, resource), timeout, f"{resource} served")


def _established(kube: Kube, name: str) -> bool:
    crd = kube.request("GET", f"{CRD_PATH}/{name}")
    conditions = crd.get("status", {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def serves(kube: Kube, resource: str) -> bool:
    """Whether the apiserver answers a list of `resource` (a kind whose CRD it serves)."""
    try:
        kube.request("GET", resource)
    except ApiError:
        return False
    return True


def ensure_namespace(kube: Kube, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    try:
        kube.request("POST", "/api/v1/namespaces", body)
    except ApiError as error:
        if error.status != 409:
            raise


def wait_until(
    condition: Callable[[], T | None], timeout: float, what: str, interval: float = 0.2
) -> T:
    """Poll `condition` until it returns something truthy; raise WaitTimeout naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise WaitTimeout(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


# --- watching ----------------------------------------------------------------------------------


def watch(
    kube: Kube, path: str, query: Mapping[str, str] | None = None, timeout: float = 300.0
) -> Iterator[tuple[str, Json]]:
    """(event type, object) from a watch on `path`, starting with the current objects.

    One LIST for the starting point, then a watch from its resourceVersion, so no change
    between the two is missed; ends after `timeout` seconds. After the listing comes one
    ("SYNCED", {}) item, so a caller knows everything that existed has been delivered.
    """
    listing = kube.request("GET", path, query=query)
    for item in listing.get("items", []):
        yield "ADDED", item
    yield "SYNCED", {}
    version = listing["metadata"]["resourceVersion"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seconds = max(1, int(deadline - time.monotonic()))
        watch_query = {
            **(query or {}),
            "watch": "1",
            "resourceVersion": version,
            "timeoutSeconds": str(seconds),
            "allowWatchBookmarks": "true",
        }
        for kind, obj in kube.stream(path, watch_query, read_timeout=seconds + 10):
            version = obj.get("metadata", {}).get("resourceVersion", version)
            if kind == "BOOKMARK":
                continue
            if kind == "ERROR":
                raise ApiError(int(obj.get("code", 500)), str(obj.get("message")), "WATCH", path)
            yield kind, obj


@dataclass
class Recorder:
    """Every version of every object a watch delivered, in order (for "never more than")."""

    events: list[tuple[float, str, Json]] = field(default_factory=list)

    def add(self, kind: str, obj: Json) -> None:
        self.events.append((time.monotonic(), kind, obj))


# --- the operator as a subprocess --------------------------------------------------------------


ADMISSION_API = "/apis/admissionregistration.k8s.io/v1"


@dataclass
class OperatorProcess:
    """`skyhook-operator run` in its own process group, logging to `log_path`.

    The kubeconfig is passed as $KUBECONFIG, or with `kubeconfig_flag` as `--kubeconfig`
    (with $KUBECONFIG unset)."""

    kubeconfig: Path
    log_path: Path
    env: Mapping[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    kubeconfig_flag: bool = False
    # Free loopback ports unless `env` names them: runs never collide on upstream's defaults.
    metrics_address: str = ""
    probe_address: str = ""
    # The admission webhooks on a free loopback port, registered by the operator itself as a
    # URL the apiserver calls; replicas given the same address share the port (SO_REUSEPORT).
    webhook_address: str = ""
    metrics_secure: bool = False
    # Who removes the webhook configurations after the stop, when `kubeconfig`'s user may not
    # delete them (the chart's ServiceAccount); default: `kubeconfig`.
    cleanup_kubeconfig: Path | None = None

    def start(self) -> OperatorProcess:
        environment = {**os.environ, "KUBECONFIG": str(self.kubeconfig), **self.env}
        environment.setdefault("SKYHOOK_LOG_LEVEL", "info")
        self.metrics_address = environment.setdefault(
            "SKYHOOK_METRICS_PORT", self.metrics_address or f"127.0.0.1:{free_port()}"
        )
        # Plain HTTP unless a test asks for the secure endpoint (test_metrics_auth.py): the
        # other tests and the benchmarks read metrics without a token.
        self.metrics_secure = environment.setdefault("SKYHOOK_METRICS_SECURE", "false") == "true"
        self.probe_address = environment.setdefault(
            "SKYHOOK_PROBE_PORT", self.probe_address or f"127.0.0.1:{free_port()}"
        )
        self.webhook_address = environment.setdefault(
            "SKYHOOK_WEBHOOK_PORT", self.webhook_address or f"127.0.0.1:{free_port()}"
        )
        environment.setdefault("SKYHOOK_WEBHOOK_URL", f"https://{self.webhook_address}")
        environment.setdefault(
            "SKYHOOK_WEBHOOK_CERT_DIR", str(self.log_path.with_name(f"{self.log_path.stem}-certs"))
        )
        command = [sys.executable, "-m", "skyhook_operator", "run"]
        if self.kubeconfig_flag:
            del environment["KUBECONFIG"]
            command += ["--kubeconfig", str(self.kubeconfig)]
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            command,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        return self

    def wait_ready(self, timeout: float = 90.0) -> OperatorProcess:
        """Until `/readyz` answers 200: the indexes are full and the apiserver calls this
        process's webhooks. Raises with the log's tail when the process exits first."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if not self.running:
                raise RuntimeError(f"operator exited while starting:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.probe_url("/readyz"), timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except urllib.error.HTTPError as error:
                last = error.read().decode(errors="replace")
            except OSError as error:
                last = str(error)
            time.sleep(0.1)
        raise TimeoutError(f"operator not ready after {timeout:.0f} s ({last}):\n{self.log_tail()}")

    @property
    def metrics_url(self) -> str:
        scheme = "https" if self.metrics_secure else "http"
        return f"{scheme}://{self.metrics_address}/metrics"

    def probe_url(self, path: str) -> str:
        return f"http://{self.probe_address}{path}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crash would: nothing gets to clean up."""
        if self.process is not None and self.running:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)

    def terminate(self) -> None:
        """SIGTERM, as Kubernetes stops a pod; returns at once (`stop` waits for the exit)."""
        if self.process is not None and self.running:
            os.killpg(self.process.pid, signal.SIGTERM)

    def stop(self, grace: float = 15.0) -> None:
        if self.process is None:
            return
        if self.running:
            self.terminate()
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                self.kill()
        self.unregister_webhooks()

    def unregister_webhooks(self) -> None:
        """Delete the webhook configurations that call this process. The operator leaves them
        (they fail closed while it is away); a harness whose operator is gone for good must
        not leave the sandbox refusing every Skyhook write."""
        kube = connect(str(self.cleanup_kubeconfig or self.kubeconfig))
        try:
            self._forget_webhooks(kube)
        finally:
            kube.close()

    def _forget_webhooks(self, kube: Kube) -> None:
        ours = f"https://{self.webhook_address}/"
        for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
            try:
                found = kube.request("GET", f"{ADMISSION_API}/{kind}")["items"]
            except (ApiError, OSError):  # the sandbox is gone already
                return
            for configuration in found:
                urls = [
                    (w.get("clientConfig") or {}).get("url", "") for w in configuration["webhooks"]
                ]
                if any(url.startswith(ours) for url in urls):
                    with contextlib.suppress(ApiError):  # gone already
                        kube.request(
                            "DELETE", f"{ADMISSION_API}/{kind}/{configuration['metadata']['name']}"
                        )
        _wait_until_webhooks_are_not_called(kube)

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def _wait_until_webhooks_are_not_called(kube: Kube, seconds: float = 10.0) -> None:
    """The apiserver drops a deleted webhook configuration from its cache a moment after the
    DELETE: until then every Skyhook write still calls the stopped process and fails. A
    dry-run create shows when it no longer does (any answer but a failed webhook call)."""
    probe = {
        "apiVersion": keys.API_VERSION,
        "kind": keys.KIND,
        "metadata": {"name": "harness-webhook-probe"},
        "spec": {"packages": {}},
    }
    deadline = time.monotonic() + seconds
    while True:
        try:
            kube.request("POST", kube.skyhook_path(), probe, query={"dryRun": "All"})
            return
        except ApiError as error:
            if "failed calling webhook" not in error.reason or time.monotonic() > deadline:
                return
        except OSError:  # the sandbox is gone already
            return
        time.sleep(0.1)


# --- reading what the operator wrote ------------------------------------------------------------


def lease_holder(kube: Kube, namespace: str, name: str) -> str:
    """The holderIdentity of a coordination.k8s.io Lease; "" when released or absent."""
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
    try:
        lease = kube.request("GET", path)
    except ApiError as error:
        if error.status == 404:
            return ""
        raise
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def node_state(node: Mapping[str, Any], scr: str) -> dict[str, Any]:
    """The decoded nodeState annotation of `scr` on a node object ({} when absent)."""
    text = (node.get("metadata", {}).get("annotations") or {}).get(keys.node_state_key(scr))
    return json.loads(text) if text else {}


def node_status(node: Mapping[str, Any], scr: str) -> str:
    annotations = node.get("metadata", {}).get("annotations") or {}
    return str(annotations.get(keys.node_status_key(scr), ""))


def apply_skyhook(kube: Kube, manifest: Mapping[str, Any]) -> Json:
    """Create the Skyhook, or merge its spec into the existing one."""
    name = manifest["metadata"]["name"]
    try:
        return kube.request("POST", kube.skyhook_path(), dict(manifest))
    except ApiError as error:
        if error.status != 409:
            raise
    patch = {"spec": manifest.get("spec", {})}
    return kube.request("PATCH", kube.skyhook_path(name), patch, MERGE_PATCH)


def load_manifest(path: Path) -> Json:
    document = yaml.safe_load(path.read_text())
    if not isinstance(document, dict):
        raise ValueError(
            f"{path}: expected one YAML mapping (a Skyhook), got {type(document).__name__}"
        )
    return document
