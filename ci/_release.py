"""Release one component from its Conventional Commits (the logic behind ci/release).

git-cliff reads the history: which commits belong to the component (its commit scope), the
next version they call for, and the changelog section. This module checks an explicit version
against that, edits the version where the component declares it, and makes the release commit
and tag. Nothing here parses a commit message itself.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
import yaml
from _project import ProjectVersionError, project_version, set_project_version, version_file

from skyhook_schemas.tags import check_tag
from skyhook_schemas.versions import VersionError, parse_version

REPO = Path(__file__).resolve().parent.parent
# Components released from their own pyproject.toml; `cli` once the repository has one.
PROJECTS = ("operator", "agent", "schemas", "planner", "sandbox", "cli")
LEVELS = ("patch", "minor", "major")
BREAKING_GROUP = "<!-- 0 -->Breaking changes"
FEATURES_GROUP = "<!-- 1 -->Features"


class ReleaseError(RuntimeError):
    """The release cannot go ahead; the message says why and what to do."""


@dataclass(frozen=True)
class Component:
    name: str
    kind: str  # "project", "chart" or "package"
    directory: Path  # relative to the repository root

    @property
    def tag_prefix(self) -> str:
        """Packages tag `<package>/<X.Y.Z>`; everything else `<component>/vX.Y.Z`."""
        return f"{self.name}/" if self.kind == "package" else f"{self.name}/v"

    def tag(self, version: str) -> str:
        return self.tag_prefix + version

    @property
    def changelog(self) -> Path:
        return self.directory / "CHANGELOG.md"


def find_component(name: str, repo: Path = REPO) -> Component:
    if name in PROJECTS:
        if not (repo / name / "pyproject.toml").is_file():
            raise ReleaseError(f"component {name!r}: {name}/pyproject.toml does not exist")
        return Component(name, "project", Path(name))
    if name == "chart":
        return Component(name, "chart", Path("chart"))
    if (repo / "packages" / name / "config.json").is_file():
        return Component(name, "package", Path("packages") / name)
    packages = sorted(path.parent.name for path in (repo / "packages").glob("*/config.json"))
    raise ReleaseError(
        f"component {name!r} is not releasable; choose one of "
        f"{', '.join([*PROJECTS, 'chart', *packages])}"
    )


# --- where versions live ------------------------------------------------------------------


@dataclass(frozen=True)
class Edit:
    """One version string changed in one file."""

    path: Path  # relative to the repository root
    field: str
    old: str
    new: str
    write: Callable[[], object]

    def __str__(self) -> str:
        return f"{self.path}: {self.field} {self.old} -> {self.new}"


def current_version(component: Component, repo: Path = REPO) -> str:
    if component.kind == "project":
        try:
            return project_version(component.name, repo)
        except ProjectVersionError as error:
            raise ReleaseError(str(error)) from None
    if component.kind == "chart":
        return str(_chart(repo)["version"])
    return str(_package_config(component, repo)["package_version"])


def version_edits(component: Component, version: str, repo: Path = REPO) -> list[Edit]:
    """Every version string a release of ``component`` at ``version`` changes."""
    old = current_version(component, repo)
    if component.kind == "project":
        path = version_file(component.name, repo).relative_to(repo)
        edits = [
            Edit(
                path,
                "version",
                old,
                version,
                lambda: set_project_version(component.name, version, repo),
            )
        ]
    elif component.kind == "chart":
        edits = [_yaml_edit(repo, Path("chart/Chart.yaml"), ("version",), old, version)]
    else:
        config = component.directory / "config.json"
        edits = [
            Edit(
                config,
                "package_version",
                old,
                version,
                lambda: _set_package_version(repo / config, old, version),
            )
        ]
    # Sibling projects depend on each other at exactly the released version, so a bare
    # `pip install` of one wheel never resolves another from an index at some other version.
    if component.kind == "project":
        edits += sibling_pin_edits(component.name, old, version, repo)
    # The chart recommends an operator (appVersion) and pins the agent image (values.yaml), so
    # those move with each operator and agent release; the chart's own release then follows.
    if component.name == "operator":
        app_version = str(_chart(repo)["appVersion"])
        edits.append(
            _yaml_edit(repo, Path("chart/Chart.yaml"), ("appVersion",), app_version, version)
        )
    if component.name == "agent":
        values = yaml.safe_load((repo / "chart/values.yaml").read_text())
        pinned = str(values["agent"]["image"]["tag"])
        edits.append(
            _yaml_edit(
                repo, Path("chart/values.yaml"), ("agent", "image", "tag"), pinned, f"v{version}"
            )
        )
    return [edit for edit in edits if edit.old != edit.new]


def sibling_pin_edits(name: str, old: str, new: str, repo: Path = REPO) -> list[Edit]:
    """The `skyhook-<name>==<old>` requirement in every other project's pyproject.toml."""
    pin = f'"skyhook-{name}=={old}"'
    edits = []
    for pyproject in sorted(repo.glob("*/pyproject.toml")):
        if pyproject.parent.name != name and pin in pyproject.read_text():
            edits.append(
                Edit(
                    pyproject.relative_to(repo),
                    f"skyhook-{name} requirement",
                    old,
                    new,
                    lambda path=pyproject: path.write_text(
                        path.read_text().replace(pin, f'"skyhook-{name}=={new}"')
                    ),
                )
            )
    return edits


