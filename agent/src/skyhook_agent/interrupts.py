"""Interrupts the agent performs: an explicit registry of upstream's five agent types.

The operator passes ``base64(json({"type": <agent type>, ...fields}))`` as the 4th argument of
an ``interrupt`` pod. Each type maps to the commands run, in order, in the host chroot.
"""

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from skyhook_agent.chroot import ProcessSpec, run_process
from skyhook_agent.console import Console, Outcome, StepReport
from skyhook_agent.errors import InputError
from skyhook_agent.fsutil import write_atomic
from skyhook_agent.layout import HostLayout
from skyhook_agent.logs import OutputSink, new_log_path
from skyhook_agent.settings import ResourceId
from skyhook_agent.signals import StopSignal
from skyhook_schemas.podpackage import InterruptArgumentError, decode_interrupt_argument

Commands = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Interrupt:
    type: str
    commands: Commands
    services: tuple[str, ...] = ()

    @property
    def writes_noop_flag(self) -> bool:
        # no_op records that it "ran"; script_interrupt (the package did it) records nothing.
        return self.type == "no_op"


def _no_fields(kind: str, commands: Commands) -> Callable[[Mapping[str, Any]], Interrupt]:
    def build(fields: Mapping[str, Any]) -> Interrupt:
        _reject_unknown(kind, fields, allowed=())
        return Interrupt(kind, commands)

    return build


def _service_restart(fields: Mapping[str, Any]) -> Interrupt:
    _reject_unknown("service_restart", fields, allowed=("services",))
    services = fields.get("services", [])  # the operator omits an empty list
    if not isinstance(services, list) or not all(isinstance(s, str) and s for s in services):
        raise InputError(["interrupt.services: must be a list of service names"])
    commands = (("systemctl", "daemon-reload"), *(("systemctl", "restart", s) for s in services))
    return Interrupt("service_restart", commands, tuple(services))


INTERRUPT_TYPES: dict[str, Callable[[Mapping[str, Any]], Interrupt]] = {
    "node_restart": _no_fields("node_restart", (("reboot",),)),
    "service_restart": _service_restart,
    # Upstream's command: it reloads sysctl settings only; kept because packages rely on it.
    "restart_all_services": _no_fields(
        "restart_all_services", (("service", "procps", "force-reload"),)
    ),
    "no_op": _no_fields("no_op", ()),
    "script_interrupt": _no_fields("script_interrupt", ()),
}


def _reject_unknown(kind: str, fields: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(fields) - set(allowed))
    if unknown:
        raise InputError([f"interrupt.{name}: not a field of {kind}" for name in unknown])


def decode_interrupt(payload: str) -> Interrupt:
    """Decode the base64 JSON argument; InputError saying exactly what is wrong."""
    try:
        document = decode_interrupt_argument(payload)
    except InterruptArgumentError as error:
        raise InputError([str(error)]) from None
    kind = document.pop("type")
    if kind not in INTERRUPT_TYPES:
        choices = ", ".join(INTERRUPT_TYPES)
        raise InputError([f"interrupt.type: unknown type {kind!r}; expected one of: {choices}"])
    return INTERRUPT_TYPES[kind](document)


REBOOT_SIGTERM = -15
"""``reboot`` itself SIGTERMed by the shutdown it started: the reboot is under way."""


@dataclass(frozen=True)
class InterruptContext:
    layout: HostLayout
    resource_id: str
    resource: ResourceId
    console: Console
    stop: StopSignal
    agent_env: Mapping[str, str]
    buffer_limit: int


def perform_interrupt(interrupt: Interrupt, ctx: InterruptContext) -> list[StepReport]:
    """Run the interrupt's commands in the host chroot, each once per SKYHOOK_RESOURCE_ID.

    A command's ``<type>_<i>.complete`` flag is written *before* it runs (a reboot never
    returns) and removed again when it fails, so a rerun resumes at the failed command.
    The interrupt failed if any report is FAILED.
    """
    flags_dir = ctx.layout.interrupt_flags_dir(ctx.resource_id)
    flags_dir.mkdir(parents=True, exist_ok=True)
    if interrupt.writes_noop_flag:
        write_atomic(flags_dir / "no_op.complete", str(time.time()))
    if not interrupt.commands:
        ctx.console.note(f"{interrupt.type}: no commands to run")
    reports: list[StepReport] = []
    total = len(interrupt.commands)
    for index, command in enumerate(interrupt.commands):
        label = " ".join(command)
        flag = flags_dir / f"{interrupt.type}_{index}.complete"
        if flag.exists():
            report = StepReport(
                "interrupt", index + 1, total, label, Outcome.SKIPPED, detail=f"{flag} exists"
            )
        elif ctx.stop.requested:
            report = StepReport(
                "interrupt",
                index + 1,
                total,
                label,
                Outcome.FAILED,
                detail="SIGTERM received; stopped before this command",
            )
        else:
            write_atomic(flag, str(time.time()))
            ctx.console.step_started("interrupt", index + 1, total, label)
            report = _run_command(interrupt, index, command, flag, ctx)
        ctx.console.step_finished(report)
        reports.append(report)
        if report.outcome is Outcome.FAILED:
            break
    return reports


def _run_command(
    interrupt: Interrupt, index: int, command: tuple[str, ...], flag: Path, ctx: InterruptContext
) -> StepReport:
    total, label = len(interrupt.commands), " ".join(command)
    started = time.monotonic()
    returncode = _run_logged(interrupt, index, command, ctx)
    seconds = time.monotonic() - started
    if returncode == 0:
        return StepReport("interrupt", index + 1, total, label, Outcome.OK, 0, seconds)
    if interrupt.type == "node_restart" and returncode == REBOOT_SIGTERM:
        detail = "terminated by the reboot it started; flag kept so the rerun after boot succeeds"
    else:
        flag.unlink(missing_ok=True)
        detail = "flag removed; a rerun retries this command"
    return StepReport(
        "interrupt", index + 1, total, label, Outcome.FAILED, returncode, seconds, detail
    )


def _run_logged(
    interrupt: Interrupt, index: int, command: tuple[str, ...], ctx: InterruptContext
) -> int:
    layout = ctx.layout
    log_dir = layout.package_log_dir(ctx.resource.package, ctx.resource.version)
    log_path = new_log_path(log_dir / "interrupts", f"{interrupt.type}_{index}", datetime.now(UTC))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # Upstream needs copy_dir on the host as the cwd; after a node's state was wiped it may
    # not exist, and "/" serves a reboot or a service restart just as well.
    cwd = layout.copy_dir if layout.package_dir.is_dir() else "/"
    spec = ProcessSpec(command, dict(ctx.agent_env), cwd, layout.root_mount)
    with open(log_path, "w") as log_out, open(f"{log_path}.err", "w") as log_err:
        log_out.write(" ".join(command) + "\n")
        sink = OutputSink(ctx.console.out, ctx.console.err, log_out, log_err)
        return run_process(spec, sink, ctx.buffer_limit)
