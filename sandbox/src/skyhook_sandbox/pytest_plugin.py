"""pytest fixtures for tests that need a cluster (registered through the pytest11 entry point).

- `sandbox` (session): a started `Sandbox`; the control plane and node host run for the whole
  session. Its kubeconfig is `sandbox.kubeconfig`.
- `sandbox_kubeconfig` (session): that kubeconfig path.
- `sandbox_nodes` (function): a factory, `sandbox_nodes(count=1, labels=None, **kwargs)`,
  returning names of fresh Ready nodes unique to the test; they are removed (with their pods)
  when the test ends.

Nothing here skips: if the control plane cannot be built or started, the fixture errors.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from skyhook_sandbox.sandbox import Sandbox

NodeFactory = Callable[..., list[str]]


@pytest.fixture(scope="session")
def sandbox(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Sandbox]:
    state_dir = tmp_path_factory.mktemp("skyhook-sandbox")
    running = Sandbox(state_dir, backoff_initial=0.5, backoff_max=4.0)
    capture = request.config.pluginmanager.getplugin("capturemanager")
    # A first run builds the control plane for minutes: let its progress reach the terminal.
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="session")
def sandbox_kubeconfig(sandbox: Sandbox) -> Path:
    return sandbox.kubeconfig


@pytest.fixture
def sandbox_nodes(sandbox: Sandbox, request: pytest.FixtureRequest) -> Iterator[NodeFactory]:
    created: list[str] = []
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:30].strip("-") or "t"

    def make(count: int = 1, labels: dict[str, str] | None = None, **kwargs: Any) -> list[str]:
        kwargs.setdefault("prefix", stem)
        names = sandbox.add_nodes(count, labels=labels, **kwargs)
        created.extend(names)
        return names

    yield make
    if created:
        sandbox.remove_nodes(created)
