"""ci/_kindnode.py's decisions, without building the node image: the images kubeadm names,
the manifests kind applies, the iptables choice, and when a node image is made again.

The image itself is built and a cluster of three nodes started from it by `tox -e e2e-kind`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "ci"))

import _kindnode  # noqa: E402

KUBEADM_LIST = """registry.k8s.io/kube-apiserver:v1.34.4
registry.k8s.io/kube-controller-manager:v1.34.4
registry.k8s.io/kube-scheduler:v1.34.4
registry.k8s.io/kube-proxy:v1.34.4
registry.k8s.io/coredns/coredns:v1.12.1
registry.k8s.io/pause:3.10.1
registry.k8s.io/etcd:3.6.5-0
"""


def fake_kubeadm(tmp_path: Path, output: str, status: int = 0) -> Path:
    kubeadm = tmp_path / "kubeadm"
    kubeadm.write_text(f"#!/bin/sh\necho \"$*\" > {tmp_path}/asked\nprintf '%s' '{output}'\n"
                       f"exit {status}\n")  # fmt: skip
    kubeadm.chmod(0o755)
    return kubeadm


def test_the_images_kubeadm_names_are_the_ones_built_by_component(tmp_path: Path) -> None:
    images = _kindnode.kubeadm_images(fake_kubeadm(tmp_path, KUBEADM_LIST), "v1.34.4")
    assert (tmp_path / "asked").read_text().split() == [
        "config", "images", "list", "--kubernetes-version", "v1.34.4",
    ]  # fmt: skip
    assert images["registry.k8s.io/coredns/coredns:v1.12.1"] == "coredns"
    assert sorted(images.values()) == [
        "coredns", "etcd", "kube-apiserver", "kube-controller-manager", "kube-proxy",
        "kube-scheduler", "pause",
    ]  # fmt: skip
    assert _kindnode.image_version(images, "etcd") == "3.6.5-0"
    assert _kindnode.image_version(images, "coredns") == "v1.12.1"
    with pytest.raises(_kindnode.KindNodeError, match="kubeadm names no flannel image"):
        _kindnode.image_version(images, "flannel")


def test_a_failing_kubeadm_stops_the_build_with_its_message(tmp_path: Path) -> None:
    kubeadm = tmp_path / "kubeadm"
    kubeadm.write_text("#!/bin/sh\necho 'unknown version v9' >&2\nexit 1\n")
    kubeadm.chmod(0o755)
    with pytest.raises(_kindnode.KindNodeError, match="unknown version v9"):
        _kindnode.kubeadm_images(kubeadm, "v9")


def test_the_network_manifest_is_kinds_template_and_runs_flannel_on_every_node() -> None:
    manifest = _kindnode.FLANNEL_MANIFEST.replace("FLANNEL_IMAGE", "skyhook.local/flannel:v1")
    # kind renders files carrying this marker with text/template and the cluster's pod subnet.
    assert "would you kindly template this file" in manifest
    rendered = manifest.replace("{{ .PodSubnet }}", "10.244.0.0/16")
    documents = {doc["kind"]: doc for doc in yaml.safe_load_all(rendered)}
    net_conf = yaml.safe_load(documents["ConfigMap"]["data"]["net-conf.json"])
    assert net_conf == {"Network": "10.244.0.0/16", "Backend": {"Type": "host-gw"}}
    cni = yaml.safe_load(documents["ConfigMap"]["data"]["cni-conf.json"])
    assert [plugin["type"] for plugin in cni["plugins"]] == ["flannel", "portmap"]
    pod = documents["DaemonSet"]["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    assert pod["tolerations"] == [{"operator": "Exists"}]  # the control plane's taint too
    images = {c["image"] for c in (*pod["initContainers"], *pod["containers"])}
    assert images == {"skyhook.local/flannel:v1"}


def iptables_rules(tmp_path: Path, legacy: int, nft: int) -> dict[str, str]:
    """A PATH on which the *-save commands print that many rules, and update-alternatives
    records its choice."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for family in ("iptables", "ip6tables"):
        for mode, count in (("legacy", legacy), ("nft", nft)):
            save = bin_dir / f"{family}-{mode}-save"
            rules = "".join(f"-A CHAIN -j RULE{i}\\n" for i in range(count))
            save.write_text(f"#!/bin/sh\nprintf '*filter\\n{rules}COMMIT\\n'\n")
            save.chmod(0o755)
    chooser = bin_dir / "update-alternatives"
    chooser.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path}/chosen\n')
    chooser.chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin"}


