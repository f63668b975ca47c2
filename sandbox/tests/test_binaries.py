"""The control-plane binaries are built once and reused; KUBEBUILDER_ASSETS is honoured."""

from __future__ import annotations

import os

import pytest

from skyhook_sandbox.binaries import BuildError, bin_dir, ensure_binaries


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
