"""A pinned helm v3, built from the Go module proxy once and cached.

    python ci/_helm.py        build helm if needed (with progress), then print its path

The chart tests run the real helm (lint, template). No helm release binary is downloadable
here, so `go install helm.sh/helm/v3/cmd/helm@HELM_VERSION` builds it, niced because the
build takes minutes of CPU. It lands in ~/.cache/skyhook/bin/helm/<version>/helm
($SKYHOOK_CACHE_DIR replaces ~/.cache/skyhook); a file lock stops two test runs from
building at once. The link flags are the ones helm's Makefile sets, so `helm version` and
the Kubernetes version `helm template` assumes match a release build.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

HELM_VERSION = "v3.21.4"
HELM_MODULE = "helm.sh/helm/v3"


class HelmBuildError(RuntimeError):
    """helm could not be built; the message says which step failed and how."""


def cache_root() -> Path:
    override = os.environ.get("SKYHOOK_CACHE_DIR")
    return Path(override) if override else Path.home() / ".cache" / "skyhook"


def helm_path() -> Path:
    return cache_root() / "bin" / "helm" / HELM_VERSION / "helm"


def link_flags(client_go_version: str) -> str:
    """helm's Makefile ldflags: helm's own version, and Kubernetes 1.<minor> from client-go 0.<minor>."""
    match = re.fullmatch(r"v0\.(\d+)\.\d+", client_go_version)
    if not match:
        raise HelmBuildError(f"unexpected k8s.io/client-go version {client_go_version!r}")
    minor = match.group(1)
    flags = [f"-X {HELM_MODULE}/internal/version.version={HELM_VERSION}"]
    for package in ("pkg/lint/rules", "pkg/chartutil"):
        flags += [
            f"-X {HELM_MODULE}/{package}.k8sVersionMajor=1",
            f"-X {HELM_MODULE}/{package}.k8sVersionMinor={minor}",
        ]
    return " ".join(flags)


def client_go_version(go_mod_text: str) -> str:
    match = re.search(r"^\s*k8s\.io/client-go\s+(v\S+)", go_mod_text, re.MULTILINE)
    if not match:
        raise HelmBuildError(f"{HELM_MODULE}@{HELM_VERSION} go.mod does not require client-go")
    return match.group(1)


def ensure_helm(say: Callable[[str], None] = print) -> Path:
    """The cached helm, built first when missing. `say` receives progress lines."""
    override = os.environ.get("SKYHOOK_HELM")
    if override:
        if not (Path(override).is_file() and os.access(override, os.X_OK)):
            raise HelmBuildError(f"SKYHOOK_HELM={override} is not an executable file")
        return Path(override)
    target = helm_path()
    if _usable(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _lock(target.parent / ".build.lock"):
        if _usable(target):  # another process built it while we waited
            return target
        _build(target, say)
    return target


def _usable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    env["GOFLAGS"] = "-mod=mod"
    env.setdefault("GOPROXY", "https://proxy.golang.org,direct")
    return env


def _build(target: Path, say: Callable[[str], None]) -> None:
    go = shutil.which("go")
    if go is None:
        raise HelmBuildError(
            "building helm needs Go on PATH (https://go.dev/dl), or set SKYHOOK_HELM"
        )
    module = f"{HELM_MODULE}@{HELM_VERSION}"
    say(f"building helm {HELM_VERSION} from the Go module proxy (first run only, a few minutes)")
    with tempfile.TemporaryDirectory(prefix="skyhook-helm-") as work:
        download = subprocess.run(
            [go, "mod", "download", "-json", module],
            cwd=work,
            env=_go_env(),
            capture_output=True,
            text=True,
        )
        if download.returncode != 0:
            raise HelmBuildError(f"go mod download {module} failed:\n{download.stderr.strip()}")
        go_mod = Path(json.loads(download.stdout)["GoMod"]).read_text()
        flags = link_flags(client_go_version(go_mod))
        gobin = Path(work) / "bin"
        command = ["nice", "-n", "19", go, "install", "-v", "-ldflags", flags]
        command.append(f"{HELM_MODULE}/cmd/helm@{HELM_VERSION}")
        _run_with_progress(command, Path(work), {**_go_env(), "GOBIN": str(gobin)}, say)
        built = gobin / "helm"
        reported = subprocess.run(
            [str(built), "version", "--template", "{{.Version}}"], capture_output=True, text=True
        ).stdout.strip()
        if reported != HELM_VERSION:
            raise HelmBuildError(f"built helm reports version {reported!r}, not {HELM_VERSION}")
        partial = target.with_name(target.name + ".partial")
        shutil.copy2(built, partial)
        partial.replace(target)  # atomic: a reader sees no binary or a whole one
    say(f"helm {HELM_VERSION} cached at {target}")


def _run_with_progress(
    command: list[str], cwd: Path, env: dict[str, str], say: Callable[[str], None]
) -> None:
    """Run `go install -v`, reporting downloads and every 50th compiled package."""
    started = time.monotonic()
    tail: list[str] = []
    compiled = 0
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert process.stdout is not None
    for raw in process.stdout:
        line = raw.rstrip()
        tail = [*tail[-19:], line]
        elapsed = f"{time.monotonic() - started:5.0f}s"
        if line.startswith("go: downloading"):
            say(f"[helm build {elapsed}] {line}")
        elif line and not line.startswith(("#", "go:")):
            compiled += 1
            if compiled % 50 == 0:
                say(f"[helm build {elapsed}] {compiled} packages compiled, now {line}")
    if process.wait() != 0:
        raise HelmBuildError("go install of helm failed; last output:\n" + "\n".join(tail))


def main() -> int:
    try:
        path = ensure_helm(lambda line: print(line, file=sys.stderr, flush=True))
    except HelmBuildError as error:
        print(f"ci/_helm.py: {error}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
