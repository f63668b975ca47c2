"""A package's life on real nodes: install, config change, upgrade, downgrade, removal, SCR
deletion. The operator runs as a subprocess against the sandbox's apiserver; stage pods run
on simulated nodes (the real agent where host files matter, the agentless image elsewhere)."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

import yaml

from skyhook_dev.harness import wait_until
from skyhook_schemas import keys

from .helpers import SHELLSCRIPT, Cluster, agentless, entry, pod_stage

DEMO_SCR = Path(__file__).parents[3] / "dev" / "src" / "skyhook_dev" / "demo-scr.yaml"
HELLO = "/skyhook-hello-world"
# What the running operator writes into the version annotations: its installed version.
OPERATOR_VERSION = f"v{metadata.version('skyhook-operator')}"


def demo_packages() -> dict:
    return yaml.safe_load(DEMO_SCR.read_text())["spec"]["packages"]


def test_install_runs_apply_then_config_and_writes_the_host(cluster: Cluster) -> None:
    nodes = cluster.add_nodes(2)
    recording = cluster.record("install")
    cluster.skyhook("install", demo_packages())
    cluster.wait_complete("install", timeout=120)

    for node in nodes:
        state = cluster.states("install")[node]
        assert entry(state, "tuning", "1.1.0") == {
            "name": "tuning",
            "version": "1.1.0",
            "image": SHELLSCRIPT,
            "stage": "config",
            "state": "complete",
        }
        assert cluster.host_file(node, HELLO) == "hello world\na config is run\n"
        labels = cluster.node(node)["metadata"]["labels"]
        assert labels[keys.node_status_key("install")] == "complete"
        annotations = cluster.node(node)["metadata"]["annotations"]
        assert annotations[keys.version_key("install")] == OPERATOR_VERSION
    scr_annotations = cluster.get_skyhook("install")["metadata"]["annotations"]
    assert scr_annotations[keys.SKYHOOK_VERSION_ANNOTATION] == OPERATOR_VERSION
    stages = [pod_stage(p) for _, kind, p in recording.of("pod") if kind == "ADDED"]
    assert sorted(stages) == ["apply", "apply", "config", "config"]
    status = cluster.get_skyhook("install")["status"]
    assert status["completeNodes"] == "2/2"
    # Each stage's pod stays, Succeeded, for its logs (SKYHOOK_POD_TTL_SUCCEEDED).
    kept = cluster.pods("install")
    assert sorted(pod_stage(p) for p in kept) == ["apply", "apply", "config", "config"]
    assert {p["status"]["phase"] for p in kept} == {"Succeeded"}


def test_config_change_reruns_config_only(cluster: Cluster) -> None:
    (node,) = cluster.add_nodes(1)
    packages = demo_packages()
    cluster.skyhook("config", packages)
    cluster.wait_complete("config", timeout=120)
    recording = cluster.record("config")

    packages["tuning"]["configMap"]["config.sh"] = (
        '#!/bin/bash\necho "a second config" >> /skyhook-hello-world\n'
    )
    cluster.skyhook("config", packages)
    wait_until(
        lambda: "a second config" in cluster.host_file(node, HELLO), 60, "the new config to run"
    )
    cluster.wait_complete("config", timeout=60)

    assert cluster.host_file(node, HELLO) == "hello world\na config is run\na second config\n"
    stages = {pod_stage(p) for _, kind, p in recording.of("pod") if kind == "ADDED"}
    assert stages == {"config"}
    assert entry(cluster.states("config")[node], "tuning", "1.1.0")["stage"] == "config"


def test_upgrade_runs_upgrade_then_config_and_drops_the_old_entry(cluster: Cluster) -> None:
    (node,) = cluster.add_nodes(1)
    cluster.skyhook("upgrade", {"dexter": agentless("1.2.3")})
    cluster.wait_complete("upgrade", timeout=90)
    recording = cluster.record("upgrade")

    cluster.skyhook("upgrade", {"dexter": agentless("1.3.0")})
    wait_until(lambda: entry(cluster.states("upgrade")[node], "dexter", "1.3.0"), 30, "new entry")
    cluster.wait_complete("upgrade", timeout=90)

    state = cluster.states("upgrade")[node]
    assert list(state) == ["dexter|1.3.0"]
    assert state["dexter|1.3.0"]["stage"] == "config"
    stages = [pod_stage(p) for _, kind, p in recording.of("pod") if kind == "ADDED"]
    assert stages == ["upgrade", "config"]


def test_downgrade_installs_the_older_version_beside_the_newer_entry(cluster: Cluster) -> None:
    (node,) = cluster.add_nodes(1)
    cluster.skyhook("downgrade", {"dogs": agentless("1.2.6")})
    cluster.wait_complete("downgrade", timeout=90)
    recording = cluster.record("downgrade")

    cluster.skyhook("downgrade", {"dogs": agentless("1.2.5")})
    wait_until(lambda: entry(cluster.states("downgrade")[node], "dogs", "1.2.5"), 30, "new entry")
    cluster.wait_complete("downgrade", timeout=120)

    # Nothing is uninstalled unless asked: the newer version's entry stays as its record.
    assert sorted(cluster.states("downgrade")[node]) == ["dogs|1.2.5", "dogs|1.2.6"]
    added = [p for _, kind, p in recording.of("pod") if kind == "ADDED"]
    versions = [(pod_stage(p), p["metadata"]["labels"][keys.PACKAGE_LABEL]) for p in added]
    assert versions == [("apply", "dogs-1.2.5"), ("config", "dogs-1.2.5")]


def test_removed_package_is_left_installed(cluster: Cluster) -> None:
    (node,) = cluster.add_nodes(1)
    cluster.skyhook("removal", {"keep": agentless("1.0.0"), "drop": agentless("2.0.0")})
    cluster.wait_complete("removal", timeout=120)
    recording = cluster.record("removal")

    cluster.kube.request(
        "PATCH",
        cluster.kube.skyhook_path("removal"),
        {"spec": {"packages": {"drop": None}}},
        "application/merge-patch+json",
    )
    wait_until(
        lambda: cluster.get_skyhook("removal")["status"].get("packageList") == "keep:1.0.0",
        60,
        "package list updated",
    )
    cluster.wait_complete("removal", timeout=60)

    # Nothing is uninstalled unless asked (uninstall.apply): the entry stays as its record.
    assert sorted(cluster.states("removal")[node]) == ["drop|2.0.0", "keep|1.0.0"]
    added = [p for _, kind, p in recording.of("pod") if kind == "ADDED"]
    assert added == []


def test_deleting_the_skyhook_mid_rollout_leaves_nodes_clean_but_for_their_record(
    cluster: Cluster,
) -> None:
    """The package's uninstall is not enabled, so what it did stays on the hosts, and so does
    the nodeState recording it (with the version key): a Skyhook created again under the name
    resumes from it rather than running the package again from the start."""
    nodes = cluster.add_nodes(2)
    slow = agentless(
        "1.0.0",
        sleep=4,
        configMap={"a.conf": "x"},
        interrupt={"type": "service", "services": ["x"]},
    )
    cluster.skyhook("deleted", {"pkg": slow})

    def cordoned_with_pod() -> bool:
        cordoned = any(cluster.node(n)["spec"].get("unschedulable") for n in nodes)
        return cordoned and bool(cluster.pods("deleted"))

    wait_until(cordoned_with_pod, 60, "a node cordoned with a stage pod running")
    cluster.kube.request("DELETE", cluster.kube.skyhook_path("deleted"))
    wait_until(lambda: cluster._gone("deleted"), 60, "the Skyhook to be deleted")

    for node in nodes:
        obj = cluster.node(node)
        meta = obj["metadata"]
        record = {keys.node_state_key("deleted"), keys.version_key("deleted")}
        leftovers = [
            k
            for k in {**meta.get("annotations", {}), **meta["labels"]}
            if k.startswith(keys.PREFIX) and k.endswith("_deleted") and k not in record
        ]
        assert leftovers == [], f"{node} keeps {leftovers}"
        recorded = meta.get("annotations", {}).get(keys.node_state_key("deleted"))
        if recorded is not None:  # a node the rollout had reached
            assert set(json.loads(recorded)) == {"pkg|1.0.0"}
        assert not obj["spec"].get("unschedulable"), f"{node} is still cordoned"
        conditions = [c["type"] for c in obj["status"].get("conditions", [])]
        assert not [c for c in conditions if c.startswith(f"{keys.GROUP}/deleted/")]
    wait_until(lambda: cluster.pods("deleted") == [], 30, "the SCR's pods to be gone")

    def configmaps_gone() -> bool:
        items = []
        for label in (keys.NAME_LABEL, keys.NODE_META_LABEL):
            items += cluster.kube.request(
                "GET",
                cluster.kube.namespaced_path("configmaps", "skyhook"),
                query={"labelSelector": f"{label}=deleted"},
            )["items"]
        return not items

    wait_until(configmaps_gone, 30, "the SCR's ConfigMaps to be deleted")
