"""Carrying SCRs and their state over from the other API group, when the operator's group changed
(`skyhook.nvidia.com` to `nodewright.nvidia.com`, upstream's rename, or back): what to write,
decided from the objects as the apiserver returns them. kube/carryover.py reads and writes.

- An SCR or DeploymentPolicy of the other group with no twin of ours is mirrored: the same
  name and spec, its pause and disable annotations respelled, stamped `<group>/mirrored-from`.
  A twin we did not stamp is someone's own object, left alone.
- A node's state for an SCR (annotations, the status label, the NotReady and Erroring
  conditions) is copied to our keys, and the other group's copies are kept, so an operator
  rolled back finds them. Copied where we have none, or, when the other group was spoken last,
  made equal to the other group's (which moved on since we last spoke).
- Stage, interrupt and health-check pods and our ConfigMaps labelled by the other group get our
  labels and annotations too, and our SCR as a second owner: a pod still running is then ours
  to wait for, and its result is not lost or run again.
- An object of the other group whose spec does not decode (admitted while no webhook of ours
  looked at that group), or whose mirror the apiserver refuses, is not carried over: it is
  told so on itself, in its status's NotCarriedOver condition (an SCR) and one Warning Event,
  and every other object is carried over without it.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from skyhook_planner.model.policy import PolicyError, decode_policy
from skyhook_planner.model.spec import SpecError, decode_spec
from skyhook_planner.model.status import condition
from skyhook_schemas import keys

Json = dict[str, Any]

OTHER_GROUP = keys.OTHER_GROUP
OTHER_PREFIX = f"{OTHER_GROUP}/"
OTHER_KIND, OTHER_PLURAL, OTHER_SINGULAR = keys.KINDS[OTHER_GROUP]
OTHER_FINALIZER = f"{OTHER_GROUP}/{OTHER_SINGULAR}"
MIRRORED_FROM = f"{keys.GROUP}/mirrored-from"


def ours(key: str) -> str:
    """`key` of the other group, spelled under ours."""
    return keys.PREFIX + key.removeprefix(OTHER_PREFIX)


def theirs(key: str) -> str:
    """`key` of ours, spelled under the other group."""
    return OTHER_PREFIX + key.removeprefix(keys.PREFIX)


def mirrored(other: Mapping[str, Any], kind: str) -> Json:
    """Our `kind` object for the other group's `other`: its name, labels and spec, the pause
    and disable annotations under our keys, stamped as mirrored."""
    meta = other.get("metadata") or {}
    carried = {theirs(keys.PAUSE_ANNOTATION), theirs(keys.DISABLE_ANNOTATION)}
    annotations = {
        ours(key): value for key, value in (meta.get("annotations") or {}).items() if key in carried
    }
    annotations[MIRRORED_FROM] = meta["name"]
    body: Json = {
        "apiVersion": keys.API_VERSION,
        "kind": kind,
        "metadata": {"name": meta["name"], "annotations": annotations},
        "spec": copy.deepcopy(other.get("spec") or {}),
    }
    if meta.get("labels"):
        body["metadata"]["labels"] = dict(meta["labels"])
    return body


# On an object of the other group that is not carried over: why (on an SCR's status; a
# DeploymentPolicy has none, its Warning Event alone says it).
CONDITION_NOT_CARRIED_OVER = f"{keys.GROUP}/NotCarriedOver"
NOT_CARRIED_OVER = "NotCarriedOver"  # the condition's bare name, the Event's reason
SPEC_INVALID = "SpecInvalid"  # reason: its spec does not decode
MIRROR_REFUSED = "MirrorRefused"  # reason: the apiserver refused its mirror


def mirror_problems(other: Mapping[str, Any], kind: str) -> tuple[str, ...]:
    """Why the other group's `kind` object (SCR or DeploymentPolicy) cannot be mirrored: each
    problem of its spec as `spec.<field>: ...`, as our admission webhook would refuse it; none
    when it decodes."""
    raw = other.get("spec")
    try:
        if kind == keys.POLICY_KIND:
            name = (other.get("metadata") or {}).get("name", "")
            decode_policy(name, raw if raw is not None else {})
        else:
            decode_spec(raw if isinstance(raw, Mapping) else {})
    except (SpecError, PolicyError) as error:
        return tuple(error.messages)
    return ()


def not_carried_message(kind: str, name: str, problems: Iterable[str]) -> str:
    ours_kind = keys.KIND if kind == OTHER_KIND else kind
    return (
        f'{OTHER_GROUP} {kind} "{name}" is not carried over to {keys.GROUP} {ours_kind}: '
        + "; ".join(problems)
    )


def _not_carried(other: Mapping[str, Any]) -> Mapping[str, Any] | None:
    found = ((other.get("status") or {}).get("conditions")) or ()
    return next((c for c in found if c.get("type") == CONDITION_NOT_CARRIED_OVER), None)


def not_carried_patch(
    other: Mapping[str, Any], reason: str, message: str, now: dt.datetime
) -> Json | None:
    """The status merge patch that puts the NotCarriedOver condition on the other group's SCR;
    None when it says so already (reported once: the caller's Warning Event goes with the
    patch). Carries the resourceVersion read: a change since is a conflict, looked at again
    next round."""
    current = _not_carried(other)
    if current is not None and (current.get("reason"), current.get("message")) == (
        reason,
        message,
    ):
        return None
    meta = other.get("metadata") or {}
    kept = [
        c
        for c in (other.get("status") or {}).get("conditions") or ()
        if c.get("type") != CONDITION_NOT_CARRIED_OVER
    ]
    generation = int(meta.get("generation") or 0)
    added = condition(CONDITION_NOT_CARRIED_OVER, True, reason, message, now, generation=generation)
    return {
        "metadata": {"resourceVersion": meta.get("resourceVersion")},
        "status": {"conditions": [*kept, added]},
    }


def carried_patch(other: Mapping[str, Any]) -> Json | None:
    """The status merge patch that removes the NotCarriedOver condition from the other group's
    SCR once it is carried over; None when it has none."""
    if _not_carried(other) is None:
        return None
    meta = other.get("metadata") or {}
    kept = [
        c
        for c in (other.get("status") or {}).get("conditions") or ()
        if c.get("type") != CONDITION_NOT_CARRIED_OVER
    ]
    return {
        "metadata": {"resourceVersion": meta.get("resourceVersion")},
        "status": {"conditions": kept},
    }


def user_managed(own: Mapping[str, Any]) -> bool:
    """Our twin exists and no mirror made it: the user's own object wins."""
    return MIRRORED_FROM not in ((own.get("metadata") or {}).get("annotations") or {})


