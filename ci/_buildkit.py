"""The pinned image build tools, built from the Go module proxy once and cached (ci/_gotool.py).

    python ci/_buildkit.py       build whichever are missing (with progress), print their paths

No container engine or release binary can be fetched here, so real image builds use tools built
from source: the buildx CLI plugin, BuildKit's daemon and client, runc (the OCI worker's
runtime) and CNCF distribution's registry. Versions are pinned here, once; the link flags set
the version each binary reports, as the projects' release builds do. $SKYHOOK_<NAME> (e.g.
$SKYHOOK_BUILDKITD) names a binary to use instead.
"""

from __future__ import annotations

import sys
from pathlib import Path

from _gotool import GoTool, Say, ensure_all, print_paths

BUILDX_VERSION = "v0.38.2"
BUILDKIT_VERSION = "v0.34.2"
REGISTRY_VERSION = "v3.1.2"
RUNC_VERSION = "v1.5.2"


def _version_flags(package: str, version: str, variable: str = "Version") -> str:
    return f"-X {package}.{variable}={version}"


BUILDX = GoTool(
    name="buildx",
    module="github.com/docker/buildx",
    package="github.com/docker/buildx/cmd/buildx",
    version=BUILDX_VERSION,
    version_args=("version",),  # github.com/docker/buildx v0.38.2 <revision>
    link_flags=lambda _: _version_flags("github.com/docker/buildx/version", BUILDX_VERSION),
    version_word=1,
)
BUILDKITD = GoTool(
    name="buildkitd",
    module="github.com/moby/buildkit",
    package="github.com/moby/buildkit/cmd/buildkitd",
    version=BUILDKIT_VERSION,
    version_args=("--version",),  # buildkitd github.com/moby/buildkit v0.34.2 <revision>
    link_flags=lambda _: _version_flags("github.com/moby/buildkit/version", BUILDKIT_VERSION),
    version_word=2,
    in_module=True,  # BuildKit's go.mod has exclude directives, which `go install` refuses
)
BUILDCTL = GoTool(
    name="buildctl",
    module="github.com/moby/buildkit",
    package="github.com/moby/buildkit/cmd/buildctl",
    version=BUILDKIT_VERSION,
    version_args=("--version",),
    link_flags=lambda _: _version_flags("github.com/moby/buildkit/version", BUILDKIT_VERSION),
    version_word=2,
    in_module=True,  # BuildKit's go.mod has exclude directives, which `go install` refuses
)
REGISTRY = GoTool(
    name="registry",
    module="github.com/distribution/distribution/v3",
    package="github.com/distribution/distribution/v3/cmd/registry",
    version=REGISTRY_VERSION,
    version_args=("--version",),  # registry github.com/distribution/distribution/v3 v3.1.2
    link_flags=lambda _: _version_flags(
        "github.com/distribution/distribution/v3/version", REGISTRY_VERSION, "version"
    ),
    version_word=2,
    static=True,  # also the whole of the e2e registry's image (ci/e2e-kind-nerdctl)
)
# With the Makefile's seccomp tag (cgo and libseccomp: `apt-get install libseccomp-dev
# pkg-config`), since BuildKit gives every RUN step its default seccomp profile and a runc
# without seccomp refuses to start them ("seccomp: config provided but seccomp not
# supported"). Without libpathrs, a Rust library: runc then uses its Go path resolution.
RUNC = GoTool(
    name="runc",
    module="github.com/opencontainers/runc",
    package="github.com/opencontainers/runc",
    version=RUNC_VERSION,
    version_args=("--version",),  # runc version 1.5.2
    version_word=2,
    cgo=True,
    tags=("seccomp", "urfave_cli_no_docs"),
)
TOOLS = (REGISTRY, RUNC, BUILDKITD, BUILDCTL, BUILDX)


def ensure_tools(say: Say = print) -> dict[str, Path]:
    """Every tool by name, each built first when missing. `say` receives progress lines."""
    return ensure_all(TOOLS, say)


if __name__ == "__main__":
    sys.exit(print_paths(TOOLS, "ci/_buildkit.py"))
