"""Interrupt mode: commands run in the host root's chroot, where reboot/systemctl/service are
shims recording their argv to /shim-calls.log (never the real commands of this machine)."""

import re

import pytest

from conftest import LOG_DIR, RESOURCE_ID, STATE_DIR, Host
from skyhook_schemas.podpackage import encode_interrupt_argument as encode_interrupt

FLAGS = f"{STATE_DIR}/interrupts/flags/{RESOURCE_ID}"


def shim_calls(host: Host) -> list[str]:
    log = host.path("/shim-calls.log")
    return [line.rstrip() for line in log.read_text().splitlines()] if log.exists() else []


def flags(host: Host) -> list[str]:
    return sorted(p.name for p in host.path(FLAGS).iterdir())


def test_service_restart_reloads_then_restarts_each_service_once(host: Host) -> None:
    payload = encode_interrupt("service_restart", services=["containerd", "kubelet"])
    result = host.run("interrupt", payload)
    assert result.returncode == 0, result.stdout + result.stderr
    assert shim_calls(host) == [
        "systemctl daemon-reload",
        "systemctl restart containerd",
        "systemctl restart kubelet",
    ]
    assert flags(host) == [f"service_restart_{i}.complete" for i in range(3)]
    float(host.read(f"{FLAGS}/service_restart_0.complete"))  # body: time.time()
    log = next(host.path(f"{LOG_DIR}/demo-pkg/1.0.0/interrupts").glob("service_restart_0-*.log"))
    assert log.read_text().splitlines()[0] == "systemctl daemon-reload"

    rerun = host.run("interrupt", payload)
    assert rerun.returncode == 0
    assert len(shim_calls(host)) == 3  # nothing ran twice for the same resource id
    assert rerun.stdout.count("SKIPPED") == 3


def test_failed_command_drops_its_flag_and_the_rerun_resumes_there(host: Host) -> None:
    payload = encode_interrupt("service_restart", services=["containerd", "kubelet"])
    failed = host.run("interrupt", payload, SHIM_FAIL_ON="systemctl restart kubelet")
    assert failed.returncode == 1
    assert re.search(r"^interrupt 3/3 FAILED +systemctl restart kubelet rc=3", failed.stdout, re.M)
    assert flags(host) == ["service_restart_0.complete", "service_restart_1.complete"]

    assert host.run("interrupt", payload).returncode == 0
    assert shim_calls(host)[3:] == ["systemctl restart kubelet"]


def test_reboot_runs_reboot_once(host: Host) -> None:
    payload = encode_interrupt("node_restart")
    assert host.run("interrupt", payload).returncode == 0
    assert host.run("interrupt", payload).returncode == 0
    assert shim_calls(host) == ["reboot"]
    assert flags(host) == ["node_restart_0.complete"]


def test_reboot_killed_by_its_own_shutdown_keeps_its_flag(host: Host) -> None:
    payload = encode_interrupt("node_restart")
    first = host.run("interrupt", payload, SHIM_REBOOT_SIGTERM="1")
    assert first.returncode == 1  # the pod fails now and reruns after the boot
    assert "rc=-15" in first.stdout
    assert flags(host) == ["node_restart_0.complete"]
    assert host.run("interrupt", payload).returncode == 0
    assert shim_calls(host) == ["reboot"]


def test_restart_all_services_uses_upstreams_command(host: Host) -> None:
    assert host.run("interrupt", encode_interrupt("restart_all_services")).returncode == 0
    assert shim_calls(host) == ["service procps force-reload"]


@pytest.mark.parametrize(("kind", "expected"), [("no_op", ["no_op.complete"]),
                                                ("script_interrupt", [])])  # fmt: skip
def test_interrupts_without_commands(host: Host, kind: str, expected: list[str]) -> None:
    assert host.run("interrupt", encode_interrupt(kind)).returncode == 0
    assert shim_calls(host) == []
    assert flags(host) == expected


def test_new_resource_id_rearms_the_interrupt(host: Host) -> None:
    payload = encode_interrupt("node_restart")
    assert host.run("interrupt", payload).returncode == 0
    next_generation = "demo-uid-2_demo-pkg_1.0.0"
    assert host.run("interrupt", payload, SKYHOOK_RESOURCE_ID=next_generation).returncode == 0
    assert shim_calls(host) == ["reboot", "reboot"]


# A Skyhook CR interrupt (or configInterrupts entry) as the operator encodes it for the
# interrupt pod: CRD type -> agent type, `services` omitted when empty.
CR_INTERRUPTS = [
    ("reboot", {}, ["reboot"]),
    ("service", {"services": ["containerd"]},
     ["systemctl daemon-reload", "systemctl restart containerd"]),
    ("restartAllServices", {}, ["service procps force-reload"]),
    ("noop", {}, []),
]  # fmt: skip
AGENT_TYPE = {"reboot": "node_restart", "service": "service_restart",
              "restartAllServices": "restart_all_services", "noop": "no_op"}  # fmt: skip


@pytest.mark.parametrize(
    ("cr_type", "fields", "calls"), CR_INTERRUPTS, ids=[c[0] for c in CR_INTERRUPTS]
)
def test_each_cr_interrupt_type_maps_to_its_host_commands(
    host: Host, cr_type: str, fields: dict[str, list[str]], calls: list[str]
) -> None:
    assert host.run("interrupt", encode_interrupt(AGENT_TYPE[cr_type], **fields)).returncode == 0
    assert shim_calls(host) == calls
