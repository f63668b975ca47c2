"""skyhook_sandbox.debian_root: the cached debootstrap root every package test chroots into."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from skyhook_sandbox import debian_root as dr


def test_cache_name_depends_on_suite_arch_and_extra_packages():
    plain = dr.tarball_name("bookworm", "amd64", ())
    assert plain == "bookworm-minbase-amd64.tar"
    with_extras = dr.tarball_name("bookworm", "amd64", ("tuned", "procps"))
    assert with_extras != plain
    assert with_extras == dr.tarball_name("bookworm", "amd64", ("procps", "tuned"))
    assert dr.tarball_name("trixie", "arm64", ()) == "trixie-minbase-arm64.tar"


def test_cache_dir_follows_the_team_layout_or_the_override(monkeypatch):
    monkeypatch.delenv(dr.CACHE_ENV, raising=False)
    assert dr.default_cache_dir() == Path.home() / ".cache" / "skyhook" / "debian"
    monkeypatch.setenv(dr.CACHE_ENV, "/srv/cache")
    assert dr.default_cache_dir() == Path("/srv/cache")


@pytest.mark.chroot
def test_cached_tarball_is_reused_silently(debian_tarball):
    lines: list[str] = []
    started = time.monotonic()
    assert dr.debian_rootfs_tarball(progress=lines.append) == debian_tarball
    assert time.monotonic() - started < 1
    assert lines == []  # no rebuild, no progress output


@pytest.mark.chroot
def test_each_extraction_is_a_fresh_bookworm_root(tmp_path, debian_tarball):
    first = dr.debian_root(tmp_path / "a")
    (first / "etc" / "marker").write_text("changed by a test")
    second = dr.debian_root(tmp_path / "b")
    assert not (second / "etc" / "marker").exists()
    assert "VERSION_CODENAME=bookworm" in (second / "etc" / "os-release").read_text()
    assert (second / "usr" / "bin" / "bash").is_file()
    assert (second / "usr" / "bin" / "apt-get").is_file()


@pytest.mark.chroot
def test_extracting_into_a_non_empty_directory_is_refused(tmp_path, debian_tarball):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file").write_text("keep me")
    with pytest.raises(dr.DebianRootError, match="is not empty"):
        dr.debian_root(tmp_path / "busy")
    assert (tmp_path / "busy" / "file").read_text() == "keep me"


def test_building_without_root_says_so(monkeypatch, tmp_path):
    monkeypatch.setattr(dr.os, "geteuid", lambda: 1000)
    with pytest.raises(dr.DebianRootError, match="needs root"):
        dr.debian_rootfs_tarball(cache_dir=tmp_path)


def test_building_without_debootstrap_names_the_package(monkeypatch, tmp_path):
    monkeypatch.setattr(dr.os, "geteuid", lambda: 0)
    monkeypatch.setattr(dr.shutil, "which", lambda tool: None if tool == "debootstrap" else "/x")
    with pytest.raises(dr.DebianRootError, match="apt-get install -y debootstrap"):
        dr.debian_rootfs_tarball(cache_dir=tmp_path)
