"""ci/_runtime.py's pinned tools, without building them: versions, cache layout, overrides.

The tools themselves are built and run in `tox -e images` (ci/image_tests/
test_container_runtime.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "ci"))

from _runtime import CNI_PLUGINS, CONTAINERD, CONTAINERD_SHIM, CTR, KIND  # noqa: E402


def test_binaries_that_belong_together_share_one_cache_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SKYHOOK_CACHE_DIR", str(tmp_path))
    containerd = tmp_path / "bin" / "containerd" / CONTAINERD.version
    assert CONTAINERD.cached_path() == containerd / "containerd"
    assert CONTAINERD_SHIM.cached_path() == containerd / "containerd-shim-runc-v2"
    assert CTR.cached_path() == containerd / "ctr"
    cni = {plugin.cached_path().parent for plugin in CNI_PLUGINS}
    assert cni == {tmp_path / "bin" / "cni-plugins" / "v1.10.0"}
    assert {plugin.name for plugin in CNI_PLUGINS} >= {
        "bridge",
        "host-local",
        "loopback",
        "portmap",
        "firewall",
        "tuning",  # nerdctl's networks need it
        "ptp",  # a kind node's
    }


def test_a_named_binary_replaces_the_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shim = tmp_path / "my-shim"
    shim.write_text("#!/bin/sh\n")
    shim.chmod(0o755)
    monkeypatch.setenv("SKYHOOK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SKYHOOK_CONTAINERD_SHIM_RUNC_V2", str(shim))
    assert CONTAINERD_SHIM.ensure(say=pytest.fail) == shim
    assert not (tmp_path / "cache").exists()


def test_the_workflows_kind_job_installs_the_pinned_kind() -> None:
    workflow = (REPO / ".github" / "workflows" / "checks.yaml").read_text()
    installs = [
        line.split()[2] for line in workflow.splitlines() if "go install sigs.k8s.io/kind@" in line
    ]
    assert installs == [f"sigs.k8s.io/kind@{KIND.version}"]
