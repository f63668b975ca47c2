"""What explicit uninstall reports on a Skyhook: the conditions saying an uninstall runs, fails,
or holds back a package that depends on an uninstalled one.

Each condition is present (True) only while it holds; the status step removes it otherwise
(`model.status.WHILE_TRUE_CONDITIONS`). They are read from the node states after the pass's own decisions, so they
follow the cycle on the nodes, not only the spec: an uninstall-interrupt that a cancel cannot
stop still counts as in progress.
"""

from __future__ import annotations

from typing import Any

from skyhook_planner.model import status as statuses
from skyhook_planner.passes.context import SkyhookContext
from skyhook_planner.passes.prepare import Rollout
from skyhook_planner.rules import stages
from skyhook_schemas import keys
from skyhook_schemas.nodestate import ERRORING, UNINSTALL_CYCLE


def conditions(ctx: SkyhookContext, rollout: Rollout) -> list[dict[str, Any]]:
    """UninstallInProgress, UninstallFailed and Blocked, each only when it holds."""
    packages = rollout.spec.packages
    states = [ctx.state(node) for node in rollout.matched]
    readable = [s for s in states if not s.error]
    cycling: set[str] = set()  # packages in their uninstall cycle on some node
    failing = False
    for state in readable:
        for name, package in packages.items():
            entry = state.packages.get(package.key)
            if entry is not None and entry.stage in UNINSTALL_CYCLE:
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
        if package.uninstalling or all(
            stages.is_complete(package, s.packages, ctx.config_updates) for s in readable
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
