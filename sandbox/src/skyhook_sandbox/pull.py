"""Pulling a real image from a registry into a local root filesystem, with skopeo and umoci.

An image map rule `run: pull` (images.py) makes a container's image come from its registry, as
a kubelet would have it, instead of from a local folder: `skopeo copy` fetches the image for
linux/<the node's arch> (from an index, the matching manifest) into an OCI layout, and `umoci
raw unpack` applies its layers in order into a directory, whiteouts and opaque directories
honoured. Both are Debian packages (`apt-get install skopeo umoci`); no layer is read by our
own code.

The image's config (Entrypoint, Cmd, Env, WorkingDir, User), which `run: image` needs to run
the image as a container runtime would, is skopeo's answer too: `skopeo inspect --config` on the
local copy, kept as <state>/images/config/<key>.json.

Each image is pulled once per sandbox: the unpacked tree lives under
<state>/images/rootfs/<index digest>-<arch> and is keyed by the digest of what the reference
names at pull time, so pushing a new image under the same tag pulls again, and nodes that start
the same image at once wait for one pull. Plain-HTTP registries (a local one) need the rule's
`insecure: true`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import platform
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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


@dataclass(frozen=True)
class ImageConfig:
    """What an image asks of the runtime that starts it (the OCI image config's `config`)."""

    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    working_dir: str = ""
    user: str = ""

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> ImageConfig:
        config = document.get("config") or {}
        env = {}
        for item in config.get("Env") or []:
            name, _, value = item.partition("=")
            env[name] = value
        return cls(
            entrypoint=list(config.get("Entrypoint") or []),
            cmd=list(config.get("Cmd") or []),
            env=env,
            working_dir=config.get("WorkingDir") or "",
            user=config.get("User") or "",
        )


@dataclass(frozen=True)
class PulledImage:
    rootfs: Path  # the layers applied, shared read-only by every container of the image
    config: ImageConfig


@dataclass
class ImagePuller:
    cache_dir: Path
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    async def pull(self, reference: str, arch: str, insecure: bool = False) -> PulledImage:
        """The unpacked root filesystem of `reference` for linux/`arch`, and its config."""
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
        config = self.cache_dir / "config" / f"{key}.json"
        async with self._locks.setdefault(key, asyncio.Lock()):
            layout = self.cache_dir / "layout"
            if not rootfs.is_dir():
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
            if not config.is_file():
                answer = await _run("skopeo", "inspect", "--config", f"oci:{layout}:{key}")
                partial_config = config.with_suffix(".partial")
                partial_config.parent.mkdir(parents=True, exist_ok=True)
                partial_config.write_bytes(answer)
                partial_config.rename(config)
        return PulledImage(rootfs, ImageConfig.from_json(json.loads(config.read_bytes())))


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
