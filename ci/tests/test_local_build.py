"""ci/local-build's pieces that need no daemon: the configs it writes and the pinned tools.

The daemons themselves run in `tox -e images` (ci/image_tests/), which builds and pushes real
images through them.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "ci"))

from _buildkit import TOOLS as BUILD_TOOLS  # noqa: E402
from _localbuild import buildkitd_config, registry_config  # noqa: E402
from _runtime import TOOLS as RUNTIME_TOOLS  # noqa: E402


def test_buildkitd_runs_the_oci_worker_on_our_runc_and_reaches_the_registry_over_http() -> None:
    config = tomllib.loads(
        buildkitd_config(Path("/state/buildkit"), Path("/cache/runc"), "127.0.0.1:5000")
    )
    assert config["root"] == "/state/buildkit"
    assert config["worker"]["oci"]["enabled"] is True
    assert config["worker"]["oci"]["binary"] == "/cache/runc"
    assert config["worker"]["oci"]["networkMode"] == "host"
    assert config["worker"]["containerd"]["enabled"] is False
    assert config["registry"]["127.0.0.1:5000"]["http"] is True


def test_registry_serves_loopback_from_its_storage_dir() -> None:
    config = json.loads(registry_config(Path("/state/registry"), "127.0.0.1:5000"))
    assert config["http"]["addr"] == "127.0.0.1:5000"
    assert config["storage"]["filesystem"]["rootdirectory"] == "/state/registry"


# The image tools and the container runtime's (runc is in both).
TOOLS = {tool.name: tool for tool in (*BUILD_TOOLS, *RUNTIME_TOOLS)}.values()


@pytest.mark.parametrize("tool", TOOLS, ids=[tool.name for tool in TOOLS])
def test_every_tool_is_pinned_to_an_exact_version(tool) -> None:
    assert tool.version.startswith("v") and tool.version.count(".") == 2
    assert tool.package.startswith(tool.module)
    if not tool.in_module:  # go install names the binary after its package's last element
        assert Path(tool.package).name == tool.name


def test_env_without_a_running_build_says_so(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "ci" / "local-build"), "env", "--state-dir", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert "ci/local-build: " in result.stderr and "registry.address" in result.stderr


def test_a_static_build_is_cached_apart_from_one_that_links_libc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry also runs alone in the e2e registry's image (FROM scratch): a binary
    cached before it was built static must not be taken for it."""
    monkeypatch.setenv("SKYHOOK_CACHE_DIR", str(tmp_path))
    (registry,) = [tool for tool in BUILD_TOOLS if tool.name == "registry"]
    assert registry.static
    linked = dataclasses.replace(registry, static=False)
    assert (
        registry.cached_path() == tmp_path / "bin/registry" / f"{registry.version}-static/registry"
    )
    assert linked.cached_path() == tmp_path / "bin/registry" / registry.version / "registry"
