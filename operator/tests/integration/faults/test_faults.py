"""Things break mid-rollout; the rollout still ends right.

Each test starts a rollout of the marker package, breaks something while stages run, and ends
with the same checks (helpers.assert_rolled_out): every selected node complete with the final
spec, no completed stage run twice for the same version and config (unless the test says why),
the interruption budget never exceeded in the recorded watch, no node left cordoned or
tainted, the SCR complete.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skyhook_dev.harness import node_state, wait_until
from skyhook_schemas import keys

from ..helpers import TEST_LABEL, Cluster, Recording
from .helpers import (
    BEGUN,
    PACKAGE,
    assert_nodes_released,
    assert_rolled_out,
    live_stage_pod,
    marker_lines,
    marker_package,
    record,
    wait_gone,
)

BUDGET = {"count": 2}
ETCD_OUTAGE_S = 10.0


def start(cluster: Cluster, scr: str, nodes: int = 4, **package: Any) -> Recording:
    cluster.add_nodes(nodes)
    recording = record(cluster, scr)
    cluster.skyhook(scr, {PACKAGE: marker_package(**package)}, interruptionBudget=BUDGET)
    return recording


# --- the operator ------------------------------------------------------------------------------


def _annotation_changed(recording: Recording, scr: str) -> Callable[[int], bool]:
    """After event `seen`, some node's nodeState annotation for `scr` changed."""
    key = keys.node_state_key(scr)

    def changed(seen: int) -> bool:
        last: dict[str, str | None] = {}
        for index, (_, kind, node) in enumerate(recording.of("node")):
            name = node["metadata"]["name"]
            value = (node["metadata"].get("annotations") or {}).get(key)
            if index >= seen and kind == "MODIFIED" and name in last and last[name] != value:
                return True
            last[name] = value
        return False

    return changed


def _pod_event(recording: Recording, kind: str) -> Callable[[int], bool]:
    def happened(seen: int) -> bool:
        return any(k == kind for _, k, _ in recording.of("pod")[seen:])

    return happened


def _pod_ended(recording: Recording) -> Callable[[int], bool]:
    def happened(seen: int) -> bool:
        return any(
            p.get("status", {}).get("phase") in ("Succeeded", "Failed")
            for _, _, p in recording.of("pod")[seen:]
        )

    return happened


def test_operator_sigkilled_at_twenty_points_finishes_the_rollout_once(cluster: Cluster) -> None:
    # Long enough that even on a quiet machine 20 kill points come before the end.
    recording = start(cluster, "kills", nodes=12, sleep=3)
    # A kill point is whatever the operator or a node does next after the last restart: a
    # node's state annotation changed (the node patch is written, its pod may not be yet), a
    # stage pod created, one ended (its stage to be learnt) or one deleted.
    triggers = [
        ("node", _annotation_changed(recording, "kills")),
        ("pod", _pod_event(recording, "ADDED")),
        ("pod", _pod_ended(recording)),
        ("pod", _pod_event(recording, "DELETED")),
    ]
    kills = 0
    assert cluster.operator is not None
    while kills < 24:
        seen = {what: len(recording.of(what)) for what in ("node", "pod")}

        def next_point(seen: dict[str, int] = seen) -> bool:
            return any(trigger(seen[what]) for what, trigger in triggers)

        try:
            wait_until(next_point, 60, "the next kill point", interval=0.05)
        except AssertionError:
            break  # the rollout is over: no more kill points
        cluster.operator.kill()
        kills += 1
        cluster.operator = cluster.start_operator()
    assert kills >= 20, f"only {kills} kill points before the rollout ended"
    assert_rolled_out(cluster, "kills", recording, version="1.0.0", budget=2)


# --- the control plane -------------------------------------------------------------------------


def test_apiserver_restarted_mid_rollout(cluster: Cluster) -> None:
    recording = start(cluster, "apiserver")
    wait_until(live_stage_pod(cluster, "apiserver", "apply"), 60, "an apply pod")
    cluster.sandbox.restart_component("kube-apiserver")
    assert_rolled_out(cluster, "apiserver", recording, version="1.0.0", budget=2)


def test_etcd_stopped_for_ten_seconds_mid_rollout(cluster: Cluster) -> None:
    recording = start(cluster, "etcd")
    wait_until(live_stage_pod(cluster, "etcd", "apply"), 60, "an apply pod")
    argv = cluster.sandbox.stop_component("etcd")
    time.sleep(ETCD_OUTAGE_S)  # the fault itself: an outage of this length
    cluster.sandbox.start_component("etcd", argv)
    assert_rolled_out(cluster, "etcd", recording, version="1.0.0", budget=2)


# --- pods, nodes and the agent -----------------------------------------------------------------


def test_stage_pod_deleted_by_hand_mid_step(cluster: Cluster) -> None:
    recording = start(cluster, "podgone", sleep=3)
    apply = "apply 1.0.0 a"

    def node_mid_apply() -> str | None:
        return next(
            (
                n
                for n in cluster.nodes
                if apply in cluster.host_file(n, BEGUN).splitlines()
                and apply not in marker_lines(cluster, n)
            ),
            None,
        )

    node = wait_until(node_mid_apply, 60, "an apply step running")
    pod = next(
        p
        for p in cluster.pods("podgone")
        if p["spec"]["nodeName"] == node and not p["metadata"].get("deletionTimestamp")
    )
    meta = pod["metadata"]
    cluster.kube.request(
        "DELETE", cluster.kube.namespaced_path("pods", meta["namespace"], meta["name"])
    )
    assert_rolled_out(
        cluster, "podgone", recording, version="1.0.0", budget=2, rerun_allowed=[node]
    )
    # The running step was let finish, not cut short; its stage was not complete, so the stage
    # ran again from its first step (the shellscript package's steps rerun every time).
    assert marker_lines(cluster, node) == [apply, apply, "config 1.0.0 a"]
    # ... and not while the deleted pod was still there: never two stage pods on one node.
    pods = recording.of("pod")
    uid = meta["uid"]
    gone = next(t for t, kind, p in pods if kind == "DELETED" and p["metadata"]["uid"] == uid)
    replaced = next(
        t
        for t, kind, p in pods
        if kind == "ADDED" and p["spec"].get("nodeName") == node and p["metadata"]["uid"] != uid
    )
    assert replaced > gone, "a new stage pod was created before the deleted one was gone"


