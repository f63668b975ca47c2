"""The tuned package run through our agent in a chroot of a real minimal Debian root.

apply really installs tuned from deb.debian.org with apt inside the chroot. The tuned daemon is
never started (it would tune this machine's kernel): systemctl is a recording shim, so checks
that need the running daemon are shown to fail while it is not running, and the service state
they read is set explicitly where a test needs "tuned.service is running". RHEL-family and
Fedora installs are exercised with a recording dnf/yum in the same root.
"""

from __future__ import annotations

import pytest
from tuned_host import STATE, installed_packages, make_host, readme_package


@pytest.fixture(scope="module")
def tuned(module_package_host):
    """One root in which apply has installed tuned (once: it downloads ~20 MB)."""
    host = make_host(module_package_host)
    host.before_apply = installed_packages(host)
    host.apply_result = host.run("apply")
    return host


@pytest.mark.chroot
def test_apply_installs_tuned_with_apt_and_enables_the_service(tuned):
    assert tuned.apply_result.returncode == 0
    assert "installing tuned with apt" in tuned.apply_result.stdout
    assert "tuned" in installed_packages(tuned) - tuned.before_apply
    assert tuned.path("/usr/sbin/tuned-adm").is_file()
    recorded = set(tuned.path(f"{STATE}/installed-packages").read_text().split())
    assert recorded == installed_packages(tuned) - tuned.before_apply
    assert ["systemctl", "enable", "--now", "tuned"] in tuned.calls()


@pytest.mark.chroot
def test_apply_check_needs_tuned_enabled_and_running(tuned):
    tuned.set_service_active("tuned", False)
    result = tuned.run("apply-check")
    assert result.returncode != 0
    assert "tuned.service is not active" in result.stderr + result.stdout

    tuned.set_service_active("tuned")  # what systemd would report after `enable --now`
    assert tuned.run("apply-check").returncode == 0
    tuned.path("/var/lib/skyhook-test/enabled/tuned").unlink()
    assert tuned.run("apply-check").returncode != 0
    assert tuned.run("apply").returncode == 0  # rerun enables it again


@pytest.mark.chroot
def test_apply_rerun_and_upgrade_do_not_reinstall(tuned):
    packages = installed_packages(tuned)
    for stage in ("apply", "upgrade"):
        result = tuned.run(stage)
        assert result.returncode == 0
        assert "tuned is already installed: tuned 2." in result.stdout
        assert "installing tuned" not in result.stdout
    assert installed_packages(tuned) == packages
    assert not tuned.path(f"{STATE}/preinstalled").exists()  # it is still ours to remove


@pytest.mark.chroot
def test_config_deploys_profiles_and_scripts_and_selects_the_profile(tuned):
    _, package = readme_package()
    tuned.set_configmap(package["configMap"])
    result = tuned.run("config")
    assert result.returncode == 0

    for profile in ("gpu-base", "gpu-training"):
        deployed = tuned.path(f"/etc/tuned/{profile}/tuned.conf").read_text()
        assert deployed == package["configMap"][profile]
    script = tuned.path("/etc/tuned/scripts/training_init_script")
    assert script.read_text() == package["configMap"]["training_init_script"]
    assert script.stat().st_mode & 0o111
    assert tuned.path("/etc/tuned/scripts/training_init").resolve() == script.resolve()
    # tuned-adm recorded the choice; applying it is the daemon's job (never run here).
    assert tuned.path("/etc/tuned/active_profile").read_text().strip() == "gpu-training"

    before = tuned.snapshot("/etc/tuned", STATE)
    assert tuned.run("config").returncode == 0
    assert tuned.snapshot("/etc/tuned", STATE) == before  # a rerun changes nothing


@pytest.mark.chroot
def test_config_check_fails_while_the_daemon_does_not_run_the_profile(tuned):
    _, package = readme_package()
    tuned.set_configmap(package["configMap"])
    assert tuned.run("config").returncode == 0
    tuned.set_service_active("tuned")
    for mode in ("config-check", "post-interrupt-check"):
        result = tuned.run(mode)
        assert result.returncode != 0
        assert "expected 'gpu-training' (is the tuned daemon running?)" in result.stderr


@pytest.mark.chroot
def test_config_check_names_a_deployed_file_that_drifted(tuned):
    _, package = readme_package()
    tuned.set_configmap(package["configMap"])
    assert tuned.run("config").returncode == 0
    tuned.path("/etc/tuned/gpu-base/tuned.conf").write_text("[main]\n")
    tuned.path("/etc/tuned/scripts/training_init_script").chmod(0o644)
    result = tuned.run("config-check")
    assert result.returncode != 0
    assert "/etc/tuned/gpu-base/tuned.conf is missing or differs" in result.stderr
    assert "training_init_script is missing or not executable" in result.stderr


