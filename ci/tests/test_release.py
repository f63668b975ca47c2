"""ci/release on throwaway git repositories holding copies of the files it edits.

Each test commits Conventional Commits into its own repository, runs the real script (with the
git-cliff tox installs) and checks what a maintainer sees: version files, changelog lines, the
release commit and tag, and that ci/build-package and ci/build-image accept the tag.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "ci"))
from _release import ReleaseError, changelog_text, check_requested  # noqa: E402

CI_FILES = ("release", "_release.py", "_project.py", "_helm.py", "_gotool.py", "cliff.toml")
CI_BUILDERS = ("build-image", "build-package", "_buildx.py", "_sbom.py")
COPIED = (
    "chart",
    "operator/pyproject.toml",
    "agent/pyproject.toml",
    "agent/src/skyhook_agent/__init__.py",
    "packages/shellscript",
)
# The starting point: every component released once at the version its files declare.
FIRST_TAGS = ("operator/v0.1.0", "agent/v0.1.0", "chart/v0.1.0", "shellscript/1.1.1")
GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "Release Test",
    "GIT_AUTHOR_EMAIL": "release@example.com",
    "GIT_COMMITTER_NAME": "Release Test",
    "GIT_COMMITTER_EMAIL": "release@example.com",
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, env=GIT_ENV, capture_output=True, text=True, check=True
    ).stdout.strip()


def commit(repo: Path, message: str) -> str:
    """Commit ``message`` (touching a scratch file) and return its short sha."""
    scratch = repo / "scratch.txt"
    scratch.write_text(scratch.read_text() + message + "\n" if scratch.exists() else message)
    git(repo, "add", "scratch.txt")
    git(repo, "commit", "--quiet", "-m", message)
    return git(repo, "rev-parse", "--short=7", "HEAD")


def release(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(repo / "ci" / "release"), *args],
        cwd=repo,
        env=GIT_ENV,
        capture_output=True,
        text=True,
    )


def state(repo: Path) -> tuple[str, str, str]:
    """HEAD, the tag list and the working tree's status: what a release may change."""
    return (
        git(repo, "rev-parse", "HEAD"),
        git(repo, "tag", "--list"),
        git(repo, "status", "--porcelain", "--untracked-files=all"),
    )


def declared(repo: Path, component: str) -> str:
    if component == "chart":
        return str(yaml.safe_load((repo / "chart/Chart.yaml").read_text())["version"])
    if component == "shellscript":
        config = json.loads((repo / "packages/shellscript/config.json").read_text())
        return str(config["package_version"])
    if component == "agent":
        text = (repo / "agent/src/skyhook_agent/__init__.py").read_text()
        return text.split('__version__ = "')[1].split('"')[0]
    return str(
        tomllib.loads((repo / component / "pyproject.toml").read_text())["project"]["version"]
    )


@pytest.fixture(scope="session")
def template_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("release-template")
    for name in CI_FILES + CI_BUILDERS:
        (repo / "ci").mkdir(exist_ok=True)
        shutil.copy2(REPO / "ci" / name, repo / "ci" / name)
    for relative in COPIED:
        source, target = REPO / relative, repo / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():  # symlinks (the chart's CRD) become the files they point at
            shutil.copytree(source, target, symlinks=False)
        else:
            shutil.copy2(source, target)
    _declare_first_versions(repo)
    (repo / ".gitignore").write_text("dist/\n")
    git(repo, "init", "--quiet", "--initial-branch=main")
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "-m", "chore(repo): start")
    for tag in FIRST_TAGS:
        git(repo, "tag", "--annotate", tag, "--message", tag)
    return repo


def _declare_first_versions(repo: Path) -> None:
    """The copied files declare the versions FIRST_TAGS name, whatever this checkout has
    released since: the tests are about the release tool, not about this repository's
    versions."""
    first = dict(tag.split("/") for tag in FIRST_TAGS)
    first = {name: version.removeprefix("v") for name, version in first.items()}
    for name in ("operator", "agent", "chart", "shellscript"):
        now = declared(repo, name)
        if name == "operator":
            _replace(
                repo / "operator/pyproject.toml", f'version = "{now}"', f'version = "{first[name]}"'
            )
            _replace(
                repo / "chart/Chart.yaml", f'appVersion: "{now}"', f'appVersion: "{first[name]}"'
            )
        elif name == "agent":
            _replace(repo / "agent/src/skyhook_agent/__init__.py", f'"{now}"', f'"{first[name]}"')
            _replace(
                repo / "agent/pyproject.toml",
                f'version = "{now}"',
                f'version = "{first[name]}"',
                must=False,
            )
            _replace(repo / "chart/values.yaml", f"tag: v{now}", f"tag: v{first[name]}")
        elif name == "chart":
            _replace(repo / "chart/Chart.yaml", f"version: {now}\n", f"version: {first[name]}\n")
        else:
            _replace(repo / "packages/shellscript/config.json", f'"{now}"', f'"{first[name]}"')
        assert declared(repo, name) == first[name], name


