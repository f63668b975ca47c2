"""The tuned package's uninstall, in a root of its own: apply, config, uninstall and a tuned
the host had before, four apt runs against deb.debian.org. A file of its own, so pytest-xdist
runs it beside test_tuned.py instead of after it."""

from __future__ import annotations

import pytest
from tuned_host import STATE, installed_packages, make_host


@pytest.mark.chroot
def test_uninstall_restores_the_package_set_and_leaves_no_files(package_host):
    host = make_host(package_host)
    before = installed_packages(host)
    assert host.run("apply").returncode == 0
    assert host.run("config").returncode == 0
    host.set_service_active("tuned")
    assert host.run("uninstall-check").returncode != 0  # still installed

    host.clear_calls()
    assert host.stage("uninstall") == (0, 0)
    assert installed_packages(host) == before
    assert ["systemctl", "disable", "--now", "tuned"] in host.calls()
    assert not host.path("/etc/tuned/gpu-base").exists()
    assert not host.path("/etc/tuned/scripts").exists()
    assert not host.path(STATE).exists()
    assert host.stage("uninstall") == (0, 0)  # rerun is harmless

    # A tuned the host already had stays when the package leaves.
    assert host.chroot("apt-get install -y -q tuned").returncode == 0
    assert host.run("apply").returncode == 0
    assert host.path(f"{STATE}/preinstalled").exists()
    assert host.stage("uninstall") == (0, 0)
    assert "tuned" in installed_packages(host)
