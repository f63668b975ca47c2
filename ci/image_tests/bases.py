"""Base images made from Debian packages, for builds that cannot pull upstream's bases.

Docker Hub is out of reach here, so the tests push their own bases to the local registry first:
`busybox_rootfs(arch)` is Debian's busybox-static for that architecture, unpacked (no code of
the target architecture runs: the applet links come from the amd64 build of the same version).
The .deb files are fetched with apt-get, with lists and cache of their own for each
architecture (the machine's dpkg configuration is left alone), and cached under
~/.cache/skyhook/debs/<arch>/ ($SKYHOOK_CACHE_DIR replaces ~/.cache/skyhook).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _gotool import cache_root
from _localbuild import LocalBuild

ARCHES = ("amd64", "arm64")


def _apt_options(state: Path, arch: str) -> list[str]:
    return [
        "-o", f"APT::Architecture={arch}",
        "-o", f"APT::Architectures::={arch}",
        "-o", f"Dir::State::Lists={state / 'lists'}",
        "-o", f"Dir::Cache={state / 'cache'}",
        "-o", f"Dir::State::status={state / 'status'}",
        "-o", "Debug::NoLocking=1",
        "-o", "APT::Sandbox::User=root",
    ]  # fmt: skip


def debian_package(name: str, arch: str) -> Path:
    """The .deb of `name` for `arch` (Debian's own archive, the machine's apt sources)."""
    directory = cache_root() / "debs" / arch
    found = sorted(directory.glob(f"{name}_*_{arch}.deb"))
    if found:
        return found[-1]
    state = directory / ".apt"
    for sub in ("lists/partial", "cache/archives/partial"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    (state / "status").touch()
    options = _apt_options(state, arch)
    subprocess.run(["apt-get", *options, "-qq", "update"], check=True)
    subprocess.run(
        ["apt-get", *options, "-qq", "download", f"{name}:{arch}"], cwd=directory, check=True
    )
    return sorted(directory.glob(f"{name}_*_{arch}.deb"))[-1]


def busybox_rootfs(arch: str, target: Path) -> Path:
    """A root filesystem of busybox-static for `arch`: /bin/busybox and every applet link."""
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["dpkg-deb", "-x", str(debian_package("busybox-static", arch)), str(target)], check=True
    )
    native = target if arch == "amd64" else busybox_rootfs("amd64", target.with_name("native"))
    applets = subprocess.run(
        [str(native / "bin" / "busybox"), "--list-full"], capture_output=True, text=True, check=True
    ).stdout.split()
    for applet in applets:
        link = target / applet
        if not link.exists() and not link.is_symlink():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to("/bin/busybox")
    for directory in ("tmp", "root", "etc"):
        (target / directory).mkdir(exist_ok=True)
    return target


BASE_DOCKERFILE = """\
FROM scratch
ARG TARGETARCH
COPY rootfs-${TARGETARCH}/ /
"""


def push_busybox_base(build: LocalBuild, work: Path, image: str) -> None:
    """Build `image` (linux/amd64 and linux/arm64, busybox-static) and push it to our registry."""
    for arch in ARCHES:
        busybox_rootfs(arch, work / f"rootfs-{arch}")
    (work / "Dockerfile").write_text(BASE_DOCKERFILE)
    platforms = ",".join(f"linux/{arch}" for arch in ARCHES)
    subprocess.run(
        ["docker", "buildx", "build", "--platform", platforms, "-t", image, "--push", str(work)],
        env={**os.environ, **build.env()},
        check=True,
    )
