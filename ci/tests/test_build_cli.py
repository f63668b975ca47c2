"""ci/build-cli: the wheels, a krew archive that runs on a Python with none of our packages, and
the krew manifest naming it by URL and sha256."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from skyhook_schemas.versions import parse_version

REPO = Path(__file__).resolve().parents[2]
PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"
RELEASES = "https://github.com/example/skyhook/releases/download"


def _cli_version() -> str:
    text = (REPO / "cli/src/skyhook_cli/__init__.py").read_text()
    version = text.split('__version__ = "')[1].split('"')[0]
    parse_version(version)
    return version


def _base_python() -> str:
    """An interpreter of this version without the test environment's packages."""
    found = Path(sys.base_prefix) / "bin" / f"python{PYTHON}"
    assert found.exists(), found
    probe = subprocess.run([found, "-c", "import skyhook_cli"], capture_output=True)
    assert probe.returncode != 0, f"{found} has skyhook_cli installed: not a clean interpreter"
    return str(found)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    dist = tmp_path_factory.mktemp("dist")
    version = _cli_version()
    result = subprocess.run(
        [sys.executable, REPO / "ci/build-cli", f"cli/v{version}", "--dist-dir", dist,
         "--platform", "linux/amd64", "--python", PYTHON, "--release-url", RELEASES],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    yield dist


def test_the_manifest_names_each_archive_by_url_and_digest(built: Path) -> None:
    version = _cli_version()
    archive = built / f"kubectl-skyhook-{version}-linux-amd64.tar.gz"
    plugin = yaml.safe_load((built / "skyhook.yaml").read_text())
    assert plugin["kind"] == "Plugin" and plugin["metadata"]["name"] == "skyhook"
    assert plugin["spec"]["version"] == f"v{version}"
    (platform,) = plugin["spec"]["platforms"]
    assert platform["selector"] == {"matchLabels": {"os": "linux", "arch": "amd64"}}
    assert platform["uri"] == f"{RELEASES}/cli%2Fv{version}/{archive.name}"
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert platform["bin"] == "kubectl-skyhook"
    # kubectl nodewright: its own krew plugin, from the same archives.
    other = yaml.safe_load((built / "nodewright.yaml").read_text())
    assert other["metadata"]["name"] == "nodewright"
    (same,) = other["spec"]["platforms"]
    assert (same["uri"], same["sha256"], same["bin"]) == (
        platform["uri"],
        platform["sha256"],
        "kubectl-nodewright",
    )
    wheels = sorted(p.name.split("-")[0] for p in built.glob("*.whl"))
    assert wheels == ["skyhook_cli", "skyhook_planner", "skyhook_schemas"]


def test_the_archive_runs_the_plugin_on_a_python_without_our_packages(
    built: Path, tmp_path: Path
) -> None:
    version = _cli_version()
    with tarfile.open(built / f"kubectl-skyhook-{version}-linux-amd64.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    plugin = tmp_path / "kubectl-skyhook"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SKYHOOK_PYTHON": _base_python()}
    shown = subprocess.run([plugin, "--version"], env=env, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == f"Skyhook plugin: {version}\n"
    missing = subprocess.run(
        [plugin, "node", "list", "--skyhook", "x", "--kubeconfig", tmp_path / "none"],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert missing.returncode == 1 and "initializing kubernetes client" in missing.stderr
    # The same archive's kubectl-nodewright speaks nodewright.nvidia.com.
    nodewright = [tmp_path / "kubectl-nodewright", "pause", "x", "--help"]
    shown = subprocess.run(nodewright, env=env, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert "Usage: nodewright pause" in shown.stdout

    # A Python the archive has no libraries for is told so.
    shutil.move(tmp_path / "lib" / f"cp{PYTHON.replace('.', '')}", tmp_path / "lib" / "cp30")
    refused = subprocess.run([plugin, "--version"], env=env, capture_output=True, text=True)
    assert refused.returncode == 1
    assert "this build has no libraries for Python" in refused.stderr
    assert os.access(plugin, os.X_OK)
