"""The end-to-end scenario list `ci/e2e-kind` runs on kind (ci/e2e/scenarios.py), played here
by the same runner on the sandbox: one operator and two nodes labelled
`skyhook.nvidia.com/test-node=demo` for the whole list, the runner talking to the apiserver
only through kubectl with `sandbox.kubeconfig`. The sandbox serves every shellscript tag from
packages/shellscript, as kind is served the images ci/e2e-kind builds from it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from skyhook_dev.harness import OperatorProcess
from skyhook_operator.kube.client import Kube
from skyhook_sandbox.sandbox import Sandbox

from .conftest import NAMESPACE
from .helpers import TEST_LABEL

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "ci" / "e2e"))
import scenarios

pytestmark = pytest.mark.sandbox


@pytest.fixture(scope="module")
def runner(
    sandbox: Sandbox, kube: Kube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[scenarios.Runner]:
    """Two demo-labelled nodes and one running operator, shared by every scenario."""
    assert TEST_LABEL == scenarios.NODE_LABEL
    nodes = sandbox.add_nodes(
        2, labels={TEST_LABEL: scenarios.NODE_LABEL_VALUE}, prefix="shared-scenarios"
    )
    log = tmp_path_factory.mktemp("shared-scenarios") / "operator.log"
    operator = OperatorProcess(
        sandbox.kubeconfig, log, env={"SKYHOOK_NAMESPACE": NAMESPACE, "SKYHOOK_RETRY_INTERVAL": "1"}
    ).start()
    operator.wait_ready()
    try:
        yield scenarios.Runner(scenarios.Kubectl(str(sandbox.kubeconfig)), timeout=180)
    finally:
        operator.stop()
        print("--- operator log (tail) ---\n" + operator.log_tail())
        sandbox.remove_nodes(nodes)


@pytest.mark.parametrize("scenario", scenarios.SCENARIOS, ids=lambda s: s.name)
def test_shared_scenario(runner: scenarios.Runner, scenario: Any) -> None:
    try:
        runner.play(scenario)
    finally:
        runner.clean_up()
