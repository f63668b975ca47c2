"""ci/check-commits on real git history and on single messages."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "check-commits"


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=cwd
    )


@pytest.mark.parametrize(
    "message",
    [
        "fix(agent): handle empty configmap",
        "feat(operator)!: drop the legacy budget field",
        "docs(tuning): explain configInterrupts",
        "ci(shellscript): build on tag",
        "feat(schemas): strict semver\n\nA body with details.\n",
    ],
)
def test_accepts_scoped_conventional_commits(message: str) -> None:
    result = run("--message", message)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("update stuff", "expected 'type(scope): summary'"),
        ("feat: x", "missing scope"),
        ("feat(): x", "missing scope"),
        ("feature(agent): x", "unknown type 'feature'"),
        ("fix(kernel): x", "unknown scope 'kernel'"),
        ("fix(agent):x", "expected 'type(scope): summary'"),
        ("", "expected 'type(scope): summary'"),
    ],
)
def test_rejects_with_the_reason(message: str, reason: str) -> None:
    result = run("--message", message)
    assert result.returncode == 1
    assert reason in result.stderr


def git(repo: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, env=env)


def test_checks_every_commit_of_a_range(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "ci").mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "ci" / "check-commits")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "commit", "-q", "--allow-empty", "-m", "build(repo): start")
    git(repo, "commit", "-q", "--allow-empty", "-m", "fix(agent): handle empty configmap")
    # The copy checks the repository it sits in (the original would check this checkout's HEAD).
    good = subprocess.run(
        [sys.executable, str(repo / "ci" / "check-commits"), "HEAD"],
        capture_output=True,
        text=True,
        cwd=repo,
    )
    assert good.returncode == 0, good.stderr
    git(repo, "commit", "-q", "--allow-empty", "-m", "update stuff")
    git(repo, "commit", "-q", "--allow-empty", "-m", "feat: x")
    result = subprocess.run(
        [sys.executable, str(repo / "ci" / "check-commits"), "HEAD~2..HEAD"],
        capture_output=True,
        text=True,
        cwd=repo,
    )
    assert result.returncode == 1
    assert "'update stuff'" in result.stderr and "'feat: x': missing scope" in result.stderr
    assert "2 problem(s)" in result.stderr
