"""The operator's layer rules (pyproject.toml's import-linter contracts) hold on this tree and
catch each kind of violation: the core importing kopf, the core importing its callers, and an
import cycle hidden behind TYPE_CHECKING."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import skyhook_operator

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = Path(skyhook_operator.__file__).parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(source_root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(source_root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-logo", "--no-cache", str(ROOT / "pyproject.toml")],
        capture_output=True,
        text=True,
        env=env,
        cwd=source_root,
    )


def test_contracts_hold_on_this_tree() -> None:
    result = lint_imports(PACKAGE.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 kept, 0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        pytest.param(
            "core/stages.py",
            "import kopf",
            "The core decides; it never talks to the cluster",
            id="core-imports-kopf",
        ),
        pytest.param(
            "core/budget.py",
            "from skyhook_operator.kube import client",
            "The core decides; it never talks to the cluster",
            id="core-imports-kube",
        ),
        pytest.param(
            "core/stages.py",
            "from skyhook_operator import reconcile",
            "Handlers poke the reconciler",
            id="core-imports-its-caller",
        ),
        pytest.param(
            "core/stages.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from skyhook_operator.core.skyhook import SkyhookPass",
            "No import cycles in the operator",
            id="type-checking-cycle",
        ),
    ],
)
def test_a_violation_breaks_its_contract(
    tmp_path: Path, module: str, line: str, broken: str
) -> None:
    shutil.copytree(PACKAGE, tmp_path / "skyhook_operator", ignore=shutil.ignore_patterns("*.pyc"))
    target = tmp_path / "skyhook_operator" / module
    target.write_text(target.read_text() + "\n" + line + "\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert f"{broken}" in result.stdout
    assert "BROKEN" in result.stdout