def _chart(repo: Path) -> dict[str, Any]:
    return dict(yaml.safe_load((repo / "chart/Chart.yaml").read_text()))


def _package_config(component: Component, repo: Path) -> dict[str, Any]:
    return dict(json.loads((repo / component.directory / "config.json").read_text()))


def _set_package_version(config: Path, old: str, new: str) -> None:
    """Change the one `package_version` value, keeping the file's layout."""
    text, count = re.subn(
        rf'("package_version"\s*:\s*"){re.escape(old)}"',
        rf'\g<1>{new}"',
        config.read_text(),
        count=1,
    )
    if count != 1:
        raise ReleaseError(f'{config}: no "package_version": "{old}" to change')
    config.write_text(text)


def _yaml_edit(repo: Path, path: Path, keys: tuple[str, ...], old: str, new: str) -> Edit:
    return Edit(
        path, ".".join(keys), old, new, lambda: _set_yaml_scalar(repo / path, keys, old, new)
    )


def _set_yaml_scalar(path: Path, keys: tuple[str, ...], old: str, new: str) -> None:
    """Change one block-style scalar in place, so comments and layout stay as written."""
    lines = path.read_text().splitlines(keepends=True)
    found: tuple[int, int] | None = (-1, -1)  # the parent's line and indentation
    for key in keys:
        found = _child_line(lines, *found, key) if found else None
    if found is None:
        raise ReleaseError(f"{path}: no {'.'.join(keys)} to change")
    key, _, value = lines[found[0]].partition(":")
    if old not in value:
        raise ReleaseError(f"{path}: {'.'.join(keys)} is not {old}")
    lines[found[0]] = f"{key}:{value.replace(old, new, 1)}"
    path.write_text("".join(lines))


def _child_line(
    lines: list[str], parent: int, parent_indent: int, key: str
) -> tuple[int, int] | None:
    """The line (and indentation) of ``key`` directly inside the mapping opened at ``parent``."""
    child_indent = None
    for index in range(parent + 1, len(lines)):
        content = lines[index].strip()
        if not content or content.startswith("#"):
            continue
        indent = len(lines[index]) - len(lines[index].lstrip())
        if indent <= parent_indent:
            return None  # the parent mapping ended
        child_indent = indent if child_indent is None else child_indent
        if indent == child_indent and content.startswith(f"{key}:"):
            return index, indent
    return None


# --- what the commits allow ----------------------------------------------------------------


def level_of(current: str, candidate: str) -> str | None:
    """Which bump turns ``current`` into ``candidate`` (prerelease tags ignored), if any."""
    base = parse_version(current)
    core = parse_version(candidate).finalize_version()
    for level in LEVELS:
        if base.next_version(level) == core:
            return level
    return None


def check_requested(current: str, required: str, requested: str) -> str:
    """``requested`` when it follows from the commits: the next patch, minor or major of
    ``current`` (optionally a prerelease of it), at least the bump ``required`` is."""
    try:
        parsed = parse_version(requested)
    except VersionError as error:
        raise ReleaseError(f"version: {error}") from None
    if parsed.build:
        raise ReleaseError(f"version {requested}: build metadata (+{parsed.build}) is not released")
    level = level_of(current, requested)
    if level is None:
        base = parse_version(current)
        following = ", ".join(str(base.next_version(level)) for level in LEVELS)
        raise ReleaseError(
            f"version {requested} does not follow {current}: the next version is one of {following}"
        )
    needed = level_of(current, required) or "patch"
    if LEVELS.index(level) < LEVELS.index(needed):
        raise ReleaseError(
            f"version {requested} is a {level} release, but the commits call for at least "
            f"{required} ({needed})"
        )
    return str(parsed)


# --- git-cliff --------------------------------------------------------------------------------