def _replace(path: Path, old: str, new: str, must: bool = True) -> None:
    text = path.read_text()
    assert old in text or not must, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


@pytest.fixture
def repo(template_repo: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "repo"
    shutil.copytree(template_repo, copy, symlinks=True)
    return copy


# --- versions from commits --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("component", "messages", "version"),
    [
        pytest.param("operator", ["fix(operator): a"], "0.1.1", id="fix-patch"),
        pytest.param("operator", ["perf(operator): a"], "0.1.1", id="perf-patch"),
        pytest.param(
            "operator", ["fix(operator): a", "feat(operator): b"], "0.2.0", id="feat-minor"
        ),
        pytest.param("operator", ["feat(operator)!: a"], "0.2.0", id="bang-minor-before-1.0"),
        pytest.param("shellscript", ["fix(shellscript): a"], "1.1.2", id="package-fix-patch"),
        pytest.param("shellscript", ["feat(shellscript): a"], "1.2.0", id="package-feat-minor"),
        pytest.param("shellscript", ["fix(shellscript)!: a"], "2.0.0", id="bang-major"),
        pytest.param(
            "shellscript",
            ["refactor(shellscript): a\n\nBREAKING CHANGE: step names changed"],
            "2.0.0",
            id="footer-major",
        ),
        pytest.param(
            "shellscript",
            [
                "fix(shellscript): a",
                "feat(tuning)!: other scope",
                "docs(shellscript): not released",
            ],
            "1.1.2",
            id="other-scopes-and-types-ignored",
        ),
    ],
)
def test_next_version_follows_the_commits(repo, component, messages, version):
    for message in messages:
        commit(repo, message)
    result = release(repo, component)
    assert result.returncode == 0, result.stderr
    assert declared(repo, component) == version
    prefix = f"{component}/" if component == "shellscript" else f"{component}/v"
    assert git(repo, "describe", "--exact-match", "HEAD") == prefix + version
    assert git(repo, "log", "-1", "--format=%s") == f"chore({component}): release {version}"
    assert git(repo, "status", "--porcelain") == ""


def test_feat_release_writes_the_changelog_and_tags_the_release_commit(repo):
    feat = commit(repo, "feat(operator): drain with a deadline")
    fix = commit(repo, "fix(operator): keep the taint on failure")
    commit(repo, "docs(operator): explain budgets")
    commit(repo, "feat(agent): something else")
    result = release(repo, "operator")
    assert result.returncode == 0, result.stderr
    assert "released operator/v0.2.0" in result.stdout
    changelog = (repo / "operator/CHANGELOG.md").read_text()
    assert changelog.startswith("# Changelog: operator\n\n## 0.2.0 (")
    features, fixes = changelog.index("### Features"), changelog.index("### Bug fixes")
    assert features < changelog.index(f"- Drain with a deadline ({feat})") < fixes
    assert fixes < changelog.index(f"- Keep the taint on failure ({fix})")
    assert "budgets" not in changelog
    assert "something else" not in changelog
    # The chart recommends the new operator in the same commit.
    assert yaml.safe_load((repo / "chart/Chart.yaml").read_text())["appVersion"] == "0.2.0"
    assert git(repo, "show", "--name-only", "--format=", "HEAD").split() == [
        "chart/Chart.yaml",
        "operator/CHANGELOG.md",
        "operator/pyproject.toml",
    ]
    assert git(repo, "rev-parse", "operator/v0.2.0^{commit}") == git(repo, "rev-parse", "HEAD")


def test_breaking_change_is_listed_with_its_footer(repo):
    sha = commit(repo, "feat(shellscript): stop\n\nBREAKING CHANGE: the apply step is gone")
    result = release(repo, "shellscript")
    assert result.returncode == 0, result.stderr
    changelog = (repo / "packages/shellscript/CHANGELOG.md").read_text()
    assert (
        f"### Breaking changes\n\n- Stop ({sha}); breaking: the apply step is gone\n" in changelog
    )


