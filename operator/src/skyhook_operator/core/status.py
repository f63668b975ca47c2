"""Statuses, computed purely: a node's status for one Skyhook, the Skyhook's overall status,
its status block and the merge patch that gets it there.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from skyhook_operator.core.vocabulary import (
    BLOCKED,
    COMPLETE,
    DISABLED,
    ERRORING,
    IN_PROGRESS,
    PAUSED,
    UNKNOWN,
    WAITING,
)
from skyhook_schemas import keys

CONDITION_SPEC_INVALID = f"{keys.GROUP}/SpecInvalid"
CONDITION_POLICY_NOT_FOUND = f"{keys.GROUP}/DeploymentPolicyNotFound"
CONDITION_SPEC_WARNING = f"{keys.GROUP}/SpecWarning"
CONDITION_POLICY_INVALID = f"{keys.GROUP}/DeploymentPolicyInvalid"
# Ours: a package's image compatibility artifact could not be fetched or is malformed.
CONDITION_IMAGE_COMPATIBILITY = f"{keys.GROUP}/ImageCompatibilityUnavailable"
# Ours: nodes skipped because no candidate image of an artifact matches them.
CONDITION_NO_COMPATIBLE_IMAGE = f"{keys.GROUP}/NoCompatibleImage"
# Removed as soon as the Skyhook runs again.
POLICY_BLOCKED_CONDITIONS = (
    CONDITION_POLICY_NOT_FOUND,
    CONDITION_POLICY_INVALID,
    CONDITION_IMAGE_COMPATIBILITY,
)


def node_status(
    *,
    complete: bool,
    blocked: bool,
    erroring: bool,
    in_progress: bool,
    paused: bool,
    disabled: bool,
) -> str:
    """One node's status for one Skyhook. A finished node is `complete` whatever the Skyhook's
    mode; otherwise disable and pause win, then problems, then progress."""
    if complete:
        return COMPLETE
    if disabled:
        return DISABLED
    if paused:
        return PAUSED
    if blocked:
        return BLOCKED
    if erroring:
        return ERRORING
    return IN_PROGRESS if in_progress else WAITING


def skyhook_status(node_statuses: Mapping[str, str], *, paused: bool, disabled: bool) -> str:
    """All complete (or no nodes) -> complete; else the most pressing node status, in the order
    in_progress, erroring, waiting, blocked; then disable/pause override an incomplete result."""
    values = set(node_statuses.values())
    if values <= {COMPLETE}:
        return COMPLETE
    if disabled:
        return DISABLED
    if paused:
        return PAUSED
    for status in (IN_PROGRESS, ERRORING, WAITING, BLOCKED, PAUSED, DISABLED):
        if status in values:
            return status
    return UNKNOWN


def condition(
    type_: str, status: bool, reason: str, message: str, now: datetime, *, generation: int = 0
) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "observedGeneration": generation,
    }


def merge_conditions(
    current: list[Mapping[str, Any]], wanted: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Upsert by type; a condition whose status, reason and message are unchanged keeps its
    lastTransitionTime, so an unchanged list produces no patch."""
    result = [dict(c) for c in current]
    index = {c.get("type"): i for i, c in enumerate(result)}
    for cond in wanted:
        at = index.get(cond["type"])
        if at is None:
            index[cond["type"]] = len(result)
            result.append(cond)
            continue
        old = result[at]
        if any(
            old.get(k) != cond[k] for k in ("status", "reason", "message", "observedGeneration")
        ):
            result[at] = cond
    return result


def merge_patch(current: Any, desired: Any) -> Any:
    """The RFC 7386 merge patch taking `current` to `desired` (dicts recurse, None removes);
    returns {} when they are equal. Shared sub-objects are skipped without a deep compare."""
    if not isinstance(current, dict) or not isinstance(desired, dict):
        return desired
    patch: dict[str, Any] = {}
    for key, value in desired.items():
        if key not in current:
            patch[key] = value
            continue
        old = current[key]
        if old is value:
            continue
        if isinstance(value, dict) and isinstance(old, dict):
            sub = merge_patch(old, value)
            if sub:
                patch[key] = sub
        elif old != value:
            patch[key] = value
    for key in current:
        if key not in desired:
            patch[key] = None
    return patch


def counts(node_statuses: Mapping[str, str]) -> tuple[int, int]:
    """(complete nodes, nodes in progress) where in progress includes erroring, as upstream."""
    values = list(node_statuses.values())
    return values.count(COMPLETE), values.count(IN_PROGRESS) + values.count(ERRORING)


def package_list(packages: Mapping[str, Any]) -> str:
    return ",".join(sorted(f"{p.name}:{p.version}" for p in packages.values()))
