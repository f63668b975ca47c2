"""Multi-arch image builds with `docker buildx`, shared by the ci/build-* scripts.

Pure helpers build the exact command line (so `--dry-run` prints what would run and tests can
check it); `run_build` prints it and, unless dry-running, runs it from the repository root.
Standard library only.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PLATFORMS = ("linux/amd64", "linux/arm64")
_PLATFORM = re.compile(r"^[a-z0-9]+/[a-z0-9_]+(/v[0-9]+)?$")
# host[:port]/path: lowercase path components as the OCI distribution spec requires.
_REGISTRY = re.compile(
    r"^[a-zA-Z0-9.-]+(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*$|^[a-z0-9]+([._-][a-z0-9]+)*$"
)


class BuildConfigError(ValueError):
    """A bad registry, platform list or tag; the message names the option."""


def parse_platforms(text: str) -> tuple[str, ...]:
    """`linux/amd64,linux/arm64` -> a tuple; each entry must be os/arch[/variant]."""
    platforms = tuple(part.strip() for part in text.split(",") if part.strip())
    if not platforms:
        raise BuildConfigError("--platforms: give at least one platform, e.g. linux/amd64")
    bad = [platform for platform in platforms if not _PLATFORM.match(platform)]
    if bad:
        raise BuildConfigError(
            f"--platforms: {', '.join(bad)} not os/arch[/variant] (e.g. linux/arm64, linux/arm/v7)"
        )
    return platforms


def check_registry(registry: str) -> str:
    """The registry prefix without a trailing slash, e.g. `ghcr.io/nvidia/skyhook`."""
    registry = registry.rstrip("/")
    if not _REGISTRY.match(registry):
        raise BuildConfigError(
            f"--registry: {registry!r} is not host[:port]/path with lowercase path parts "
            "(e.g. ghcr.io/nvidia/skyhook or localhost:5000/skyhook)"
        )
    return registry


_BUILD_ARG = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def parse_build_args(values: tuple[str, ...] | list[str]) -> tuple[tuple[str, str], ...]:
    """`NAME=VALUE` strings -> (name, value) pairs, in order."""
    bad = [value for value in values if not _BUILD_ARG.match(value)]
    if bad:
        raise BuildConfigError(f"--build-arg: {', '.join(bad)} not NAME=VALUE")
    return tuple((name, value) for name, _, value in (v.partition("=") for v in values))


@dataclass(frozen=True)
class BuildxBuild:
    """One `docker buildx build` of a Dockerfile for several platforms."""

    dockerfile: str  # relative to the repository root
    context: str  # relative to the repository root
    tags: tuple[str, ...]
    platforms: tuple[str, ...] = DEFAULT_PLATFORMS
    build_args: tuple[tuple[str, str], ...] = ()
    push: bool = True

    def command(self) -> list[str]:
        argv = ["docker", "buildx", "build", "--platform", ",".join(self.platforms)]
        argv += ["-f", self.dockerfile]
        for tag in self.tags:
            argv += ["-t", tag]
        for name, value in self.build_args:
            argv += ["--build-arg", f"{name}={value}"]
        argv.append("--push" if self.push else "--load")
        argv.append(self.context)
        return argv


def git_revision() -> str:
    """The commit being built, for the image's revision label; `unknown` outside git."""
    result = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else "unknown"


def run_build(build: BuildxBuild, dry_run: bool, prog: str) -> int:
    """Print the command; run it from the repository root unless dry-running."""
    command = build.command()
    print(shlex.join(command), flush=True)
    if dry_run:
        return 0
    missing = _missing_tools()
    if missing:
        print(f"{prog}: {missing}", file=sys.stderr)
        return 2
    return subprocess.run(command, cwd=REPO).returncode


def _missing_tools() -> str:
    if shutil.which("docker") is None:
        return "docker is not on PATH (install the docker CLI with the buildx plugin)"
    probe = subprocess.run(["docker", "buildx", "version"], capture_output=True, text=True)
    if probe.returncode != 0:
        return "`docker buildx` is unavailable: install the buildx plugin"
    return ""
