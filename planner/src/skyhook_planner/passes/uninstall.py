"""Explicit uninstall beyond the stage machine: the conditions saying an uninstall runs, fails,
or holds back a package that depends on an uninstalled one (`report`), and a deleted Skyhook's
uninstall of its `uninstall.enabled` packages before cleanup (`deletion_pending`,
`for_deletion`), held with a DeletionBlocked condition while paused, disabled or unreadable.

Each condition is present (True) only while it holds; the status step removes it otherwise
(`model.status.WHILE_TRUE_CONDITIONS`). They are read from the node states after the pass's own decisions, so they
follow the cycle on the nodes, not only the spec: an uninstall-interrupt that a cancel cannot
stop still counts as in progress.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from skyhook_planner.model import nodestate
from skyhook_planner.model import status as statuses
from skyhook_planner.model.snapshot import SkyhookView
from skyhook_planner.model.spec import Uninstall
from skyhook_planner.passes.context import PassIndex, SkyhookContext
from skyhook_planner.passes.prepare import Rollout
from skyhook_planner.passes.work import SkyhookWork, Step
from skyhook_planner.rules import stages
from skyhook_schemas import keys
from skyhook_schemas.nodestate import ERRORING


def deletion_pending(index: PassIndex, scr: SkyhookView) -> bool:
    """Must a deleted Skyhook uninstall first? Yes while a selected node still holds an
    `uninstall.enabled` package at its spec version, or a node's state cannot be read (what it
    holds is unknown: deletion waits rather than guess)."""
    spec = scr.spec
    if spec is None:
        return False
    enabled = [p for p in spec.packages.values() if p.uninstall.enabled]
    if not enabled:
        return False
    for node in index.snap.nodes:
        if not spec.node_selector.matches(node.labels):
            continue
        state = nodestate.read(node, scr.name)
        if state.error or any(p.key in state.packages for p in enabled):
            return True
    return False


def for_deletion(rollout: Rollout) -> Rollout:
    """A deleted Skyhook's rollout: every `uninstall.enabled` package uninstalled as if asked,
    the others left as they are (nothing new is installed)."""
    packages = {
        name: replace(package, uninstall=Uninstall(enabled=True, apply=True))
        for name, package in rollout.spec.packages.items()
        if package.uninstall.enabled
    }
    return replace(rollout, spec=replace(rollout.spec, packages=packages))


def report(
    ctx: SkyhookContext, work: SkyhookWork, rollout: Rollout, *, cycling: bool = True
) -> Step:
    """The uninstall conditions, and a Warning Event when deletion becomes blocked. `cycling`:
    does some node's state have an entry in its uninstall cycle (passes/tally.py)? Without one,
    and with no package asked to uninstall, no condition holds."""
    decided = Step()
    if cycling or any(p.uninstalling for p in rollout.spec.packages.values()):
        decided.changes.conditions += conditions(ctx, work, rollout)
    if ctx.scr.deleting:
        blocked = _deletion_blocked(ctx, work, rollout)
        if blocked is not None:
            reason, message, event = blocked
            decided.changes.conditions.append(
                statuses.condition(
                    keys.CONDITION_DELETION_BLOCKED,
                    True,
                    reason,
                    message,
                    ctx.now,
                    generation=ctx.scr.generation,
                )
            )
            previous = ctx.scr.status.condition(keys.CONDITION_DELETION_BLOCKED)
            if previous is None or previous.get("reason") != reason:
                decided.event(
                    keys.KIND,
                    ctx.name,
                    "DeletionBlocked",
                    event,
                    type="Warning",
                    action="BlockDelete",
                )
    return decided


def _deletion_blocked(
    ctx: SkyhookContext, work: SkyhookWork, rollout: Rollout
) -> tuple[str, str, str] | None:
    """(reason, condition message, event message) while a deletion cannot go on by itself."""
    states = [work.state(node) for node in rollout.matched]
    if any(s.error for s in states):
        return (
            "MalformedNodeState",
            "Cannot safely delete Skyhook: malformed nodeState on one or more nodes. Repair "
            "the nodeState annotation before deletion.",
            f"Cannot delete Skyhook {ctx.name}: malformed nodeState. Repair and retry.",
        )
    if rollout.paused:
        return (
            "PausedWithPendingUninstall",
            "Skyhook is paused with uninstall-enabled packages still tracked in nodeState. "
            "Unpause to let uninstall complete before deletion.",
            f"Cannot delete Skyhook {ctx.name}: paused with uninstall work pending. "
            "Unpause to proceed.",
        )
    if rollout.disabled:
        return (
            "DisabledWithPendingUninstall",
            "Skyhook is disabled with uninstall-enabled packages still tracked in nodeState. "
            "Re-enable the Skyhook to let uninstall complete before deletion.",
            f"Cannot delete Skyhook {ctx.name}: disabled with uninstall work pending. "
            "Re-enable to proceed.",
        )
    return None


def conditions(ctx: SkyhookContext, work: SkyhookWork, rollout: Rollout) -> list[dict[str, Any]]:
    """UninstallInProgress, UninstallFailed and Blocked, each only when it holds."""
    packages = rollout.spec.packages
    states = [work.state(node) for node in rollout.matched]
    readable = [s for s in states if not s.error]
    cycling: set[str] = set()  # packages in their uninstall cycle on some node
    failing = False
    for state in readable:
        if not state.uninstalling:
            continue
        for name, package in packages.items():
            entry = state.uninstalling.get(package.key)
            if entry is not None:
                cycling.add(name)
                failing = failing or entry.state == ERRORING
    found = []
    now, generation = ctx.now, ctx.scr.generation
    if cycling:
        found.append(
            statuses.condition(
                keys.CONDITION_UNINSTALL_IN_PROGRESS,
                True,
                "UninstallInProgress",
                "One or more packages are being uninstalled",
                now,
                generation=generation,
            )
        )
    if failing:
        found.append(
            statuses.condition(
                keys.CONDITION_UNINSTALL_FAILED,
                True,
                "UninstallPodFailing",
                "One or more uninstall pods are failing",
                now,
                generation=generation,
            )
        )
    # A dependency uninstalled everywhere: every node readable, at least one, none holds it.
    gone = {
        name
        for name, package in packages.items()
        if package.uninstalling
        and states
        and len(readable) == len(states)
        and all(package.key not in s.packages for s in states)
    }
    blocked = []
    for name, package in sorted(packages.items()):
        if not (package.depends_on.keys() & (cycling | gone)):
            continue  # no dependency of it is going: nothing to say, whatever its state
        if package.uninstalling or all(
            stages.is_complete(package, s.packages, work.config_updates) for s in readable
        ):
            continue
        for dep in sorted(package.depends_on):
            if dep in cycling:
                blocked.append(f"package {name} is blocked: dependency {dep} is being uninstalled")
            elif dep in gone:
                blocked.append(f"package {name} is blocked: dependency {dep} has been uninstalled")
    if blocked:
        found.append(
            statuses.condition(
                keys.CONDITION_BLOCKED,
                True,
                "DependencyUninstalled",
                "; ".join(sorted(blocked)),
                now,
                generation=generation,
            )
        )
    return found
