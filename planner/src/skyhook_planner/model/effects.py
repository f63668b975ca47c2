"""What each action does to the object it writes, said once.

The operator's writer computes a node's new taint list and a Skyhook's new finalizers with
these rules; the replay (model/replay.py) shows queued node patches with them; the in-memory
cluster (sim/cluster.py) applies every action with them. So what the planner reads back while
a write is out, what the simulator's tests see and what the writer sends are one result, and
a test holds it to what the apiserver leaves (operator/tests/integration/test_node_patch.py).

Where the apiserver decides the result (a strategic merge of conditions, a JSON merge of
annotations), the rule here is the apiserver's.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from skyhook_planner.model.actions import AddFinalizer, PatchNode, RemoveFinalizer
from skyhook_planner.model.snapshot import NodeView
from skyhook_planner.model.vocabulary import Taint

Entry = TypeVar("Entry")


def merged(current: Mapping[str, str], changes: Mapping[str, str | None]) -> Mapping[str, str]:
    """`current` with `changes` merged in, None removing a key (a JSON merge patch)."""
    if not changes:
        return current
    result = dict(current)
    for key, value in changes.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = value
    return result


def taints_after(
    current: Sequence[Taint], add: Sequence[Taint], remove: Sequence[Taint]
) -> tuple[Taint, ...]:
    """The taints once `remove` (matched by key and effect) are gone and `add` are set: a taint
    that was there keeps its place (with its new value if it was set again), new ones go last.
    The writer sends this list as the node's whole spec.taints."""
    if not add and not remove:
        return tuple(current)
    added = {(t.key, t.effect): t for t in add}
    placed: set[tuple[str, str]] = set()
    kept: list[Taint] = []
    for taint in current:
        key = (taint.key, taint.effect)
        if key in added:
            if key not in placed:
                kept.append(added[key])
                placed.add(key)
        elif not any(taint.same_as(r) for r in remove):
            kept.append(taint)
    return (*kept, *(t for key, t in added.items() if key not in placed))


def conditions_after(
    current: Sequence[Entry],
    upserts: Sequence[Entry],
    removed: Collection[str],
    type_of: Callable[[Entry], str],
) -> tuple[Entry, ...]:
    """status.conditions once a strategic merge patch upserts `upserts` by type and deletes the
    `removed` types, ordered as the apiserver orders a merged list: the patch's entries keep
    their order, the others theirs, and the two are interleaved by where each stood before: an
    updated condition stays in place, a new one follows the patch's entry before it (or goes
    first)."""
    if not upserts and not removed:
        return tuple(current)
    was_at = {type_of(c): i for i, c in enumerate(current)}
    upserted = {type_of(c) for c in upserts}
    others = [c for c in current if type_of(c) not in upserted and type_of(c) not in removed]
    result: list[Entry] = []
    i = j = 0
    while i < len(others) or j < len(upserts):
        if j == len(upserts):
            result.append(others[i])
            i += 1
            continue
        if i < len(others):
            patched_at = was_at.get(type_of(upserts[j]))
            if patched_at is not None and was_at[type_of(others[i])] < patched_at:
                result.append(others[i])
                i += 1
                continue
        result.append(upserts[j])
        j += 1
    return tuple(result)


def node_patched(node: NodeView, patch: PatchNode) -> NodeView:
    """`node` as it reads once `patch` is written."""
    return replace(
        node,
        annotations=merged(node.annotations, patch.annotations),
        labels=merged(node.labels, patch.labels),
        taints=taints_after(node.taints, patch.add_taints, patch.remove_taints),
        unschedulable=node.unschedulable if patch.unschedulable is None else patch.unschedulable,
        conditions=conditions_after(
            node.conditions, patch.conditions, patch.remove_conditions, lambda c: c.type
        ),
    )


def patch_node_object(node: dict[str, Any], patch: PatchNode) -> None:
    """Write `patch` into `node`, an API-shaped Node (as the in-memory cluster keeps it)."""
    meta, spec = node.setdefault("metadata", {}), node.setdefault("spec", {})
    status = node.setdefault("status", {})
    meta["annotations"] = dict(merged(meta.get("annotations") or {}, patch.annotations))
    meta["labels"] = dict(merged(meta.get("labels") or {}, patch.labels))
    if patch.add_taints or patch.remove_taints:
        current = [Taint.from_api(t) for t in spec.get("taints") or ()]
        taints = taints_after(current, patch.add_taints, patch.remove_taints)
        spec["taints"] = [t.to_api() for t in taints]
    if patch.unschedulable is not None:
        spec["unschedulable"] = patch.unschedulable
    upserts = [
        {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message}
        for c in patch.conditions
    ]
    conditions = status.get("conditions") or []
    updated = conditions_after(conditions, upserts, patch.remove_conditions, lambda c: c["type"])
    status["conditions"] = list(updated)


def finalizers_after(current: Sequence[str], action: AddFinalizer | RemoveFinalizer) -> list[str]:
    """metadata.finalizers once the finalizer is added (last, once) or removed."""
    if isinstance(action, AddFinalizer):
        return list(current) if action.finalizer in current else [*current, action.finalizer]
    return [f for f in current if f != action.finalizer]