# --- explicit versions ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("component", "message", "requested", "refusal"),
    [
        pytest.param(
            "operator",
            "feat(operator): new knob",
            "0.1.1",
            "version 0.1.1 is a patch release, but the commits call for at least 0.2.0 (minor)",
            id="patch-after-feat",
        ),
        pytest.param(
            "shellscript",
            "fix(shellscript)!: new layout",
            "1.2.0",
            "version 1.2.0 is a minor release, but the commits call for at least 2.0.0 (major)",
            id="minor-after-bang",
        ),
        pytest.param(
            "operator",
            "fix(operator): a",
            "0.3.0",
            "version 0.3.0 does not follow 0.1.0: the next version is one of 0.1.1, 0.2.0, 1.0.0",
            id="skips-a-version",
        ),
        pytest.param(
            "operator",
            "fix(operator): a",
            "0.1.0",
            "version 0.1.0 does not follow 0.1.0",
            id="same",
        ),
        pytest.param(
            "operator",
            "fix(operator): a",
            "0.2",
            "version: '0.2' is not a strict semver",
            id="short",
        ),
        pytest.param(
            "operator",
            "fix(operator): a",
            "0.1.1+build.1",
            "version 0.1.1+build.1: build metadata (+build.1) is not released",
            id="build-metadata",
        ),
    ],
)
def test_explicit_versions_that_do_not_follow_are_refused(
    repo, component, message, requested, refusal
):
    commit(repo, message)
    before = state(repo)
    result = release(repo, component, requested)
    assert result.returncode == 1
    assert f"ci/release: refusing to release {component}: {refusal}" in result.stderr
    assert state(repo) == before


def test_refusal_names_the_commits_that_force_the_bump(repo):
    sha = commit(repo, "feat(operator): new knob")
    commit(repo, "fix(operator): small")
    result = release(repo, "operator", "0.1.1")
    assert result.returncode == 1
    assert f"since operator/v0.1.0:\n  {sha} feat(operator): new knob\n" in result.stderr
    assert "small" not in result.stderr


@pytest.mark.parametrize(
    ("message", "requested"),
    [
        pytest.param("feat(operator): a", "0.2.0", id="what-the-commits-say"),
        pytest.param("feat(operator): a", "1.0.0", id="leaving-0.x"),
        pytest.param("fix(operator): a", "0.2.0", id="bigger-than-needed"),
        pytest.param("feat(operator): a", "0.2.0-rc.1", id="prerelease"),
    ],
)
def test_explicit_versions_that_follow_are_released(repo, message, requested):
    commit(repo, message)
    result = release(repo, "operator", requested)
    assert result.returncode == 0, result.stderr
    assert declared(repo, "operator") == requested
    assert f"operator/v{requested}" in git(repo, "tag", "--list")


@pytest.mark.parametrize(
    ("current", "required", "requested", "accepted"),
    [
        pytest.param("1.4.2", "1.4.3", "1.4.3", True, id="patch"),
        pytest.param("1.4.2", "1.5.0", "1.4.3", False, id="patch-under-minor"),
        pytest.param("1.4.2", "2.0.0", "1.5.0", False, id="minor-under-major"),
        pytest.param("1.4.2", "1.4.3", "2.0.0", True, id="major-over-patch"),
        pytest.param("1.4.2", "1.4.3", "1.4.4", False, id="gap"),
        pytest.param("1.4.2", "1.4.3", "1.4.2", False, id="same"),
        pytest.param("1.4.2", "1.4.3", "1.4.1", False, id="lower"),
        pytest.param("2.0.0-rc.1", "2.0.0", "2.0.0", True, id="final-after-rc"),
        pytest.param("0.9.0", "0.10.0", "1.0.0", True, id="graduate"),
    ],
)
def test_check_requested(current, required, requested, accepted):
    if accepted:
        assert check_requested(current, required, requested) == requested
    else:
        with pytest.raises(ReleaseError):
            check_requested(current, required, requested)


LEVEL_BUMPS = {"patch": (0, 0, 1), "minor": (0, 1, 0), "major": (1, 0, 0)}


def _bumped(version: tuple[int, int, int], level: str) -> str:
    major, minor, patch = version
    if level == "major":
        return f"{major + 1}.0.0"
    if level == "minor":
        return f"{major}.{minor + 1}.0"
    return f"{major}.{minor}.{patch + 1}"


