"""A pulled image as a container's root filesystem (`run: image`): what a container runtime
derives from the image and the pod before it starts the process, for container.py to do.

- The root: the unpacked image as the read-only lower layer of an overlay per container run,
  so what the container writes stays in that run's upper directory.
- Paths inside the image (mount targets, the working directory) are resolved within the
  image's tree, symlinks included, as runc does: an absolute symlink in the image points into
  the image, never at this machine's files. A target below another mount is resolved below
  that mount's resolved target, since the image's tree is not what lies there.
- The user: the image's `User` (`uid[:gid]`, or names looked up in the image's /etc/passwd and
  /etc/group); HOME from that user's passwd entry when the environment does not set it.
- /etc/hosts and /etc/resolv.conf: this machine's, as a kubelet gives a host-network pod the
  node's (every sandbox pod shares this machine's network).
- The node's simulated kernel and init: the image's own reboot, systemctl, sysctl ... are
  replaced in the run's upper directory by the node's shim, which acts on the node's host root,
  so that is mounted in the container at its path on this machine; the container's /proc/sys
  and /proc/cmdline are the node's, as for a host root mount (simkernel.proc_mounts).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from skyhook_sandbox import shims, simkernel
from skyhook_sandbox.container import ContainerSpec, ImageLayer, Mount
from skyhook_sandbox.podenv import ContainerConfigError

MAX_SYMLINKS = 40  # Linux's own limit on symlinks followed while resolving one path
NETWORK_FILES = ("/etc/hosts", "/etc/resolv.conf")


def resolve_in_root(root: Path, path: str, follow_last: bool = True) -> str:
    """`path` as the container sees it, every symlink resolved inside the tree at `root`.

    Missing components are kept as written (a mount creates them). Returns an absolute path.
    """
    pending = [part for part in path.split("/") if part not in ("", ".")]
    resolved: list[str] = []
    hops = 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            if resolved:
                resolved.pop()
            continue
        candidate = root.joinpath(*resolved, part)
        if candidate.is_symlink() and (pending or follow_last):
            hops += 1
            if hops > MAX_SYMLINKS:
                raise ContainerConfigError(
                    f"{path}: too many levels of symbolic links in the image"
                )
            link = os.readlink(candidate)
            if link.startswith("/"):
                resolved = []
            pending = [p for p in link.split("/") if p not in ("", ".")] + pending
            continue
        resolved.append(part)
    return "/" + "/".join(resolved)


def _table(root: Path, name: str) -> list[list[str]]:
    """The colon-separated lines of the image's /etc/`name` (passwd, group); none if absent."""
    path = root / resolve_in_root(root, f"/etc/{name}").lstrip("/")
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return [line.split(":") for line in text.splitlines() if line and not line.startswith("#")]


def resolve_user(root: Path, user: str) -> tuple[int, int, str] | None:
    """(uid, gid, home) of the image's `User`; None for an image that names none (root).

    As runc reads it: a numeric uid needs no passwd entry (then gid 0 and home /).
    """
    if not user:
        return None
    name, _, group = user.partition(":")
    passwd = [e for e in _table(root, "passwd") if len(e) >= 6 and e[2].isdigit()]
    entry = next((e for e in passwd if (e[2] if name.isdigit() else e[0]) == name), None)
    if entry is None and not name.isdigit():
        raise ContainerConfigError(f'user "{name}" of the image: no such user in its /etc/passwd')
    uid = int(entry[2]) if entry is not None else int(name)
    gid = int(entry[3]) if entry is not None and entry[3].isdigit() else 0
    if group.isdigit():
        gid = int(group)
    elif group:
        found = [e for e in _table(root, "group") if len(e) >= 3 and e[0] == group]
        if not found or not found[0][2].isdigit():
            raise ContainerConfigError(
                f'group "{group}" of the image: no such group in its /etc/group'
            )
        gid = int(found[0][2])
    home = entry[5] if entry is not None and entry[5] else "/"
    return uid, gid, home


class _Paths:
    """Container paths resolved in the image, or below the mount that encloses them."""

    def __init__(self, rootfs: Path) -> None:
        self.rootfs = rootfs
        self.mounted: dict[str, str] = {}  # mount target as written -> resolved

    def resolve(self, path: str) -> str:
        path = "/" + path.strip("/")
        enclosing = [m for m in self.mounted if m != path and path.startswith(m.rstrip("/") + "/")]
        if not enclosing:
            return resolve_in_root(self.rootfs, path)
        parent = max(enclosing, key=len)
        return self.mounted[parent].rstrip("/") + path[len(parent.rstrip("/")) :]

    def mounts(self, mounts: list[Mount]) -> list[Mount]:
        result = []
        for mount in sorted(mounts, key=lambda m: len(Path(m.target).parts)):
            resolved = self.resolve(mount.target)
            self.mounted["/" + mount.target.strip("/")] = resolved
            result.append(replace(mount, target=resolved))
        return result


def container_spec(
    rootfs: Path,
    run_dir: Path,
    *,
    argv: list[str],
    env: dict[str, str],
    working_dir: str,
    user: str,
    mounts: list[Mount],
    node_root: Path,
) -> ContainerSpec:
    """The container that runs `argv` chrooted in an overlay of `rootfs` mounted in `run_dir`.

    `env` is the image's environment updated with the pod's; `working_dir` is the pod's or else
    the image's; `user` is the image's (the sandbox applies no pod securityContext).
    """
    upper, work = run_dir / "rootfs-upper", run_dir / "rootfs-work"
    upper.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    shims.shadow_image_commands(upper, rootfs, shims.shim_script(str(node_root)))
    identity = resolve_user(rootfs, user)
    environment = dict(env)
    if identity is not None:
        environment.setdefault("HOME", identity[2])
    extra = [Mount(source=str(node_root), target=str(node_root))]
    extra += [Mount(source=path, target=path) for path in NETWORK_FILES if Path(path).is_file()]
    extra += simkernel.proc_mounts(node_root, "/")
    paths = _Paths(rootfs)
    inside = paths.mounts([*mounts, *extra])
    root = run_dir / "rootfs"
    return ContainerSpec(
        argv=argv,
        env=environment,
        working_dir=paths.resolve(working_dir or "/"),
        layers=[ImageLayer(str(rootfs), str(root), str(upper), str(work))],
        mounts=inside,
        root=str(root),
        user=identity[:2] if identity is not None else None,
    )
