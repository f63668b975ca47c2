"""A kind node image, made here from source: no registry it would come from is reachable.

    python ci/_kindnode.py      build it when missing (progress on stderr), print its archive

A kind node is a privileged container running systemd, containerd and the kubelet; `kind create
cluster` starts one per node and runs kubeadm in it, and kubeadm starts the control plane from
images the node's containerd already holds. Everything is built here:
- the root: Debian bookworm (debootstrap, cached by skyhook_sandbox.debian_root) with systemd
  and the packages kind's base image installs, less those for storage drivers nothing here
  uses (nfs-common, open-iscsi, fuse-overlayfs), and kind's own files from its module
  (entrypoint, units, containerd configuration);
- the runtime: ci/_runtime.py's containerd, runc, crictl and CNI plugins;
- kubelet, kubeadm and kubectl at the sandbox's Kubernetes release (skyhook_sandbox.binaries);
- every image `kubeadm config images list` names (API server, controller manager, scheduler,
  kube-proxy, etcd, CoreDNS), and the pause kind's containerd configuration names in place of
  kubeadm's (as kind's node image build does), each from source, built by our BuildKit into our
  registry (ci/_localbuild.py) and preloaded into the node's image store as kind preloads its
  own;
- flannel as the network (kind's kindnetd is not on the module proxy), which kind applies from
  /kind/manifests/default-cni.yaml with the cluster's pod subnet; the storage manifest is the
  host-path StorageClass kind falls back to (rancher's provisioner is left out).
The node image is cached as an OCI archive, ~/.cache/skyhook/kind-node/<release>-<digest>.tar,
the digest covering this file, the versions and every binary that goes in; `nerdctl load` or
`docker load` reads it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from _containerd import Containerd
from _gotool import GoTool, Say, cache_root
from _localbuild import LocalBuild, LocalBuildError
from _runtime import KIND_VERSION, ensure_tools

from skyhook_sandbox.binaries import ensure_commands, ensure_etcd
from skyhook_sandbox.debian_root import debian_rootfs_tarball
from skyhook_sandbox.versions import KUBERNETES_VERSION

# The node image's name (the tag is the Kubernetes release, as kindest/node's).
NODE_REPOSITORY = "skyhook.local/kind-node"
# Packages kind's base image installs (its images/base/Dockerfile), without the storage drivers.
NODE_PACKAGES = (
    "systemd", "systemd-sysv", "dbus", "conntrack", "iptables", "nftables", "iproute2",
    "ethtool", "util-linux", "mount", "kmod", "libseccomp2", "pigz", "e2fsprogs", "bash",
    "ca-certificates", "curl", "jq", "procps",
)  # fmt: skip
# What kube-proxy and flanneld run: they program the node's packet filter.
NETWORK_PACKAGES = ("iptables", "nftables", "conntrack", "iproute2")
# CNI plugins in the node's /opt/cni/bin: kind's (host-local, loopback, ptp, portmap) and the
# bridge flannel's plugin hands each pod to.
NODE_CNI_PLUGINS = ("host-local", "loopback", "ptp", "portmap", "bridge")
FLANNEL_IMAGE = "skyhook.local/flannel"
CONTAINERD_NAMESPACE = "k8s.io"  # the CRI's, where the kubelet looks for images

FLANNELD = GoTool(
    name="flanneld",
    module="github.com/flannel-io/flannel",
    package="github.com/flannel-io/flannel",
    # v0.28's tencentvpc backend needs a tencentcloud-sdk-go version the proxy refuses.
    version="v0.27.4",
    version_args=("--version",),  # v0.27.4
    link_flags=lambda _: "-X github.com/flannel-io/flannel/pkg/version.Version=v0.27.4",
)
FLANNEL_CNI = GoTool(
    name="flannel",
    module="github.com/containernetworking/plugins",
    # The plugin moved to github.com/flannel-io/cni-plugin, which the proxy refuses; v0.9.1 is
    # the newest release of the plugins that still holds it.
    package="github.com/containernetworking/plugins/plugins/meta/flannel",
    version="v0.9.1",
    version_args=("--version",),  # CNI flannel plugin v0.9.1
    link_flags=lambda _: (
        "-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=v0.9.1"
    ),
    version_word=3,
    cache_dir="cni-plugins",
)


def coredns(version: str) -> GoTool:
    return GoTool(
        name="coredns",
        module="github.com/coredns/coredns",
        package="github.com/coredns/coredns",
        version=version,
        version_args=("-version",),  # CoreDNS-1.12.1
        reported_version=f"CoreDNS-{version.removeprefix('v')}",
        static=True,  # its image holds nothing else
    )


# Chooses legacy iptables or nft the way the node's entrypoint did: whichever holds more rules
# (the kubelet's own chains are there before any pod starts). Debian's alternatives then point
# every iptables command at it, the wrapper's links are pointed at /usr/sbin's commands (a
# program that looked the path up once keeps a working one), and the command asked for runs.
IPTABLES_WRAPPER = """#!/bin/sh
set -e
legacy=$( (iptables-legacy-save || true; ip6tables-legacy-save || true) 2>/dev/null | grep -c '^-' || true)
nft=$( (iptables-nft-save || true; ip6tables-nft-save || true) 2>/dev/null | grep -c '^-' || true)
if [ "${legacy:-0}" -gt "${nft:-0}" ]; then mode=legacy; else mode=nft; fi
for command in iptables ip6tables; do
  update-alternatives --quiet --set "$command" "/usr/sbin/$command-$mode" >/dev/null
