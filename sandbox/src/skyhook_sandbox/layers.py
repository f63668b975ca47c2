"""The shared read-only lower layers of node host roots, prepared once per node host."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from skyhook_sandbox import debian_root, hostroot
from skyhook_sandbox.binaries import skyhook_cache_root

HOST_ROOT_KINDS = ("plain", "debian")


def debian_base() -> Path:
    """The cached Debian rootfs tarball extracted once into a directory shared as a lower layer."""
    tarball = debian_root.debian_rootfs_tarball()
    base = (
        skyhook_cache_root() / "hostroot" / f"debian-{tarball.stem}-{int(tarball.stat().st_mtime)}"
    )
    if base.is_dir():
        return base
    staging = base.parent / f".{base.name}.staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    debian_root.debian_root(staging)
    try:
        staging.rename(base)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return base


def lower_layers(kind: str) -> list[Path]:
    """Top to bottom: the shim layer, then the base."""
    if kind not in HOST_ROOT_KINDS:
        raise ValueError(f"host root kind {kind!r}: expected one of {', '.join(HOST_ROOT_KINDS)}")
    base = hostroot.build_plain_base() if kind == "plain" else debian_base()
    return [hostroot.build_shim_layer(base), base]
