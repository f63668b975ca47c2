"""Everything checked before the agent's first write to the host, all problems at once.

Mode, copy dir, host root access, the package config (schema, semantic rules, step files),
expected config files, root_dir against the host tree, and for interrupts the payload and
SKYHOOK_RESOURCE_ID. Bad input must never leave a half-changed host behind: no START flag,
no root_dir copy, no package copy until the whole invocation is known to be runnable.
"""

import os
from dataclasses import dataclass
from pathlib import Path

from skyhook_agent.errors import InputError
from skyhook_agent.interrupts import Interrupt, decode_interrupt
from skyhook_agent.invocation import Invocation
from skyhook_agent.layout import HostLayout
from skyhook_agent.package import load_package, missing_config_files
from skyhook_agent.settings import AgentSettings, ResourceId, parse_resource_id
from skyhook_schemas.package_config import ALL_MODES, PackageConfig

UNINSTALL_MODES = ("uninstall", "uninstall-check")
"""Modes that neither copy root_dir nor require expected config files (upstream)."""


@dataclass(frozen=True)
class StagePlan:
    mode: str
    layout: HostLayout
    config: PackageConfig
    legacy_source: Path | None
    """Package content to copy to the copy dir first (upstream's legacy mode), if any."""
    root_dir: Path | None
    """The package's root_dir to merge over the host root, or None."""


@dataclass(frozen=True)
class InterruptPlan:
    layout: HostLayout
    interrupt: Interrupt
    resource_id: str
    resource: ResourceId


def host_root_problems(root: Path) -> list[str]:
    if not root.exists():
        return [f"root_mount: {root} does not exist (is the host's / mounted there?)"]
    if not root.is_dir():
        return [f"root_mount: {root} is not a directory"]
    if not os.access(root, os.R_OK | os.W_OK | os.X_OK):
        return [f"root_mount: {root} is not readable and writable by the agent"]
    try:
        os.listdir(root)
    except OSError as exc:
        return [f"root_mount: cannot read {root}: {exc.strerror}"]
    return []


def root_dir_conflicts(root_dir: Path, host_root: Path) -> list[str]:
    """Entries of root_dir whose host counterpart has the other type (file vs directory)."""
    problems = []
    for current, dirs, files in os.walk(root_dir):
        relative = Path(current).relative_to(root_dir)
        for name in dirs:
            target = host_root / relative / name
            if target.exists() and not target.is_dir():
                problems.append(
                    f"root_dir/{relative / name}: is a directory but the host has "
                    f"a file at /{relative / name}"
                )
        for name in files:
            if (host_root / relative / name).is_dir():
                problems.append(
                    f"root_dir/{relative / name}: is a file but the host has "
                    f"a directory at /{relative / name}"
                )
    return problems


def state_dir_problems(layout: HostLayout, settings: AgentSettings) -> list[str]:
    """The agent's own host directories must be directories (or not exist yet)."""
    places = [
        ("SKYHOOK_ROOT_DIR", settings.state_dir, layout.flags_dir),
        ("SKYHOOK_LOG_DIR", settings.log_dir, layout.mounted(settings.log_dir)),
    ]
    problems = []
    for name, value, deepest in places:
        for path in (deepest, *deepest.parents):
            if path == layout.root_mount:
                break
            if path.exists() and not path.is_dir():
                host_path = "/" + str(path.relative_to(layout.root_mount))
                problems.append(f"{name}: {value}: {host_path} on the host is not a directory")
                break
    return problems


def plan_invocation(invocation: Invocation, settings: AgentSettings) -> StagePlan | InterruptPlan:
    """Validate the whole invocation; InputError with every problem found."""
    layout = HostLayout(
        invocation.root_mount, invocation.copy_dir, settings.state_dir, settings.log_dir
    )
    problems = []
    if invocation.mode not in ALL_MODES:
        problems.append(
            f"mode: {invocation.mode!r} is not a stage; expected one of: {', '.join(ALL_MODES)}"
        )
    if not invocation.copy_dir.startswith("/"):
        problems.append(f"copy_dir: {invocation.copy_dir!r} must be an absolute host path")
    problems += host_root_problems(invocation.root_mount)
    if problems:
        raise InputError(problems)
    problems += state_dir_problems(layout, settings)
    if problems:
        raise InputError(problems)
    if invocation.mode == "interrupt":
        return _plan_interrupt(invocation, settings, layout)
    return _plan_stage(invocation, settings, layout)


def _plan_interrupt(
    invocation: Invocation, settings: AgentSettings, layout: HostLayout
) -> InterruptPlan:
    problems = []
    resource = interrupt = None
    try:
        resource = parse_resource_id(settings.resource_id)
    except InputError as exc:
        problems += exc.problems
    if invocation.interrupt_b64 is None:
        problems.append("interrupt: the interrupt mode needs the base64 interrupt argument")
    else:
        try:
            interrupt = decode_interrupt(invocation.interrupt_b64)
        except InputError as exc:
            problems += exc.problems
    if problems or resource is None or interrupt is None:
        raise InputError(problems)
    return InterruptPlan(layout, interrupt, settings.resource_id, resource)


def _plan_stage(invocation: Invocation, settings: AgentSettings, layout: HostLayout) -> StagePlan:
    legacy_source = None
    source = layout.package_dir
    if not source.is_dir():
        legacy = Path(settings.data_dir)
        if not legacy.is_dir():
            raise InputError(
                [
                    f"copy_dir: {source} does not exist and SKYHOOK_DATA_DIR {legacy} holds no "
                    "package to copy there"
                ]
            )
        legacy_source = source = legacy
    config = load_package(source)
    problems = []
    root_dir = None
    if invocation.mode not in UNINSTALL_MODES:
        problems += missing_config_files(config, source)
        if (source / "root_dir").is_dir():
            root_dir = layout.package_dir / "root_dir"
            problems += root_dir_conflicts(source / "root_dir", layout.root_mount)
    if problems:
        raise InputError(problems)
    return StagePlan(invocation.mode, layout, config, legacy_source, root_dir)
