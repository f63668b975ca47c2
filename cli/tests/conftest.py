"""Fixtures for running the plugin against the sandbox apiserver.

Every use of the operator's test harness (CRD install, the operator as a subprocess) is in
this file, so moving that harness changes one import.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from skyhook_dev.harness import OperatorProcess, ensure_namespace, install_crd
from skyhook_operator.kube.client import connect as operator_connection
from skyhook_sandbox.sandbox import Sandbox
from skyhook_schemas import keys

NAMESPACE = "skyhook"
TEST_LABEL = "skyhook.nvidia.com/test-node"
AGENTLESS = "ghcr.io/nvidia/skyhook/agentless:test"
SHELLSCRIPT = "ghcr.io/nvidia/skyhook-packages/shellscript"


@dataclass
class Result:
    code: int
    out: str
    err: str


def wait_for(condition: Callable[[], Any], seconds: float, what: str) -> Any:
    """Poll until `condition()` is truthy; fail naming `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {seconds:.0f} s waiting for {what}")
        time.sleep(0.2)


@pytest.fixture(scope="session")
def api(sandbox: Sandbox) -> client.ApiClient:
    installer = operator_connection(str(sandbox.kubeconfig))
    install_crd(installer)
    ensure_namespace(installer, NAMESPACE)
    return config.new_client_from_config(config_file=str(sandbox.kubeconfig))


@pytest.fixture(scope="session")
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture(scope="session")
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


@pytest.fixture
def cli(sandbox: Sandbox) -> Callable[..., Result]:
    """Run `kubectl-skyhook --kubeconfig <sandbox> ARGS` as a real process (stdin not a tty)."""

    def run(*args: str, stdin: str = "") -> Result:
        done = subprocess.run(
            [sys.executable, "-m", "skyhook_cli", "--kubeconfig", str(sandbox.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    return run


@pytest.fixture
def label(request: pytest.FixtureRequest) -> str:
    """Short and unique to this test: node label value, node name prefix, Skyhook name."""
    digest = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:6]
    return f"cli-{digest}"


@pytest.fixture
def nodes(sandbox_nodes: Callable[..., list[str]], label: str) -> Callable[[int], list[str]]:
    def make(count: int) -> list[str]:
        return sorted(sandbox_nodes(count, labels={TEST_LABEL: label}, prefix=label))

    return make


@pytest.fixture
def skyhooks(
    custom: client.CustomObjectsApi, label: str
) -> Iterator[Callable[..., dict[str, Any]]]:
    """Create Skyhooks selecting this test's nodes; all deleted at the end."""
    made: list[str] = []

    def make(name: str, packages: dict[str, Any], **spec: Any) -> dict[str, Any]:
        body = {
            "apiVersion": keys.API_VERSION,
            "kind": keys.KIND,
            "metadata": {"name": name},
            "spec": {
                "nodeSelectors": {"matchLabels": {TEST_LABEL: label}},
                "packages": packages,
                **spec,
            },
        }
        made.append(name)
        return dict(
            custom.create_cluster_custom_object(keys.GROUP, keys.VERSION, keys.PLURAL, body)
        )

    yield make
    for name in made:
        try:
            custom.delete_cluster_custom_object(keys.GROUP, keys.VERSION, keys.PLURAL, name)
        except client.ApiException as error:
            if error.status != 404:
                raise


@pytest.fixture
def operator(sandbox: Sandbox, tmp_path: Path) -> Iterator[OperatorProcess]:
    """The operator running against the sandbox, in namespace skyhook."""
    log = tmp_path / "operator.log"
    env = {"SKYHOOK_NAMESPACE": NAMESPACE, "SKYHOOK_RETRY_INTERVAL": "1"}
    process = OperatorProcess(sandbox.kubeconfig, log, env=env).start().wait_ready()
    yield process
    process.stop()
    print("--- operator log (tail) ---")
    print(process.log_tail(60))


def agentless(version: str, sleep: float = 0.5) -> dict[str, Any]:
    """A package whose stages only sleep (the agentless test image runs them)."""
    return {
        "version": version,
        "image": SHELLSCRIPT,
        "agentImageOverride": AGENTLESS,
        "env": [{"name": "SLEEP_LEN", "value": str(sleep)}],
    }


def package_state(
    version: str, stage: str, state: str, restarts: int = 0, name: str = ""
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": name,
        "version": version,
        "image": "ghcr.io/x/" + name,
        "stage": stage,
    }
    if state:
        entry["state"] = state
    if restarts:
        entry["restarts"] = restarts
    return entry


def node_state(**packages: tuple[str, str, str] | tuple[str, str, str, int]) -> str:
    """nodeState annotation value: name=(version, stage, state[, restarts])."""
    body = {
        keys.package_key(name, spec[0]): package_state(*spec, name=name)  # type: ignore[misc]
        for name, spec in packages.items()
    }
    return json.dumps(body, separators=(",", ":"), sort_keys=True)
