"""A pinned Go tool, built from the Go module proxy once and cached (helm, BuildKit, containerd).

No release binaries are downloadable here, so `go install <package>@<version>` builds the tool
(`go build` in a copy of the module for one whose go.mod `go install` refuses, BuildKit's),
niced because a build can take minutes of CPU. It lands in
~/.cache/skyhook/bin/<name>/<version>/<name> ($SKYHOOK_CACHE_DIR replaces ~/.cache/skyhook;
binaries that belong together share one directory, e.g. the CNI plugins'); a file lock stops two
test runs from building at once, and the binary appears whole or not at all.
`$SKYHOOK_<NAME>` (`-` as `_`) pointing at an executable skips the build.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

Say = Callable[[str], None]


class GoToolBuildError(RuntimeError):
    """The tool could not be built; the message says which step failed and how."""


@dataclass(frozen=True)
class GoTool:
    name: str  # the binary's name, and its cache directory
    module: str  # the module `go mod download` fetches, e.g. helm.sh/helm/v3
    package: str  # the main package `go install` builds, inside the module
    version: str  # the module version, e.g. v3.21.4
    version_args: tuple[str, ...]  # the arguments that make the binary print its version
    # From the module's go.mod text to the -ldflags value; None builds without any.
    link_flags: Callable[[str], str] | None = None
    # Which word of the version output names the version (`buildkitd github.com/moby/buildkit
    # v0.34.2 ...` is word 2); a version printed without its `v` (runc's 1.5.2) also counts.
    version_word: int = 0
    # The version the binary prints when it differs from the module version (Prometheus 3.16.0
    # is module v0.316.0); None when they match.
    reported_version: str | None = None
    cgo: bool = False  # runc's nsenter is C: build with CGO_ENABLED=1 (needs gcc)
    static: bool = False  # CGO_ENABLED=0: for an image with no C library (FROM scratch)
    tags: tuple[str, ...] = ()  # Go build tags, e.g. runc's seccomp (needs libseccomp-dev)
    # `go install <package>@<version>` refuses a module whose go.mod has replace or exclude
    # directives (BuildKit's): build in a copy of the module instead, as its main module.
    in_module: bool = False
    # The cache directory when binaries belong together (the CNI plugins, found by one CNI
    # path; containerd and its shim); None: the binary's name.
    cache_dir: str | None = None

    @property
    def override_variable(self) -> str:
        return "SKYHOOK_" + self.name.upper().replace("-", "_")

    def cached_path(self) -> Path:
        # A static build is kept apart: a binary cached before a tool became static links libc.
        version = f"{self.version}-static" if self.static else self.version
        return cache_root() / "bin" / (self.cache_dir or self.name) / version / self.name

    def ensure(self, say: Say = print) -> Path:
        """The cached binary, built first when missing. `say` receives progress lines."""
        override = os.environ.get(self.override_variable)
        if override:
            if not _usable(Path(override)):
                raise GoToolBuildError(
                    f"{self.override_variable}={override} is not an executable file"
                )
            return Path(override)
        target = self.cached_path()
        if _usable(target):
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        with _lock(target.parent / ".build.lock"):
            if not _usable(target):  # another process may have built it while we waited
                self._build(target, say)
        return target

    def _build(self, target: Path, say: Say) -> None:
        go = shutil.which("go")
        if go is None:
            raise GoToolBuildError(
                f"building {self.name} needs Go on PATH (https://go.dev/dl), "
                f"or set {self.override_variable}"
            )
        module = f"{self.module}@{self.version}"
        say(f"building {self.name} {self.version} from the Go module proxy (first run only)")
        with tempfile.TemporaryDirectory(prefix=f"skyhook-{self.name}-") as work_dir:
            work = Path(work_dir)
            gobin = work / "bin"
            built = gobin / self.name
            env = {**_go_env(), "GOBIN": str(gobin)}
            if self.cgo or self.static:
                env["CGO_ENABLED"] = "0" if self.static else "1"
            command, cwd = self._command(go, module, work, built)
            self._install(command, cwd, env, say)
            if not self.in_module:
                (gobin / Path(self.package).name).rename(built)
            answer = subprocess.run(
                [str(built), *self.version_args], capture_output=True, text=True
            )
            reported = (answer.stdout or answer.stderr).split()  # the CNI plugins': on stderr
            word = reported[self.version_word : self.version_word + 1]
            expected = self.reported_version or self.version
            if not {expected, expected.removeprefix("v")} & set(word):
                raise GoToolBuildError(
                    f"built {self.name} reports version {' '.join(word)!r}, not {expected}"
                )
            partial = target.with_name(target.name + ".partial")
            shutil.copy2(built, partial)
            partial.replace(target)  # atomic: a reader sees no binary or a whole one
        say(f"{self.name} {self.version} cached at {target}")

    def _command(self, go: str, module: str, work: Path, built: Path) -> tuple[list[str], Path]:
        """The niced `go install` (or `go build` in a copy of the module) and where to run it."""
        nice = ["nice", "-n", "19", go]
        if self.in_module:
            downloaded = self._download(go, module, work)
            source = work / "src"
            shutil.copytree(downloaded["Dir"], source)  # the module cache is read-only
            subprocess.run(["chmod", "-R", "u+w", str(source)], check=True)
            command = [*nice, "build", "-v", "-o", str(built)]
            go_mod = Path(downloaded["GoMod"]).read_text()
            package = "./" + self.package.removeprefix(self.module).strip("/")
        else:
            command = [*nice, "install", "-v"]
            source = work
            linked = self.link_flags is not None
            go_mod = Path(self._download(go, module, work)["GoMod"]).read_text() if linked else ""
            package = f"{self.package}@{self.version}"
        if self.link_flags is not None:
            command += ["-ldflags", self.link_flags(go_mod)]
        if self.tags:
            command += ["-tags", ",".join(self.tags)]
        return [*command, package], source

    @staticmethod
    def _download(go: str, module: str, work: Path) -> dict[str, str]:
        download = subprocess.run(
            [go, "mod", "download", "-json", module],
            cwd=work,
            env=_go_env(),
            capture_output=True,
            text=True,
        )
        if download.returncode != 0:
            raise GoToolBuildError(f"go mod download {module} failed:\n{download.stderr.strip()}")
        info: dict[str, str] = json.loads(download.stdout)
        return info

    def _install(self, command: list[str], cwd: Path, env: dict[str, str], say: Say) -> None:
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
                say(f"[{self.name} build {elapsed}] {line}")
            elif line and not line.startswith(("#", "go:")):
                compiled += 1
                if compiled % 50 == 0:
                    say(f"[{self.name} build {elapsed}] {compiled} packages compiled, now {line}")
        if process.wait() != 0:
            raise GoToolBuildError(
                f"go install of {self.name} failed; last output:\n" + "\n".join(tail)
            )


def ensure_all(tools: Sequence[GoTool], say: Say = print) -> dict[str, Path]:
    """Every tool by name, each built first when missing. `say` receives progress lines."""
    return {tool.name: tool.ensure(say) for tool in tools}


def print_paths(tools: Sequence[GoTool], prog: str) -> int:
    """A tool module's command line: build what is missing (progress on stderr), then print
    `name path` per tool; 1, with the reason, when a build failed."""
    try:
        paths = ensure_all(tools, lambda line: print(line, file=sys.stderr, flush=True))
    except GoToolBuildError as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 1
    for name, path in paths.items():
        print(f"{name} {path}")
    return 0


def cache_root() -> Path:
    override = os.environ.get("SKYHOOK_CACHE_DIR")
    return Path(override) if override else Path.home() / ".cache" / "skyhook"


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
