"""The per-node, per-package stage machine.

A fresh package runs apply -> config [-> interrupt -> post-interrupt]; a newer spec version runs
upgrade -> config [-> ...]; an older spec version first uninstalls the installed version, then
applies; a package removed from the spec is uninstalled. A configMap edit sends packages back to
config, and the changed keys decide whether an interrupt follows. Every answer derives from the
node's entries alone, so it is the same after an operator restart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from skyhook_planner.model.spec import Package
from skyhook_planner.rules.interrupts import has_interrupt
from skyhook_schemas.nodestate import (
    APPLY,
    COMPLETE,
    CONFIG,
    INTERRUPT,
    POST_INTERRUPT,
    SKIPPED,
    UNINSTALL,
    UPGRADE,
    PackageEntry,
)
from skyhook_schemas.versions import VersionChange, VersionError, version_change

# How far along the cycle a stage is; upgrade stands where apply does.
_RANK = {UNINSTALL: 0, APPLY: 1, UPGRADE: 1, CONFIG: 2, INTERRUPT: 3, POST_INTERRUPT: 4}
# The stage after a completed one, when the package has an interrupt to run.
_NEXT = {
    UNINSTALL: APPLY,
    APPLY: CONFIG,
    UPGRADE: CONFIG,
    CONFIG: INTERRUPT,
    INTERRUPT: POST_INTERRUPT,
}
ConfigUpdates = Mapping[str, Sequence[str]]


def legal_successor(previous: str | None, stage: str) -> bool:
    """May `stage` run right after `previous` (None = nothing ran yet) for one package version?
    Used by the invariant tests; a rerun of the same stage is always legal."""
    if previous is None:
        return stage in {APPLY, UPGRADE, UNINSTALL}
    return (
        stage == previous
        or _NEXT.get(previous) == stage
        or (
            stage == CONFIG and previous in {INTERRUPT, POST_INTERRUPT}  # a config edit
        )
    )


def terminal_stage(package: Package, config_updates: ConfigUpdates) -> str:
    return (
        POST_INTERRUPT if has_interrupt(package, config_updates.get(package.name, ())) else CONFIG
    )


def is_complete(
    package: Package, entries: Mapping[str, PackageEntry], config_updates: ConfigUpdates
) -> bool:
    entry = entries.get(package.key)
    return (
        entry is not None
        and entry.state == COMPLETE
        and entry.stage != UNINSTALL
        and _RANK[entry.stage] >= _RANK[terminal_stage(package, config_updates)]
    )


def _change(installed: str, wanted: str) -> VersionChange:
    try:
        return version_change(installed, wanted)
    except VersionError:
        # An entry no version reader accepts (written by hand): treat it as older, so the
        # spec's version upgrades it.
        return VersionChange.UPGRADE


@dataclass(frozen=True)
class NodeWork:
    """What is left to do for one Skyhook on one node."""

    uninstalls: tuple[PackageEntry, ...]  # installed versions to uninstall first
    due: Mapping[str, str]  # spec package name -> the stage it runs next
    renames: Mapping[str, str]  # old entry key -> spec key (same version, other spelling)

    @property
    def complete(self) -> bool:
        return not (self.uninstalls or self.due or self.renames)


def next_stage(
    package: Package,
    entries: Mapping[str, PackageEntry],
    config_updates: ConfigUpdates,
    reselected: bool = False,
) -> str | None:
    """The stage `package` runs next on this node, or None when it has nothing to do (complete,
    or waiting on something else: a skipped interrupt, an uninstall in flight). `reselected`:
    the node's image compatibility artifact now chooses another image, which upgrades the
    complete package as a new version would."""
    entry = entries.get(package.key)
    if reselected and entry is not None and entry.state == COMPLETE and entry.stage != UNINSTALL:
        return UPGRADE
    if entry is None:
        others = [e for e in entries.values() if e.name == package.name]
        if any(_change(e.version, package.version) is VersionChange.DOWNGRADE for e in others):
            return None  # the newer installed version is uninstalled first
        return UPGRADE if others else APPLY
    if entry.state == COMPLETE:
        if entry.stage == UNINSTALL:
            return APPLY
        if is_complete(package, entries, config_updates):
            return None
        nxt = _NEXT.get(entry.stage)
        return nxt
    if entry.state == SKIPPED and entry.stage == UNINSTALL:
        # upstream's marker for "apply once the old version is uninstalled"
        pending = [e for e in entries.values() if e.name == package.name and e.key != package.key]
        return None if pending else APPLY
    # in_progress, erroring, skipped (interrupt) or unknown: (re)run the recorded stage
    return entry.stage


def node_work(
    packages: Mapping[str, Package],
    entries: Mapping[str, PackageEntry],
    config_updates: ConfigUpdates,
    reselected: frozenset[str] = frozenset(),
) -> NodeWork:
    uninstalls: list[PackageEntry] = []
    renames: dict[str, str] = {}
    for key, entry in sorted(entries.items()):
        package = packages.get(entry.name)
        if package is None:
            uninstalls.append(entry)  # removed from the spec
            continue
        if entry.version == package.version:
            continue
        change = _change(entry.version, package.version)
        if change is VersionChange.SAME:
            renames[key] = package.key  # same version, other spelling (build metadata)
        elif change is VersionChange.DOWNGRADE:
            uninstalls.append(entry)
    due: dict[str, str] = {}
    for name, package in packages.items():
        stage = next_stage(package, entries, config_updates, name in reselected)
        if stage is not None:
            due[name] = stage
    return NodeWork(tuple(uninstalls), due, renames)
