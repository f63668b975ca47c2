"""The sandbox's own tests use its pytest plugin's fixtures (`sandbox`, `sandbox_nodes`)."""

from __future__ import annotations

import pytest
from kubernetes.client import CoreV1Api

from skyhook_sandbox.kubeapi import core_v1
from skyhook_sandbox.sandbox import Sandbox


@pytest.fixture(scope="session")
def api(sandbox: Sandbox) -> CoreV1Api:
    return core_v1(sandbox)
