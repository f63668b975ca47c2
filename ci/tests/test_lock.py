"""The lock (constraints.txt, written by ci/lock) and the base image pins: every range the project
declares admits its locked version, every place that installs Python distributions installs
the locked ones, and every base image is pinned by digest."""

from __future__ import annotations

import configparser
import importlib.machinery
import importlib.metadata
import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
LOCK = REPO / "constraints.txt"
PIN = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;]+)(?: ; (?P<marker>.+))?$"
)


def _load_lock_script():
    loader = importlib.machinery.SourceFileLoader("ci_lock", str(REPO / "ci" / "lock"))
    spec = importlib.util.spec_from_loader("ci_lock", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


LOCK_SCRIPT = _load_lock_script()
OURS = {canonicalize_name(name) for name in LOCK_SCRIPT.project_names()}


def _lock_lines() -> list[str]:
    return [line for line in LOCK.read_text().splitlines() if line and not line.startswith("#")]


def _pins() -> dict[str, list[str]]:
    pins: dict[str, list[str]] = {}
    for line in _lock_lines():
        match = PIN.match(line)
        assert match, line
        pins.setdefault(canonicalize_name(match["name"]), []).append(match["version"])
    return pins


def _declared() -> list[tuple[str, str]]:
    """(where, requirement) for every third-party requirement the project names."""
    found = []
    for project in LOCK_SCRIPT.PROJECTS:
        data = tomllib.loads((REPO / project / "pyproject.toml").read_text())["project"]
        extras = data.get("optional-dependencies", {})
        for requirement in [
            *data.get("dependencies", []),
            *(r for e in extras.values() for r in e),
        ]:
            found.append((f"{project}/pyproject.toml", requirement))
    found += [("tox.ini", requirement) for requirement in LOCK_SCRIPT.tox_tool_requirements()]
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(REPO / "tox.ini")
    found += [
        ("tox.ini [tox] requires", line.strip()) for line in parser["tox"]["requires"].split()
    ]
    bootstrap = (REPO / "ci" / "bootstrap").read_text()
    found += [
        ("ci/bootstrap", requirement)
        for requirement in re.findall(r"'(tox[a-z-]*>=[\d.]+)'", bootstrap)
    ]
    return [(where, r) for where, r in found if canonicalize_name(Requirement(r).name) not in OURS]


def test_each_line_of_the_lock_is_one_exact_pin() -> None:
    lines = _lock_lines()
    assert len(lines) > 50
    assert [line for line in lines if not PIN.match(line)] == []


@pytest.mark.parametrize("where,requirement", _declared(), ids=lambda value: value)
def test_every_declared_range_admits_its_locked_version(where: str, requirement: str) -> None:
    parsed = Requirement(requirement)
    versions = _pins().get(canonicalize_name(parsed.name))
    assert versions, f"{where}: {parsed.name} is not in constraints.txt (run ci/lock)"
    for version in versions:
        assert parsed.specifier.contains(version, prereleases=True), (
            f"{where}: {requirement} does not admit the locked {parsed.name}=={version} (run ci/lock)"
        )


def test_this_environment_runs_the_locked_versions() -> None:
    """tox installs through UV_CONSTRAINT: what runs the tests is what the lock says."""
    pins = _pins()
    seeded = {"pip", "setuptools", "wheel"}  # the virtualenv's own seed (tox.ini: uv_seed)
    wrong = {}
    for distribution in importlib.metadata.distributions():
        name = canonicalize_name(distribution.metadata["Name"])
        if name in OURS or name in seeded:
            continue
        if distribution.version not in pins.get(name, []):
            wrong[name] = (distribution.version, pins.get(name, "not locked"))
    assert wrong == {}


def test_every_install_site_installs_the_locked_versions() -> None:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(REPO / "tox.ini")
    assert "UV_CONSTRAINT = {toxinidir}/constraints.txt" in tox["testenv"]["setenv"]
    assert (
        '--constraint "$(dirname "$0")/../constraints.txt"' in (REPO / "ci/bootstrap").read_text()
    )
    assert '"--constraint", str(LOCK)' in (REPO / "ci/build-cli").read_text()
    for component in ("operator", "agent"):
        dockerfile = (REPO / component / "Dockerfile").read_text()
        assert "COPY constraints.txt /src/constraints.txt" in dockerfile
        commands = dockerfile.replace("\\\n", " ").splitlines()  # continuation lines joined
        installs = [line for line in commands if "pip install" in line]
        assert installs and all("--constraint /src/constraints.txt" in line for line in installs)
        ignore = (REPO / component / "Dockerfile.dockerignore").read_text().splitlines()
        assert "!constraints.txt" in ignore
    for workflow in sorted((REPO / ".github" / "workflows").glob("*.yaml")):
        for line in workflow.read_text().splitlines():
            if "pip install" in line:
                assert "--constraint constraints.txt" in line, f"{workflow.name}: {line.strip()}"


def test_every_base_image_is_pinned_by_digest() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "ci" / "base-images"), "list"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    listed = {line.split("\t")[0] for line in result.stdout.splitlines()}
    built_from_an_arg = {
        str(path.relative_to(REPO))
        for path in REPO.glob("**/Dockerfile")
        if re.search(r"^FROM \$\{[A-Z_]*IMAGE\}", path.read_text(), re.MULTILINE)
        and ".tox" not in path.parts
    }
    assert built_from_an_arg and built_from_an_arg <= listed
