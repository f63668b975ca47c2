"""Deletion, eviction and reboots: what the operator's drain and interrupt logic relies on."""

from __future__ import annotations

import datetime as dt
import threading
import time
from pathlib import Path
from typing import Any

from helpers import (
    NAMESPACE,
    pod_dict,
    pod_gone,
    pod_manifest,
    shell,
    terminated,
    wait_for,
    wait_phase,
)
from kubernetes.client import V1DeleteOptions, V1Eviction, V1ObjectMeta

HOST = [{"name": "host", "hostPath": {"path": "/"}}]
HOST_MOUNT = [{"name": "host", "mountPath": "/root"}]


def _boot_id(api, node: str) -> str:
    return str(api.read_node(node).status.node_info.boot_id)


def test_eviction_of_a_running_workload_pod_completes_within_seconds(api, sandbox_nodes):
    (node,) = sandbox_nodes(1, labels={"pool": "training"})
    workload = pod_manifest("training-job", node, containers=[shell("train", "sleep 1000")],
                            terminationGracePeriodSeconds=30)  # fmt: skip
    workload["metadata"]["labels"] = {"app": "training"}
    api.create_namespaced_pod(NAMESPACE, workload)
    wait_phase(api, "training-job", ("Running",))
    started = time.monotonic()
    api.create_namespaced_pod_eviction(
        "training-job",
        NAMESPACE,
        V1Eviction(metadata=V1ObjectMeta(name="training-job", namespace=NAMESPACE)),
    )
    wait_for(lambda: pod_gone(api, "training-job"), 15, "the evicted pod to be gone")
    # sleep dies on SIGTERM at once, so the 30 s grace period is not waited out.
    assert time.monotonic() - started < 10


def _signalled_pod(
    api, sandbox, node: str, name: str, *, script: str, grace: int, **spec: Any
) -> Path:
    """Run `script` (which writes /root/signals once its traps are set) in pod `name`; the
    node's file the script writes, once it exists."""
    api.create_namespaced_pod(
        NAMESPACE,
        pod_manifest(name, node, volumes=HOST, terminationGracePeriodSeconds=grace,
                     containers=[shell("c", script, volumeMounts=HOST_MOUNT)], **spec),
    )  # fmt: skip
    signals = sandbox.host_root_upper(node) / "signals"
    wait_for(signals.exists, 15, f"{name}: the shell to set its trap")
    return signals


def test_deletion_sends_sigterm_then_sigkill_after_the_grace_period(api, sandbox, sandbox_nodes):
    (node,) = sandbox_nodes()
    stubborn = (
        "trap 'echo got-term >> /root/signals' TERM; echo trapped > /root/signals; "
        "while :; do sleep 0.1; done"
    )
    signals = _signalled_pod(api, sandbox, node, "stubborn", script=stubborn, grace=2)
    started = time.monotonic()
    api.delete_namespaced_pod("stubborn", NAMESPACE)
    wait_for(lambda: pod_gone(api, "stubborn"), 15, "the deleted pod to be gone")
    elapsed = time.monotonic() - started
    assert 1.5 <= elapsed < 8  # waited out the 2 s grace period, then killed
    assert "got-term" in signals.read_text()


def test_deletion_signals_only_the_first_process_and_lets_its_children_finish(
    api, sandbox, sandbox_nodes
):
    """As a container runtime does: the agent gets the SIGTERM and its running step does not."""
    (node,) = sandbox_nodes()
    script = (
        "trap 'echo got-term >> /root/signals' TERM; "
        "(sleep 2; echo child-finished >> /root/signals) & "
        "echo started > /root/signals; wait; wait"
    )
    signals = _signalled_pod(api, sandbox, node, "parent", script=script, grace=20)
    started = time.monotonic()
    api.delete_namespaced_pod("parent", NAMESPACE)
    wait_for(lambda: pod_gone(api, "parent"), 25, "the deleted pod to be gone")
    assert signals.read_text().splitlines() == ["started", "got-term", "child-finished"]
    # Gone once its first process exited, not at the end of the grace period.
    assert time.monotonic() - started < 10


