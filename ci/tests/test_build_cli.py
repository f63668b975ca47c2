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
    # krew links only `bin`: the caveats say how to put the completion helper next to it.
    assert (
        'ln -s kubectl-skyhook "${KREW_ROOT:-$HOME/.krew}/bin/kubectl_complete-skyhook"'
        in plugin["spec"]["caveats"]
    )
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

    # The completion helpers answer kubectl's plugin completion (cobra's __complete format).
    for name in ("kubectl_complete-skyhook", "kubectl_complete-nodewright"):
        answer = subprocess.run(
            [tmp_path / name, "node", "st"], env=env, capture_output=True, text=True
        )
        assert (answer.returncode, answer.stderr) == (0, ""), name
        assert answer.stdout == "status\tShow all Skyhook activity on specific node(s)\n:4\n"

    # As krew installs it: a symlink to the launcher in another directory on PATH, and the
    # completion helper a symlink to that one, as the caveats say.
    krew_bin = tmp_path / "krew-bin"
    krew_bin.mkdir()
    (krew_bin / "kubectl-skyhook").symlink_to(plugin)
    (krew_bin / "kubectl_complete-skyhook").symlink_to("kubectl-skyhook")
    shown = subprocess.run(
        [krew_bin / "kubectl-skyhook", "--version"], env=env, capture_output=True, text=True
    )
    assert (shown.returncode, shown.stdout) == (0, f"Skyhook plugin: {version}\n"), shown.stderr
    answer = subprocess.run(
        [krew_bin / "kubectl_complete-skyhook", "-o", "n"], env=env, capture_output=True, text=True
    )
    assert (answer.returncode, answer.stdout) == (0, "name\n:4\n"), answer.stderr

    # A Python the archive has no libraries for is told so.
    shutil.move(tmp_path / "lib" / f"cp{PYTHON.replace('.', '')}", tmp_path / "lib" / "cp30")
    refused = subprocess.run([plugin, "--version"], env=env, capture_output=True, text=True)
    assert refused.returncode == 1
    assert "this build has no libraries for Python" in refused.stderr
    for name in ("kubectl-skyhook", "kubectl_complete-skyhook", "kubectl_complete-nodewright"):
        assert os.access(tmp_path / name, os.X_OK), name