# A node's per-SCR keys: annotations, and the one label.
_SCR_ANNOTATIONS: tuple[Callable[[str], str], ...] = (
    keys.node_state_key,
    keys.node_status_key,
    keys.version_key,
    keys.cordon_key,
    keys.drain_start_key,
    keys.drain_blocked_key,
    keys.image_selection_key,
)


def node_patch(node: Mapping[str, Any], scrs: Iterable[str], newer: bool) -> Json | None:
    """The nodes/status strategic merge patch that gives `node` our keys for `scrs` from the
    other group's, or None when nothing is to copy. A node's state for an SCR is copied when it
    has the other group's (its version annotation) and either none of ours or, `newer`, the
    other group's moved on since. Only the operator's own keys: a user's label under the other
    prefix stays theirs."""
    meta = node.get("metadata") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    conditions = {c.get("type"): c for c in (node.get("status") or {}).get("conditions") or ()}
    set_annotations: dict[str, str | None] = {}
    set_labels: dict[str, str | None] = {}
    set_conditions: list[Json] = []
    for scr in scrs:
        if theirs(keys.version_key(scr)) not in annotations:
            continue
        if keys.version_key(scr) in annotations and not newer:
            continue
        for key in (spell(scr) for spell in _SCR_ANNOTATIONS):
            _copy(annotations, key, set_annotations)
        _copy(labels, keys.node_status_key(scr), set_labels)
        for kind in (keys.not_ready_condition(scr), keys.erroring_condition(scr)):
            found = conditions.get(theirs(kind))
            if found is not None and _condition(conditions.get(kind)) != _condition(found):
                set_conditions.append({**found, "type": kind})
            elif found is None and kind in conditions:
                set_conditions.append({"type": kind, "$patch": "delete"})
    # Per node, not per SCR: the nodes autoTaintNewNodes tainted, and the ignore label.
    for key in annotations:
        if key.startswith(theirs(keys.auto_taint_key(""))):
            _copy(annotations, ours(key), set_annotations)
    if theirs(keys.IGNORE_LABEL) in labels and keys.IGNORE_LABEL not in labels:
        set_labels[keys.IGNORE_LABEL] = labels[theirs(keys.IGNORE_LABEL)]
    return _status_patch(set_annotations, set_labels, set_conditions)


def state_on(node: Mapping[str, Any], scrs: Iterable[str]) -> set[str]:
    """The SCRs of `scrs` whose state the other group keeps on `node`: what a failed
    `node_patch` of it leaves not carried over."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return {scr for scr in scrs if theirs(keys.version_key(scr)) in annotations}


def _status_patch(
    annotations: Mapping[str, str | None], labels: Mapping[str, str | None], conditions: list[Json]
) -> Json | None:
    """A nodes/status strategic merge patch of these changes; None when there are none."""
    if not (annotations or labels or conditions):
        return None
    patch: Json = {"metadata": {}}
    if annotations:
        patch["metadata"]["annotations"] = dict(annotations)
    if labels:
        patch["metadata"]["labels"] = dict(labels)
    if conditions:
        patch["status"] = {"conditions": conditions}
    return patch


def _copy(current: Mapping[str, str], key: str, into: dict[str, str | None]) -> None:
    """Our `key` made what the other group's copy of it is (absent: removed)."""
    wanted = current.get(theirs(key))
    if current.get(key) != wanted:
        into[key] = wanted