@given(
    st.tuples(st.integers(0, 50), st.integers(0, 50), st.integers(0, 50)),
    st.sampled_from(list(LEVEL_BUMPS)),
    st.sampled_from(list(LEVEL_BUMPS)),
)
def test_a_bump_is_accepted_exactly_when_it_is_at_least_the_required_one(current, needed, asked):
    order = list(LEVEL_BUMPS)
    version = ".".join(map(str, current))
    required, requested = _bumped(current, needed), _bumped(current, asked)
    if order.index(asked) >= order.index(needed):
        assert check_requested(version, required, requested) == requested
    else:
        with pytest.raises(ReleaseError, match="the commits call for at least"):
            check_requested(version, required, requested)


# --- tags the build scripts take ------------------------------------------------------------


@pytest.mark.parametrize(
    ("component", "tag", "builder"),
    [
        pytest.param("operator", "operator/v0.1.1", "build-image", id="operator"),
        pytest.param("agent", "agent/v0.1.1", "build-image", id="agent"),
        pytest.param("shellscript", "shellscript/1.1.2", "build-package", id="package-no-v"),
    ],
)
def test_release_tags_are_what_the_build_scripts_build(repo, component, tag, builder):
    commit(repo, f"fix({component}): a")
    result = release(repo, component)
    assert result.returncode == 0, result.stderr
    assert tag in git(repo, "tag", "--list").split()
    build = subprocess.run(
        [sys.executable, str(repo / "ci" / builder), "--dry-run", tag],
        cwd=repo,
        env={k: v for k, v in GIT_ENV.items() if not k.startswith("SKYHOOK_")},
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    assert f":{tag.rpartition('/')[2]}" in build.stdout


def test_agent_release_pins_its_image_in_the_chart(repo):
    commit(repo, "feat(agent): a")
    assert release(repo, "agent").returncode == 0
    assert declared(repo, "agent") == "0.2.0"
    values = yaml.safe_load((repo / "chart/values.yaml").read_text())
    assert values["agent"]["image"]["tag"] == "v0.2.0"
    assert values["operator"]["image"]["tag"] == ""  # the operator's tag line is left alone


def test_package_release_keeps_its_changelog_and_config_layout(repo):
    config = repo / "packages/shellscript/config.json"
    changelog = repo / "packages/shellscript/CHANGELOG.md"
    old_config, old_changelog = config.read_text(), changelog.read_text()
    sha = commit(repo, "feat(shellscript): run a snippet per node")
    result = release(repo, "shellscript")
    assert result.returncode == 0, result.stderr
    assert config.read_text() == old_config.replace(
        '"package_version": "1.1.1"', '"package_version": "1.2.0"'
    )
    title, _, older = old_changelog.partition("\n\n")
    new = changelog.read_text()
    assert new.startswith(f"{title}\n\n## 1.2.0 (")
    assert f"### Features\n\n- Run a snippet per node ({sha})\n" in new
    assert new.endswith(older)
    assert git(repo, "tag", "--list", "shellscript/*").split() == [
        "shellscript/1.1.1",
        "shellscript/1.2.0",
    ]


# --- dry run and refusals -------------------------------------------------------------------


@pytest.mark.parametrize("component", ["operator", "shellscript", "chart"])
def test_dry_run_prints_the_plan_and_changes_nothing(repo, component):
    commit(repo, f"feat({component}): something new")
    before = state(repo)
    contents = {
        path: path.read_bytes()
        for path in repo.rglob("*")
        if path.is_file() and ".git" not in path.parts
    }
    result = release(repo, component, "--dry-run")
    assert result.returncode == 0, result.stderr
    tag = "shellscript/1.2.0" if component == "shellscript" else f"{component}/v0.2.0"
    assert f"would tag: {tag}" in result.stdout
    assert f"would commit: chore({component}): release" in result.stdout
    assert "- Something new (" in result.stdout
    assert result.stdout.endswith("dry run: nothing changed\n")
    assert state(repo) == before
    after = {
        path: path.read_bytes()
        for path in repo.rglob("*")
        if path.is_file() and ".git" not in path.parts
    }
    assert after == contents


def test_nothing_to_release_without_released_commit_types(repo):
    commit(repo, "docs(operator): wording")
    commit(repo, "test(operator): more cases")
    result = release(repo, "operator")
    assert result.returncode == 1
    assert (
        "nothing to release: no feat, fix, perf, revert or breaking commit with scope (operator) since operator/v0.1.0"
        in result.stderr
    )


def test_uncommitted_changes_are_refused(repo):
    commit(repo, "fix(operator): a")
    (repo / "operator/pyproject.toml").write_text(
        (repo / "operator/pyproject.toml").read_text() + "\n"
    )
    result = release(repo, "operator")
    assert result.returncode == 1
    assert "uncommitted changes to tracked files" in result.stderr
    assert "operator/pyproject.toml" in result.stderr


def test_a_version_moved_by_hand_is_refused(repo):
    pyproject = repo / "operator/pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('version = "0.1.0"', 'version = "0.3.0"'))
    git(repo, "commit", "--quiet", "--all", "-m", "fix(operator): bump by hand")
    result = release(repo, "operator")
    assert result.returncode == 1
    assert "operator declares version 0.3.0 but its last tag is operator/v0.1.0" in result.stderr


def test_unknown_component_names_the_choices(repo):
    result = release(repo, "kdump")
    assert result.returncode == 1
    assert "component 'kdump' is not releasable; choose one of operator, agent" in result.stderr
    assert "shellscript" in result.stderr


def test_version_and_bump_together_is_a_usage_error(repo):
    result = release(repo, "operator", "0.2.0", "--bump", "auto")
    assert result.returncode == 2
    assert "give a VERSION or --bump auto, not both" in result.stderr


# --- first releases -------------------------------------------------------------------------


def test_first_release_is_the_declared_version(repo):
    git(repo, "tag", "--delete", "operator/v0.1.0")
    sha = commit(repo, "feat(operator): first")
    result = release(repo, "operator")
    assert result.returncode == 0, result.stderr
    assert declared(repo, "operator") == "0.1.0"
    assert "operator/v0.1.0" in git(repo, "tag", "--list").split()
    changelog = (repo / "operator/CHANGELOG.md").read_text()
    assert changelog.startswith("# Changelog: operator\n\n## 0.1.0 (")
    assert f"- First ({sha})" in changelog


def test_untagged_package_with_a_changelog_entry_asks_for_its_tag(repo):
    git(repo, "tag", "--delete", "shellscript/1.1.1")
    commit(repo, "fix(shellscript): a")
    result = release(repo, "shellscript")
    assert result.returncode == 1
    assert "already has 1.1.1, but no tag shellscript/1.1.1 exists" in result.stderr
    assert "git tag shellscript/1.1.1 <commit>" in result.stderr


# --- the chart ------------------------------------------------------------------------------


def test_chart_release_lists_pinned_releases_and_packages_the_chart(repo, tmp_path):
    commit(repo, "feat(agent): faster start")
    assert release(repo, "agent").returncode == 0
    fix = commit(repo, "fix(chart): quote the namespace")
    dist = tmp_path / "dist"
    result = release(repo, "chart", "--dist-dir", str(dist))
    assert result.returncode == 0, result.stderr
    assert declared(repo, "chart") == "0.1.1"
    changelog = (repo / "chart/CHANGELOG.md").read_text()
    assert f"### Bug fixes\n\n- Quote the namespace ({fix})\n" in changelog
    assert "### Pinned agent\n\n- Release 0.2.0 (" in changelog
    package = dist / "skyhook-operator-0.1.1.tgz"
    assert f"chart package: {package}" in result.stdout
    with tarfile.open(package) as archive:
        chart = yaml.safe_load(archive.extractfile("skyhook-operator/Chart.yaml").read())  # type: ignore[union-attr]
        values = yaml.safe_load(archive.extractfile("skyhook-operator/values.yaml").read())  # type: ignore[union-attr]
    assert chart["version"] == "0.1.1"
    assert values["agent"]["image"]["tag"] == "v0.2.0"
    assert "chart/v0.1.1" in git(repo, "tag", "--list").split()


def test_changelog_text_keeps_the_title_and_older_sections():
    existing = "# Changelog: tuned\n\nIntro line.\n\n## 1.2.0\n- old\n"
    assert changelog_text(existing, "tuned", "## 1.3.0 (d)\n\n- new\n") == (
        "# Changelog: tuned\n\nIntro line.\n\n## 1.3.0 (d)\n\n- new\n\n## 1.2.0\n- old\n"
    )
    assert changelog_text(None, "cli", "## 0.1.0 (d)\n") == "# Changelog: cli\n\n## 0.1.0 (d)\n"
