"""Per-node host roots: an overlayfs whose read-only lower layers are shared by every node.

Layers, top to bottom: the node's own upper dir (what packages wrote on that node, for tests
to read), the shim layer (reboot/systemctl/... stand-ins), then a base: either a small tree of
this machine's shell tools with their libraries (built once, cached) or the cached minimal
Debian root from `debian_root`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from skyhook_sandbox import shims, simkernel
from skyhook_sandbox.binaries import skyhook_cache_root

BASE_TOOLS = (
    "sh", "bash", "dash", "env", "cat", "cp", "mv", "rm", "ln", "ls", "mkdir", "rmdir", "touch",
    "chmod", "chown", "echo", "printf", "test", "[", "true", "false", "sleep", "date", "id",
    "whoami", "uname", "hostname", "basename", "dirname", "readlink", "realpath", "stat", "head",
    "tail", "wc", "sort", "uniq", "tr", "cut", "tee", "seq", "grep", "egrep", "sed", "awk",
    "mawk", "find", "xargs", "diff", "cmp", "md5sum", "sha256sum", "base64", "tar", "gzip",
    "mktemp", "install", "du", "df", "sync", "nproc", "expr", "yes", "timeout", "which",
)  # fmt: skip
BASE_DIRS = ("etc", "tmp", "var/log", "var/lib", "var/tmp", "run", "dev", "proc", "sys", "root",
             "home", "opt", "usr/bin", "usr/sbin", "usr/lib", "usr/local/bin")  # fmt: skip
LAYOUT_VERSION = "1"


class HostRootError(RuntimeError):
    """A host root could not be prepared or mounted."""


@dataclass(frozen=True)
class NodeRoot:
    merged: Path  # what the node's pods see as "/" of the host
    upper: Path  # only what was written on this node
    work: Path


def _libraries(binary: Path) -> list[Path]:
    result = subprocess.run(["ldd", str(binary)], capture_output=True, text=True)
    libs = []
    for line in result.stdout.splitlines():
        parts = line.split("=>")
        candidate = (parts[1] if len(parts) == 2 else parts[0]).split("(")[0].strip()
        if candidate.startswith("/"):
            libs.append(Path(candidate))
    return libs


def _copy_preserving(path: Path, root: Path) -> None:
    """Copy a file to the same path under root, recreating the symlink chain on the way."""
    target = root / str(path).lstrip("/")
    if target.exists() or target.is_symlink():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        link = os.readlink(path)
        target.symlink_to(link)
        _copy_preserving(
            (path.parent / link).resolve() if not os.path.isabs(link) else Path(link), root
        )
    else:
        shutil.copy2(path, target)


def _base_digest() -> str:
    found = [shutil.which(tool) or "" for tool in BASE_TOOLS]
    text = LAYOUT_VERSION + "|" + "|".join(f"{p}:{os.stat(p).st_mtime_ns}" for p in found if p)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _write_etc(root: Path) -> None:
    etc = root / "etc"
    (etc / "os-release").write_text(
        'NAME="skyhook-sandbox host"\nID=skyhook-sandbox\nPRETTY_NAME="skyhook-sandbox host root"\n'
    )
    (etc / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n"
    )
    (etc / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
    (etc / "hostname").write_text("sandbox-node\n")


def build_plain_base(cache: Path | None = None) -> Path:
    """The small tool tree, built once per set of tool binaries and reused."""
    cache = cache or skyhook_cache_root() / "hostroot"
    base = cache / f"plain-{_base_digest()}"
    if base.is_dir():
        return base
    staging = cache / f".staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    for directory in BASE_DIRS:
        (staging / directory).mkdir(parents=True, exist_ok=True)
    (staging / "tmp").chmod(0o1777)
    # Follow this machine's layout: on merged /usr, /bin and /lib are links into /usr.
    for link in ("bin", "sbin", "lib", "lib64"):
        real = Path("/") / link
        if real.is_symlink():
            target = os.readlink(real)
            (staging / link).symlink_to(target)
            (staging / link).resolve().mkdir(parents=True, exist_ok=True)
        elif link in ("bin", "sbin"):
            (staging / link).mkdir(exist_ok=True)
    for tool in BASE_TOOLS:
        found = shutil.which(tool)
        if not found:
            continue
        binary = Path(found)
        _copy_preserving(binary, staging)
        for library in _libraries(binary.resolve()):
            _copy_preserving(library, staging)
    _write_etc(staging)
    try:
        staging.rename(base)
    except OSError:  # a concurrent builder won
        shutil.rmtree(staging, ignore_errors=True)
    return base


def build_shim_layer(base: Path) -> Path:
    """Shims sit above a given base; one layer per base, cached next to it."""
    content = shims.LAYER_VERSION + shims.shim_script()
    layer = base.parent / f"{base.name}.shims-{hashlib.sha256(content.encode()).hexdigest()[:8]}"
    if layer.is_dir():
        return layer
    staging = base.parent / f".{layer.name}.staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    shims.write_shims(staging, base)
    simkernel.seed_sysctl(staging)
    try:
        staging.rename(layer)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return layer


def mount_node_root(node_dir: Path, lower_layers: list[Path]) -> NodeRoot:
    root = NodeRoot(merged=node_dir / "root", upper=node_dir / "upper", work=node_dir / "work")
    for path in (root.merged, root.upper, root.work):
        path.mkdir(parents=True, exist_ok=True)
    if os.path.ismount(root.merged):
        return root
    lower = ":".join(str(layer) for layer in lower_layers)
    options = f"lowerdir={lower},upperdir={root.upper},workdir={root.work}"
    result = subprocess.run(
        ["mount", "-t", "overlay", "overlay", "-o", options, str(root.merged)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise HostRootError(f"mounting the host root {root.merged} failed: {result.stderr.strip()}")
    return root


def unmounted_node_root(node_dir: Path) -> NodeRoot:
    """A fake kubelet's node: no process ever runs on it, so it gets no host root (no overlay
    mount, no boot step), which is what lets one node host carry 20,000 nodes."""
    return NodeRoot(merged=node_dir / "root", upper=node_dir / "upper", work=node_dir / "work")


def unmount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def mounts_under(directory: Path) -> list[Path]:
    """Mount points at or below a directory, deepest first (for clean-up on `down`)."""
    prefix = str(directory.resolve())
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            found.append(Path(point))
    return sorted(set(found), key=lambda p: len(p.parts), reverse=True)


def clear_volatile(root: NodeRoot) -> None:
    """A reboot empties /run and /tmp (tmpfs on a real host); cleared through the mounted view."""
    for directory in ("run", "tmp"):
        target = root.merged / directory
        if target.is_dir():
            for child in target.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
