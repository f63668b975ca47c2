"""ci/base-images against a real registry: a multi-platform index passes `check`, one platform's
manifest does not, and `update` moves the Dockerfiles' pins to what a mirror serves for each tag.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from _sbom import ensure_tools
from registry import Registry

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(cwd / "ci" / "base-images"), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
    )


def test_check_accepts_an_index_of_both_platforms_and_refuses_one_platform(
    registry: Registry, python_base: str
) -> None:
    digest = registry.digest("base/python", "3.11")
    good = _run("check", f"{python_base}@{digest}")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "linux/amd64, linux/arm64" in good.stdout

    index, _ = registry.manifest("base/python", digest)
    one_platform = _run("check", f"{python_base}@{index['manifests'][0]['digest']}")
    assert one_platform.returncode == 1
    assert "not an index of several" in one_platform.stderr, one_platform.stderr

    by_tag = _run("check", python_base)
    assert by_tag.returncode == 1 and "not pinned by digest" in by_tag.stderr


def test_update_moves_each_pin_to_the_digest_a_mirror_serves(
    registry: Registry, python_base: str, busybox_base: str, tmp_path: Path
) -> None:
    oras = str(ensure_tools()["oras"])
    copies = {
        python_base: f"{registry.address}/library/python:3.11-slim-bookworm",
        busybox_base: f"{registry.address}/library/bash:5.2",
    }
    for source, target in copies.items():
        result = subprocess.run(
            [oras, "cp", "--from-plain-http", "--to-plain-http", source, target],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stderr
    tree = tmp_path / "repo"
    for name in ("base-images", "_sbom.py", "_gotool.py"):
        (tree / "ci").mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / "ci" / name, tree / "ci" / name)
    dockerfiles = ["operator/Dockerfile", "agent/Dockerfile", "packages/shellscript/Dockerfile"]
    for dockerfile in dockerfiles:
        (tree / dockerfile).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / dockerfile, tree / dockerfile)

    result = _run("update", "--from", registry.address, cwd=tree)
    assert result.returncode == 0, result.stdout + result.stderr

    python = registry.digest("library/python", "3.11-slim-bookworm")
    bash = registry.digest("library/bash", "5.2")
    assert (
        f"ARG PYTHON_IMAGE=python:3.11-slim-bookworm@{python}\n"
        in (tree / dockerfiles[0]).read_text()
    )
    assert (
        f"ARG PYTHON_IMAGE=python:3.11-slim-bookworm@{python}\n"
        in (tree / dockerfiles[1]).read_text()
    )
    assert f"ARG BASE_IMAGE=bash:5.2@{bash}\n" in (tree / dockerfiles[2]).read_text()
    assert "3 pin(s) moved" in result.stdout
    again = _run("update", "--from", registry.address, cwd=tree)
    assert "0 pin(s) moved" in again.stdout
