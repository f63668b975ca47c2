"""One agent invocation end to end: banner -> preflight -> host changes -> steps -> records.

Exit codes: 0 success (or nothing to do), 1 a step, check or interrupt failed (or SIGTERM
stopped the stage), 2 bad input (nothing on the host was changed).
"""

import shutil
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from skyhook_agent import __version__, history
from skyhook_agent.console import Console, Outcome, StepReport
from skyhook_agent.errors import InputError
from skyhook_agent.flags import FlagStore
from skyhook_agent.interrupts import InterruptContext, perform_interrupt
from skyhook_agent.invocation import Invocation
from skyhook_agent.preflight import InterruptPlan, StagePlan, plan_invocation
from skyhook_agent.runner import RunContext, StepRunner
from skyhook_agent.settings import AgentSettings
from skyhook_agent.signals import StopSignal

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
RECORDING_CHECKS = {
    "apply-check": None,
    "upgrade-check": None,
    "uninstall-check": history.UNINSTALLED,
}
"""Check modes whose success is recorded in history (value: version recorded instead)."""
RESOLV_CONF = Path("/etc/resolv.conf")


def execute(
    invocation: Invocation,
    settings: AgentSettings,
    agent_env: Mapping[str, str],
    console: Console,
    stop: StopSignal,
) -> int:
    started = time.monotonic()
    console.banner(
        f"skyhook-agent {__version__}: {invocation.mode}",
        [
            ("root_mount", str(invocation.root_mount)),
            ("copy_dir", invocation.copy_dir),
            ("state", settings.state_dir),
            ("logs", settings.log_dir if settings.write_logs else "off"),
            ("resource_id", settings.resource_id or "-"),
        ],
    )
    try:
        plan = plan_invocation(invocation, settings)
    except InputError as exc:
        console.problems(exc.problems)
        console.problems(["nothing was changed on the host"])
        return EXIT_BAD_INPUT
    try:
        if isinstance(plan, InterruptPlan):
            reports = _run_interrupt(plan, settings, agent_env, console, stop)
            ok = all(report.outcome is not Outcome.FAILED for report in reports)
            console.summary("interrupt", reports, time.monotonic() - started, ok)
            return EXIT_OK if ok else EXIT_FAILED
        context = RunContext(plan.layout, plan.config, settings, agent_env, console, stop)
        return _run_stage(plan, context, started)
    except OSError as exc:
        # The host changed under us (disk full, read-only remount, a path replaced): say what
        # failed in one line; a rerun resumes from the flags already written.
        console.problems([f"host write failed: {exc}"])
        return EXIT_FAILED


def _run_interrupt(
    plan: InterruptPlan,
    settings: AgentSettings,
    agent_env: Mapping[str, str],
    console: Console,
    stop: StopSignal,
) -> list[StepReport]:
    console.note(f"interrupt {plan.interrupt.type} for {plan.resource_id}")
    context = InterruptContext(
        plan.layout,
        plan.resource_id,
        plan.resource,
        console,
        stop,
        agent_env,
        settings.buffer_limit,
    )
    return perform_interrupt(plan.interrupt, context)


def _run_stage(plan: StagePlan, context: RunContext, started: float) -> int:
    config, layout, console = plan.config, plan.layout, context.console
    console.note(
        f"package {config.package_name} {config.package_version}: "
        f"{len(config.modes.get(plan.mode, ()))} {plan.mode} step(s)"
    )
    # config.warnings (a step without a matching *_check) are for package authors; they see
    # them from `skyhook-agent validate`, and repeating them in every stage pod's log is noise.
    if context.settings.copy_resolv:
        _copy_resolv(layout.root_mount, console)
    if plan.legacy_source is not None:
        console.note(f"copying {plan.legacy_source} to {layout.package_dir} (legacy mode)")
        shutil.copytree(plan.legacy_source, layout.package_dir, dirs_exist_ok=True)
    if plan.root_dir is not None:
        shutil.copytree(plan.root_dir, layout.root_mount, dirs_exist_ok=True)
    flags = FlagStore(layout, config)
    flags.mark_started()

    runner = StepRunner(context)
    reports = runner.run_mode(plan.mode)
    ok = all(report.outcome is not Outcome.FAILED for report in reports)
    if ok and plan.mode in RECORDING_CHECKS:
        version = RECORDING_CHECKS[plan.mode] or config.package_version
        note = history.record_version(
            layout.history_file(config.package_name), version, datetime.now(UTC)
        )
        if note:
            console.warning(note)
        if plan.mode == "uninstall-check":
            every_step = [step for steps in config.modes.values() for step in steps]
            for removed in flags.remove_step_flags(every_step):
                console.note(f"removed flag {removed}")
    console.summary(plan.mode, reports, time.monotonic() - started, ok)
    return EXIT_OK if ok else EXIT_FAILED


def _copy_resolv(root_mount: Path, console: Console) -> None:
    target = root_mount / "etc" / "resolv.conf"
    if target.is_symlink():
        # An absolute link would resolve in the agent's filesystem, not the host's.
        console.note(f"COPY_RESOLV: {target} is a symlink (host resolver); left alone")
    elif RESOLV_CONF.is_file() and target.parent.is_dir():
        shutil.copyfile(RESOLV_CONF, target)
    else:
        console.note(f"COPY_RESOLV: {RESOLV_CONF} or {target.parent} missing; not copied")
