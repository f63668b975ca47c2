"""The shims' simulated kernel and init, run as the real shell script against a temporary root."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from skyhook_sandbox import simkernel
from skyhook_sandbox.shims import KERNEL_DIR, SYSTEMD_DIR, shim_script, write_shims


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A host root with the shims (ROOT = this dir), a tiny seeded /proc/sys and a pid pool."""
    host = tmp_path / "root"
    fake_sys = tmp_path / "proc-sys"
    for key, value in {
        "vm/max_map_count": "65530\n",
        "fs/inotify/max_user_watches": "8192\n",
        "net/ipv4/ip_local_port_range": "32768\t60999\n",
    }.items():
        (fake_sys / key).parent.mkdir(parents=True, exist_ok=True)
        (fake_sys / key).write_text(value)
    assert simkernel.seed_sysctl(host, fake_sys) == 3
    bin_dir = host / "shims"
    bin_dir.mkdir()
    for name in ("sysctl", "update-grub", "systemctl", "service", "boot"):
        (bin_dir / name).write_text(shim_script(str(host)))
        (bin_dir / name).chmod(0o755)
    (host / KERNEL_DIR / "pid-pool").write_text("2\n14\n15\n")
    return host


def run(root: Path, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(root / "shims" / command), *args], capture_output=True, text=True)


def value(root: Path, key: str) -> str:
    return (root / KERNEL_DIR / "sys" / key.replace(".", "/")).read_text().strip()


