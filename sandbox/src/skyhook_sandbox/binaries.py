"""Kubernetes and etcd binaries: found in KUBEBUILDER_ASSETS or the cache, else built from source.

kube-apiserver and kube-controller-manager (the sandbox's control plane) and the node's commands
(kubelet, kubeadm, kubectl, kube-scheduler, kube-proxy: a kind node image's) come from the
pinned Kubernetes release, etcd from the pinned etcd release, all through the Go module proxy.
The Kubernetes commands asked for together are built by one `go build` so they share
compilation. Results are cached under ~/.cache/skyhook/bin/<kubernetes version>/ (an etcd other
than the pinned one under ~/.cache/skyhook/bin/etcd/<version>/) and reused; a file lock keeps
two concurrent builds from racing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from skyhook_sandbox import gomod
from skyhook_sandbox.cachelock import exclusive_lock
from skyhook_sandbox.progress import BuildProgress
from skyhook_sandbox.versions import ETCD_VERSION, KUBERNETES_VERSION

KUBE_COMMANDS = ("kube-apiserver", "kube-controller-manager")
NODE_COMMANDS = ("kubelet", "kubeadm", "kubectl", "kube-scheduler", "kube-proxy")


class BuildError(RuntimeError):
    """A control-plane binary could not be found or built."""


@dataclass(frozen=True)
class ControlPlaneBinaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    built: bool  # True when this call compiled anything


def skyhook_cache_root() -> Path:
    override = os.environ.get("SKYHOOK_CACHE_DIR")
    return Path(override) if override else Path.home() / ".cache" / "skyhook"


def bin_dir(version: str = KUBERNETES_VERSION) -> Path:
    return skyhook_cache_root() / "bin" / version


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def ensure_binaries(progress: BuildProgress | None = None) -> ControlPlaneBinaries:
    """Return usable binaries, building whichever are missing (with progress shown)."""
    progress = progress or BuildProgress()
    cache = bin_dir()
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        asset_dir = Path(assets)
        for name in ("etcd", "kube-apiserver"):
            if not _executable(asset_dir / name):
                raise BuildError(
                    f"KUBEBUILDER_ASSETS={assets}: no executable {name} there "
                    "(the envtest layout is a directory holding etcd and kube-apiserver)"
                )
        etcd, apiserver = asset_dir / "etcd", asset_dir / "kube-apiserver"
        kcm = asset_dir / "kube-controller-manager"
        if _executable(kcm):
            return ControlPlaneBinaries(etcd, apiserver, kcm, built=False)
        wanted: tuple[str, ...] = ("kube-controller-manager",)
    else:
        etcd, apiserver = cache / "etcd", cache / "kube-apiserver"
        kcm = cache / "kube-controller-manager"
        wanted = tuple(name for name in (*KUBE_COMMANDS, "etcd") if not _executable(cache / name))
    if not wanted:
        return ControlPlaneBinaries(etcd, apiserver, kcm, built=False)
    missing = tuple(name for name in wanted if not _executable(cache / name))
    _build_missing(missing, cache, ETCD_VERSION, progress)
    kcm = cache / "kube-controller-manager"
    return ControlPlaneBinaries(etcd, apiserver, kcm, built=bool(missing))


def ensure_commands(
    names: tuple[str, ...], progress: BuildProgress | None = None
) -> dict[str, Path]:
    """The cached binaries of these Kubernetes commands (and `etcd`), building the missing ones."""
    unknown = set(names) - {*KUBE_COMMANDS, *NODE_COMMANDS, "etcd"}
    if unknown:
        raise BuildError(f"no Kubernetes command named {', '.join(sorted(unknown))}")
    cache = bin_dir()
    _build_missing(names, cache, ETCD_VERSION, progress or BuildProgress())
    return {name: cache / name for name in names}


def ensure_etcd(version: str, progress: BuildProgress | None = None) -> Path:
    """etcd at `version` (a kind node runs the etcd kubeadm names, not the sandbox's)."""
    if version == ETCD_VERSION:
        return ensure_commands(("etcd",), progress)["etcd"]
    cache = skyhook_cache_root() / "bin" / "etcd" / version
    _build_missing(("etcd",), cache, version, progress or BuildProgress())
    return cache / "etcd"


def _build_missing(
    names: tuple[str, ...], cache: Path, etcd_version: str, progress: BuildProgress
) -> None:
    if all(_executable(cache / name) for name in names):
        return
    cache.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(cache.parent / f".{cache.name}.lock"):
        # Another process may have finished the build while we waited for the lock.
        missing = tuple(name for name in names if not _executable(cache / name))
        if missing:
            _build(missing, cache, progress, etcd_version)


def _go_env() -> dict[str, str]:
    if shutil.which("go") is None:
        raise BuildError(
            "the control plane is built from source and needs the Go toolchain on PATH "
            "(or set KUBEBUILDER_ASSETS to a directory holding etcd and kube-apiserver)"
        )
    env = dict(os.environ)
    env["CGO_ENABLED"] = "0"
    env["GOFLAGS"] = (env.get("GOFLAGS", "") + " -mod=mod").strip()
    env.setdefault("GOTOOLCHAIN", "local")
    return env


def _go(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    result = subprocess.run(["go", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(f"`go {' '.join(args)}` in {cwd} failed:\n{result.stderr[-4000:]}")
    return result.stdout


def _released_go_mod(module: str, version: str, env: dict[str, str], cwd: Path) -> str:
    info = json.loads(_go(["mod", "download", "-json", f"{module}@{version}"], cwd, env))
    if "Error" in info:
        raise BuildError(f"go mod download {module}@{version}: {info['Error']}")
    return Path(info["GoMod"]).read_text()


def _prepare_module(workdir: Path, wrapper: gomod.WrapperModule, env: dict[str, str]) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    go_mod = workdir / "go.mod"
    if go_mod.exists() and (workdir / "go.sum").exists() and go_mod.read_text() == wrapper.go_mod():
        return
    go_mod.write_text(wrapper.go_mod())
    (workdir / "tools.go").write_text(wrapper.imports_go())
    _go(["mod", "tidy"], workdir, env)


def _build(names: tuple[str, ...], cache: Path, progress: BuildProgress, etcd_version: str) -> None:
    env = _go_env()
    build_root = skyhook_cache_root() / "build"
    build_root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    staging = cache.parent / f".{cache.name}.staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        kube = tuple(name for name in names if name != "etcd")
        if kube:
            workdir = build_root / f"kubernetes-{KUBERNETES_VERSION}"
            progress.note(f"preparing the Kubernetes {KUBERNETES_VERSION} build module")
            go_mod = _released_go_mod("k8s.io/kubernetes", KUBERNETES_VERSION, env, build_root)
            _prepare_module(
                workdir, gomod.kubernetes_wrapper(KUBERNETES_VERSION, go_mod, kube), env
            )
            packages = [f"k8s.io/kubernetes/cmd/{name}" for name in kube]
            flags = gomod.version_ldflags(KUBERNETES_VERSION)
            _compile(
                packages,
                output=staging,
                workdir=workdir,
                env=env,
                ldflags=flags,
                label=", ".join(kube),
                progress=progress,
            )
        if "etcd" in names:
            workdir = build_root / f"etcd-{etcd_version}"
            progress.note(f"preparing the etcd {etcd_version} build module")
            go_mod = _released_go_mod("go.etcd.io/etcd/server/v3", etcd_version, env, build_root)
            _prepare_module(workdir, gomod.etcd_wrapper(etcd_version, go_mod), env)
            _compile(
                ["go.etcd.io/etcd/server/v3"],
                output=staging / "etcd",
                workdir=workdir,
                env=env,
                ldflags="-s -w",
                label="etcd",
                progress=progress,
            )
        for name in names:
            os.replace(staging / name, cache / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    seconds = time.monotonic() - started
    record = {"built": list(names), "seconds": round(seconds, 1), "at": time.time()}
    with open(cache / "build-log.jsonl", "a") as log:
        log.write(json.dumps(record) + "\n")
    progress.done(f"built {', '.join(names)} in {seconds:.0f} s -> {cache}")


def _compile(
    packages: list[str],
    *,
    output: Path,
    workdir: Path,
    env: dict[str, str],
    ldflags: str,
    label: str,
    progress: BuildProgress,
) -> None:
    total = len(_go(["list", "-deps", *packages], workdir, env).split())
    out = f"{output}/" if output.is_dir() else str(output)
    command = ["go", "build", "-v", "-trimpath", f"-ldflags={ldflags}", "-o", out, *packages]
    started = time.monotonic()
    with subprocess.Popen(
        command, cwd=workdir, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    ) as process:
        assert process.stderr is not None
        tail: list[str] = []
        with progress.task(f"building {label}", total) as advance:
            for line in process.stderr:
                tail = [*tail[-40:], line.rstrip()]
                advance(line.strip())
        if process.wait() != 0:
            raise BuildError(f"`{' '.join(command)}` failed:\n" + "\n".join(tail))
    progress.note(f"{label}: compiled in {time.monotonic() - started:.0f} s")
