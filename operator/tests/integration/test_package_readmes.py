"""Each package README's example SCR, applied unchanged by the real operator on fresh sandbox
nodes labelled as the README expects (`skyhook.nvidia.com/test-node=demo`).

The nodes' simulated kernel and init (sandbox `simkernel`) give the tuning package's
post-interrupt-check the live values it reads: /proc/sys, /proc/cmdline and containerd's
/proc/<MainPID>/limits, all as the node's pods see them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from skyhook_operator.harness import apply_skyhook, node_state
from skyhook_schemas import keys

from .helpers import TEST_LABEL, Cluster

PACKAGES = Path(__file__).resolve().parents[3] / "packages"
README_LABEL = "demo"
KERNEL = "var/lib/skyhook-sandbox/kernel"


def readme_scr(package: str) -> dict[str, Any]:
    """The Skyhook manifest in the package README's yaml block."""
    text = (PACKAGES / package / "README.md").read_text()
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        document = yaml.safe_load(block)
        if isinstance(document, dict) and document.get("kind") == "Skyhook":
            return document
    raise AssertionError(f"packages/{package}/README.md has no Skyhook yaml block")


def readme_nodes(cluster: Cluster, count: int = 1, host_root: str = "plain") -> list[str]:
    """Fresh nodes with the README's label; removed with the test's other nodes at the end."""
    names = cluster.sandbox.add_nodes(
        count, labels={TEST_LABEL: README_LABEL}, prefix=cluster.label[:30], host_root=host_root
    )
    cluster.nodes.extend(names)
    return names


def apply_readme(cluster: Cluster, package: str) -> str:
    manifest = readme_scr(package)
    assert manifest["spec"]["nodeSelectors"]["matchLabels"] == {TEST_LABEL: README_LABEL}
    name = str(manifest["metadata"]["name"])
    cluster.skyhooks.append(name)
    apply_skyhook(cluster.kube, manifest)
    return name


def boot_id(cluster: Cluster, node: str) -> str:
    return str(cluster.node(node)["status"]["nodeInfo"]["bootID"])


def limits_row(limits: str, row: str) -> list[str]:
    line = next(line for line in limits.splitlines() if line.startswith(row + " "))
    return line[len(row) :].split()


def test_shellscript_readme_scr_completes(cluster: Cluster) -> None:
    (node,) = readme_nodes(cluster)
    name = apply_readme(cluster, "shellscript")
    cluster.wait_complete(name, timeout=120)
    assert cluster.host_file(node, "/skyhook-hello-world") == "hello from skyhook\nconfig ran\n"


def test_tuning_readme_scr_completes_with_live_settings(cluster: Cluster) -> None:
    (node,) = readme_nodes(cluster)
    before = boot_id(cluster, node)
    machine_threads_max = Path("/proc/sys/kernel/threads-max").read_text()
    name = apply_readme(cluster, "tuning")
    cluster.wait_complete(name, timeout=240)

    assert boot_id(cluster, node) != before, "the reboot interrupt did not reboot the node"
    dropin = "999-tuning-tuning"
    assert "vm.max_map_count = 262144" in cluster.host_file(node, f"/etc/sysctl.d/{dropin}.conf")
    assert "* hard memlock unlimited" in cluster.host_file(
        node, f"/etc/security/limits.d/{dropin}.conf"
    )
    assert "LimitSTACK=67108864" in cluster.host_file(
        node, f"/etc/systemd/system/containerd.service.d/{dropin}.conf"
    )
    assert "hugepagesz=1G" in cluster.host_file(node, f"/etc/default/grub.d/{dropin}.cfg")

    # What the post-interrupt-check read, as the node's simulated kernel holds it.
    for key, value in {
        "fs/inotify/max_user_instances": "65535",
        "fs/inotify/max_user_watches": "524288",
        "kernel/threads-max": "16512444",
        "vm/max_map_count": "262144",
        "vm/min_free_kbytes": "65536",
    }.items():
        assert cluster.host_file(node, f"{KERNEL}/sys/{key}").strip() == value, key
    cmdline = cluster.host_file(node, f"{KERNEL}/cmdline").split()
    assert {"hugepagesz=1G", "hugepages=2", "default_hugepagesz=1G"} <= set(cmdline)
    pid = cluster.host_file(
        node, "/var/lib/skyhook-sandbox/systemd/active/containerd.service"
    ).strip()
    limits = cluster.host_file(node, f"{KERNEL}/proc/{pid}/limits")
    assert limits_row(limits, "Max stack size") == ["67108864", "67108864", "bytes"]
    assert limits_row(limits, "Max locked memory") == ["unlimited", "unlimited", "bytes"]

    stages = node_state(cluster.node(node), name)
    assert stages[keys.package_key("tuning", "1.1.4")]["stage"] == "post-interrupt"
    assert stages[keys.package_key("tuning", "1.1.4")]["state"] == "complete"
    # This machine's kernel was not touched.
    assert Path("/proc/sys/kernel/threads-max").read_text() == machine_threads_max
