"""Interrupts end to end on the sandbox (real apiserver and controller-manager, simulated nodes,
the real operator and agent): per-key `configInterrupts`, one merged interrupt for several
packages, and an uninstall cancelled while its `uninstall-interrupt` runs.

Every assertion is made on recorded watches (the Skyhook's pods and the test's node;
resourceVersions order writes across them) and on what reached the node's host: the lines the
package steps append to a file, the sandbox shims' logs (`/var/log/skyhook-sandbox/<cmd>.log`:
every systemctl and reboot call), the simulated init's unit state and the node host's count of
reboots it carried out. The sandbox's systemctl shim cannot delay a restart, so the third test's
package puts a gate ahead of it (`/usr/local/sbin/systemctl`, first in the agent's PATH).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from skyhook_dev.harness import node_state, wait_until
from skyhook_operator.kube.client import MERGE_PATCH, Json
from skyhook_sandbox.shims import LOG_DIR, SYSTEMD_DIR
from skyhook_schemas import keys
from skyhook_schemas.podpackage import decode_interrupt_argument

from .helpers import SHELLSCRIPT, Cluster, Recording, pod_stage

STEPS = "/skyhook-steps"  # on the node's host: one line per step that ran
SYSTEMCTL_LOG = f"/{LOG_DIR}/systemctl.log"  # every systemctl call the shim received
REBOOT_LOG = f"/{LOG_DIR}/reboot.log"  # every reboot call the shim received


def step(line: str) -> str:
    return f"#!/bin/bash\necho {line} >> {STEPS}\n"


def check(line: str) -> str:
    return f"#!/bin/bash\ngrep -q '^{line}' {STEPS}\n"


# --- reading the recording and the host -------------------------------------------------------


def rv(obj: Json) -> int:
    return int(obj["metadata"]["resourceVersion"])


def created(recording: Recording, after: int = 0) -> list[Json]:
    """The first recorded version of every stage pod created after resourceVersion `after`,
    in creation order."""
    first: dict[str, Json] = {}
    for _, _, pod in recording.of("pod"):
        uid = pod["metadata"]["uid"]
        if uid not in first or rv(pod) < rv(first[uid]):
            first[uid] = pod
    return sorted((p for p in first.values() if rv(p) > after), key=rv)


def stages(pods: list[Json]) -> list[str]:
    return [pod_stage(p) for p in pods]


def payload(pod: Json) -> dict[str, Any]:
    """The interrupt the pod carries out: its agent's 4th argument, decoded."""
    (container,) = pod["spec"]["initContainers"]
    return decode_interrupt_argument(container["args"][3])


def package_of(pod: Json) -> str:
    return str(pod["metadata"]["labels"][keys.PACKAGE_LABEL])


def versions_of(recording: Recording, pod: Json) -> list[Json]:
    uid = pod["metadata"]["uid"]
    return [p for _, _, p in recording.of("pod") if p["metadata"]["uid"] == uid]


def boot_changed_rv(recording: Recording, boot_id: str) -> int | None:
    """The first recorded node version whose boot id is not `boot_id`."""
    return next(
        (rv(n) for _, _, n in recording.of("node") if n["status"]["nodeInfo"]["bootID"] != boot_id),
        None,
    )


def lines(cluster: Cluster, node: str, path: str) -> list[str]:
    return cluster.host_file(node, path).splitlines()


def reboots(cluster: Cluster, node: str) -> int:
    """How many reboots the node host has carried out on this node."""
    return int(cluster.sandbox.node(node)["reboots"])


def boot_id(cluster: Cluster, node: str) -> str:
    return str(cluster.node(node)["status"]["nodeInfo"]["bootID"])


def patch(cluster: Cluster, scr: str, body: Mapping[str, Any]) -> int:
    """Merge-patch the Skyhook; the resourceVersion of that write."""
    return rv(
        cluster.kube.request("PATCH", cluster.kube.skyhook_path(scr), dict(body), MERGE_PATCH)
    )


def wait_lines(cluster: Cluster, node: str, path: str, count: int, timeout: float = 120) -> None:
    wait_until(
        lambda: len(lines(cluster, node, path)) >= count,
        timeout,
        f"{count} lines in {path} (have {lines(cluster, node, path)})",
        interval=0.25,
    )


def uncordoned_at_end(cluster: Cluster, recording: Recording, after: int) -> None:
    """Cordoned for the interrupt some time after `after`, and uncordoned now."""
    nodes = [n for _, _, n in recording.of("node") if rv(n) > after]
    assert any(n["spec"].get("unschedulable") for n in nodes), "never cordoned for the interrupt"
    wait_until(
        lambda: not cluster.node(nodes[-1]["metadata"]["name"])["spec"].get("unschedulable"),
        30,
        "uncordoned",
    )


