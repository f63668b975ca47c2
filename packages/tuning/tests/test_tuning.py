"""The tuning package run through our agent in a chroot of a real minimal Debian root.

The chroot has no running kernel or init of its own: /proc is a plain directory and systemctl,
sysctl, update-grub, service and reboot are recording shims (packages/conftest.py). So config
is checked by the files it writes and the commands it requests, interrupts by the commands the
agent runs for them, and post-interrupt-check by writing what a booted host would show under
/proc (sysctl values, the service's limits, the kernel command line) right or wrong.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

PACKAGE_DIR = Path(__file__).resolve().parents[1]
SYSCTL = "/etc/sysctl.d/999-tuning-tuning.conf"
LIMITS = "/etc/security/limits.d/999-tuning-tuning.conf"
GRUB = "/etc/default/grub.d/999-tuning-tuning.cfg"
CONTAINERD = "/etc/systemd/system/containerd.service.d/999-tuning-tuning.conf"
PAM_SESSION = "/etc/pam.d/common-session"
HOST_DIRS = ("/etc", "/var/lib/skyhook-tuning")
CONTAINERD_PID = 4242


def readme_package() -> tuple[str, dict]:
    block = re.search(r"```yaml\n(.*?)```", (PACKAGE_DIR / "README.md").read_text(), re.S)
    assert block, "README.md has no yaml example"
    ((name, package),) = yaml.safe_load(block.group(1))["spec"]["packages"].items()
    return name, package


@pytest.fixture
def tuning(package_host):
    name, package = readme_package()
    host = package_host("tuning", cr_name=name, cr_version=package["version"])
    host.set_configmap(package["configMap"])
    return host


def proc_limits(stack: str, memlock: str) -> str:
    return (
        "Limit                     Soft Limit           Hard Limit           Units     \n"
        "Max cpu time              unlimited            unlimited            seconds   \n"
        f"Max stack size            {stack:<21}{stack:<21}bytes     \n"
        "Max open files            1048576              1048576              files     \n"
        f"Max locked memory         {memlock:<21}{memlock:<21}bytes     \n"
    )


def boot_host(host, *, sysctl_override: dict[str, str] | None = None, memlock="unlimited",
              cmdline_extra=" hugepagesz=1G hugepages=2 default_hugepagesz=1G") -> None:  # fmt: skip
    """Write what the host's /proc would show after the interrupt (right unless overridden)."""
    _, package = readme_package()
    values = dict(line.split(" = ") for line in package["configMap"]["sysctl.conf"].splitlines())
    values |= sysctl_override or {}
    for key, value in values.items():
        proc = host.path("/proc/sys/" + key.replace(".", "/"))
        proc.parent.mkdir(parents=True, exist_ok=True)
        proc.write_text(value + "\n")
    host.path("/proc/cmdline").write_text(f"BOOT_IMAGE=/vmlinuz ro quiet{cmdline_extra}\n")
    host.path("/run/skyhook-test/mainpid").mkdir(parents=True, exist_ok=True)
    host.path("/run/skyhook-test/mainpid/containerd").write_text(f"{CONTAINERD_PID}\n")
    limits = host.path(f"/proc/{CONTAINERD_PID}/limits")
    limits.parent.mkdir(parents=True, exist_ok=True)
    limits.write_text(proc_limits("67108864", memlock))


@pytest.mark.chroot
def test_config_writes_every_drop_in_and_requests_live_application(tuning):
    assert tuning.stage("config") == (0, 0)

    sysctl = tuning.path(SYSCTL).read_text()
    assert "vm.max_map_count = 262144" in sysctl
    assert tuning.path(LIMITS).read_text().splitlines()[-2:] == [
        "* hard memlock unlimited",
        "* hard nofile 1048576",
    ]
    containerd = tuning.path(CONTAINERD).read_text()
    assert "LimitSTACK=67108864\nLimitMEMLOCK=infinity" in containerd
    assert tuning.path(GRUB).read_text().splitlines()[-1] == (
        'GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT:-} '
        'hugepagesz=1G hugepages=2 default_hugepagesz=1G"'
    )
    assert "session required pam_limits.so" in tuning.path(PAM_SESSION).read_text()
    # What needs the live kernel and init is requested, not faked.
    calls = tuning.calls()
    assert ["sysctl", "-p", SYSCTL] in calls
    assert ["systemctl", "daemon-reload"] in calls
    assert ["update-grub"] in calls


