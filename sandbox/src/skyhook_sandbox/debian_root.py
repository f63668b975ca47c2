"""A real minimal Debian root filesystem, built once with debootstrap and cached as a tarball.

Package tests and optional sandbox host roots need a genuine distro root to chroot into (bash,
coreutils, dpkg, apt, /etc/os-release) rather than a hand-made directory. Building one takes
about a minute and needs the network, so the first call runs
``debootstrap --variant=minbase <suite>`` against deb.debian.org and packs the result into
``~/.cache/skyhook/debian/<suite>-minbase-<arch>[-<extras>].tar``; every later call only
extracts that tarball (a couple of seconds) into a fresh directory the caller owns.

Needs root (debootstrap and the extraction keep ownership and device nodes) and the
``debootstrap`` command (``apt-get install -y debootstrap``).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from skyhook_sandbox.cachelock import exclusive_lock

DEFAULT_SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
CACHE_ENV = "SKYHOOK_DEBIAN_CACHE"

Progress = Callable[[str], None]

_DEBIAN_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


class DebianRootError(RuntimeError):
    """The Debian root could not be built or extracted; the message says what to do."""


def _print_progress(line: str) -> None:
    print(f"[debian-root] {line}", file=sys.stderr, flush=True)


def default_cache_dir() -> Path:
    """``$SKYHOOK_DEBIAN_CACHE`` if set, else ``~/.cache/skyhook/debian`` (team cache layout)."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    return Path.home() / ".cache" / "skyhook" / "debian"


def host_debian_arch() -> str:
    machine = platform.machine()
    try:
        return _DEBIAN_ARCH[machine]
    except KeyError:
        raise DebianRootError(f"no Debian architecture known for machine {machine!r}") from None


def tarball_name(suite: str, arch: str, include: Sequence[str]) -> str:
    """Cache file name; extra packages change the name so each variant is cached on its own."""
    name = f"{suite}-minbase-{arch}"
    if include:
        digest = hashlib.sha256(",".join(sorted(include)).encode()).hexdigest()[:10]
        name += f"-{digest}"
    return name + ".tar"


def _require_root_and_tools(*tools: str) -> None:
    if os.geteuid() != 0:
        raise DebianRootError("building or extracting a Debian root needs root (uid 0)")
    for tool in tools:
        if shutil.which(tool) is None:
            hint = " (apt-get install -y debootstrap)" if tool == "debootstrap" else ""
            raise DebianRootError(f"required command {tool!r} not found on PATH{hint}")


def _run_streaming(cmd: list[str], progress: Progress) -> None:
    """Run ``cmd``, forwarding each output line to ``progress``; on failure raise with the tail."""
    tail: list[str] = []
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    ) as proc:
        assert proc.stdout is not None
        for raw_line in proc.stdout:
            line = raw_line.rstrip()
            tail = [*tail[-19:], line]
            progress(line)
    if proc.returncode != 0:
        detail = "\n".join(tail)
        raise DebianRootError(f"{cmd[0]} exited {proc.returncode}; last output:\n{detail}")


def _build_tarball(
    target: Path, *, suite: str, mirror: str, arch: str, include: Sequence[str], progress: Progress
) -> None:
    started = time.monotonic()
    progress(f"building {target.name}: debootstrap --variant=minbase {suite} from {mirror}")
    with tempfile.TemporaryDirectory(prefix="build-", dir=target.parent) as work:
        rootfs = Path(work) / "rootfs"
        cmd = ["debootstrap", "--variant=minbase", f"--arch={arch}"]
        if include:
            cmd.append("--include=" + ",".join(include))
        _run_streaming([*cmd, suite, str(rootfs), mirror], progress)
        # The apt package cache is only needed during the build; dropping it halves the tarball.
        for cached in (rootfs / "var/cache/apt/archives").glob("*.deb"):
            cached.unlink()
        partial = Path(work) / target.name
        progress(f"packing {rootfs} into {target}")
        _run_streaming(
            ["tar", "--numeric-owner", "-cpf", str(partial), "-C", str(rootfs), "."], progress
        )
        partial.replace(target)  # atomic: a crash never leaves a half-written cache entry
    elapsed = time.monotonic() - started
    size_mib = target.stat().st_size / 2**20
    progress(f"built {target} ({size_mib:.0f} MiB) in {elapsed:.1f} s")


def debian_rootfs_tarball(
    *,
    suite: str = DEFAULT_SUITE,
    mirror: str = DEFAULT_MIRROR,
    include: Sequence[str] = (),
    cache_dir: Path | None = None,
    progress: Progress = _print_progress,
) -> Path:
    """Return the cached rootfs tarball for ``suite``, running debootstrap first if it is missing.

    ``include`` adds packages to the minbase set (a separate cache entry per set). Progress lines
    (debootstrap's own output, then the build time) go to ``progress``; nothing is printed when
    the tarball is already cached.
    """
    cache = cache_dir or default_cache_dir()
    arch = host_debian_arch()
    target = cache / tarball_name(suite, arch, include)
    if target.is_file():
        return target
    _require_root_and_tools("debootstrap", "tar")
    with exclusive_lock(cache / ".build.lock"):
        if not target.is_file():  # another process may have built it while we waited
            _build_tarball(
                target, suite=suite, mirror=mirror, arch=arch, include=include, progress=progress
            )
    return target


def debian_root(
    dest: Path,
    *,
    suite: str = DEFAULT_SUITE,
    mirror: str = DEFAULT_MIRROR,
    include: Sequence[str] = (),
    cache_dir: Path | None = None,
    progress: Progress = _print_progress,
) -> Path:
    """Extract a fresh minimal Debian root (``suite``, debootstrap minbase) into ``dest``.

    ``dest`` must be absent or empty; each caller gets its own copy, so tests may change it
    freely. The first call on a machine builds the cached tarball (see
    :func:`debian_rootfs_tarball`); later calls only extract it. Returns ``dest``.
    """
    tarball = debian_rootfs_tarball(
        suite=suite, mirror=mirror, include=include, cache_dir=cache_dir, progress=progress
    )
    _require_root_and_tools("tar")
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise DebianRootError(f"{dest} is not empty; debian_root extracts into an empty directory")
    result = subprocess.run(
        ["tar", "--numeric-owner", "-xpf", str(tarball), "-C", str(dest)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise DebianRootError(f"extracting {tarball} into {dest} failed: {result.stderr.strip()}")
    return dest
