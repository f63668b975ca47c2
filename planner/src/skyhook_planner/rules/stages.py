"""The per-node, per-package stage machine.

A fresh package runs apply -> config [-> interrupt -> post-interrupt]; a newer spec version runs
upgrade -> config [-> ...]; an older spec version installs from scratch (apply), beside the
entry of the newer version, which stays as the record that its files may remain on the host. A
package removed from the spec is left as it is: nothing is uninstalled unless asked. A
configMap edit sends packages back to config, and the changed keys decide whether an interrupt
follows.

A package asked to be uninstalled (`uninstall.enabled` and `uninstall.apply`) finishes the
install stage it is in, then runs uninstall [-> uninstall-interrupt, when it has an interrupt];
once the cycle is over its entry is dropped: no entry means uninstalled. Cancelling (apply back
to false) sends an unfinished uninstall back to apply; an uninstall-interrupt always completes.
Every answer derives from the node's entries alone, so it is the same after an operator restart.
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
    UNINSTALL_CYCLE,
    UNINSTALL_INTERRUPT,
    UPGRADE,
    PackageEntry,
)
from skyhook_schemas.versions import VersionChange, VersionError, version_change

# How far along the cycle a stage is; upgrade stands where apply does.
_RANK = {
    UNINSTALL: 0,
    UNINSTALL_INTERRUPT: 0,
    APPLY: 1,
    UPGRADE: 1,
    CONFIG: 2,
    INTERRUPT: 3,
    POST_INTERRUPT: 4,
}
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
        or (stage == UNINSTALL and previous not in UNINSTALL_CYCLE)  # an uninstall request
        or (previous == UNINSTALL and stage == UNINSTALL_INTERRUPT)
        or (previous in UNINSTALL_CYCLE and stage == APPLY)  # cancelled, or reinstalled
    )


def records_done(entry: PackageEntry | None, stage: str) -> bool:
    """Does `entry` still record `stage` of its package version as done: completed, or a later
    stage of the same install reached? A stage pod that succeeded stays for its logs while it
    does; once it does not (a rerun, a configMap edit, an uninstall, the entry gone) the pod is
    stale."""
    if entry is None or entry.stage in UNINSTALL_CYCLE or stage in UNINSTALL_CYCLE:
        return False
    if entry.stage == stage:
        return entry.state == COMPLETE
    return _RANK[entry.stage] > _RANK[stage]


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
        and entry.stage not in UNINSTALL_CYCLE
        and _RANK[entry.stage] >= _RANK[terminal_stage(package, config_updates)]
    )


def uninstall_over(entry: PackageEntry, package: Package | None) -> bool:
    """Is `entry`'s uninstall cycle finished, so that the entry goes (absent = uninstalled)?
    `package`: the spec's package of that name, if any. An uninstall-interrupt that no spec
    interrupt can carry out any more (the package or its interrupt left the spec) is over too:
    nothing would ever run it."""
    if entry.stage not in UNINSTALL_CYCLE:
        return False
    if entry.state == SKIPPED:  # an older operator's marker for an apply still to come
        return package is None or package.uninstalling
    follows = package is not None and package.key == entry.key and package.interrupt is not None
    if entry.stage == UNINSTALL_INTERRUPT:
        return entry.state == COMPLETE or not follows
    # An uninstall recorded complete (by an operator that kept such markers) is over unless
    # its package's interrupt is still to run; cancelled, the package then reinstalls.
    return entry.state == COMPLETE and not (
        follows and package is not None and package.uninstalling
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

    due: Mapping[str, str]  # spec package name -> the stage it runs next
    renames: Mapping[str, str]  # old entry key -> spec key (same version, other spelling)

    @property
    def complete(self) -> bool:
        return not (self.due or self.renames)


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
    if entry is not None and entry.stage in UNINSTALL_CYCLE:
        return _uninstall_next(package, entry)
    if package.uninstalling:
        if entry is None:
            return None  # uninstalled (or never installed): nothing to do
        if entry.state == COMPLETE:
            return UNINSTALL
        return entry.stage  # the install stage under way finishes first
    if reselected and entry is not None and entry.state == COMPLETE:
        return UPGRADE
    if entry is None:
        older = [
            e
            for e in entries.values()
            if e.name == package.name
            and _change(e.version, package.version) is VersionChange.UPGRADE
        ]
        return UPGRADE if older else APPLY  # a downgrade installs from scratch
    if entry.state == COMPLETE:
        if is_complete(package, entries, config_updates):
            return None
        nxt = _NEXT.get(entry.stage)
        return nxt
    # in_progress, erroring, skipped (interrupt) or unknown: (re)run the recorded stage
    return entry.stage


def _uninstall_next(package: Package, entry: PackageEntry) -> str | None:
    """The next stage of a package whose entry is in the uninstall cycle."""
    if uninstall_over(entry, package):
        # Dropped by tidying (passes/select.py); then absent: reinstalled unless uninstalling.
        return None if package.uninstalling else APPLY
    if entry.stage == UNINSTALL_INTERRUPT:
        return UNINSTALL_INTERRUPT  # the host is already uninstalled: the interrupt completes
    if entry.state == COMPLETE:
        return UNINSTALL_INTERRUPT
    # An uninstall not yet finished: cancelled, the package goes back to apply.
    return UNINSTALL if package.uninstalling else APPLY


def node_work(
    packages: Mapping[str, Package],
    entries: Mapping[str, PackageEntry],
    config_updates: ConfigUpdates,
    reselected: frozenset[str] = frozenset(),
) -> NodeWork:
    renames: dict[str, str] = {}
    for key, entry in sorted(entries.items()):
        package = packages.get(entry.name)
        if package is None or entry.version == package.version:
            continue  # a removed package's entry stays: its files may remain on the host
        if _change(entry.version, package.version) is VersionChange.SAME:
            renames[key] = package.key  # same version, other spelling (build metadata)
    due: dict[str, str] = {}
    for name, package in packages.items():
        stage = next_stage(package, entries, config_updates, name in reselected)
        if stage is not None:
            due[name] = stage
    return NodeWork(due, renames)
