"""The step runner: for each step of a mode, decide (flags) -> run (chroot) -> record.

Action modes stop at the first failure; check modes run every check and then record
``check_results`` (and ``<mode>_ALL_CHECKED`` when all passed), as upstream does.
"""

import os
import stat
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime

from skyhook_agent import history
from skyhook_agent.chroot import ProcessSpec, run_process
from skyhook_agent.console import Console, Outcome, StepReport
from skyhook_agent.flags import FlagStore
from skyhook_agent.layout import HostLayout
from skyhook_agent.logs import OutputSink, new_log_path, reap_logs
from skyhook_agent.settings import AgentSettings
from skyhook_agent.signals import StopSignal
from skyhook_schemas.package_config import CHECK_MODES, PackageConfig, Step

ENV_PREFIX = "env:"
UPGRADE_MODES = ("upgrade", "upgrade-check")
FLAG_SKIPPING_MODES = ("apply", "post-interrupt")
"""Only these modes skip a flagged auto-idempotent step; config/upgrade/uninstall always rerun."""


def expand_arguments(
    arguments: Sequence[str], env: Mapping[str, str]
) -> tuple[list[str], list[tuple[int, str]]]:
    """Replace each ``env:NAME`` argument by the agent's env value; report (index, NAME) missing."""
    expanded, missing = [], []
    for index, argument in enumerate(arguments):
        if argument.startswith(ENV_PREFIX):
            name = argument[len(ENV_PREFIX) :]
            if name in env:
                expanded.append(env[name])
            else:
                missing.append((index, name))
        else:
            expanded.append(argument)
    return expanded, missing


def should_run(step: Step, mode: str, flag_exists: bool, always_run: bool) -> tuple[bool, str]:
    """Whether an action step runs, and why (empty reason when there is no flag to explain)."""
    if not flag_exists:
        return True, ""
    if always_run:
        return True, "flag exists but OVERLAY_ALWAYS_RUN_STEP=true, running anyway"
    if mode not in FLAG_SKIPPING_MODES:
        return True, f"flag exists but {mode} steps always rerun"
    if step.idempotence:
        return True, "flag exists but the step handles its own idempotence, running"
    return False, "already completed for this package version (flag exists)"


@dataclass(frozen=True)
class RunContext:
    layout: HostLayout
    config: PackageConfig
    settings: AgentSettings
    agent_env: Mapping[str, str]
    console: Console
    stop: StopSignal


