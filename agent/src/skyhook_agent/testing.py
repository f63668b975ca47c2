"""A minimal host root for tests and benchmarks: real bash and coreutils, and shims.

``build_host_root(dest)`` copies the listed tools and the shared libraries ``ldd`` names for
them, so steps really run chrooted into ``dest``. ``reboot``, ``systemctl`` and ``service`` are
shims that only append their argv to ``/shim-calls.log`` inside the root: an interrupt tested
here can never touch the machine running the tests.
"""

import os
import re
import shutil
import stat
import subprocess
from collections.abc import Iterable
from pathlib import Path

TOOLS = (
    "bash", "sh", "cat", "echo", "grep", "sleep", "mkdir", "touch", "date", "env", "rm", "ls",
    "printf", "true", "false", "chmod", "cp", "mv", "id",
)  # fmt: skip
SHIM_LOG = "/shim-calls.log"
_SHIM = """#!/bin/sh
# Test shim: records the call instead of acting on a real machine.
echo "{name} $*" >> {log}
if [ "{name} $*" = "$SHIM_FAIL_ON" ]; then exit 3; fi
if [ "{name}" = reboot ] && [ -n "$SHIM_REBOOT_SIGTERM" ]; then kill -TERM $$; fi
exit 0
"""
SHIMS = ("reboot", "systemctl", "service")
_LDD_PATH = re.compile(r"(/\S+) \(0x")


def _shared_libraries(binary: Path) -> set[str]:
    output = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
    return set(_LDD_PATH.findall(output))


def build_host_root(dest: Path, tools: Iterable[str] = TOOLS) -> Path:
    """Create a usr-merged root at ``dest`` with ``tools``, their libraries and the shims."""
    for directory in ("usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "etc", "tmp", "var/lib",
                      "var/log", "root"):  # fmt: skip
        (dest / directory).mkdir(parents=True, exist_ok=True)
    for link in ("bin", "sbin", "lib", "lib64"):
        (dest / link).symlink_to(f"usr/{link}")
    libraries: set[str] = set()
    for tool in tools:
        found = shutil.which(tool)
        if found is None:
            raise FileNotFoundError(f"{tool} is not installed on this machine")
        source = Path(found).resolve()
        shutil.copy2(source, dest / "usr/bin" / tool)
        libraries |= _shared_libraries(source)
    for library in libraries:
        target = dest / library.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(library).resolve(), target)
    for name in SHIMS:
        shim = dest / "usr/sbin" / name
        shim.write_text(_SHIM.format(name=name, log=SHIM_LOG))
        shim.chmod(0o755)
    (dest / "etc/os-release").write_text("ID=skyhook-test\n")
    (dest / "dev").mkdir(exist_ok=True)
    for name, minor in (("null", 3), ("zero", 5), ("urandom", 9)):
        os.mknod(dest / "dev" / name, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    return dest


def clone_host_root(template: Path, dest: Path) -> Path:
    """A cheap per-test copy: hard links for files (nobody writes into the tools)."""
    shutil.copytree(template, dest, symlinks=True, copy_function=os.link)
    return dest
