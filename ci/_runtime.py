"""The pinned container runtime tools, built from the Go module proxy once and cached
(ci/_gotool.py).

    python ci/_runtime.py        build whichever are missing (with progress), print their paths

The images ci/build-image and ci/build-package make are run by a real runtime: containerd with
its runc shim (runc is BuildKit's, ci/_buildkit.py) and ctr, containerd's own client; the CNI
plugins for container networks (bridge, firewall, portmap and tuning make nerdctl's; host-local,
loopback, ptp and portmap are the ones a kind node holds), crictl for containerd's CRI and kind for clusters of real
kubelets. Versions are pinned here, once; the link flags set the version each binary reports,
as the projects' release builds do. containerd, its shim and ctr share a cache directory, and so
do the CNI plugins (one CNI path names them all). $SKYHOOK_<NAME> (`-` as `_`, e.g.
$SKYHOOK_CONTAINERD_SHIM_RUNC_V2) names a binary to use instead.

nerdctl (kind's provider without docker) is v1.7.7, the newest release the proxy can build:
each v2 release's go.mod replaces github.com/containerd/nerdctl/mod/tigron with ./mod/tigron, a
nested module its zip leaves out and the proxy does not serve (403 "This module version is not
available"), and cmd/nerdctl imports it (cmd/nerdctl/helpers/testing_linux.go ->
pkg/testutil); v2.4.2, the newest listed, also needs github.com/moby/moby/v2 v2.0.0-beta.28,
which the proxy refuses. v1.7.7 is built inside its module (`go install` stops on the
module's version list, which the proxy refuses) and speaks containerd's v1 API, which 2.4 serves.

Build times measured here (2 cores shared with another build, the modules downloaded, an empty
Go build cache, built in TOOLS order, so each reuses the packages compiled before it): five
CNI plugins 39 s together (the first compiles the standard library; ptp and tuning, a few
seconds each), crictl 3 min 55 s (beside a test run), kind 10 s, runc 24 s, containerd 59 s,
its shim 3 s, ctr 6 s; 6 min 16 s in all; nerdctl 40 s.
"""

from __future__ import annotations

import sys
from pathlib import Path

from _buildkit import RUNC
from _gotool import GoTool, Say, ensure_all, print_paths

CONTAINERD_VERSION = "v2.4.2"
CNI_PLUGINS_VERSION = "v1.10.0"
CRICTL_VERSION = "v1.37.0"
KIND_VERSION = "v0.33.0"
NERDCTL_VERSION = "v1.7.7"

CONTAINERD_MODULE = "github.com/containerd/containerd/v2"
CNI_PLUGINS_MODULE = "github.com/containernetworking/plugins"


def _containerd(name: str, version_args: tuple[str, ...]) -> GoTool:
    return GoTool(
        name=name,
        module=CONTAINERD_MODULE,
        package=f"{CONTAINERD_MODULE}/cmd/{name}",
        version=CONTAINERD_VERSION,
        version_args=version_args,
        link_flags=lambda _: f"-X {CONTAINERD_MODULE}/version.Version={CONTAINERD_VERSION}",
        version_word=2,
        cache_dir="containerd",  # one directory on containerd's PATH holds its shim
    )


def _cni_plugin(kind: str, name: str) -> GoTool:
    return GoTool(
        name=name,
        module=CNI_PLUGINS_MODULE,
        package=f"{CNI_PLUGINS_MODULE}/plugins/{kind}/{name}",
        version=CNI_PLUGINS_VERSION,
        version_args=("--version",),  # CNI bridge plugin v1.10.0
        link_flags=lambda _: (
            f"-X {CNI_PLUGINS_MODULE}/pkg/utils/buildversion.BuildVersion={CNI_PLUGINS_VERSION}"
        ),
        version_word=3,
        cache_dir="cni-plugins",
    )


CONTAINERD = _containerd("containerd", ("--version",))  # containerd <module> v2.4.2
CTR = _containerd("ctr", ("--version",))  # ctr <module> v2.4.2
CONTAINERD_SHIM = _containerd("containerd-shim-runc-v2", ("-v",))  # <name>: Version: v2.4.2
CNI_PLUGINS = (
    _cni_plugin("main", "bridge"),
    _cni_plugin("main", "loopback"),
    _cni_plugin("main", "ptp"),
    _cni_plugin("ipam", "host-local"),
    _cni_plugin("meta", "portmap"),
    _cni_plugin("meta", "firewall"),
    _cni_plugin("meta", "tuning"),
)
CRICTL = GoTool(
    name="crictl",
    module="sigs.k8s.io/cri-tools",
    package="sigs.k8s.io/cri-tools/cmd/crictl",
    version=CRICTL_VERSION,
    version_args=("--version",),  # crictl version v1.37.0
    link_flags=lambda _: f"-X sigs.k8s.io/cri-tools/pkg/version.Version={CRICTL_VERSION}",
    version_word=2,
)
KIND = GoTool(
    name="kind",
    module="sigs.k8s.io/kind",
    package="sigs.k8s.io/kind",
    version=KIND_VERSION,
    version_args=("version",),  # kind v0.33.0 go1.26.8 linux/amd64 (the version is in its source)
    version_word=1,
)
NERDCTL = GoTool(
    name="nerdctl",
    module="github.com/containerd/nerdctl",
    package="github.com/containerd/nerdctl/cmd/nerdctl",
    version=NERDCTL_VERSION,
    version_args=("--version",),  # nerdctl version 1.7.7
    link_flags=lambda _: f"-X github.com/containerd/nerdctl/pkg/version.Version={NERDCTL_VERSION}",
    version_word=2,
    in_module=True,
)
TOOLS = (*CNI_PLUGINS, CRICTL, KIND, RUNC, CONTAINERD, CONTAINERD_SHIM, CTR, NERDCTL)


def ensure_tools(say: Say = print) -> dict[str, Path]:
    """Every tool by name, each built first when missing. `say` receives progress lines."""
    return ensure_all(TOOLS, say)


if __name__ == "__main__":
    sys.exit(print_paths(TOOLS, "ci/_runtime.py"))
