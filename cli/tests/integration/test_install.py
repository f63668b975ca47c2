"""The plugin as a user installs it: `pip install ./schemas ./planner ./cli` into a fresh venv
brings none of the operator's stack (aiohttp, cryptography, oras, prometheus-client), and the
installed `kubectl-skyhook` runs `node list` and `plan` against the sandbox.

Needs PyPI (or pip's cache) for the third-party dependencies.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from skyhook_sandbox.sandbox import Sandbox
from skyhook_schemas import keys

from ..conftest import Result, agentless, node_state

pytestmark = [pytest.mark.sandbox, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
PROJECTS = ("schemas", "planner", "cli")
OURS = ("skyhook-cli", "skyhook-planner", "skyhook-schemas")
FORBIDDEN = ("aiohttp", "cryptography", "oras", "prometheus-client", "skyhook-operator")
LEFT_BEHIND = shutil.ignore_patterns(
    "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis"
)


def run(args: list[str], timeout: float, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)


def clean_env() -> dict[str, str]:
    """This process's environment without anything that would let the venv see our packages."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME"}}
    env.pop("VIRTUAL_ENV", None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def requirement_edges(report: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    """name -> [(required name, requirement text)] from a `pip install --report` document,
    keeping only unconditional requirements (no extra, marker true here)."""
    edges: dict[str, list[tuple[str, str]]] = {}
    for item in report.get("install", []):
        meta = item["metadata"]
        wanted = []
        for text in meta.get("requires_dist") or []:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                wanted.append((canonicalize_name(req.name), text))
        edges[canonicalize_name(meta["name"])] = wanted
    return edges


def chain(edges: dict[str, list[tuple[str, str]]], target: str) -> str:
    """How `target` got in: the shortest requirement path from one of our projects."""
    seen = set(OURS)
    queue = deque((name, name) for name in OURS)
    while queue:
        name, path = queue.popleft()
        for required, text in edges.get(name, []):
            if required in seen:
                continue
            step = f"{path} -> {text}"
            if required == target:
                return step
            seen.add(required)
            queue.append((required, step))
    return "(no requirement path found in pip's report)"


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A fresh venv with the three projects installed from their directories (non-editable),
    and pip's installation report."""
    base = tmp_path_factory.mktemp("install")
    home = base / "venv"
    # Built from copies: setuptools would otherwise leave build/ directories in the checkout.
    sources = []
    for project in PROJECTS:
        copy = base / "src" / project
        shutil.copytree(ROOT / project, copy, ignore=LEFT_BEHIND)
        sources.append(str(copy))
    env = clean_env()
    made = run([sys.executable, "-m", "venv", str(home)], 120, env)
    assert made.returncode == 0, made.stderr
    report = home.parent / "report.json"
    installed = run(
        [
            str(home / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "-q",
            "--no-compile",
            "--report",
            str(report),
            *sources,
        ],
        600,
        env,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return home, json.loads(report.read_text())


def test_fresh_install_brings_none_of_the_operator_stack(venv: tuple[Path, dict[str, Any]]) -> None:
    home, report = venv
    listed = run(
        [str(home / "bin" / "python"), "-m", "pip", "list", "--format=json"], 120, clean_env()
    )
    assert listed.returncode == 0, listed.stderr
    names = {canonicalize_name(d["name"]) for d in json.loads(listed.stdout)}
    missing = [name for name in OURS if name not in names]
    assert not missing, f"not installed: {missing}; installed: {sorted(names)}"
    edges = requirement_edges(report)
    pulled = [f"{name} via {chain(edges, name)}" for name in FORBIDDEN if name in names]
    assert not pulled, (
        "a fresh install of schemas, planner and cli pulled in: "
        + "; ".join(pulled)
        + f"\ninstalled: {sorted(names)}"
    )


def test_installed_plugin_runs_node_list_and_plan(
    *,
    venv: tuple[Path, dict[str, Any]],
    sandbox: Sandbox,
    core: client.CoreV1Api,
    nodes: Callable[[int], list[str]],
    skyhooks: Callable[..., Any],
    label: str,
) -> None:
    home, _ = venv
    plugin = home / "bin" / "kubectl-skyhook"
    assert plugin.exists(), f"no console script at {plugin}"
    nodewright = home / "bin" / "kubectl-nodewright"
    assert run([str(nodewright), "--version"], 60, clean_env()).returncode == 0, nodewright

    def cli(*args: str) -> Result:
        done = run([str(plugin), "--kubeconfig", str(sandbox.kubeconfig), *args], 120, clean_env())
        return Result(done.returncode, done.stdout, done.stderr)

    # As the operator leaves them mid-rollout: the first node done, the second half way.
    first, second, third = nodes(3)
    skyhooks(label, {"pkg": agentless("1.0.0")}, interruptionBudget={"count": 1})
    for node, state, status in (
        (first, node_state(pkg=("1.0.0", "config", "complete")), "complete"),
        (second, node_state(pkg=("1.0.0", "apply", "in_progress")), "in_progress"),
    ):
        annotations = {keys.node_state_key(label): state, keys.node_status_key(label): status}
        core.patch_node(node, {"metadata": {"annotations": annotations}})

    listed = cli("node", "list", "--skyhook", label)
    assert listed.code == 0, listed.err
    lines = listed.out.splitlines()
    assert lines[:3] == [
        f"Skyhook: {label}",
        "",
        "Summary: 2 nodes (1 complete, 0 erroring, 1 in progress)",
    ], listed.out
    rows = [line.split() for line in lines[4:]]
    assert rows == [
        ["NODE", "STATUS", "PACKAGES"],
        ["----", "------", "--------"],
        [first, "complete", "1/1"],
        [second, "in_progress", "0/1"],
    ], listed.out

    planned = cli("plan", label, "--stage-seconds", "5")
    assert planned.code == 0, planned.err
    lines = planned.out.splitlines()
    assert lines[:3] == [
        f"Skyhook: {label}",
        "Selected nodes: 3 (at most 1 at once), already complete: 1, blocked: 0",
        "Estimated duration: 20s",
    ], planned.out
    waves = [line for line in lines if line.startswith("Wave ")]
    assert waves == [
        f"Wave 1 (starts at +0s): {second}",
        f"Wave 2 (starts at +10s): {third}",
    ], planned.out
    stages = [line.split() for line in lines if line.startswith(label)]
    assert stages == [
        [second, "pkg|1.0.0", "apply", "+0s"],
        [second, "pkg|1.0.0", "config", "+5s"],
        [third, "pkg|1.0.0", "apply", "+10s"],
        [third, "pkg|1.0.0", "config", "+15s"],
    ], planned.out
