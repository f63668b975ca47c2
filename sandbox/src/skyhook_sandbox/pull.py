"""Pulling a real image from a registry into a local root filesystem, with skopeo and umoci.

An image map rule `run: pull` (images.py) makes a container's image come from its registry, as
a kubelet would have it, instead of from a local folder: `skopeo copy` fetches the image for
linux/<the node's arch> (from an index, the matching manifest) into an OCI layout, and `umoci
raw unpack` applies its layers in order into a directory, whiteouts and opaque directories
honoured. Both are Debian packages (`apt-get install skopeo umoci`); no layer is read by our
own code.

Each image is pulled once per sandbox: the unpacked tree lives under
<state>/images/rootfs/<index digest>-<arch> and is keyed by the digest of what the reference
names at pull time, so pushing a new image under the same tag pulls again, and nodes that start
the same image at once wait for one pull. Plain-HTTP registries (a local one) need the rule's
`insecure: true`.
"""

from __future__ import annotations

import asyncio
import hashlib
import platform
import shutil
from dataclasses import dataclass, field
from pathlib import Path

TOOLS = ("skopeo", "umoci")
# The architecture a node reports (kubernetes.io/arch) and pulls images for: this machine's.
MACHINE_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


class PullError(RuntimeError):
    """The image could not be pulled or unpacked; the message is the tool's own."""


def split_reference(reference: str) -> tuple[str, str]:
    """`host:5000/a/b:1.0` -> (`host:5000/a/b`, `:1.0`); a digest stays as `@sha256:...`."""
    name, at, digest = reference.partition("@")
    if at:
        return name, f"@{digest}"
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon:]
    return name, ":latest"


@dataclass
class ImagePuller:
    cache_dir: Path
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    async def pull(self, reference: str, arch: str, insecure: bool = False) -> Path:
        """The unpacked root filesystem of `reference` for linux/`arch`."""
        missing = [tool for tool in TOOLS if shutil.which(tool) is None]
        if missing:
            raise PullError(
                f"pulling {reference} needs {' and '.join(missing)} (apt-get install skopeo umoci)"
            )
        tls = "false" if insecure else "true"
        raw = await _run(
            "skopeo", "inspect", "--raw", f"--tls-verify={tls}", f"docker://{reference}"
        )
        digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        key = f"{digest.removeprefix('sha256:')[:32]}-{arch}"
        rootfs = self.cache_dir / "rootfs" / key
        async with self._locks.setdefault(key, asyncio.Lock()):
            if rootfs.is_dir():
                return rootfs
            layout = self.cache_dir / "layout"
            layout.parent.mkdir(parents=True, exist_ok=True)
            repository, _ = split_reference(reference)
            await _run(
                "skopeo", "copy", "--quiet", f"--src-tls-verify={tls}",
                "--override-os", "linux", "--override-arch", arch,
                f"docker://{repository}@{digest}", f"oci:{layout}:{key}",
            )  # fmt: skip
            partial = rootfs.with_name(f"{key}.partial")
            shutil.rmtree(partial, ignore_errors=True)
            partial.parent.mkdir(parents=True, exist_ok=True)
            await _run("umoci", "raw", "unpack", "--image", f"{layout}:{key}", str(partial))
            partial.rename(rootfs)  # whole or absent: a crash mid-unpack pulls again
        return rootfs


async def _run(*argv: str) -> bytes:
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    if process.returncode != 0:
        message = err.decode(errors="replace").strip().splitlines()
        raise PullError(f"{argv[0]} {argv[1]}: {message[-1] if message else 'failed'}")
    return out