@pytest.mark.parametrize(
    ("legacy", "nft", "mode"), [(12, 0, "legacy"), (0, 7, "nft"), (0, 0, "nft")]
)
def test_the_iptables_wrapper_takes_the_mode_holding_the_nodes_rules(
    tmp_path: Path, legacy: int, nft: int, mode: str
) -> None:
    env = iptables_rules(tmp_path, legacy, nft)
    sbin = tmp_path / "sbin"  # the image's /usr/local/sbin
    sbin.mkdir()
    wrapper = sbin / "iptables-wrapper"
    script = _kindnode.IPTABLES_WRAPPER.replace("/usr/local/sbin", str(sbin))
    wrapper.write_text(script.replace('exec "/usr/sbin/', 'echo "/usr/sbin/'))
    wrapper.chmod(0o755)
    (sbin / "iptables-save").symlink_to("iptables-wrapper")  # as the image links it
    ran = subprocess.run([str(sbin / "iptables-save")], env=env, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    chosen = (tmp_path / "chosen").read_text().splitlines()
    assert chosen == [
        f"--quiet --set iptables /usr/sbin/iptables-{mode}",
        f"--quiet --set ip6tables /usr/sbin/ip6tables-{mode}",
    ]
    # The link now leads to the chosen command, not back to the wrapper.
    assert os.readlink(sbin / "iptables-save") == "/usr/sbin/iptables-save"
    assert ran.stdout.strip() == "/usr/sbin/iptables-save"


def test_a_changed_binary_makes_a_new_node_image(tmp_path: Path) -> None:
    binaries = {name: tmp_path / name for name in ("kubelet", "etcd", "coredns", "flanneld")}
    for binary in binaries.values():
        binary.write_bytes(b"v1")
    parts = _kindnode.Parts(
        kubernetes={"kubelet": binaries["kubelet"]},
        images={"registry.k8s.io/etcd:3.6.5-0": "etcd"},
        etcd=binaries["etcd"],
        coredns=binaries["coredns"],
        flanneld=binaries["flanneld"],
        runtime={},
    )
    before = parts.digest()
    assert parts.digest() == before
    binaries["kubelet"].write_bytes(b"v2 and longer")
    assert parts.digest() != before


def test_the_pause_is_the_one_kinds_containerd_runs_not_kubeadms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "etc/containerd/config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        '[plugins."io.containerd.grpc.v1.cri"]\n'
        "  # use fixed sandbox image\n"
        '  sandbox_image = "registry.k8s.io/pause:3.10"\n'
    )
    monkeypatch.setattr(_kindnode, "_kind_base_files", lambda: tmp_path)
    images = _kindnode.kind_images(
        _kindnode.kubeadm_images(fake_kubeadm(tmp_path, KUBEADM_LIST), "v1.34.4")
    )
    pauses = [reference for reference, name in images.items() if name == "pause"]
    assert pauses == ["registry.k8s.io/pause:3.10"]
    assert len(images) == 7
    config.write_text("version = 2\n")
    with pytest.raises(_kindnode.KindNodeError, match="names no sandbox_image"):
        _kindnode.kind_images(images)


def test_each_start_gets_a_boot_id_of_its_own_from_the_unit_both_images_install() -> None:
    """The script, run as the unit runs it at a node's start (here in a mount namespace of its
    own, /run a new tmpfs as at a start), puts a new boot id over the kernel's; the unit runs
    the script where the node image and ci/e2e-kind install it."""
    kernels = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    script = REPO / "ci/kind-node/node-boot-id"
    started = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         f"mount -t tmpfs tmpfs /run && {script} && cat /proc/sys/kernel/random/boot_id"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    boot_id = started.stdout.strip()
    assert len(boot_id) == 36 and boot_id != kernels
    assert Path("/proc/sys/kernel/random/boot_id").read_text().strip() == kernels
    unit = (REPO / "ci/kind-node/node-boot-id.service").read_text()
    (exec_start,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    installed = exec_start.removeprefix("ExecStart=")
    assert installed == "/usr/local/sbin/node-boot-id"
    assert (
        f'ci/kind-node/node-boot-id "${{node}}:{installed}"' in (REPO / "ci/e2e-kind").read_text()
    )
    assert os.access(script, os.X_OK)