# --- 1. configInterrupts per key ---------------------------------------------------------------


def config_package() -> dict[str, Any]:
    """No package `interrupt`: only a config edit interrupts, as its key says."""
    conf = "$SKYHOOK_DIR/configmaps"
    return {
        "version": "1.0.0",
        "image": SHELLSCRIPT,
        "configInterrupts": {
            "svc.conf": {"type": "service", "services": ["demo"]},
            "grub.conf": {"type": "reboot"},
        },
        "configMap": {
            "svc.conf": "v1",
            "grub.conf": "g1",
            "apply.sh": step("apply"),
            "apply_check.sh": check("apply"),
            "config.sh": (
                f'#!/bin/bash\necho "config svc=$(cat {conf}/svc.conf) '
                f'grub=$(cat {conf}/grub.conf)" >> {STEPS}\n'
            ),
            "config_check.sh": check("config"),
            "post_interrupt.sh": step("post-interrupt"),
            "post_interrupt_check.sh": check("post-interrupt"),
        },
    }


def test_a_config_edit_runs_the_interrupt_its_key_names(cluster: Cluster) -> None:
    """svc.conf edited: config, ONE interrupt pod restarting `demo` (no reboot), post-interrupt.
    grub.conf edited: config, ONE interrupt pod rebooting the node, post-interrupt after the
    new boot id."""
    (node,) = cluster.add_nodes(1)
    scr = cluster.label
    cluster.skyhook(scr, {"tuned": config_package()})
    cluster.wait_complete(scr, timeout=120)
    # The first install has no interrupt: the package declares none of its own.
    assert lines(cluster, node, STEPS) == ["apply", "config svc=v1 grub=g1"]
    assert lines(cluster, node, SYSTEMCTL_LOG) == []
    boot, rebooted = boot_id(cluster, node), reboots(cluster, node)
    recording = cluster.record(scr)

    # svc.conf: a service restart of demo, no reboot.
    edited = patch(
        cluster, scr, {"spec": {"packages": {"tuned": {"configMap": {"svc.conf": "v2"}}}}}
    )
    wait_lines(cluster, node, STEPS, 4)
    cluster.wait_complete(scr, timeout=120)
    pods = created(recording, edited)
    assert stages(pods) == ["config", "interrupt", "post-interrupt"], stages(pods)
    interrupt = pods[1]
    assert interrupt["metadata"]["labels"].get(keys.INTERRUPT_LABEL) == "True"
    assert payload(interrupt) == {"type": "service_restart", "services": ["demo"]}
    assert lines(cluster, node, STEPS)[2:] == ["config svc=v2 grub=g1", "post-interrupt"]
    assert lines(cluster, node, SYSTEMCTL_LOG) == [
        "systemctl daemon-reload",
        "systemctl restart demo",
    ]
    assert cluster.host_file(node, f"/{SYSTEMD_DIR}/active/demo.service"), "demo is not running"
    assert boot_id(cluster, node) == boot and reboots(cluster, node) == rebooted, "rebooted"
    assert lines(cluster, node, REBOOT_LOG) == []
    assert boot_changed_rv(recording, boot) is None
    uncordoned_at_end(cluster, recording, edited)
    entry = node_state(cluster.node(node), scr)["tuned|1.0.0"]
    assert (entry["stage"], entry["state"]) == ("post-interrupt", "complete"), entry

    # grub.conf: a reboot; no service restart.
    edited = patch(
        cluster, scr, {"spec": {"packages": {"tuned": {"configMap": {"grub.conf": "g2"}}}}}
    )
    wait_lines(cluster, node, STEPS, 6)
    cluster.wait_complete(scr, timeout=120)
    pods = created(recording, edited)
    assert stages(pods) == ["config", "interrupt", "post-interrupt"], stages(pods)
    assert payload(pods[1]) == {"type": "node_restart"}
    assert lines(cluster, node, STEPS)[4:] == ["config svc=v2 grub=g2", "post-interrupt"]
    assert len(lines(cluster, node, SYSTEMCTL_LOG)) == 2, "a service restarted for grub.conf"
    assert len(lines(cluster, node, REBOOT_LOG)) == 1
    assert boot_id(cluster, node) != boot and reboots(cluster, node) == rebooted + 1
    new_boot = boot_changed_rv(recording, boot)
    assert new_boot is not None and rv(pods[1]) < new_boot < rv(pods[2]), (
        "post-interrupt did not start after the reboot"
    )
    uncordoned_at_end(cluster, recording, edited)