done
for link in $(find /usr/local/sbin -type l -lname iptables-wrapper); do
  ln -sf "/usr/sbin/$(basename "$link")" "$link"
done
exec "/usr/sbin/$(basename "$0")" "$@"
"""
IPTABLES_COMMANDS = (
    "iptables", "iptables-save", "iptables-restore",
    "ip6tables", "ip6tables-save", "ip6tables-restore",
)  # fmt: skip

STATIC_DOCKERFILE = """FROM scratch
COPY {binary} /usr/local/bin/{binary}
ENV PATH=/usr/local/bin:/usr/bin:/bin
ENTRYPOINT ["/usr/local/bin/{binary}"]
"""
# The wrapper comes first on PATH, in /usr/local/sbin, until it has chosen.
NETWORK_DOCKERFILE = """FROM scratch
ADD network-root.tar /
COPY iptables-wrapper /usr/local/sbin/iptables-wrapper
RUN for command in {commands}; do ln -s iptables-wrapper /usr/local/sbin/$command; done
COPY {binary} {path}
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ENTRYPOINT ["{path}"]
"""
PAUSE_DOCKERFILE = """FROM scratch
COPY pause /pause
ENTRYPOINT ["/pause"]
"""
COREDNS_DOCKERFILE = """FROM scratch
COPY coredns /coredns
EXPOSE 53 53/udp
ENTRYPOINT ["/coredns"]
"""
NODE_DOCKERFILE = """FROM scratch
ADD node-root.tar /
COPY overlay/ /
RUN /kind/setup-node-image && rm /kind/setup-node-image
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
"""
# What kind's base image Dockerfile runs once its packages are in: a systemd that starts only
# containerd and the kubelet (kind starts the kubelet's unit itself after kubeadm), and the
# runtime spec containerd gives each container, with kind's product-files hook.
SETUP_NODE_IMAGE = """#!/bin/bash
set -euo pipefail
chmod 755 /kind /kind/bin /kind/bin/* /usr/local/bin/* /usr/local/sbin/* /opt/cni/bin/*
find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete
rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \\
  /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \\
  /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*
echo ReadKMsg=no >> /etc/systemd/journald.conf
systemctl enable kubelet.service containerd.service undo-mount-hacks.service node-boot-id.service
systemctl mask systemd-binfmt.service
mkdir -p /etc/kubernetes/manifests
ctr oci spec \\
  | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \\
  | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json
"""

# The kubelet asks for an oom_score_adj below the node's own for every pod sandbox (-998), which
# needs CAP_SYS_RESOURCE. Where the node's bounding set lacks it (a host that runs everything
# without it, as this one does), containerd clamps what it is asked to what it may set, as kind
# configures it on a rootless node; elsewhere the setting stays as kind ships it.
RESTRICT_OOM_SCORE_ADJ = """#!/bin/sh
set -eu
bounding=$(awk '/^CapBnd/ {print $2}' /proc/self/status)
if [ $(( 0x$bounding >> 24 & 1 )) -eq 0 ]; then
  sed -i 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' /etc/containerd/config.toml
fi
"""
RESTRICT_OOM_SCORE_ADJ_UNIT = """[Service]
ExecStartPre=/kind/bin/restrict-oom-score-adj.sh
"""

# Each start of a node gets a boot id of its own (the unit and its script, which ci/e2e-kind also
# installs on node images that lack them).
BOOT_ID_FILES = Path(__file__).resolve().parent / "kind-node"

# kind renders this with its pod subnet ("would you kindly template this file" asks it to).
FLANNEL_MANIFEST = """# would you kindly template this file
# flannel, host-gw backend: every node routes each other node's pod subnet to that node.
apiVersion: v1
kind: ServiceAccount
metadata:
  name: flannel
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: flannel
rules:
  - apiGroups: [""]
    resources: [pods]
    verbs: [get]
  - apiGroups: [""]
    resources: [nodes]
    verbs: [get, list, watch]
  - apiGroups: [""]
    resources: [nodes/status]
    verbs: [patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: flannel
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: flannel
subjects:
  - kind: ServiceAccount
    name: flannel
    namespace: kube-system
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: flannel
  namespace: kube-system
data:
  cni-conf.json: |
    {
      "name": "cbr0",
      "cniVersion": "0.3.1",
      "plugins": [
        {"type": "flannel", "delegate": {"hairpinMode": true, "isDefaultGateway": true}},
        {"type": "portmap", "capabilities": {"portMappings": true}}
      ]
    }
  net-conf.json: |
    {"Network": "{{ .PodSubnet }}", "Backend": {"Type": "host-gw"}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: flannel
  namespace: kube-system
  labels:
    app: flannel
spec:
  selector:
    matchLabels:
      app: flannel
  template:
    metadata:
      labels:
        app: flannel
    spec:
      hostNetwork: true
      priorityClassName: system-node-critical
      serviceAccountName: flannel
      tolerations:
        - operator: Exists
      initContainers:
        - name: install-cni-conf
          image: FLANNEL_IMAGE
          command: [cp, -f, /etc/flannel/cni-conf.json, /etc/cni/net.d/10-flannel.conflist]
          volumeMounts:
            - {name: cni, mountPath: /etc/cni/net.d}
            - {name: config, mountPath: /etc/flannel}
      containers:
        - name: flanneld
          image: FLANNEL_IMAGE
          command: [/opt/bin/flanneld, --ip-masq, --kube-subnet-mgr,
                    --net-config-path=/etc/flannel/net-conf.json]
          env:
            - name: POD_NAME
              valueFrom: {fieldRef: {fieldPath: metadata.name}}
            - name: POD_NAMESPACE
              valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
          resources:
            requests: {cpu: 50m, memory: 50Mi}
          securityContext:
            privileged: false
            capabilities: {add: [NET_ADMIN, NET_RAW]}
          volumeMounts:
            - {name: run, mountPath: /run/flannel}
            - {name: config, mountPath: /etc/flannel}
            - {name: xtables-lock, mountPath: /run/xtables.lock}
      volumes:
        - {name: run, hostPath: {path: /run/flannel}}
        - {name: cni, hostPath: {path: /etc/cni/net.d}}
        - {name: config, configMap: {name: flannel}}
        - {name: xtables-lock, hostPath: {path: /run/xtables.lock, type: FileOrCreate}}
"""
# What kind installs when a node image has no storage manifest of its own.
STORAGE_MANIFEST = """apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kubernetes.io/host-path
"""


class KindNodeError(RuntimeError):
    """The node image could not be made; the message says which step failed."""


@dataclass(frozen=True)
class Parts:
    """Everything the node image is made from, by role."""

    kubernetes: dict[str, Path]  # command -> binary
    images: dict[str, str]  # kubeadm's image reference -> component (kube-apiserver, etcd, ...)
    etcd: Path
    coredns: Path
    flanneld: Path
    runtime: dict[str, Path]  # ci/_runtime.py's tools, and flannel's CNI plugin

    def digest(self) -> str:
        """Of this file, the files it adds from ci/kind-node, the versions and every binary: a
        change to any makes a new image."""
        hasher = hashlib.sha256(Path(__file__).read_bytes())
        for added in sorted(BOOT_ID_FILES.iterdir()):
            hasher.update(added.read_bytes())
        hasher.update(json.dumps(sorted(self.images)).encode())
        binaries = [*self.kubernetes.values(), self.etcd, self.coredns, self.flanneld]
        for binary in sorted({*binaries, *self.runtime.values()}):
            hasher.update(str(binary).encode())
            hasher.update(str(binary.stat().st_size).encode())
            hasher.update(str(binary.stat().st_mtime_ns).encode())
        return hasher.hexdigest()[:12]


def kubeadm_images(kubeadm: Path, release: str) -> dict[str, str]:
    """`kubeadm config images list`: reference -> component (the repository's last part)."""
    listed = subprocess.run(
        [str(kubeadm), "config", "images", "list", "--kubernetes-version", release],
        capture_output=True,
        text=True,
    )
    if listed.returncode != 0:
        raise KindNodeError(f"kubeadm config images list: {listed.stderr.strip()}")
    references = listed.stdout.split()
    return {ref: ref.rsplit(":", 1)[0].rsplit("/", 1)[-1] for ref in references}


def sandbox_image(containerd_config: str) -> str:
    """The pause image kind's containerd configuration names (`sandbox_image = "..."`)."""
    for line in containerd_config.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "sandbox_image":
            return value.strip().strip('"')
    raise KindNodeError("kind's containerd configuration names no sandbox_image")


def kind_images(images: dict[str, str]) -> dict[str, str]:
    """kubeadm's images with its pause replaced by the one kind's containerd runs, as kind's
    own node image build does (workloads that expect a kind node rely on that pause)."""
    kept = {reference: name for reference, name in images.items() if name != "pause"}
    config = (_kind_base_files() / "etc/containerd/config.toml").read_text()
    return {**kept, sandbox_image(config): "pause"}


def image_version(images: dict[str, str], component: str) -> str:
    for reference, name in images.items():
        if name == component:
            return reference.rsplit(":", 1)[1]
    raise KindNodeError(f"kubeadm names no {component} image: {sorted(images)}")


def gather(say: Say) -> Parts:
    """Build (or find cached) every binary the node image holds."""
    kubernetes = ensure_commands(
        ("kubelet", "kubeadm", "kubectl", "kube-apiserver", "kube-controller-manager",
         "kube-scheduler", "kube-proxy")
    )  # fmt: skip
    images = kind_images(kubeadm_images(kubernetes["kubeadm"], KUBERNETES_VERSION))
    etcd_version = "v" + image_version(images, "etcd").split("-", 1)[0]  # 3.6.5-0 -> v3.6.5
    runtime = ensure_tools(say)
    return Parts(
        kubernetes=kubernetes,
        images=images,
        etcd=ensure_etcd(etcd_version),
        coredns=coredns(image_version(images, "coredns")).ensure(say),
        flanneld=FLANNELD.ensure(say),
        runtime={**runtime, "flannel": FLANNEL_CNI.ensure(say)},
    )


def node_archive(parts: Parts) -> Path:
    return cache_root() / "kind-node" / f"{KUBERNETES_VERSION}-{parts.digest()}.tar"


def node_image_name() -> str:
    return f"{NODE_REPOSITORY}:{KUBERNETES_VERSION}"


def ensure_node_image(say: Say = print, state_dir: Path | None = None) -> Path:
    """The node image's OCI archive, built first when missing."""
    parts = gather(say)
    archive = node_archive(parts)
    if archive.is_file():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kn-", dir=state_dir or "/var/tmp") as work_dir:
        work = Path(work_dir)
        with LocalBuild(work / "build", say=say) as build:
            preloaded = _component_images(build, work / "images", parts, say)
            store = work / "store"
            _preload(parts, preloaded, store, work / "ctd", say)
            context = _node_context(work / "node", parts, store, say)
            partial = archive.with_suffix(".partial")
            say(f"building the node image {node_image_name()}")
            build.buildx(context, "--output", f"type=oci,dest={partial}", "-t", node_image_name())
            partial.replace(archive)
    for stale in archive.parent.glob(f"{KUBERNETES_VERSION}-*.tar"):
        if stale != archive:
            stale.unlink()  # made from parts since changed
    say(f"node image {node_image_name()} cached at {archive} in {time.monotonic() - started:.0f} s")
    return archive


def _component_images(build: LocalBuild, work: Path, parts: Parts, say: Say) -> dict[str, str]:
    """Build each image kubeadm names, and flannel's, into our registry: the registry's
    reference -> the name the node knows it by."""
    network_root = debian_rootfs_tarball(include=NETWORK_PACKAGES, progress=say)
    pushed: dict[str, str] = {}
    for reference, component in {**parts.images, _flannel_image(): "flannel"}.items():
        context = work / component
        context.mkdir(parents=True)
        if component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"):
            binary = parts.etcd if component == "etcd" else parts.kubernetes[component]
            shutil.copy2(binary, context / component)
            dockerfile = STATIC_DOCKERFILE.format(binary=component)
        elif component == "coredns":
            shutil.copy2(parts.coredns, context / "coredns")
            dockerfile = COREDNS_DOCKERFILE
        elif component == "pause":
            _build_pause(context / "pause", reference.rsplit(":", 1)[1])
            dockerfile = PAUSE_DOCKERFILE
        else:  # kube-proxy and flanneld: the network root and the iptables wrapper
            binary = parts.kubernetes["kube-proxy"] if component == "kube-proxy" else parts.flanneld
            path = "/usr/local/bin/kube-proxy" if component == "kube-proxy" else "/opt/bin/flanneld"
            shutil.copy2(binary, context / binary.name)
            _link(network_root, context / "network-root.tar")
            (context / "iptables-wrapper").write_text(IPTABLES_WRAPPER)
            (context / "iptables-wrapper").chmod(0o755)
            dockerfile = NETWORK_DOCKERFILE.format(
                binary=binary.name, path=path, commands=" ".join(IPTABLES_COMMANDS)
            )
        (context / "Dockerfile").write_text(dockerfile)
        in_registry = f"{build.registry}/{reference}"
        say(f"building {reference} into {build.registry}")
        build.buildx(context, "--push", "-t", in_registry)
        pushed[in_registry] = reference
    return pushed


def _flannel_image() -> str:
    return f"{FLANNEL_IMAGE}:{FLANNELD.version}"


def _build_pause(target: Path, version: str) -> None:
    """Kubernetes' pause, from the release's source (build/pause/linux/pause.c), as its
    Makefile builds it: static, the version compiled in."""
    source = _module_source(f"k8s.io/kubernetes@{KUBERNETES_VERSION}") / "build/pause/linux/pause.c"
    compiled = subprocess.run(
        ["gcc", "-Os", "-Wall", "-Werror", "-static", f'-DVERSION=v{version}-skyhook',
         "-o", str(target), str(source)],
        capture_output=True,
        text=True,
    )  # fmt: skip
    if compiled.returncode != 0:
        raise KindNodeError(f"gcc {source}: {compiled.stderr.strip()}")


def _preload(parts: Parts, pushed: dict[str, str], store: Path, state: Path, say: Say) -> None:
    """Fill a containerd store with the images, by the names the node knows them by, pinned
    (the kubelet never collects them) and not unpacked (the node unpacks on first use)."""
    say(f"preloading {len(pushed)} images into the node's image store")
    with Containerd(state, parts.runtime, namespace=CONTAINERD_NAMESPACE, root=store) as ctd:
        for in_registry, reference in pushed.items():
            for args in (
                ("content", "fetch", "--plain-http", "--platform", "linux/amd64", in_registry),
                ("images", "tag", "--force", in_registry, reference),
                ("images", "label", reference, "io.cri-containerd.pinned=pinned"),
                ("images", "rm", in_registry),
            ):
                result = ctd.ctr(*args)
                if result.returncode != 0:
                    raise KindNodeError(f"ctr {' '.join(args)}: {result.stderr.strip()}")


def _module_source(module: str) -> Path:
    """A module's files, from the Go module proxy (the module cache keeps them)."""
    downloaded = subprocess.run(
        ["go", "mod", "download", "-json", module],
        capture_output=True,
        text=True,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
    )
    if downloaded.returncode != 0:
        raise KindNodeError(f"go mod download {module}: {downloaded.stderr.strip()}")
    return Path(json.loads(downloaded.stdout)["Dir"])


def _kind_base_files() -> Path:
    """kind's base image files: entrypoint, systemd units, containerd configuration."""
    return _module_source(f"sigs.k8s.io/kind@{KIND_VERSION}") / "images/base/files"


def _node_context(context: Path, parts: Parts, store: Path, say: Say) -> Path:
    overlay = context / "overlay"
    shutil.copytree(_kind_base_files(), overlay, ignore=shutil.ignore_patterns("LICENSES"))
    subprocess.run(["chmod", "-R", "u+w", str(overlay)], check=True)  # the module cache's modes
    _install(overlay / "usr/local/bin", [parts.runtime[n] for n in ("containerd", "ctr", "crictl")])
    _install(overlay / "usr/local/bin", [parts.runtime["containerd-shim-runc-v2"]])
    _install(overlay / "usr/local/sbin", [parts.runtime["runc"]])
    _install(overlay / "opt/cni/bin", [parts.runtime[n] for n in (*NODE_CNI_PLUGINS, "flannel")])
    _install(overlay / "usr/bin", [parts.kubernetes[n] for n in ("kubelet", "kubeadm", "kubectl")])
    (overlay / "kind/version").write_text(KUBERNETES_VERSION)
    manifests = overlay / "kind/manifests"
    manifests.mkdir(parents=True)
    (manifests / "default-cni.yaml").write_text(
        FLANNEL_MANIFEST.replace("FLANNEL_IMAGE", _flannel_image())
    )
    (manifests / "default-storage.yaml").write_text(STORAGE_MANIFEST)
    (overlay / "kind/bin/restrict-oom-score-adj.sh").write_text(RESTRICT_OOM_SCORE_ADJ)
    _install(overlay / "usr/local/sbin", [BOOT_ID_FILES / "node-boot-id"])
    shutil.copy(BOOT_ID_FILES / "node-boot-id.service", overlay / "etc/systemd/system")
    drop_in = overlay / "etc/systemd/system/containerd.service.d"
    drop_in.mkdir(parents=True)
    (drop_in / "10-restrict-oom-score-adj.conf").write_text(RESTRICT_OOM_SCORE_ADJ_UNIT)
    (overlay / "kind/setup-node-image").write_text(SETUP_NODE_IMAGE)
    (overlay / "kind/setup-node-image").chmod(0o755)
    shutil.copytree(store, overlay / "var/lib/containerd", symlinks=True)
    node_root = debian_rootfs_tarball(include=NODE_PACKAGES, progress=say)
    _link(node_root, context / "node-root.tar")
    (context / "Dockerfile").write_text(NODE_DOCKERFILE)
    return context


def _link(source: Path, target: Path) -> None:
    """A large cached file into a build context: hard-linked where the two share a file system."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _install(directory: Path, binaries: Iterable[Path]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for binary in binaries:
        shutil.copy2(binary, directory / binary.name)


if __name__ == "__main__":

    def _say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        print(ensure_node_image(_say))
    except (KindNodeError, LocalBuildError) as error:
        print(f"ci/_kindnode.py: {error}", file=sys.stderr)
        sys.exit(1)
