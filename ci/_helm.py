"""A pinned helm v3, built from the Go module proxy once and cached (ci/_gotool.py).

    python ci/_helm.py        build helm if needed (with progress), then print its path

The chart tests run the real helm (lint, template, install on the sandbox). The link flags are
the ones helm's Makefile sets, so `helm version` and the Kubernetes version `helm template`
assumes match a release build. $SKYHOOK_HELM names a helm to use instead.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from _gotool import GoTool, GoToolBuildError, Say

HELM_VERSION = "v3.21.4"
HELM_MODULE = "helm.sh/helm/v3"


def link_flags(client_go_version: str) -> str:
    """helm's Makefile ldflags: helm's own version, and Kubernetes 1.<minor> from client-go 0.<minor>."""
    match = re.fullmatch(r"v0\.(\d+)\.\d+", client_go_version)
    if not match:
        raise GoToolBuildError(f"unexpected k8s.io/client-go version {client_go_version!r}")
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
        raise GoToolBuildError(f"{HELM_MODULE}@{HELM_VERSION} go.mod does not require client-go")
    return match.group(1)


HELM = GoTool(
    name="helm",
    module=HELM_MODULE,
    package=f"{HELM_MODULE}/cmd/helm",
    version=HELM_VERSION,
    version_args=("version", "--template", "{{.Version}}"),
    link_flags=lambda go_mod: link_flags(client_go_version(go_mod)),
)


def ensure_helm(say: Say = print) -> Path:
    """The cached helm, built first when missing. `say` receives progress lines."""
    return HELM.ensure(say)


def main() -> int:
    try:
        path = ensure_helm(lambda line: print(line, file=sys.stderr, flush=True))
    except GoToolBuildError as error:
        print(f"ci/_helm.py: {error}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