def test_active_deadline_fails_the_pod_and_stops_its_containers(api, sandbox, sandbox_nodes):
    """Counted from startTime; the containers are stopped as on deletion (SIGTERM, SIGKILL
    after the grace period) and the pod stays, Failed with reason DeadlineExceeded."""
    (node,) = sandbox_nodes()
    stubborn = (
        "trap 'echo got-term >> /root/signals' TERM; echo trapped > /root/signals; "
        "echo still-here; while :; do sleep 0.1; done"
    )
    signals = _signalled_pod(
        api, sandbox, node, "outlives", script=stubborn, grace=1, activeDeadlineSeconds=3
    )
    pod = wait_phase(api, "outlives", ("Succeeded", "Failed"), timeout=20)
    status = pod["status"]
    assert status["phase"] == "Failed"
    assert status["reason"] == "DeadlineExceeded"
    assert status["message"] == "Pod was active on the node longer than the specified deadline"
    stopped = terminated(status["containerStatuses"][0])
    assert stopped["exitCode"] == 137  # ignored the SIGTERM: killed after the 1 s grace
    assert "got-term" in signals.read_text()
    started = dt.datetime.fromisoformat(status["startTime"])
    assert dt.datetime.fromisoformat(stopped["finishedAt"]) - started >= dt.timedelta(seconds=3)
    time.sleep(1.5)  # stays Failed and is not started again; its logs stay readable
    assert pod_dict(api, "outlives")["status"]["phase"] == "Failed"
    assert "still-here" in api.read_namespaced_pod_log("outlives", NAMESPACE, container="c")


def test_a_finished_pod_is_finalized_on_delete(api, sandbox_nodes):
    (node,) = sandbox_nodes()
    api.create_namespaced_pod(
        NAMESPACE,
        pod_manifest("done", node, restartPolicy="Never", containers=[shell("c", "true")]),
    )
    wait_phase(api, "done", ("Succeeded",))
    api.delete_namespaced_pod("done", NAMESPACE, body=V1DeleteOptions())
    wait_for(lambda: pod_gone(api, "done"), 10, "the finished pod to be gone")


def _survivor(api, node: str, name: str, policy: str) -> None:
    api.create_namespaced_pod(
        NAMESPACE,
        pod_manifest(name, node, restartPolicy=policy, volumes=HOST,
                     initContainers=[shell("count", f"echo run >> /root/{name}", volumeMounts=HOST_MOUNT)],
                     containers=[{"name": "pause", "image": "registry.k8s.io/pause:3.10"}]),
    )  # fmt: skip
    wait_phase(api, name, ("Running",))


def _restarts(api, name: str) -> tuple[str, int, int]:
    status = pod_dict(api, name)["status"]
    init, main = status["initContainerStatuses"][0], status["containerStatuses"][0]
    return status["phase"], init["restartCount"], main["restartCount"]


def test_reboot_changes_boot_id_and_reruns_init_containers(api, sandbox, sandbox_nodes):
    (node,) = sandbox_nodes()
    before = _boot_id(api, node)
    _survivor(api, node, "always", "Always")
    _survivor(api, node, "onfailure", "OnFailure")
    (sandbox.host_root(node) / "tmp" / "volatile").write_text("gone after reboot")
    new_boot = sandbox.reboot(node)
    assert new_boot != before
    assert _boot_id(api, node) == new_boot
    assert sandbox.node(node)["reboots"] == 1
    assert not (sandbox.host_root(node) / "tmp" / "volatile").exists()
    # Always: the init container runs again. OnFailure: an init container that exited 0 may not
    # run again (the API forbids that transition); the killed pause container restarts.
    wait_for(lambda: _restarts(api, "always") == ("Running", 1, 1), 20, "Always pod re-run")
    wait_for(lambda: _restarts(api, "onfailure") == ("Running", 0, 1), 20, "OnFailure pod restart")
    upper = sandbox.host_root_upper(node)
    assert (upper / "always").read_text() == "run\nrun\n"
    assert (upper / "onfailure").read_text() == "run\n"
    pause = pod_dict(api, "onfailure")["status"]["containerStatuses"][0]
    assert pause["lastState"]["terminated"]["reason"] == "Unknown"
    assert pause["lastState"]["terminated"]["exitCode"] == 255
    sandbox.wait_ready([node], timeout=30)