@pytest.mark.chroot
def test_config_removes_profiles_and_scripts_dropped_from_the_configmap(tuned):
    _, package = readme_package()
    tuned.set_configmap(package["configMap"])
    assert tuned.run("config").returncode == 0
    tuned.set_configmap({"tuned_profile": "gpu-base", "gpu-base": package["configMap"]["gpu-base"]})
    assert tuned.run("config").returncode == 0
    assert not tuned.path("/etc/tuned/gpu-training").exists()
    assert not tuned.path("/etc/tuned/scripts/training_init_script").exists()
    assert not tuned.path("/etc/tuned/scripts/training_init").is_symlink()
    assert tuned.path("/etc/tuned/active_profile").read_text().strip() == "gpu-base"


@pytest.mark.chroot
@pytest.mark.parametrize(
    ("profile", "reason"),
    [
        ("no-such-profile", "profile 'no-such-profile' is neither a tuned profile"),
        ("gpu-base throughput-performance", "needs tuned >= 2.24, this host has tuned 2.20"),
    ],
    ids=["unknown-profile", "two-profiles-on-old-tuned"],
)
def test_config_refuses_profiles_tuned_cannot_activate(tuned, profile, reason):
    _, package = readme_package()
    tuned.set_configmap({"tuned_profile": profile, "gpu-base": package["configMap"]["gpu-base"]})
    result = tuned.run("config")
    assert result.returncode != 0
    assert reason in result.stderr


@pytest.mark.chroot
@pytest.mark.parametrize(
    ("os_release", "managers", "expected"),
    [
        ('ID=debian\nVERSION_ID="12"', (), "apt"),
        ('ID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"', (), "apt"),
        ('ID=linuxmint\nID_LIKE="ubuntu debian"', (), "apt"),
        ('ID="rhel"\nID_LIKE="fedora"\nVERSION_ID="9.4"', ("dnf", "yum"), "dnf"),
        ('ID="centos"\nID_LIKE="rhel fedora"\nVERSION_ID="7"', ("yum",), "yum"),
        ('ID="rocky"\nID_LIKE="rhel centos fedora"', ("dnf",), "dnf"),
        ('ID="amzn"\nID_LIKE="centos rhel fedora"\nVERSION_ID="2"', ("yum",), "yum"),
        ('ID="amzn"\nID_LIKE="fedora"\nVERSION_ID="2023"', ("dnf",), "dnf"),
        ("ID=fedora\nVERSION_ID=40", ("dnf",), "dnf"),
        ("ID=arch", (), "unsupported distribution 'arch'"),
    ],
    ids=["debian", "ubuntu", "mint", "rhel", "centos7", "rocky", "al2", "al2023", "fedora", "arch"],
)
def test_package_manager_chosen_per_distribution(package_host, os_release, managers, expected):
    host = package_host("tuned", cr_name="tuned", cr_version="1.2.0")
    host.path("/etc/os-release").unlink()
    host.path("/etc/os-release").write_text(os_release + "\n")
    for manager in managers:
        host.add_shim(f"/usr/bin/{manager}")
    result = host.chroot(
        f"SKYHOOK_DIR={host.copy_dir} SKYHOOK_RESOURCE_ID={host.resource_id} "
        f"source {host.copy_dir}/skyhook_dir/tuned_lib.sh && package_manager"
    )
    assert expected in result.stdout + result.stderr
    assert (result.returncode == 0) == (expected in {"apt", "dnf", "yum"})


@pytest.mark.chroot
def test_install_on_rhel_installs_only_tuned_with_dnf(package_host):
    host = package_host("tuned", cr_name="tuned", cr_version="1.2.0")
    host.path("/etc/os-release").unlink()
    host.path("/etc/os-release").write_text('ID="rhel"\nID_LIKE="fedora"\nVERSION_ID="9.4"\n')
    host.add_shim("/usr/bin/dnf")
    host.set_configmap({})
    assert host.run("apply").returncode == 0
    assert host.calls() == [
        ["dnf", "install", "-y", "tuned"],
        ["systemctl", "enable", "--now", "tuned"],
    ]
    assert host.path(f"{STATE}/installed-packages").read_text() == "tuned\n"


@pytest.mark.chroot
def test_unsupported_distribution_fails_apply_with_a_reason(package_host):
    host = package_host("tuned", cr_name="tuned", cr_version="1.2.0")
    host.path("/etc/os-release").unlink()
    host.path("/etc/os-release").write_text("ID=alpine\n")
    host.set_configmap({})
    result = host.run("apply")
    assert result.returncode != 0
    assert "unsupported distribution 'alpine'" in result.stderr
    assert host.calls() == []