def write(root: Path, path: str, text: str) -> None:
    (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    (root / path.lstrip("/")).write_text(text)


def test_sysctl_write_and_read_forms(root: Path) -> None:
    result = run(root, "sysctl", "-w", "vm.max_map_count=262144", "fs.inotify.max_user_watches=1")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "vm.max_map_count = 262144\nfs.inotify.max_user_watches = 1\n"
    assert run(root, "sysctl", "-n", "vm.max_map_count").stdout == "262144\n"
    assert run(root, "sysctl", "vm/max_map_count").stdout == "vm/max_map_count = 262144\n"
    assert "vm.max_map_count = 262144" in run(root, "sysctl", "-a").stdout


def test_sysctl_unknown_key_fails_like_the_kernel(root: Path) -> None:
    result = run(root, "sysctl", "-w", "kernel.nonexistent=1")
    assert result.returncode == 255
    assert "cannot stat /proc/sys/kernel/nonexistent" in result.stderr
    assert run(root, "sysctl", "-n", "kernel.nonexistent").returncode == 255


def test_sysctl_load_parses_conf_files(root: Path) -> None:
    write(root, "/etc/sysctl.d/50-a.conf",
          "# comment\n; also\n\n  vm.max_map_count =   262144  \n"
          "-net.ipv4.ip_local_port_range = 1024   65000\nfs.inotify.max_user_watches=524288\n")  # fmt: skip
    result = run(root, "sysctl", "-p", "/etc/sysctl.d/50-a.conf")
    assert result.returncode == 0, result.stderr
    assert value(root, "vm.max_map_count") == "262144"
    assert value(root, "net.ipv4.ip_local_port_range") == "1024 65000"
    assert value(root, "fs.inotify.max_user_watches") == "524288"
    assert run(root, "sysctl", "-p", "/etc/missing.conf").returncode != 0


def test_sysctl_system_order_and_boot_reset(root: Path) -> None:
    write(root, "/usr/lib/sysctl.d/10-distro.conf", "vm.max_map_count = 1\n")
    write(root, "/usr/lib/sysctl.d/20-x.conf", "vm.max_map_count = 2\n")
    write(root, "/etc/sysctl.d/20-x.conf", "vm.max_map_count = 3\n")  # hides the /usr/lib one
    write(root, "/etc/sysctl.conf", "fs.inotify.max_user_watches = 9\n")
    assert run(root, "sysctl", "--system").returncode == 0
    assert value(root, "vm.max_map_count") == "3"
    assert value(root, "fs.inotify.max_user_watches") == "9"
    # A boot restores the boot-time value of a key no file sets any more.
    (root / "etc/sysctl.conf").unlink()
    run(root, "sysctl", "-w", "net.ipv4.ip_local_port_range=1 2")
    assert run(root, "boot").returncode == 0
    assert value(root, "fs.inotify.max_user_watches") == "8192"
    assert value(root, "net.ipv4.ip_local_port_range") == "32768\t60999"
    assert value(root, "vm.max_map_count") == "3"


def test_update_grub_cmdline_becomes_proc_cmdline_at_boot(root: Path) -> None:
    write(root, "/etc/default/grub",
          'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX="console=ttyS0"\n')  # fmt: skip
    write(root, "/etc/default/grub.d/999-t.cfg",
          'GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT:-} hugepagesz=1G hugepages=2"\n')  # fmt: skip
    assert run(root, "update-grub").returncode == 0
    assert (
        "console=ttyS0 quiet hugepagesz=1G hugepages=2" in (root / "boot/grub/grub.cfg").read_text()
    )
    assert not (root / KERNEL_DIR / "cmdline").exists()  # only a boot changes the running line
    run(root, "boot")
    assert (root / KERNEL_DIR / "cmdline").read_text() == (
        "BOOT_IMAGE=/boot/vmlinuz-sandbox root=/dev/sda1 ro console=ttyS0 quiet"
        " hugepagesz=1G hugepages=2\n"
    )


def limits_row(text: str, row: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(row + " "))
    return line[len(row) :].split()


def test_unit_limits_follow_drop_ins(root: Path) -> None:
    write(root, "/etc/systemd/system/containerd.service.d/10-a.conf",
          "[Service]\nLimitSTACK=1\nLimitNOFILE=4096:8K\n")  # fmt: skip
    write(root, "/etc/systemd/system/containerd.service.d/999-t.conf",
          "[Service]\nLimitSTACK=67108864\nLimitMEMLOCK=infinity\n")  # fmt: skip
    assert run(root, "systemctl", "restart", "containerd").returncode == 0
    pid = run(root, "systemctl", "show", "--property=MainPID", "--value", "containerd.service")
    assert pid.stdout.strip() in ("2", "14", "15")
    limits = (root / KERNEL_DIR / "proc" / pid.stdout.strip() / "limits").read_text()
    assert limits.splitlines()[0].split() == ["Limit", "Soft", "Limit", "Hard", "Limit", "Units"]
    assert limits_row(limits, "Max stack size") == ["67108864", "67108864", "bytes"]
    assert limits_row(limits, "Max locked memory") == ["unlimited", "unlimited", "bytes"]
    assert limits_row(limits, "Max open files") == ["4096", "8192", "files"]
    assert limits_row(limits, "Max core file size") == ["0", "unlimited", "bytes"]
    # Row labels are padded to 25 columns as the kernel prints them.
    assert any(line.startswith("Max stack size" + " " * 12) for line in limits.splitlines())


def test_unit_state_and_reboot(root: Path) -> None:
    assert run(root, "systemctl", "is-active", "kubelet").stdout == "inactive\n"
    assert run(root, "systemctl", "is-active", "kubelet").returncode == 3
    assert run(root, "systemctl", "enable", "--now", "kubelet").returncode == 0
    assert run(root, "systemctl", "is-enabled", "kubelet.service").stdout == "enabled\n"
    run(root, "service", "nvidia-persistenced", "start")
    first = run(root, "systemctl", "show", "-p", "MainPID", "nvidia-persistenced").stdout
    assert first.startswith("MainPID=") and first.strip() != "MainPID=0"
    run(root, "systemctl", "restart", "nvidia-persistenced")
    assert run(root, "systemctl", "show", "-p", "MainPID", "nvidia-persistenced").stdout != first
    assert run(root, "systemctl", "status", "kubelet").returncode == 0
    run(root, "systemctl", "stop", "kubelet")
    assert run(root, "systemctl", "status", "kubelet").returncode == 3
    assert run(root, "boot").returncode == 0
    # Enabled and previously running units are running after the boot; the pid may differ.
    for unit in ("kubelet.service", "nvidia-persistenced.service"):
        assert (root / SYSTEMD_DIR / "active" / unit).is_file()
    log = (root / "var/log/skyhook-sandbox/systemctl.log").read_text()
    assert "systemctl enable --now kubelet\n" in log


def test_proc_mounts_cover_sys_cmdline_and_unit_limits(root: Path) -> None:
    run(root, "boot")
    run(root, "systemctl", "start", "containerd")
    pid = run(root, "systemctl", "show", "--property=MainPID", "--value", "containerd").stdout
    mounts = {m.target: m.source for m in simkernel.proc_mounts(root, "/root")}
    assert mounts["/root/proc/sys"] == str(root / KERNEL_DIR / "sys")
    assert mounts["/root/proc/cmdline"] == str(root / KERNEL_DIR / "cmdline")
    assert mounts[f"/root/proc/{pid.strip()}/limits"].endswith(f"/proc/{pid.strip()}/limits")


def test_pid_pool_holds_permanent_kernel_threads() -> None:
    pool = simkernel.pid_pool()
    assert 2 in pool  # kthreadd
    assert all(Path(f"/proc/{pid}").is_dir() for pid in pool)


def test_shim_layer_diverts_shimmed_paths_from_dpkg(tmp_path: Path) -> None:
    """apt installing systemd or procps must not replace the shims on a Debian host root."""
    base, layer = tmp_path / "base", tmp_path / "layer"
    (base / "usr/bin").mkdir(parents=True)
    (base / "var/lib/dpkg").mkdir(parents=True)
    (base / "var/lib/dpkg/diversions").write_text("/bin/sh\n/bin/sh.distrib\ndash\n")
    write_shims(layer, base)
    lines = (layer / "var/lib/dpkg/diversions").read_text().splitlines()
    assert lines[:3] == ["/bin/sh", "/bin/sh.distrib", "dash"]
    entries = {lines[i]: (lines[i + 1], lines[i + 2]) for i in range(0, len(lines), 3)}
    assert entries["/bin/systemctl"] == ("/bin/systemctl.distrib", ":")
    assert entries["/usr/sbin/sysctl"] == ("/usr/sbin/sysctl.distrib", ":")
    assert (layer / "usr/bin/systemctl").read_text().startswith("#!/bin/sh")
    assert (layer / SYSTEMD_DIR / "enabled/containerd.service").is_file()
