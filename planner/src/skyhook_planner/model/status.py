"""Statuses, computed purely: a node's status for one Skyhook, the Skyhook's overall status,
its status block and the merge patch that gets it there.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from skyhook_planner.model.times import stamp
from skyhook_schemas import keys
from skyhook_schemas.nodestate import (
    BLOCKED,
    COMPLETE,
    DISABLED,
    ERRORING,
    IN_PROGRESS,
    PAUSED,
    UNKNOWN,
    WAITING,
)

CONDITION_SPEC_INVALID = f"{keys.GROUP}/SpecInvalid"
CONDITION_POLICY_NOT_FOUND = f"{keys.GROUP}/DeploymentPolicyNotFound"
CONDITION_SPEC_WARNING = f"{keys.GROUP}/SpecWarning"
CONDITION_POLICY_INVALID = f"{keys.GROUP}/DeploymentPolicyInvalid"
# Ours: a package's image compatibility artifact could not be fetched or is malformed.
CONDITION_IMAGE_COMPATIBILITY = f"{keys.GROUP}/ImageCompatibilityUnavailable"
# Ours: nodes skipped because no candidate image of an artifact matches them.
CONDITION_NO_COMPATIBLE_IMAGE = f"{keys.GROUP}/NoCompatibleImage"
# Ours: the apiserver refused one of the operator's writes for the current spec as invalid.
CONDITION_WRITE_REFUSED = f"{keys.GROUP}/WriteRefused"
# Conditions written under a bare type as well as under our group's prefix (the prefixed types
# are the older spelling, kept for readers that know only them); Ready's copy is prefixed.
BARE_TYPES = {
    keys.CONDITION_TAINT_NOT_TOLERABLE: "TaintNotTolerable",
    keys.CONDITION_NODES_IGNORED: "NodesIgnored",
    keys.CONDITION_APPLY_PACKAGE: "ApplyPackage",
    CONDITION_POLICY_NOT_FOUND: "DeploymentPolicyNotFound",
}
PREFIXED_READY = f"{keys.GROUP}/Ready"
# Why a Skyhook cannot run at all (passes/prepare.py); removed as soon as it runs again.
UNRUNNABLE_CONDITIONS = (
    CONDITION_SPEC_INVALID,
    CONDITION_POLICY_NOT_FOUND,
    BARE_TYPES[CONDITION_POLICY_NOT_FOUND],
    CONDITION_POLICY_INVALID,
    CONDITION_IMAGE_COMPATIBILITY,
)
# Present only while they hold: a pass that does not report one removes it (explicit uninstall,
# passes/uninstall.py).
CONDITION_NODE_STATE_MALFORMED = "NodeStateMalformed"
# Ours: a DeploymentPolicy's shared budget or topology holds nodes of the Skyhook back.
CONDITION_SHARED_BUDGET_FULL = f"{keys.GROUP}/SharedBudgetFull"
CONDITION_TOPOLOGY_LIMIT = f"{keys.GROUP}/TopologyLimit"
WHILE_TRUE_CONDITIONS = (
    CONDITION_NODE_STATE_MALFORMED,
    CONDITION_SHARED_BUDGET_FULL,
    CONDITION_TOPOLOGY_LIMIT,
    keys.CONDITION_UNINSTALL_IN_PROGRESS,
    keys.CONDITION_UNINSTALL_FAILED,
    keys.CONDITION_BLOCKED,
    keys.CONDITION_DRAIN_BLOCKED,
    keys.CONDITION_DELETION_BLOCKED,
)
# The kstatus convention (Flux, kpt, cli-utils): written beside upstream's conditions so GitOps
# tools can tell a rollout in progress from a finished or a stuck one.
CONDITION_READY, CONDITION_RECONCILING, CONDITION_STALLED = "Ready", "Reconciling", "Stalled"
KSTATUS_CONDITIONS = (CONDITION_READY, CONDITION_RECONCILING, CONDITION_STALLED)
# The reason these conditions give for each overall status; Ready's are upstream's own
# (anything else, or no status yet, is Unknown).
KSTATUS_REASONS = {
    COMPLETE: "NodesConverged",
    IN_PROGRESS: "Progressing",
    BLOCKED: "Blocked",
    ERRORING: "Erroring",
    PAUSED: "Paused",
    WAITING: "Waiting",
    DISABLED: "Disabled",
}
# The order in which the Ready message counts the nodes that are not complete, and its words.
_SUMMARY_BUCKETS = (
    (IN_PROGRESS, "in progress"),
    (BLOCKED, "blocked"),
    (ERRORING, "erroring"),
    (WAITING, "waiting"),
    (PAUSED, "paused"),
    (DISABLED, "disabled"),
    (UNKNOWN, "unknown"),
)
SUMMARY_NAMES_MAX = 10  # a bucket with more nodes than this is counted, not listed


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


@dataclass(frozen=True)
class NodeStatuses:
    """A Skyhook's selected nodes' statuses, in node order (`by_node`), and the nodes with each
    status (`by_status`): what the status's counts, overall status and messages are made of. A
    pass that looked at few nodes again updates the last pass's (`updated`) instead of walking
    and sorting every node."""

    by_node: Mapping[str, str]
    by_status: Mapping[str, frozenset[str]]

    @classmethod
    def of(cls, by_node: Mapping[str, str]) -> NodeStatuses:
        found: defaultdict[str, set[str]] = defaultdict(set)
        for name, status in by_node.items():
            found[status].add(name)
        return cls(by_node, {status: frozenset(names) for status, names in found.items()})

    def updated(self, by_node: Mapping[str, str], looked_at: Iterable[str]) -> NodeStatuses:
        """These statuses as `by_node` has them, which differs from `self.by_node` at most for
        the `looked_at` nodes."""
        left: defaultdict[str, set[str]] = defaultdict(set)
        joined: defaultdict[str, set[str]] = defaultdict(set)
        for name in looked_at:
            before, now = self.by_node[name], by_node[name]
            if before != now:
                left[before].add(name)
                joined[now].add(name)
        if not joined:
            return NodeStatuses(by_node, self.by_status)
        by_status = dict(self.by_status)
        for status in left.keys() | joined.keys():
            names = (by_status.get(status, frozenset()) - left[status]) | joined[status]
            if names:
                by_status[status] = names
            else:
                del by_status[status]
        return NodeStatuses(by_node, by_status)

    def count(self, status: str) -> int:
        return len(self.by_status.get(status, ()))


def skyhook_status(node_statuses: NodeStatuses, *, paused: bool, disabled: bool) -> str:
    """All complete (or no nodes) -> complete; else the most pressing node status, in the order
    in_progress, erroring, waiting, blocked; then disable/pause override an incomplete result."""
    values = node_statuses.by_status.keys()
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


# The apiserver refuses a condition message over 32,768 characters, and with it the whole
# status write: a long list of problems is cut to whole problems plus a count of the rest.
MAX_CONDITION_MESSAGE = 32768


def summarize(problems: Sequence[str], limit: int = MAX_CONDITION_MESSAGE, sep: str = "; ") -> str:
    """`problems` joined by `sep`, cut after the last whole problem that fits in `limit`
    characters together with a note of how many were left out."""
    joined = sep.join(problems)
    if len(joined) <= limit:
        return joined
    kept: list[str] = []
    used = 0
    for problem in problems:
        rest = len(problems) - len(kept) - 1
        note = f"{sep}... and {rest} more ({len(problems)} problems in all)"
        if used + len(sep) * bool(kept) + len(problem) + len(note) > limit:
            break
        used += len(sep) * bool(kept) + len(problem)
        kept.append(problem)
    left_out = len(problems) - len(kept)
    note = f"... and {left_out} more ({len(problems)} problems in all)"
    return sep.join([*kept, note])[:limit]


def condition(
    type_: str, status: bool, reason: str, message: str, now: datetime, *, generation: int = 0
) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": stamp(now),
        "observedGeneration": generation,
    }


def kstatus_conditions(
    overall: str,
    now: datetime,
    *,
    generation: int,
    message: str = "",
    node_statuses: NodeStatuses | None = None,
) -> list[dict[str, Any]]:
    """Ready, Reconciling and Stalled for a Skyhook whose overall status is `overall`.

    complete: Ready. Still rolling (in_progress, waiting, unknown): Reconciling. Erroring nodes
    or a Skyhook that cannot run (blocked: invalid spec, missing policy, untolerated taints):
    Stalled, so a health check fails instead of waiting forever. Paused or disabled: none of
    them True, since the operator holds the rollout on purpose. `message` explains a Stalled;
    `node_statuses` (the selected nodes' statuses) make Ready's message, see `node_summary`.
    """
    reason = KSTATUS_REASONS.get(overall, "Unknown")
    stalled = overall in {ERRORING, BLOCKED}
    reconciling = overall in {IN_PROGRESS, WAITING, UNKNOWN}
    ready = overall == COMPLETE
    explained = message or f"Skyhook is {overall}."
    if node_statuses is not None:
        ready_message = node_summary(node_statuses)
    else:
        ready_message = "Every selected node is complete." if ready else explained
    return [
        condition(CONDITION_READY, ready, reason, ready_message, now, generation=generation),
        condition(
            CONDITION_RECONCILING,
            reconciling,
            reason,
            f"Rolling out: {overall}." if reconciling else f"Not rolling out: {overall}.",
            now,
            generation=generation,
        ),
        condition(
            CONDITION_STALLED,
            stalled,
            reason,
            explained if stalled else f"Not stalled: {overall}.",
            now,
            generation=generation,
        ),
    ]


def node_summary(node_statuses: NodeStatuses) -> str:
    """Ready's message, as upstream words it: `<c>/<total> nodes complete`, then a count for
    each other status that has nodes (in progress, blocked, erroring, waiting, paused,
    disabled, unknown; any other word counts as unknown), each followed by its nodes' names,
    sorted, or by a note that the list is left out when it has more than
    SUMMARY_NAMES_MAX."""
    words = {status for status, _ in _SUMMARY_BUCKETS} | {COMPLETE}
    buckets: defaultdict[str, set[str]] = defaultdict(set)
    for status, nodes in node_statuses.by_status.items():
        buckets[status if status in words else UNKNOWN] |= nodes

    def names(nodes: set[str]) -> str:
        if not nodes:
            return ""
        if len(nodes) > SUMMARY_NAMES_MAX:
            return " (list truncated; see status.nodeStatus)"
        return f" ({', '.join(sorted(nodes))})"

    complete = buckets.get(COMPLETE, set())
    parts: list[str] = [
        f"{len(complete)}/{len(node_statuses.by_node)} nodes complete{names(complete)}"
    ]
    for status, label in _SUMMARY_BUCKETS:
        bucket = buckets.get(status)
        if bucket:
            parts.append(f"{len(bucket)} {label}{names(bucket)}")
    return ", ".join(parts)


def erroring_message(node_statuses: NodeStatuses) -> str:
    """Names the erroring nodes (at most five) for the Stalled condition."""
    erroring = sorted(node_statuses.by_status.get(ERRORING, ()))
    if not erroring:
        return ""
    shown = ", ".join(erroring[:5]) + (
        f" and {len(erroring) - 5} more" if len(erroring) > 5 else ""
    )
    return f"{len(erroring)} node(s) erroring: {shown}."


def malformed_message(nodes: Sequence[str]) -> str:
    """NodeStateMalformed's message: how many nodes, and the first five names (sorted, each cut
    to ten characters)."""
    names = sorted(nodes)
    shown = [n if len(n) <= 10 else f"{n[:10]}..." for n in names[:5]]
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    return (
        f"nodeState annotation cannot be parsed on {len(names)} node(s): {', '.join(shown)}{more}"
    )


def with_copies(conditions: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """`conditions` with the second copy of each that is written twice (`BARE_TYPES`: the bare
    type first; Ready: the prefixed copy after it)."""
    found: list[dict[str, Any]] = []
    for cond in conditions:
        bare = BARE_TYPES.get(cond["type"])
        if bare is not None:
            found += [{**cond, "type": bare}, cond]
        elif cond["type"] == CONDITION_READY:
            found += [cond, {**cond, "type": PREFIXED_READY}]
        else:
            found.append(cond)
    return found


def merge_conditions(
    current: list[Mapping[str, Any]], wanted: list[dict[str, Any]], *, generation: int
) -> list[dict[str, Any]]:
    """Upsert by type, new types appended, each copy of a condition written twice included
    (`with_copies`), every one carrying the Skyhook's `generation`. A condition keeps its
    lastTransitionTime while its status stays the same, whatever its reason and message say
    (the Transition condition alone takes a new time when its reason or message changes), and an
    unchanged list produces no patch."""
    result = [dict(c) for c in current]
    index = {c.get("type"): i for i, c in enumerate(result)}
    for cond in with_copies([{**c, "observedGeneration": generation} for c in wanted]):
        at = index.get(cond["type"])
        if at is None:
            index[cond["type"]] = len(result)
            result.append(cond)
            continue
        old = result[at]
        if all(
            old.get(k) == cond[k] for k in ("status", "reason", "message", "observedGeneration")
        ):
            continue
        kept_time = old.get("status") == cond["status"] and not (
            cond["type"] == keys.CONDITION_TRANSITION
            and (old.get("reason"), old.get("message")) != (cond["reason"], cond["message"])
        )
        since = old.get("lastTransitionTime") if kept_time else None
        result[at] = {**cond, "lastTransitionTime": since} if since else cond
    return result


def merge_patched(document: Any, patch: Any) -> Any:
    """`document` with an RFC 7386 merge patch applied (dicts merge, None removes), as a new
    object: what the patch does not touch is shared with `document`, and the lists and values
    it sets are shared with the patch, not copied (neither is ever changed in place), so
    applying a patch costs the patch's size, whatever the status's size."""
    if not isinstance(patch, Mapping):
        return patch
    result = dict(document) if isinstance(document, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patched(result.get(key), value)
    return result


def compose_merge_patches(patches: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One merge patch doing what applying `patches` in order does, except where one removes
    a key and a later one sets it to an object again: the composed patch then merges that
    object into the old one (the next pass's patch removes what is left over).

    Costs the patches' total size, not their number times the result's: an object is copied
    once, when a later patch first merges into it, and the values the patches set are shared,
    not copied (a patch is never changed in place)."""
    composed: dict[str, Any] = {}
    copies = {id(composed)}  # the objects made here, which may be changed in place

    def fold(into: dict[str, Any], patch: Mapping[str, Any]) -> None:
        for key, value in patch.items():
            current = into.get(key)
            if isinstance(value, Mapping) and isinstance(current, Mapping):
                if not (isinstance(current, dict) and id(current) in copies):
                    current = into[key] = dict(current)
                    copies.add(id(current))
                fold(current, value)
            else:
                into[key] = value

    for patch in patches:
        fold(composed, patch)
    return composed


def merge_patch(current: Any, desired: Any) -> Any:
    """The RFC 7386 merge patch taking `current` to `desired` (dicts recurse, None removes);
    returns {} when they are equal. Only the sub-objects that differ are walked."""
    if not isinstance(current, dict) or not isinstance(desired, dict):
        return desired
    patch: dict[str, Any] = {}
    for key, value in desired.items():
        if key not in current:
            patch[key] = value
            continue
        old = current[key]
        if old is value or old == value:  # the C comparison: most of a status is unchanged
            continue
        if isinstance(value, dict) and isinstance(old, dict):
            sub = merge_patch(old, value)
            if sub:
                patch[key] = sub
        else:
            patch[key] = value
    for key in current:
        if key not in desired:
            patch[key] = None
    return patch


def counts(node_statuses: NodeStatuses) -> tuple[int, int]:
    """(complete nodes, nodes in progress) where in progress includes erroring, as upstream."""
    found = node_statuses.count
    return found(COMPLETE), found(IN_PROGRESS) + found(ERRORING)


def package_list(packages: Mapping[str, Any]) -> str:
    return ",".join(sorted(f"{p.name}:{p.version}" for p in packages.values()))