@pytest.mark.chroot
def test_grub_drop_in_keeps_distro_defaults_when_sourced(tuning):
    assert tuning.run("config").returncode == 0
    # update-grub sources /etc/default/grub, then grub.d/*.cfg in order.
    tuning.path("/etc/default/grub").write_text('GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n')
    script = f'. /etc/default/grub; . {GRUB}; echo "$GRUB_CMDLINE_LINUX_DEFAULT"'
    out = subprocess.run(["chroot", str(tuning.root), "bash", "-c", script],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert out.split() == ["quiet", "hugepagesz=1G", "hugepages=2", "default_hugepagesz=1G"]


@pytest.mark.chroot
def test_config_rerun_changes_nothing(tuning):
    assert tuning.stage("config") == (0, 0)
    before = tuning.snapshot(*HOST_DIRS)
    assert tuning.stage("config") == (0, 0)
    assert tuning.snapshot(*HOST_DIRS) == before
    assert tuning.path(PAM_SESSION).read_text().count("pam_limits.so") == 1


@pytest.mark.chroot
@pytest.mark.parametrize("drop_in", [SYSCTL, LIMITS, GRUB, CONTAINERD])
def test_config_check_fails_when_a_drop_in_is_wrong_or_missing(tuning, drop_in):
    assert tuning.stage("config") == (0, 0)
    path = tuning.path(drop_in)
    path.write_text(path.read_text().replace("1", "2"))
    result = tuning.run("config-check")
    assert result.returncode != 0
    assert drop_in in result.stdout + result.stderr
    path.unlink()
    assert tuning.run("config-check").returncode != 0
    assert tuning.stage("config") == (0, 0)  # config repairs it


@pytest.mark.chroot
def test_config_check_fails_when_pam_limits_is_not_loaded(tuning):
    assert tuning.stage("config") == (0, 0)
    pam = tuning.path(PAM_SESSION)
    pam.write_text(re.sub(r".*pam_limits.*\n", "", pam.read_text()))
    result = tuning.run("config-check")
    assert result.returncode != 0
    assert "pam_limits" in result.stdout + result.stderr


@pytest.mark.chroot
def test_removing_a_key_removes_its_drop_in(tuning):
    _, package = readme_package()
    assert tuning.stage("config") == (0, 0)
    tuning.clear_calls()
    remaining = {
        k: v
        for k, v in package["configMap"].items()
        if k not in {"grub.conf", "service_containerd.conf"}
    }
    tuning.set_configmap(remaining)
    assert tuning.stage("config") == (0, 0)
    assert not tuning.path(GRUB).exists()
    assert not tuning.path(CONTAINERD).exists()
    assert not tuning.path("/etc/systemd/system/containerd.service.d").exists()
    assert ["update-grub"] in tuning.calls()
    assert ["systemctl", "daemon-reload"] in tuning.calls()


@pytest.mark.chroot
@pytest.mark.parametrize(
    ("kind", "services", "expected"),
    [
        ("node_restart", (), [["reboot"]]),
        ("service_restart", ("containerd",),
         [["systemctl", "daemon-reload"], ["systemctl", "restart", "containerd"]]),
        ("restart_all_services", (), [["service", "procps", "force-reload"]]),
    ],
    ids=["grub-reboot", "containerd-service-restart", "sysctl-restart-all"],
)  # fmt: skip
def test_readme_interrupts_request_the_right_commands(tuning, kind, services, expected):
    assert tuning.stage("config") == (0, 0)
    tuning.clear_calls()
    result = tuning.interrupt(kind, *services)
    assert result.returncode == 0
    assert tuning.calls() == expected


@pytest.mark.chroot
def test_post_interrupt_check_passes_only_when_settings_are_live(tuning):
    assert tuning.stage("config") == (0, 0)
    assert tuning.interrupt("node_restart").returncode == 0

    not_booted = tuning.run("post-interrupt-check")
    assert not_booted.returncode != 0
    output = not_booted.stdout + not_booted.stderr
    assert "vm.max_map_count" in output
    assert "containerd: not running" in output
    assert "hugepagesz=1G" in output

    boot_host(tuning)
    assert tuning.stage("post-interrupt") == (0, 0)


@pytest.mark.chroot
@pytest.mark.parametrize(
    ("boot", "reason"),
    [
        ({"sysctl_override": {"vm.max_map_count": "65530"}}, "vm.max_map_count is '65530'"),
        ({"memlock": "65536"}, "LimitMEMLOCK is soft 65536 hard 65536, expected soft unlimited"),
        ({"cmdline_extra": " hugepagesz=1G"}, "lacks 'hugepages=2'"),
    ],
    ids=["sysctl-value", "infinity-memlock", "cmdline"],
)
def test_post_interrupt_check_names_the_setting_that_did_not_take(tuning, boot, reason):
    assert tuning.stage("config") == (0, 0)
    boot_host(tuning, **boot)
    result = tuning.run("post-interrupt-check")
    assert result.returncode != 0
    assert reason in result.stdout + result.stderr


@pytest.mark.chroot
def test_numeric_memlock_and_size_suffixes_are_compared(tuning):
    _, package = readme_package()
    configmap = dict(package["configMap"])
    configmap["service_containerd.conf"] = "[Service]\nLimitSTACK=64M\nLimitMEMLOCK=8388608\n"
    tuning.set_configmap(configmap)
    assert tuning.stage("config") == (0, 0)
    boot_host(tuning, memlock="8388608")
    assert tuning.run("post-interrupt-check").returncode == 0


@pytest.mark.chroot
def test_uninstall_restores_the_host(tuning):
    # A value the kernel had before: uninstall must ask to put it back.
    before_value = tuning.path("/proc/sys/vm/max_map_count")
    before_value.parent.mkdir(parents=True)
    before_value.write_text("65530\n")
    pristine = tuning.snapshot(*HOST_DIRS)

    assert tuning.stage("config") == (0, 0)
    tuning.clear_calls()
    assert tuning.stage("uninstall") == (0, 0)

    after = tuning.snapshot(*HOST_DIRS)
    skyhook_state = {p for p in after if p.startswith("/var/lib/skyhook/")}
    assert {p: v for p, v in after.items() if p not in skyhook_state} == {
        p: v for p, v in pristine.items() if p not in skyhook_state
    }
    calls = tuning.calls()
    assert ["sysctl", "-p", "/var/lib/skyhook-tuning/tuning/sysctl-before.conf"] in calls
    assert ["systemctl", "daemon-reload"] in calls
    assert ["update-grub"] in calls


@pytest.mark.chroot
def test_uninstall_with_nothing_installed_succeeds(tuning):
    assert tuning.stage("uninstall") == (0, 0)
    assert tuning.calls() == []


@pytest.mark.chroot
def test_uninstall_check_fails_while_a_drop_in_remains(tuning):
    assert tuning.stage("config") == (0, 0)
    assert tuning.run("uninstall").returncode == 0
    tuning.path(CONTAINERD).parent.mkdir(parents=True, exist_ok=True)
    tuning.path(CONTAINERD).write_text("[Service]\n")
    result = tuning.run("uninstall-check")
    assert result.returncode != 0
    assert CONTAINERD in result.stdout + result.stderr


@pytest.mark.chroot
def test_two_tuning_packages_keep_separate_drop_ins(package_host):
    first = package_host("tuning", cr_name="tuning", cr_version="1.1.4")
    second = package_host("tuning", cr_name="gpu-tuning", cr_version="1.1.4")
    first.set_configmap({"ulimit.conf": "nofile=65536\n", "sysctl.conf": "vm.swappiness = 10\n"})
    second.set_configmap({"ulimit.conf": "nproc=4096\n"})
    assert first.stage("config") == (0, 0)
    assert second.stage("config") == (0, 0)
    second_limits = second.path("/etc/security/limits.d/999-gpu-tuning-tuning.conf")
    assert second_limits.read_text().endswith("* hard nproc 4096\n")

    assert first.stage("uninstall") == (0, 0)
    assert not first.path(LIMITS).exists()
    assert second_limits.exists()
    assert "pam_limits.so" in first.path(PAM_SESSION).read_text()  # still needed by the second
    assert second.stage("config") == (0, 0)

    assert second.stage("uninstall") == (0, 0)
    assert "pam_limits.so" not in first.path(PAM_SESSION).read_text()


@pytest.mark.chroot
@pytest.mark.parametrize(
    ("configmap", "reason"),
    [
        ({"ulimit.conf": "nofiles=10\n"}, "ulimit.conf: 'nofiles=10' must be <item>=<value>"),
        ({"ulimit.conf": "nofile=lots\n"}, "value must be a number, unlimited or infinity"),
        ({"sysctl.conf": "vm.swappiness\n"}, "sysctl.conf: 'vm.swappiness' is not key = value"),
        ({"grub.conf": 'quiet "x"\n'}, "grub.conf: kernel arguments must not contain quotes"),
    ],
    ids=["unknown-limit", "bad-limit-value", "sysctl-no-value", "grub-quote"],
)
def test_bad_configmap_fails_config_naming_the_line(tuning, configmap, reason):
    tuning.set_configmap(configmap)
    result = tuning.run("config")
    assert result.returncode != 0
    assert reason in result.stdout + result.stderr
