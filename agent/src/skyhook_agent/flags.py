"""Flag files on the host (upstream's names and bodies): START, step flags, check results.

A step flag records that an action step succeeded for this package version, arguments and
return codes; the runner consults it to skip auto-idempotent steps on a rerun.
"""

from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path

from skyhook_agent.fsutil import write_atomic
from skyhook_agent.layout import HostLayout
from skyhook_schemas.package_config import PackageConfig, Step


def step_flag_body(step: Step, now: datetime) -> str:
    """Upstream's body: local ISO time of the run and whether the step always reruns."""
    return f"last_run: {now.isoformat()}\nstep_always_runs: {step.idempotence}"


def check_results_body(results: Sequence[tuple[Step, bool]]) -> str:
    """Lines ``<path> <True|False>`` where True means the check FAILED (upstream's meaning)."""
    return "\n".join(f"{step.path} {not passed}" for step, passed in results)


class FlagStore:
    """Reads and writes the flag files of one invocation."""

    def __init__(self, layout: HostLayout, config: PackageConfig) -> None:
        self._layout = layout
        self._config = config

    def mark_started(self) -> None:
        write_atomic(self._layout.start_flag, "")

    def step_done(self, step: Step) -> bool:
        return self._path(step).exists()

    def record_step(self, step: Step, now: datetime) -> None:
        write_atomic(self._path(step), step_flag_body(step, now))

    def record_checks(self, mode: str, results: Sequence[tuple[Step, bool]]) -> None:
        """check_results is overwritten on every check run; _ALL_CHECKED only when all passed."""
        write_atomic(self._layout.check_results, check_results_body(results))
        if all(passed for _, passed in results):
            write_atomic(self._layout.all_checked_flag(mode), "")

    def remove_step_flags(self, steps: Iterable[Step]) -> list[str]:
        """Delete the flags of these steps (uninstall); others' flags stay. Returns what went."""
        removed = []
        for step in steps:
            path = self._path(step)
            if path.exists():
                path.unlink()
                removed.append(str(path))
        return removed

    def _path(self, step: Step) -> Path:
        return self._layout.step_flag(self._config.package_name, self._config.package_version, step)
