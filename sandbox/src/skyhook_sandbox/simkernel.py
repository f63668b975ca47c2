"""The simulated kernel and init of a node, kept as plain files in its host root.

The shims (`shims.py`) change this state; this module seeds it, runs the boot step and shows it
to containers. Containers that mount the host root get this machine's /proc there, with three
things replaced by the node's own (bind mounts inside the container's mount namespace only):
- `/proc/sys` -> `<KERNEL_DIR>/sys` (sysctl values; defaults copied once from this machine);
- `/proc/cmdline` -> `<KERNEL_DIR>/cmdline` (written at boot from /boot/grub/grub.cfg);
- `/proc/<pid>/limits` of each running simulated unit -> `<KERNEL_DIR>/proc/<pid>/limits`.
A unit's MainPID is taken from a pool of this machine's permanent kernel threads, so that
`/proc/<pid>` exists to bind over; nothing of the real process is used or changed.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import subprocess
from pathlib import Path

from skyhook_sandbox.container import Mount
from skyhook_sandbox.shims import BOOT_SCRIPT, KERNEL_DIR

log = logging.getLogger("skyhook_sandbox.simkernel")
# Kernel threads that live as long as the machine (per-CPU and singletons), unlike kworkers.
PERMANENT_THREAD = re.compile(
    r"^(kthreadd|ksoftirqd/\d+|migration/\d+|cpuhp/\d+|rcu_\w+|kswapd\d+|kcompactd\d+|khungtaskd"
    r"|oom_reaper|kdevtmpfs|kauditd|watchdogd|idle_inject/\d+)$"
)


def seed_sysctl(layer: Path, proc_sys: Path = Path("/proc/sys")) -> int:
    """Copy this machine's sysctl values (read-only) into a host root layer; returns the count.

    Unreadable entries (write-only triggers such as vm.drop_caches) become empty files, so the
    key exists for writes as it does on the kernel.
    """
    target = layer / KERNEL_DIR / "sys"
    count = 0
    for directory, _subdirs, files in os.walk(proc_sys):
        relative = Path(directory).relative_to(proc_sys)
        (target / relative).mkdir(parents=True, exist_ok=True)
        for name in files:
            try:
                value = (Path(directory) / name).read_bytes()
            except OSError:
                value = b""
            (target / relative / name).write_bytes(value)
            count += 1
    return count


@functools.cache
def pid_pool(proc: Path = Path("/proc")) -> tuple[int, ...]:
    """Pids of this machine's permanent kernel threads, lowest first."""
    pids = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        parent = stat[stat.rindex(")") + 2 :].split()[1]
        if (entry.name == "2" or parent == "2") and PERMANENT_THREAD.match(comm):
            pids.append(int(entry.name))
    return tuple(sorted(pids))


def boot(host_root: Path) -> None:
    """The boot step of a (simulated) boot: sysctl settings, kernel command line, units."""
    kernel = host_root / KERNEL_DIR
    kernel.mkdir(parents=True, exist_ok=True)
    (kernel / "pid-pool").write_text("".join(f"{pid}\n" for pid in pid_pool()))
    result = subprocess.run(
        ["chroot", str(host_root), "/bin/sh", "/" + BOOT_SCRIPT],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0 or result.stderr:
        log.warning("boot step in %s (rc %s): %s", host_root, result.returncode, result.stderr)


def proc_mounts(host_root: Path, target: str) -> list[Mount]:
    """Bind mounts that show the node's simulated kernel over /proc of a host root mounted at
    `target` in a container (only for what the node has, and pids this machine has)."""
    kernel = host_root / KERNEL_DIR
    proc = target.rstrip("/") + "/proc"
    mounts = []
    if (kernel / "sys").is_dir():
        mounts.append(Mount(source=str(kernel / "sys"), target=f"{proc}/sys"))
    if (kernel / "cmdline").is_file():
        mounts.append(Mount(source=str(kernel / "cmdline"), target=f"{proc}/cmdline"))
    if (kernel / "proc").is_dir():
        for limits in sorted((kernel / "proc").glob("*/limits")):
            pid = limits.parent.name
            if pid.isdigit() and Path(f"/proc/{pid}").is_dir():
                mounts.append(Mount(source=str(limits), target=f"{proc}/{pid}/limits"))
    return mounts
