"""Base images made from Debian packages, for builds that cannot pull upstream's bases.

Docker Hub is out of reach here, so the tests push their own bases to the local registry first:
- `busybox_rootfs(arch)`: Debian's busybox-static for that architecture, unpacked (no code of
  the target architecture runs: the applet links come from the amd64 build of the same version);
- `python_rootfs(arch)`: Debian's python3 and python3-venv (and sh, coreutils, find) with their whole dependency closure,
  unpacked onto a merged-/usr root as debootstrap lays it out, for the agent and operator images
  (upstream's python:3.11-slim-bookworm is Debian bookworm's layout with Python 3.11 too).
  Packages are unpacked, not configured: no maintainer script runs, again so that nothing of
  the target architecture executes; what Python needs at run time is in the files.
The .deb files are fetched with apt-get, with lists and cache of their own for each
architecture (the machine's dpkg configuration is left alone), and cached under
~/.cache/skyhook/debs/<arch>/ ($SKYHOOK_CACHE_DIR replaces ~/.cache/skyhook).
"""

from __future__ import annotations

import shutil
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
    _, options = _apt_state(arch)
    subprocess.run(
        ["apt-get", *options, "-qq", "download", f"{name}:{arch}"], cwd=directory, check=True
    )
    return sorted(directory.glob(f"{name}_*_{arch}.deb"))[-1]


def _apt_state(arch: str) -> tuple[Path, list[str]]:
    state = cache_root() / "debs" / arch / ".apt"
    for sub in ("lists/partial", "cache/archives/partial"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    (state / "status").touch()  # nothing installed: apt resolves every dependency
    options = _apt_options(state, arch)
    if not any((state / "lists").glob("*_Packages")):
        subprocess.run(["apt-get", *options, "-qq", "update"], check=True)
    return state, options


PYTHON_PACKAGES = ("python3", "python3-venv", "dash", "coreutils", "findutils")


def python_rootfs(arch: str, target: Path) -> Path:
    """Debian bookworm's python3 (+ venv, sh, coreutils) for `arch`, unpacked into `target`."""
    state, options = _apt_state(arch)
    subprocess.run(
        ["apt-get", *options, "-qq", "-y", "--no-install-recommends", "install",
         "--download-only", *PYTHON_PACKAGES],
        check=True,
    )  # fmt: skip
    # Only the versions apt can still fetch: a Debian point release leaves no stale duplicate.
    subprocess.run(["apt-get", *options, "-qq", "autoclean"], check=True)
    for directory in ("usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "tmp", "root", "etc/ssl"):
        (target / directory).mkdir(parents=True, exist_ok=True)
    for link in ("bin", "sbin", "lib", "lib64"):  # merged /usr, as debootstrap makes it
        (target / link).symlink_to(f"usr/{link}")
    (target / "tmp").chmod(0o1777)
    for deb in sorted((state / "cache" / "archives").glob("*.deb")):
        unpack = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE)
        subprocess.run(
            ["tar", "-x", "--keep-directory-symlink", "-C", str(target)],
            stdin=unpack.stdout,
            check=True,
        )
        assert unpack.wait() == 0, f"dpkg-deb --fsys-tarfile {deb} failed"
    # pip inside the build reaches PyPI through this machine's TLS setup: its CA bundle.
    (target / "etc/ssl/certs").mkdir(parents=True, exist_ok=True)
    shutil.copy2("/etc/ssl/certs/ca-certificates.crt", target / "etc/ssl/certs")
    return target


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


PYTHON_DOCKERFILE = (
    BASE_DOCKERFILE
    + """\
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
"""
)


def push_busybox_base(build: LocalBuild, work: Path, image: str) -> None:
    """Build `image` (linux/amd64 and linux/arm64, busybox-static) and push it to our registry."""
    for arch in ARCHES:
        busybox_rootfs(arch, work / f"rootfs-{arch}")
    _push_base(build, work, image, BASE_DOCKERFILE)


def push_python_base(build: LocalBuild, work: Path, image: str) -> None:
    """Build `image` (linux/amd64 and linux/arm64, Debian's python3) and push it."""
    for arch in ARCHES:
        python_rootfs(arch, work / f"rootfs-{arch}")
    _push_base(build, work, image, PYTHON_DOCKERFILE)


def _push_base(build: LocalBuild, work: Path, image: str, dockerfile: str) -> None:
    (work / "Dockerfile").write_text(dockerfile)
    platforms = ",".join(f"linux/{arch}" for arch in ARCHES)
    build.buildx(work, "-t", image, "--push", platform=platforms)