def commit_parsers(component: Component) -> list[dict[str, str | bool]]:
    """The commits that go into ``component``'s changelog and version: its own scope's feat,
    fix, perf, revert and breaking commits; for the chart also the operator and agent releases
    it now pins. Other types (docs, test, refactor, ...) are not released on their own."""
    scope = re.escape(component.name)
    parsers: list[dict[str, str | bool]] = [
        {"message": rf"^[a-z]+\({scope}\)!:", "group": BREAKING_GROUP},
        {
            "message": rf"^[a-z]+\({scope}\):",
            "field": "breaking",
            "pattern": "true",
            "group": BREAKING_GROUP,
        },
        {"message": rf"^feat\({scope}\):", "group": FEATURES_GROUP},
        {"message": rf"^fix\({scope}\):", "group": "<!-- 2 -->Bug fixes"},
        {"message": rf"^perf\({scope}\):", "group": "<!-- 3 -->Performance"},
        {"message": rf"^revert\({scope}\):", "group": "<!-- 4 -->Reverts"},
    ]
    if component.kind == "chart":
        parsers.append(
            {
                "message": r"^chore\((operator|agent)\): release ",
                "group": "<!-- 5 -->Pinned ${1}",
            }
        )
    return [*parsers, {"message": ".", "skip": True}]


def cliff_config(component: Component, repo: Path = REPO) -> str:
    """ci/cliff.toml plus the component's [git] section, as TOML text."""
    document = tomlkit.parse((repo / "ci" / "cliff.toml").read_text())
    parsers = tomlkit.array()
    for parser in commit_parsers(component):
        table = tomlkit.inline_table()
        table.update(parser)
        parsers.append(table)
    git = tomlkit.table()
    git["conventional_commits"] = True
    git["filter_unconventional"] = True
    git["tag_pattern"] = f"^{re.escape(component.tag_prefix)}[0-9]+\\.[0-9]+\\.[0-9]+"
    git["sort_commits"] = "oldest"
    git["commit_parsers"] = parsers
    document["git"] = git
    return tomlkit.dumps(document)


def git_cliff_binary() -> str:
    beside = Path(sys.executable).parent / "git-cliff"  # the tox env's bin/, even off PATH
    found = str(beside) if beside.is_file() else shutil.which("git-cliff")
    if found is None:
        raise ReleaseError("git-cliff is not installed: run through tox (tox -e release -- ...)")
    return found


def run_cliff(component: Component, *args: str, repo: Path = REPO) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".toml", prefix="cliff-") as config:
        config.write(cliff_config(component, repo))
        config.flush()
        result = subprocess.run(
            [git_cliff_binary(), "--config", config.name, *args],
            cwd=repo,
            capture_output=True,
            text=True,
        )
    if result.returncode != 0:
        raise ReleaseError(f"git-cliff {' '.join(args)} failed:\n{result.stderr.strip()}")
    return result.stdout


# --- the release ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Release:
    component: Component
    current: str
    version: str
    previous_tag: str | None
    commits: list[dict[str, Any]]
    changelog_section: str
    edits: list[Edit]

    @property
    def tag(self) -> str:
        return self.component.tag(self.version)

    @property
    def commit_subject(self) -> str:
        return f"chore({self.component.name}): release {self.version}"


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise ReleaseError(f"git {' '.join(args)} failed: {result.stderr.strip()}")
    return result


def plan_release(name: str, requested: str | None, repo: Path = REPO) -> Release:
    component = find_component(name, repo)
    current = current_version(component, repo)
    unreleased = json.loads(run_cliff(component, "--unreleased", "--context", repo=repo))[0]
    commits = unreleased["commits"]
    previous_tag = (unreleased.get("previous") or {}).get("version")
    since = previous_tag or "the start of history"
    if not commits:
        raise ReleaseError(
            f"nothing to release: no feat, fix, perf, revert or breaking commit with scope "
            f"({name}) since {since}"
        )
    if previous_tag:
        tagged = previous_tag.removeprefix(component.tag_prefix)
        if tagged != current:
            raise ReleaseError(
                f"{component.name} declares version {current} but its last tag is {previous_tag}; "
                f"ci/release bumps the version itself: set it back to {tagged}, or tag the commit "
                f"that released {current}"
            )
        required = run_cliff(component, "--unreleased", "--bumped-version", repo=repo).strip()
        required = required.removeprefix(component.tag_prefix)
        version = (
            required
            if requested is None
            else _explained(current, required, requested, commits, since)
        )
    else:
        version = _first_version(component, current, requested, repo)
    tag = component.tag(version)
    if (
        git(repo, "rev-parse", "--verify", "--quiet", f"refs/tags/{tag}", check=False).returncode
        == 0
    ):
        raise ReleaseError(f"tag {tag} already exists")
    section = run_cliff(component, "--unreleased", "--tag", tag, "--strip", "all", repo=repo)
    return Release(
        component,
        current,
        version,
        previous_tag,
        commits,
        section.strip() + "\n",
        version_edits(component, version, repo),
    )


