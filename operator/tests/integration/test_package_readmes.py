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

from skyhook_dev.harness import apply_skyhook, node_state, wait_until
from skyhook_operator.kube.client import ApiError
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


def pod_logs(cluster: Cluster, scr: str) -> str:
    """Every container log of the SCR's pods, headed by pod and container names."""
    parts = []
    for pod in cluster.pods(scr):
        meta = pod["metadata"]
        spec = pod["spec"]
        for container in [*spec.get("initContainers", []), *spec["containers"]]:
            path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/log"
            try:
                text = cluster.kube.get_text(f"{path}?container={container['name']}")
            except ApiError as error:
                text = f"({error})"
            parts.append(f"--- {meta['name']} {container['name']}\n{text}")
    return "\n".join(parts)


def test_tuned_readme_scr_installs_tuned_and_stops_where_tuned_needs_its_daemon(
    cluster: Cluster,
) -> None:
    """The tuned SCR gets through apply (apt installs tuned in the Debian host root, the
    simulated init enables and starts tuned.service) and config (profiles deployed,
    `tuned-adm profile` run), then config-check fails truthfully: a simulated unit is state, not
    a running tuned daemon, so `tuned-adm active` over D-Bus reports no active profile."""
    (node,) = readme_nodes(cluster, host_root="debian")
    name = apply_readme(cluster, "tuned")
    key = keys.package_key("tuned", "1.2.0")

    def settled() -> bool:
        entry = node_state(cluster.node(node), name).get(key) or {}
        return entry.get("state") in ("complete", "erroring")

    wait_until(settled, 600, "tuned to complete or error")
    entry = node_state(cluster.node(node), name)[key]
    assert (entry["stage"], entry["state"]) == ("config", "erroring"), entry
    expected = "active profile is '', expected 'gpu-training' (is the tuned daemon running?)"
    logs: list[str] = []

    def check_failed_visibly() -> bool:
        logs[:] = [pod_logs(cluster, name)]
        return expected in logs[0]

    wait_until(check_failed_visibly, 60, "the config-check message in the pod logs")
    print(logs[0])
    assert "requested tuned profile 'gpu-training'" in logs[0]  # config itself succeeded
    assert "Cannot talk to TuneD daemon via DBus" in logs[0]

    upper = cluster.sandbox.host_root_upper(node)
    assert (upper / "usr/sbin/tuned").is_file(), "apply did not install tuned on this node"
    units = upper / "var/lib/skyhook-sandbox/systemd"
    assert (units / "enabled/tuned.service").is_file()
    assert (units / "active/tuned.service").is_file()
    assert "include=gpu-base" in cluster.host_file(node, "/etc/tuned/gpu-training/tuned.conf")