# --- 2. one interrupt for several packages ------------------------------------------------------


def interrupt_package(name: str, interrupt: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "version": "1.0.0",
        "image": SHELLSCRIPT,
        "interrupt": dict(interrupt),
        "configMap": {
            "apply.sh": step(f"{name}-apply"),
            "apply_check.sh": check(f"{name}-apply"),
            "post_interrupt.sh": step(f"{name}-post-interrupt"),
            "post_interrupt_check.sh": check(f"{name}-post-interrupt"),
        },
    }


def test_two_packages_due_together_share_one_interrupt_the_reboot(cluster: Cluster) -> None:
    """`alpha` restarts service alpha, `bravo` reboots: one interrupt pod (bravo's reboot, which
    covers alpha's restart; alpha comes first in name order), one reboot, no service restart, post-interrupt for both after the reboot."""
    (node,) = cluster.add_nodes(1)
    scr = cluster.label
    boot, rebooted = boot_id(cluster, node), reboots(cluster, node)
    recording = cluster.record(scr)
    cluster.skyhook(
        scr,
        {
            "alpha": interrupt_package("alpha", {"type": "service", "services": ["alpha"]}),
            "bravo": interrupt_package("bravo", {"type": "reboot"}),
        },
    )
    cluster.wait_complete(scr, timeout=150)

    pods = created(recording)
    interrupts = [p for p in pods if pod_stage(p) == "interrupt"]
    assert len(interrupts) == 1, f"interrupt pods: {[package_of(p) for p in interrupts]}"
    (interrupt,) = interrupts
    assert payload(interrupt) == {"type": "node_restart"}, payload(interrupt)
    assert package_of(interrupt) == "bravo-1.0.0"
    assert sorted(stages(pods)) == sorted(
        ["apply", "apply", "config", "config", "interrupt", "post-interrupt", "post-interrupt"]
    ), stages(pods)
    # The interrupt after both packages' earlier stages, both post-interrupts after the reboot.
    new_boot = boot_changed_rv(recording, boot)
    assert new_boot is not None, "the boot id never changed"
    for pod in pods:
        stage = pod_stage(pod)
        if stage in {"apply", "config"}:
            assert rv(pod) < rv(interrupt), f"{stage} of {package_of(pod)} after the interrupt"
        elif stage == "post-interrupt":
            assert rv(pod) > new_boot, f"post-interrupt of {package_of(pod)} before the reboot"
    assert reboots(cluster, node) == rebooted + 1
    assert boot_id(cluster, node) != boot
    assert len(lines(cluster, node, REBOOT_LOG)) == 1
    assert lines(cluster, node, SYSTEMCTL_LOG) == [], "a service restart ran beside the reboot"
    ran = lines(cluster, node, STEPS)
    assert sorted(ran) == [
        "alpha-apply",
        "alpha-post-interrupt",
        "bravo-apply",
        "bravo-post-interrupt",
    ], ran
    state = node_state(cluster.node(node), scr)
    for key in ("alpha|1.0.0", "bravo|1.0.0"):
        assert (state[key]["stage"], state[key]["state"]) == ("post-interrupt", "complete"), state
    uncordoned_at_end(cluster, recording, 0)


# --- 3. an uninstall cancelled during its interrupt ---------------------------------------------

GATE = "/skyhook-gate"  # on the node's host: the uninstall's service restart waits for `open`
# uninstall leaves a systemctl ahead of the shim in the agent's PATH whose restart waits for
# the test; apply removes it again.
GATED_SYSTEMCTL = f"""#!/bin/sh
echo "$*" >> {GATE}/calls
if [ "$1" = restart ]; then
    touch {GATE}/waiting
    until [ -e {GATE}/open ]; do sleep 0.2; done
fi
for d in /usr/sbin /usr/bin /sbin /bin; do
    if [ -x "$d/systemctl" ]; then exec "$d/systemctl" "$@"; fi
done
exit 127
"""


