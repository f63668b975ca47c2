"""The import rules (the root pyproject.toml's import-linter contracts) hold on this tree, and
each catches its kind of violation: the planner importing aiohttp or the operator, a planner layer
importing one above it, the runtime running the simulator, the CLI needing the operator, and an
import cycle hidden behind TYPE_CHECKING."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
SOURCES = ("schemas", "planner", "operator", "cli", "agent", "sandbox", "dev")


def copy_sources(target: Path) -> Path:
    """Every component's import package side by side in `target`, as lint-imports will see it."""
    for component in SOURCES:
        for package in (ROOT / component / "src").iterdir():
            if package.is_dir() and package.name.startswith("skyhook_"):
                shutil.copytree(
                    package, target / package.name, ignore=shutil.ignore_patterns("*.pyc")
                )
    return target


def lint_imports(source_root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(source_root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-logo", "--no-cache", str(ROOT / "pyproject.toml")],
        capture_output=True,
        text=True,
        env=env,
        cwd=source_root,
    )


def test_contracts_hold_on_this_tree(tmp_path: Path) -> None:
    result = lint_imports(copy_sources(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert " 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        pytest.param(
            "skyhook_planner/rules/stages.py",
            "import aiohttp",
            "The planner decides; it never talks to the cluster",
            id="planner-imports-aiohttp",
        ),
        pytest.param(
            "skyhook_planner/rules/budget.py",
            "from skyhook_operator.kube import client",
            "The planner decides; it never talks to the cluster",
            id="planner-imports-the-runtime",
        ),
        pytest.param(
            "skyhook_planner/model/spec.py",
            "from skyhook_planner.passes import plan",
            "The planner's layers",
            id="model-imports-a-pass",
        ),
        pytest.param(
            "skyhook_operator/reconcile.py",
            "from skyhook_planner.sim import cluster",
            "The operator runtime never runs the simulator",
            id="runtime-imports-the-simulator",
        ),
        pytest.param(
            "skyhook_cli/commands/plan.py",
            "from skyhook_operator import settings",
            "The kubectl plugin needs the planner, never the operator",
            id="cli-imports-the-operator",
        ),
        pytest.param(
            "skyhook_agent/runner.py",
            "from skyhook_planner.model import spec",
            "The agent runs on hosts",
            id="agent-imports-the-planner",
        ),
        pytest.param(
            "skyhook_planner/rules/interrupts.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from skyhook_planner.rules.stages import NodeWork",
            "No import cycles in any package",
            id="type-checking-cycle",
        ),
    ],
)
def test_a_violation_breaks_its_contract(
    tmp_path: Path, module: str, line: str, broken: str
) -> None:
    target = copy_sources(tmp_path) / module
    target.write_text(target.read_text() + "\n" + line + "\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    # Every contract is named in the summary; only broken ones are listed after this heading.
    _, _, broken_section = result.stdout.partition("Broken contracts")
    assert broken in broken_section