def test_reboot_marks_the_node_not_ready_meanwhile(api, sandbox, sandbox_nodes):
    (node,) = sandbox_nodes()
    seen: list[str] = []

    def watch() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "False" not in seen:
            conditions = api.read_node(node).status.conditions
            seen.extend(c.status for c in conditions if c.type == "Ready")
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    sandbox.reboot(node)  # blocks until Ready again; the node host does the work
    watcher.join()
    assert "False" in seen
    assert seen[-1] == "False" or api.read_node(node).status.conditions[-1].status == "True"


def test_reboot_requested_from_inside_the_host_root(api, sandbox, sandbox_nodes):
    """What a package's or the agent's reboot does: the shim asks the node, never the machine."""
    (node,) = sandbox_nodes()
    before = _boot_id(api, node)
    script = (
        "if [ -f /root/var/rebooted ]; then exit 0; fi; touch /root/var/rebooted; "
        "chroot /root systemctl daemon-reload; chroot /root reboot; echo reboot-returned"
    )
    api.create_namespaced_pod(
        NAMESPACE,
        pod_manifest("reboots", node, restartPolicy="OnFailure", volumes=HOST,
                     initContainers=[shell("interrupt", script, volumeMounts=HOST_MOUNT)],
                     containers=[{"name": "pause", "image": "registry.k8s.io/pause"}]),
    )  # fmt: skip

    def rebooted_and_back() -> bool:
        status = pod_dict(api, "reboots")["status"]
        inits = status.get("initContainerStatuses") or [{}]
        return status.get("phase") == "Running" and inits[0].get("restartCount") == 1

    wait_for(rebooted_and_back, 30, "reboot and re-run")
    assert _boot_id(api, node) != before
    init = pod_dict(api, "reboots")["status"]["initContainerStatuses"][0]
    assert init["lastState"]["terminated"]["exitCode"] == 255  # killed by the reboot
    assert terminated(init)["exitCode"] == 0
    logs = sandbox.host_root_upper(node) / "var" / "log" / "skyhook-sandbox"
    assert (logs / "systemctl.log").read_text() == "systemctl daemon-reload\n"
    assert (logs / "reboot.log").read_text() == "reboot \n"


def test_machine_systemctl_inside_a_container_is_a_shim(api, sandbox, sandbox_nodes):
    """Without the chroot, `systemctl` and `sysctl` would act on this machine: they are shimmed."""
    (node,) = sandbox_nodes()
    swappiness = Path("/proc/sys/vm/swappiness").read_text()
    unusual = "7" if swappiness.strip() != "7" else "8"
    commands = (
        f"systemctl restart kubelet && service foo start && service foo status"
        f" && sysctl -w vm.swappiness={unusual}"
    )
    api.create_namespaced_pod(
        NAMESPACE,
        pod_manifest("no-chroot", node, restartPolicy="Never", containers=[shell("c", commands)]),
    )
    assert wait_phase(api, "no-chroot", ("Succeeded", "Failed"))["status"]["phase"] == "Succeeded"
    logs = sandbox.host_root_upper(node) / "var" / "log" / "skyhook-sandbox"
    assert (logs / "systemctl.log").read_text() == "systemctl restart kubelet\n"
    assert (logs / "service.log").read_text() == "service foo start\nservice foo status\n"
    assert (logs / "sysctl.log").read_text() == f"sysctl -w vm.swappiness={unusual}\n"
    # The node's simulated kernel took the value; this machine's did not.
    simulated = sandbox.host_root(node) / "var/lib/skyhook-sandbox/kernel/sys/vm/swappiness"
    assert simulated.read_text() == f"{unusual}\n"
    assert Path("/proc/sys/vm/swappiness").read_text() == swappiness


def test_never_pod_running_at_reboot_fails(api, sandbox, sandbox_nodes):
    (node,) = sandbox_nodes()
    api.create_namespaced_pod(
        NAMESPACE,
        pod_manifest("fragile", node, restartPolicy="Never", containers=[shell("c", "sleep 1000")]),
    )
    wait_phase(api, "fragile", ("Running",))
    sandbox.reboot(node)
    status = wait_phase(api, "fragile", ("Failed",), timeout=15)["status"]
    assert terminated(status["containerStatuses"][0])["exitCode"] == 255
    assert terminated(status["containerStatuses"][0])["reason"] == "Unknown"
