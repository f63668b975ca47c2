"""The version a component project declares, read the way setuptools reads it, and rewritten.

`[project] version` when static; with `dynamic = ["version"]`, the string assigned to the
attribute `[tool.setuptools.dynamic] version = {attr = "pkg.__version__"}` names (found in
src/, without importing the package, as setuptools does for a literal assignment).
`set_project_version` changes that one string where it lives and nothing else (tomlkit keeps
the rest of pyproject.toml byte for byte); only ci/release needs it, hence the lazy import.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


class ProjectVersionError(ValueError):
    """The project's version cannot be determined; the message names the file."""


def project_version(component: str, repo: Path = REPO) -> str:
    pyproject = repo / component / "pyproject.toml"
    if not pyproject.is_file():
        raise ProjectVersionError(f"{pyproject} does not exist")
    with pyproject.open("rb") as handle:
        document = tomllib.load(handle)
    if "version" in document.get("project", {}):
        return str(document["project"]["version"])
    source, name = _dynamic_version_attr(pyproject, document)
    return str(_version_literal(source, name).value)


def version_file(component: str, repo: Path = REPO) -> Path:
    """The file holding ``component``'s version: pyproject.toml, or the dynamic attr's module."""
    pyproject = repo / component / "pyproject.toml"
    with pyproject.open("rb") as handle:
        document = tomllib.load(handle)
    if "version" in document.get("project", {}):
        return pyproject
    return _dynamic_version_attr(pyproject, document)[0]


def set_project_version(component: str, version: str, repo: Path = REPO) -> Path:
    """Write ``version`` where ``component`` declares it; returns the file changed."""
    import tomlkit  # noqa: PLC0415 - only ci/release edits; ci/build-image needs just tomllib

    pyproject = repo / component / "pyproject.toml"
    document = tomlkit.parse(pyproject.read_text())
    project = document.get("project", {})
    if "version" in project:
        project["version"] = version
        pyproject.write_text(tomlkit.dumps(document))
        return pyproject
    source, name = _dynamic_version_attr(pyproject, document.unwrap())
    literal = _version_literal(source, name)
    lines = source.read_text().splitlines(keepends=True)
    line = lines[literal.lineno - 1]
    lines[literal.lineno - 1] = (
        f'{line[: literal.col_offset]}"{version}"{line[literal.end_col_offset :]}'
    )
    source.write_text("".join(lines))
    return source


def _dynamic_version_attr(pyproject: Path, document: dict[str, Any]) -> tuple[Path, str]:
    """The module and the name of the literal a dynamic version attr points at."""
    project = document.get("project", {})
    attr = document.get("tool", {}).get("setuptools", {}).get("dynamic", {}).get("version", {})
    if "version" not in project.get("dynamic", []) or "attr" not in attr:
        raise ProjectVersionError(f"{pyproject}: no [project] version and no dynamic version attr")
    module, _, name = attr["attr"].rpartition(".")
    base = pyproject.parent / "src" / Path(*module.split("."))
    return (base / "__init__.py" if base.is_dir() else base.with_suffix(".py")), name


def _version_literal(source: Path, name: str) -> ast.Constant:
    for node in ast.parse(source.read_text()).body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value
    raise ProjectVersionError(f"{source}: no literal assignment {name} = '...'")
