"""What a package index and a bare `pip install` of one of our wheels see: the licence, complete
metadata, and sibling projects required at exactly their declared versions, kept so by
ci/release."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "ci"))
from _project import project_version  # noqa: E402
from _release import Component, version_edits  # noqa: E402

PROJECTS = sorted(path.parent.name for path in REPO.glob("*/pyproject.toml"))
SIBLING = re.compile(r"^skyhook-(?P<name>[a-z]+)\s*(?P<spec>.*)$")


def _project(name: str) -> dict:
    return tomllib.loads((REPO / name / "pyproject.toml").read_text())["project"]


def _requirements(project: dict) -> list[str]:
    extras = project.get("optional-dependencies", {}).values()
    return [*project.get("dependencies", []), *(r for extra in extras for r in extra)]


def test_the_repository_carries_the_apache_licence() -> None:
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text


@pytest.mark.parametrize("name", PROJECTS)
def test_each_project_declares_its_licence_authors_readme_and_urls(name: str) -> None:
    project = _project(name)
    assert project.get("license") == "Apache-2.0", f"{name}: license"
    assert project.get("authors"), f"{name}: authors"
    readme = project.get("readme")
    assert readme and (REPO / name / readme).is_file(), f"{name}: readme {readme!r}"
    assert project.get("urls"), f"{name}: urls"


@pytest.mark.parametrize("name", PROJECTS)
def test_siblings_are_required_at_exactly_their_declared_version(name: str) -> None:
    for requirement in _requirements(_project(name)):
        sibling = SIBLING.match(requirement)
        if sibling is None:
            continue
        expected = f"=={project_version(sibling['name'])}"
        assert sibling["spec"] == expected, f"{name}: {requirement!r}, expected {expected}"


def test_a_release_moves_every_sibling_pin(tmp_path: Path) -> None:
    for name in PROJECTS:
        (tmp_path / name).mkdir()
        (tmp_path / name / "pyproject.toml").write_text(
            (REPO / name / "pyproject.toml").read_text()
        )
    current = project_version("schemas")
    edits = version_edits(Component("schemas", "project", Path("schemas")), "9.9.9", tmp_path)
    for edit in edits:
        edit.write()
    dependents = [
        name
        for name in PROJECTS
        if any(r.startswith("skyhook-schemas") for r in _requirements(_project(name)))
    ]
    assert dependents, "some project requires skyhook-schemas"
    for name in dependents:
        text = (tmp_path / name / "pyproject.toml").read_text()
        assert '"skyhook-schemas==9.9.9"' in text, name
        assert f'"skyhook-schemas=={current}"' not in text, name