def _explained(
    current: str, required: str, requested: str, commits: list[dict[str, Any]], since: str
) -> str:
    """check_requested, with the commits that forced a bigger bump named in the refusal."""
    try:
        return check_requested(current, required, requested)
    except ReleaseError as error:
        forcing = [c for c in commits if c["group"] in (BREAKING_GROUP, FEATURES_GROUP)]
        lines = [f"  {c['id'][:7]} {c['raw_message'].splitlines()[0]}" for c in forcing]
        if "commits call for" in str(error) and lines:
            raise ReleaseError("\n".join([f"{error}; since {since}:", *lines])) from None
        raise


def _first_version(component: Component, current: str, requested: str | None, repo: Path) -> str:
    """No earlier tag: the version the files declare now, or a later one asked for."""
    version = current
    if requested is not None:
        try:
            if parse_version(requested).compare(current) < 0:
                raise ReleaseError(f"version {requested} is lower than the declared {current}")
        except VersionError as error:
            raise ReleaseError(f"version: {error}") from None
        version = str(parse_version(requested))
    changelog = repo / component.changelog
    if changelog.is_file() and re.search(
        rf"^## {re.escape(version)}(\s|$)", changelog.read_text(), re.M
    ):
        raise ReleaseError(
            f"{component.changelog} already has {version}, but no tag "
            f"{component.tag(version)} exists: tag the commit that released it "
            f"(git tag {component.tag(version)} <commit>) and run ci/release again"
        )
    return version


def changelog_text(existing: str | None, name: str, section: str) -> str:
    """``section`` above the older releases, under the file's title (kept as written)."""
    if existing is None:
        return f"# Changelog: {name}\n\n{section}"
    match = re.search(r"^## ", existing, re.M)
    head, rest = (existing[: match.start()], existing[match.start() :]) if match else (existing, "")
    return f"{head.rstrip()}\n\n{section}\n{rest}".rstrip() + "\n"


def dirty_files(repo: Path) -> list[str]:
    return git(repo, "status", "--porcelain", "--untracked-files=no").stdout.splitlines()


def post_write_problems(release: Release, repo: Path) -> list[str]:
    """What ci/build-package or ci/build-image would refuse about the edited tree."""
    component = release.component
    if component.kind == "package":
        return [str(error) for error in check_tag(release.tag, repo / "packages")]
    if component.kind == "project" and project_version(component.name, repo) != release.version:
        return [f"{component.name} declares {project_version(component.name, repo)} after the edit"]
    if component.kind == "chart" and str(_chart(repo)["version"]) != release.version:
        return [f"chart/Chart.yaml version is {_chart(repo)['version']} after the edit"]
    return []


def apply_release(
    release: Release, repo: Path, package_chart: Callable[[], Path] | None = None
) -> Path | None:
    """Edit, changelog, (chart: package), commit and tag; every file is restored on failure.
    Returns the chart package when one was made."""
    changelog = repo / release.component.changelog
    touched = [repo / edit.path for edit in release.edits] + [changelog]
    originals = {path: path.read_text() if path.is_file() else None for path in touched}
    try:
        for edit in release.edits:
            edit.write()
        existing = originals[changelog]
        changelog.write_text(
            changelog_text(existing, release.component.name, release.changelog_section)
        )
        problems = post_write_problems(release, repo)
        if problems:
            raise ReleaseError(
                "the edited files would not be released:\n  " + "\n  ".join(problems)
            )
        chart_package = package_chart() if package_chart is not None else None
        git(repo, "add", "--", *(str(path.relative_to(repo)) for path in touched))
        message = f"{release.commit_subject}\n\n{release.changelog_section}"
        git(repo, "commit", "--quiet", "-m", message)
    except BaseException:
        for path, text in originals.items():
            if text is None:
                path.unlink(missing_ok=True)
            else:
                path.write_text(text)
        git(
            repo,
            "reset",
            "--quiet",
            "--",
            *(str(path.relative_to(repo)) for path in touched),
            check=False,
        )
        raise
    git(
        repo,
        "tag",
        "--annotate",
        release.tag,
        "--message",
        f"{release.component.name} {release.version}",
    )
    return chart_package
