"""The version a component project declares, read the way setuptools reads it.

`[project] version` when static; with `dynamic = ["version"]`, the string assigned to the
attribute `[tool.setuptools.dynamic] version = {attr = "pkg.__version__"}` names (found in
src/, without importing the package, as setuptools does for a literal assignment).
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class ProjectVersionError(ValueError):
    """The project's version cannot be determined; the message names the file."""


def project_version(component: str, repo: Path = REPO) -> str:
    pyproject = repo / component / "pyproject.toml"
    with pyproject.open("rb") as handle:
        document = tomllib.load(handle)
    project = document.get("project", {})
    if "version" in project:
        return str(project["version"])
    attr = document.get("tool", {}).get("setuptools", {}).get("dynamic", {}).get("version", {})
    if "version" not in project.get("dynamic", []) or "attr" not in attr:
        raise ProjectVersionError(f"{pyproject}: no [project] version and no dynamic version attr")
    module, _, name = attr["attr"].rpartition(".")
    base = repo / component / "src" / Path(*module.split("."))
    source = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    for node in ast.parse(source.read_text()).body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value.value
    raise ProjectVersionError(f"{source}: no literal assignment {name} = '...'")