def gated_package() -> dict[str, Any]:
    uninstall = (
        f"#!/bin/bash\necho uninstall >> {STEPS}\nmkdir -p {GATE} /usr/local/sbin\n"
        f"cat > /usr/local/sbin/systemctl <<'EOF'\n{GATED_SYSTEMCTL}EOF\n"
        "chmod 755 /usr/local/sbin/systemctl\n"
    )
    return {
        "version": "1.0.0",
        "image": SHELLSCRIPT,
        "interrupt": {"type": "service", "services": ["gated"]},
        "uninstall": {"enabled": True},
        "configMap": {
            "apply.sh": f"#!/bin/bash\nrm -f /usr/local/sbin/systemctl\necho apply >> {STEPS}\n",
            "apply_check.sh": check("apply"),
            "post_interrupt.sh": step("post-interrupt"),
            "post_interrupt_check.sh": check("post-interrupt"),
            "uninstall.sh": uninstall,
            "uninstall_check.sh": "#!/bin/bash\n[ -x /usr/local/sbin/systemctl ]\n",
        },
    }


def test_an_uninstall_cancelled_during_its_interrupt_finishes_it_then_installs_again(
    cluster: Cluster,
) -> None:
    """docs/uninstall.md, Cancelling: "at uninstall-interrupt: the interrupt completes (the host
    is already uninstalled), then the package installs again". The uninstall-interrupt's
    service restart is held until the test opens the gate; `apply: false` is set meanwhile."""
    (node,) = cluster.add_nodes(1)
    scr = cluster.label
    cluster.skyhook(scr, {"gated": gated_package()})
    cluster.wait_complete(scr, timeout=120)
    assert lines(cluster, node, STEPS) == ["apply", "post-interrupt"]
    assert lines(cluster, node, SYSTEMCTL_LOG) == [
        "systemctl daemon-reload",
        "systemctl restart gated",
    ]
    recording = cluster.record(scr)

    asked = patch(cluster, scr, {"spec": {"packages": {"gated": {"uninstall": {"apply": True}}}}})
    wait_until(
        (cluster.sandbox.host_root(node) / GATE.lstrip("/") / "waiting").exists,
        90,
        "the uninstall-interrupt's service restart waiting at the gate",
        interval=0.25,
    )
    (held,) = [p for p in created(recording, asked) if pod_stage(p) == "uninstall-interrupt"]
    assert payload(held) == {"type": "service_restart", "services": ["gated"]}
    cancelled = patch(
        cluster, scr, {"spec": {"packages": {"gated": {"uninstall": {"apply": False}}}}}
    )
    time.sleep(4)  # the interrupt runs on: time in which it must not be stopped or followed
    assert not any(p["metadata"].get("deletionTimestamp") for p in versions_of(recording, held)), (
        "the uninstall-interrupt pod was stopped"
    )
    assert [pod_stage(p) for p in created(recording, cancelled)] == [], (
        "work started while the uninstall-interrupt ran"
    )
    assert cluster.node(node)["spec"].get("unschedulable"), "uncordoned during the interrupt"

    (cluster.sandbox.host_root(node) / GATE.lstrip("/") / "open").write_text("")
    wait_lines(cluster, node, STEPS, 5)
    cluster.wait_complete(scr, timeout=120)

    pods = created(recording, asked)
    assert stages(pods) == [
        "uninstall",
        "uninstall-interrupt",
        "apply",
        "config",
        "interrupt",
        "post-interrupt",
    ], stages(pods)
    assert pods[1]["metadata"]["uid"] == held["metadata"]["uid"]
    # The held interrupt ended by itself (its container exited 0), before the reinstall began.
    finished = next(
        (
            rv(p)
            for p in versions_of(recording, held)
            if any(
                (s.get("state", {}).get("terminated") or {}).get("exitCode") == 0
                for s in p.get("status", {}).get("initContainerStatuses") or []
            )
        ),
        None,
    )
    assert finished is not None, "the uninstall-interrupt never completed"
    assert finished < rv(pods[2]), "apply started before the uninstall-interrupt completed"
    assert lines(cluster, node, STEPS) == [
        "apply",
        "post-interrupt",
        "uninstall",
        "apply",
        "post-interrupt",
    ]
    # The gated restart ran once (the wrapper saw it), then the reinstall's own restart.
    assert lines(cluster, node, f"{GATE}/calls") == ["daemon-reload", "restart gated"]
    assert (
        lines(cluster, node, SYSTEMCTL_LOG)
        == ["systemctl daemon-reload", "systemctl restart gated"] * 3
    )
    entry = node_state(cluster.node(node), scr)["gated|1.0.0"]
    assert (entry["stage"], entry["state"]) == ("post-interrupt", "complete"), entry
    uncordoned_at_end(cluster, recording, asked)
    conditions = {
        c["type"]
        for c in cluster.get_skyhook(scr)["status"].get("conditions") or []
        if c["status"] == "True"
    }
    assert keys.CONDITION_UNINSTALL_IN_PROGRESS not in conditions, conditions
