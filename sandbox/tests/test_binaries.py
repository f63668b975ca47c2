"""The control-plane binaries are built once and reused; KUBEBUILDER_ASSETS is honoured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from skyhook_sandbox.binaries import BuildError, bin_dir, ensure_binaries, ensure_commands
from skyhook_sandbox.cli import main
from skyhook_sandbox.versions import KUBERNETES_VERSION


def test_second_run_reuses_cached_binaries(sandbox):
    # The session sandbox already ensured the binaries (building them on a clean machine).
    cache = bin_dir()
    before = {
        name: (cache / name).stat().st_mtime_ns
        for name in ("etcd", "kube-apiserver", "kube-controller-manager")
    }
    log = cache / "build-log.jsonl"
    builds_before = log.read_text().count("\n") if log.exists() else 0
    binaries = ensure_binaries()
    assert binaries.built is False
    assert binaries.kube_apiserver == cache / "kube-apiserver"
    after = {name: (cache / name).stat().st_mtime_ns for name in before}
    assert after == before
    assert (log.read_text().count("\n") if log.exists() else 0) == builds_before


def test_kubebuilder_assets_are_used(sandbox, tmp_path, monkeypatch):
    cache = bin_dir()
    for name in ("etcd", "kube-apiserver"):
        os.symlink(cache / name, tmp_path / name)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    binaries = ensure_binaries()
    assert binaries.etcd == tmp_path / "etcd"
    assert binaries.kube_apiserver == tmp_path / "kube-apiserver"
    # No controller-manager among the assets: the cached one is used (built if missing).
    assert binaries.kube_controller_manager == cache / "kube-controller-manager"
    assert binaries.built is False


def test_kubebuilder_assets_without_etcd_is_an_error_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    with pytest.raises(BuildError, match="no executable etcd"):
        ensure_binaries()


def test_an_unknown_command_is_refused_by_name_before_any_build():
    with pytest.raises(BuildError, match=r"no Kubernetes command named kube-router$"):
        ensure_commands(("kubelet", "kube-router"))


def test_cached_commands_are_returned_without_building(sandbox):
    cache = bin_dir()
    before = (cache / "kube-apiserver").stat().st_mtime_ns
    paths = ensure_commands(("kube-apiserver", "etcd"))
    assert paths == {"kube-apiserver": cache / "kube-apiserver", "etcd": cache / "etcd"}
    assert (cache / "kube-apiserver").stat().st_mtime_ns == before


def test_build_command_reports_the_cached_release_without_building_again(sandbox):
    cache = bin_dir()
    before = (cache / "kube-apiserver").stat().st_mtime_ns
    result = CliRunner().invoke(main, ["build"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == (
        f"Kubernetes {KUBERNETES_VERSION} (SKYHOOK_KUBERNETES): already built"
    )
    assert f"  {cache / 'kube-apiserver'}" in result.output.splitlines()
    assert (cache / "kube-apiserver").stat().st_mtime_ns == before


def test_build_command_refuses_an_unsupported_release_naming_the_variable():
    env = {**os.environ, "SKYHOOK_KUBERNETES": "1.20"}
    result = subprocess.run(
        [Path(sys.executable).parent / "skyhook-sandbox", "build"], env=env, capture_output=True,
        text=True,
    )  # fmt: skip
    assert result.returncode != 0
    assert "SKYHOOK_KUBERNETES='1.20': the sandbox runs 1.34 (v1.34.4)" in result.stderr


def test_build_command_names_the_missing_asset(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    result = CliRunner().invoke(main, ["build"])
    assert result.exit_code == 1
    assert "no executable etcd" in result.output