class StepRunner:
    def __init__(self, context: RunContext) -> None:
        self._ctx = context
        self._flags = FlagStore(context.layout, context.config)

    def run_mode(self, mode: str) -> list[StepReport]:
        """Run a mode's steps; the stage failed if any report is FAILED."""
        steps = self._ctx.config.modes.get(mode, ())
        if not steps:
            self._ctx.console.warning(f"there are no {mode} steps defined; nothing to do")
            return []
        if mode in CHECK_MODES:
            return self._run_checks(mode, steps)
        return self._run_actions(mode, steps)

    def _run_actions(self, mode: str, steps: Sequence[Step]) -> list[StepReport]:
        reports: list[StepReport] = []
        for index, step in enumerate(steps):
            if self._stopped(mode, index, len(steps), step, reports):
                break
            run, reason = should_run(
                step, mode, self._flags.step_done(step), self._ctx.settings.always_run_step
            )
            if not run:
                report = StepReport(
                    mode, index + 1, len(steps), step.path, Outcome.SKIPPED, detail=reason
                )
                self._ctx.console.step_finished(report)
                reports.append(report)
                continue
            if reason:
                self._ctx.console.note(f"{step.path}: {reason}")
            report = self._execute(mode, index, len(steps), step)
            reports.append(report)
            if report.outcome is Outcome.FAILED:
                break
            self._flags.record_step(step, datetime.now())
        return reports

    def _run_checks(self, mode: str, steps: Sequence[Step]) -> list[StepReport]:
        reports: list[StepReport] = []
        for index, step in enumerate(steps):
            if self._stopped(mode, index, len(steps), step, reports):
                return reports
            reports.append(self._execute(mode, index, len(steps), step))
        results = [(s, r.outcome is Outcome.OK) for s, r in zip(steps, reports, strict=True)]
        self._flags.record_checks(mode, results)
        return reports

    def _stopped(
        self, mode: str, index: int, total: int, step: Step, reports: list[StepReport]
    ) -> bool:
        if not self._ctx.stop.requested:
            return False
        report = StepReport(
            mode,
            index + 1,
            total,
            step.path,
            Outcome.FAILED,
            detail="SIGTERM received; stopped before this step",
        )
        self._ctx.console.step_finished(report)
        reports.append(report)
        return True

    def _execute(self, mode: str, index: int, total: int, step: Step) -> StepReport:
        ctx, layout = self._ctx, self._ctx.layout
        extra_env, extra_args = self._version_inputs(mode, step)
        arguments, missing = expand_arguments(step.arguments, ctx.agent_env)
        label = " ".join([step.path, *arguments, *extra_args])
        ctx.console.step_started(mode, index + 1, total, label)
        if missing:
            for arg_index, name in missing:
                ctx.console.problems(
                    [
                        f"modes.{mode}[{index}].arguments[{arg_index}]: environment variable "
                        f"{name} is not set (from 'env:{name}')"
                    ]
                )
            report = StepReport(
                mode,
                index + 1,
                total,
                label,
                Outcome.FAILED,
                detail="missing environment variables; step not run",
            )
            ctx.console.step_finished(report)
            return report

        if step.on_host:
            argv0, cwd, chroot = layout.host_step_path(step), layout.copy_dir, layout.root_mount
            step_root, skyhook_dir = layout.host_step_root, layout.copy_dir
        else:
            argv0 = str(layout.package_dir / "skyhook_dir" / step.path)
            cwd, chroot = str(layout.package_dir), None
            step_root, skyhook_dir = str(layout.package_dir / "skyhook_dir"), cwd
            extra_env["SKYHOOK_ROOT_MOUNT"] = str(layout.root_mount)
        _make_executable(layout.package_dir / "skyhook_dir" / step.path)
        env = {
            **ctx.agent_env,
            **step.env,
            **extra_env,
            "STEP_ROOT": step_root,
            "SKYHOOK_DIR": skyhook_dir,
        }
        spec = ProcessSpec((argv0, *arguments, *extra_args), env, cwd, chroot)

        started = time.monotonic()
        returncode = self._run_logged(spec, step)
        seconds = time.monotonic() - started
        ok = returncode in step.returncodes
        detail = "" if ok else f"accepted: {', '.join(map(str, step.returncodes))}"
        report = StepReport(
            mode,
            index + 1,
            total,
            label,
            Outcome.OK if ok else Outcome.FAILED,
            returncode,
            seconds,
            detail,
        )
        ctx.console.step_finished(report)
        return report

    def _run_logged(self, spec: ProcessSpec, step: Step) -> int:
        ctx = self._ctx
        console = ctx.console
        if not ctx.settings.write_logs:
            sink = OutputSink(console.out, console.err)
            return run_process(spec, sink, ctx.settings.buffer_limit)
        log_dir = ctx.layout.package_log_dir(ctx.config.package_name, ctx.config.package_version)
        log_path = new_log_path(log_dir, step.path, datetime.now(UTC))
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with ExitStack() as files:
            log_out = files.enter_context(open(log_path, "w"))
            log_err = files.enter_context(open(f"{log_path}.err", "w"))
            sink = OutputSink(console.out, console.err, log_out, log_err)
            returncode = run_process(spec, sink, ctx.settings.buffer_limit)
        reap_logs(log_dir, step.path)
        return returncode

    def _version_inputs(self, mode: str, step: Step) -> tuple[dict[str, str], list[str]]:
        """Upgrade modes: PREVIOUS/CURRENT_VERSION env, and as argv for upgrade_step steps."""
        if mode not in UPGRADE_MODES:
            return {}, []
        read = history.read_history(self._ctx.layout.history_file(self._ctx.config.package_name))
        if read.note:
            self._ctx.console.warning(read.note)
        current = self._ctx.config.package_version
        env = {"PREVIOUS_VERSION": read.previous_version, "CURRENT_VERSION": current}
        args = [read.previous_version, current] if step.upgrade_step else []
        return env, args


def _make_executable(path: os.PathLike[str]) -> None:
    # Upstream adds u+x,g+x,o+x to every step before running it; packages rely on that when
    # their scripts lost the exec bit on the way (e.g. a configmap or a zip).
    try:
        mode = os.stat(path).st_mode
        os.chmod(path, mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    except OSError:
        pass  # run_process reports why the step cannot start