def _condition(condition: Mapping[str, Any] | None) -> tuple[Any, ...] | None:
    if condition is None:
        return None
    return tuple(condition.get(f) for f in ("status", "reason", "message"))


def adoption_patch(obj: Mapping[str, Any], owner: Mapping[str, Any]) -> Json | None:
    """The merge patch that gives one of the other group's pods or ConfigMaps our labels and
    annotations beside its own, and `owner` (our SCR) as a further owner; None when it has
    them. A pod keeps its other owner: the garbage collector removes it only with both."""
    meta = obj.get("metadata") or {}
    patch: Json = {}
    for field in ("labels", "annotations"):
        current: Mapping[str, str] = meta.get(field) or {}
        missing = {
            ours(key): value
            for key, value in current.items()
            if key.startswith(OTHER_PREFIX) and ours(key) not in current
        }
        if missing:
            patch[field] = missing
    references = list(meta.get("ownerReferences") or ())
    uid = (owner.get("metadata") or {}).get("uid")
    if uid and not any(r.get("uid") == uid for r in references):
        patch["ownerReferences"] = [*references, owner_reference(owner)]
    if not patch:
        return None
    # The merge patch carries the version read: a change since is a conflict, read again.
    patch["resourceVersion"] = meta.get("resourceVersion")
    return {"metadata": patch}


def owner_reference(owner: Mapping[str, Any]) -> Json:
    meta = owner.get("metadata") or {}
    return {
        "apiVersion": keys.API_VERSION,
        "kind": keys.KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "blockOwnerDeletion": True,
    }


def finalizer_patch(other: Mapping[str, Any]) -> Json | None:
    """The other group's SCR without the other group's finalizer, which no operator removes
    once we speak ours: deleting it then deletes only it, never a node's state or package."""
    meta = other.get("metadata") or {}
    finalizers = list(meta.get("finalizers") or ())
    if OTHER_FINALIZER not in finalizers:
        return None
    kept = [f for f in finalizers if f != OTHER_FINALIZER]
    return {"metadata": {"finalizers": kept, "resourceVersion": meta.get("resourceVersion")}}


def frozen_edit(kind: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """Why an update of the other group's `kind` object (SCR or DeploymentPolicy) is refused
    once ours carries it: it changes the spec or the pause or disable annotation, which only
    our twin decides now. None: the update may go (metadata, finalizers, status, the same
    spec applied again)."""
    watched = {theirs(keys.PAUSE_ANNOTATION), theirs(keys.DISABLE_ANNOTATION)}

    def decisive(obj: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        return obj.get("spec"), {k: v for k, v in annotations.items() if k in watched}

    if decisive(old) == decisive(new):
        return None
    name = (new.get("metadata") or {}).get("name", "")
    ours_kind = keys.KIND if kind == OTHER_KIND else kind
    return (
        f'{OTHER_GROUP} {kind} "{name}" is carried over to {keys.GROUP} {ours_kind} and is '
        f'read-only; edit {ours_kind} "{name}" instead (its spec, or kubectl '
        f"{keys.SINGULAR} pause/disable/...)"
    )


# On our SCR: when its carry-over found the other group's state (RFC 3339). The other group's
# copies go once LEGACY_CLEANUP_DELAY has passed since; the annotation goes with them.
CARRIED_AT = f"{keys.GROUP}/legacy-migrated-at"


def prune_node_patch(node: Mapping[str, Any], scrs: Iterable[str]) -> Json | None:
    """The nodes/status patch that removes the other group's keys for `scrs` from `node`,
    once ours carry the state; None when it has none."""
    meta = node.get("metadata") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    types = {c.get("type") for c in (node.get("status") or {}).get("conditions") or ()}
    drop_annotations: dict[str, None] = {}
    drop_labels: dict[str, None] = {}
    drop_conditions: list[Json] = []
    for scr in scrs:
        for spell in _SCR_ANNOTATIONS:
            if theirs(spell(scr)) in annotations:
                drop_annotations[theirs(spell(scr))] = None
        if theirs(keys.node_status_key(scr)) in labels:
            drop_labels[theirs(keys.node_status_key(scr))] = None
        for kind in (keys.not_ready_condition(scr), keys.erroring_condition(scr)):
            if theirs(kind) in types:
                drop_conditions.append({"type": theirs(kind), "$patch": "delete"})
    return _status_patch(drop_annotations, drop_labels, drop_conditions)


def unlabel_patch(obj: Mapping[str, Any]) -> Json | None:
    """The merge patch that removes the other group's labels and annotations from one of our
    ConfigMaps, once ours carry it; None when it has none."""
    meta = obj.get("metadata") or {}
    patch: Json = {}
    for field in ("labels", "annotations"):
        gone = {k: None for k in meta.get(field) or {} if k.startswith(OTHER_PREFIX)}
        if gone:
            patch[field] = gone
    return {"metadata": patch} if patch else None
