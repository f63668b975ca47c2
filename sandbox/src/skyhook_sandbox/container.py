"""One container = one local process in its own mount namespace.

`unshare --mount` gives the process a private copy of this machine's mounts; a short shell
prologue then puts the image content and the pod's volumes where the spec says and `exec`s the
container's command, so the process we started is the container's main process. Nothing is
pivoted: the rest of this machine's files stay visible, like a small base image.

A container with a `root` (a pulled image run as a whole, `run: image`) is the exception: its
image content is an overlay mounted at `root`, this machine's /dev, /proc and /sys are bound
inside it, every mount target is a path inside it, and the command is exec'd through
`unshare --root --wd [--setgid --setuid]`, which chroots, changes directory and drops to the
image's user before exec, so nothing of this machine's tree is visible to it.

A container that touches no file (`isolated=False`: the pause and agentless images running
their own entrypoint) starts as a plain process instead: the same command, environment and
process group, without the namespace and the mount commands, which cost more CPU than such a
container ever uses (a 1,000-node rollout starts thousands of them).
"""

from __future__ import annotations

import asyncio
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

SETUP_FAILED = 128  # the exit code container runtimes use when a container cannot start
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Found on this machine's PATH: an image's PATH (the container's environment) may not have it.
UNSHARE = shutil.which("unshare") or "/usr/bin/unshare"


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = False
    host_root: bool = False  # the node's whole host root: also gets /dev, /proc and /sys


@dataclass(frozen=True)
class ImageLayer:
    """Image content at a path, writable copy-on-write per container like an image layer."""

    lower: str
    target: str
    upper: str
    work: str


@dataclass(frozen=True)
class ContainerSpec:
    argv: list[str]
    env: dict[str, str]
    working_dir: str = ""
    layers: list[ImageLayer] = field(default_factory=list)
    mounts: list[Mount] = field(default_factory=list)
    shims: list[tuple[str, str]] = field(default_factory=list)  # (shim file, machine path)
    isolated: bool = True
    # Set: the target of the layer that is the container's root filesystem. Mount targets and
    # working_dir are then paths inside it, symlinks already resolved there (imageroot.py).
    root: str = ""
    user: tuple[int, int] | None = None  # (uid, gid) the command runs as; None: root


def _fail(what: str) -> str:
    return f'|| {{ echo "skyhook-sandbox: {what} failed" >&2; exit {SETUP_FAILED}; }}'


def setup_script(spec: ContainerSpec) -> str:
    """The prologue run inside the new mount namespace, ending in `exec "$@"`."""
    q = shlex.quote
    lines = ["mount --make-rprivate / " + _fail("making mounts private")]
    root = spec.root.rstrip("/")
    if root:
        # The image's PATH is the container's; this machine's tools set the container up.
        lines.append(f"container_path=$PATH; PATH={DEFAULT_PATH}")
    for layer in spec.layers:
        options = f"lowerdir={layer.lower},upperdir={layer.upper},workdir={layer.work}"
        lines.append(
            f"mkdir -p {q(layer.target)} && mount -t overlay overlay -o {q(options)} "
            f"{q(layer.target)} " + _fail(f"image content at {layer.target}")
        )
    if root:
        for special in ("dev", "proc", "sys"):
            inner = q(f"{root}/{special}")
            lines.append(
                f"mkdir -p {inner} && mount --rbind /{special} {inner} " + _fail(f"/{special}")
            )
    for mount in sorted(spec.mounts, key=lambda m: len(Path(m.target).parts)):
        target = q(root + mount.target)
        make = f"[ -d {q(mount.source)} ] && mkdir -p {target} || {{ mkdir -p $(dirname {target}) && touch {target}; }}"
        lines.append(
            f"{{ {make}; }} && mount --bind {q(mount.source)} {target} "
            + _fail(f"mount {mount.target}")
        )
        if mount.read_only:
            lines.append(f"mount -o remount,bind,ro {target} " + _fail(f"read-only {mount.target}"))
        if mount.host_root:
            for special in ("dev", "proc", "sys"):
                inner = q(f"{root}{mount.target.rstrip('/')}/{special}")
                lines.append(
                    f"[ ! -d {inner} ] || mount --rbind /{special} {inner} " + _fail(f"/{special}")
                )
    for shim, machine_path in spec.shims:
        lines.append(
            f"mount --bind {q(shim)} {q(machine_path)} " + _fail(f"shim over {machine_path}")
        )
    if root:
        wd = spec.working_dir or "/"
        user = f"--setgid {spec.user[1]} --setuid {spec.user[0]} " if spec.user is not None else ""
        lines.append(f"mkdir -p {q(root + wd)} " + _fail(f"workingDir {wd}"))
        lines.append("PATH=$container_path")
        lines.append(f'exec {q(UNSHARE)} --root={q(root)} --wd={q(wd)} {user}-- "$@"')
        return "\n".join(lines)
    if spec.working_dir:
        wd = q(spec.working_dir)
        lines.append(f"mkdir -p {wd} && cd {wd} " + _fail(f"workingDir {spec.working_dir}"))
    lines.append('exec "$@"')
    return "\n".join(lines)


def container_environment(spec: ContainerSpec, hostname: str) -> dict[str, str]:
    env = {"PATH": DEFAULT_PATH, "HOME": "/root", "HOSTNAME": hostname}
    env.update(spec.env)
    return env


async def start(spec: ContainerSpec, log_path: Path, hostname: str) -> asyncio.subprocess.Process:
    """Start the container in its own session (its process group is the container)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        if not spec.isolated:
            return await asyncio.create_subprocess_exec(
                *spec.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=container_environment(spec, hostname),
                start_new_session=True,
                cwd="/",
            )
        return await asyncio.create_subprocess_exec(
            UNSHARE, "--mount", "--propagation", "private", "--",
            "/bin/sh", "-c", setup_script(spec), "container", *spec.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=container_environment(spec, hostname),
            start_new_session=True,
            cwd="/",
        )  # fmt: skip