def test_node_deleted_mid_stage_and_added_again(cluster: Cluster) -> None:
    recording = start(cluster, "nodegone")
    pod = wait_until(live_stage_pod(cluster, "nodegone", "apply"), 60, "an apply pod")
    name = pod["spec"]["nodeName"]
    cluster.sandbox.remove_nodes([name])
    cluster.sandbox.add_nodes(names=[name], labels={TEST_LABEL: cluster.label})
    # A new Node object is a new node: it runs every stage again, on whatever its disk kept.
    assert_rolled_out(
        cluster, "nodegone", recording, version="1.0.0", budget=2, rerun_allowed=[name]
    )


def test_node_reboots_unexpectedly_mid_stage(cluster: Cluster) -> None:
    recording = start(cluster, "reboot", sleep=3)
    pod = wait_until(live_stage_pod(cluster, "reboot", "apply"), 60, "an apply pod")
    cluster.sandbox.reboot(pod["spec"]["nodeName"])
    assert_rolled_out(cluster, "reboot", recording, version="1.0.0", budget=2)


def _agent_processes(scr: str, mode: str) -> list[int]:
    """Process groups of agent containers of `scr` running `mode` (from their environment)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ours = any(e.startswith(f"SKYHOOK_RESOURCE_ID={scr}-".encode()) for e in environ)
        if ours and mode.encode() in argv and os.getpgid(int(proc.name)) == int(proc.name):
            found.append(int(proc.name))
    return found


def test_agent_killed_mid_step(cluster: Cluster) -> None:
    recording = start(cluster, "agentkill", sleep=3)
    groups = wait_until(lambda: _agent_processes("agentkill", "apply"), 60, "an agent at apply")
    for group in groups:
        os.killpg(group, signal.SIGKILL)
    assert_rolled_out(cluster, "agentkill", recording, version="1.0.0", budget=2)


# --- the SCR edited or deleted -------------------------------------------------------------------


def _edit(cluster: Cluster, scr: str, **package: str) -> None:
    cluster.patch_skyhook(scr, {"spec": {"packages": {PACKAGE: marker_package(**package)}}})


def test_config_edited_mid_rollout(cluster: Cluster) -> None:
    recording = start(cluster, "cfgedit")
    wait_until(_some_node_complete(cluster, "cfgedit"), 120, "a node complete")
    _edit(cluster, "cfgedit", tag="b")
    assert_rolled_out(cluster, "cfgedit", recording, version="1.0.0", tag="b", budget=2)


def test_version_up_mid_rollout(cluster: Cluster) -> None:
    recording = start(cluster, "verup")
    wait_until(_some_node_complete(cluster, "verup"), 120, "a node complete")
    cluster.patch_skyhook("verup", {"spec": {"packages": {PACKAGE: None}}})
    cluster.patch_skyhook(
        "verup", {"spec": {"packages": {PACKAGE: marker_package(version="2.0.0")}}}
    )
    assert_rolled_out(cluster, "verup", recording, version="2.0.0", budget=2)


def test_version_down_mid_rollout(cluster: Cluster) -> None:
    recording = start(cluster, "verdown", version="2.0.0")
    wait_until(_some_node_complete(cluster, "verdown"), 120, "a node complete")
    _edit(cluster, "verdown", version="1.0.0")
    assert_rolled_out(cluster, "verdown", recording, version="1.0.0", budget=2)


def _some_node_complete(cluster: Cluster, scr: str) -> Callable[[], bool]:
    def complete() -> bool:
        return any(
            any(e.get("state") == "complete" and e.get("stage") == "config" for e in s.values())
            for s in cluster.states(scr).values()
        )

    return complete


def test_scr_deleted_mid_rollout_leaves_nodes_clean_but_for_their_record(cluster: Cluster) -> None:
    start(cluster, "scrgone")
    wait_until(live_stage_pod(cluster, "scrgone", "apply"), 60, "an apply pod")
    cluster.kube.request("DELETE", cluster.kube.skyhook_path("scrgone"))
    wait_gone(cluster, "scrgone")

    record = {keys.node_state_key("scrgone"), keys.version_key("scrgone")}

    def leftovers(name: str) -> list[str]:
        meta = cluster.node(name)["metadata"]
        found = {**(meta.get("annotations") or {}), **meta["labels"]}
        return [k for k in found if k.endswith("_scrgone") and k not in record]

    def clean() -> bool:
        return not cluster.pods("scrgone") and not any(leftovers(n) for n in cluster.nodes)

    wait_until(clean, 120, "pods gone and every key but the node's record cleared")
    for name in cluster.nodes:
        # A node the rollout reached keeps the record of the package it began.
        assert all(k.startswith(f"{PACKAGE}|") for k in node_state(cluster.node(name), "scrgone"))
    assert_nodes_released(cluster)
    cluster.skyhooks.remove("scrgone")
