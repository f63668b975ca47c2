"""Writes the apiserver refuses as invalid (HTTP 422): recorded for the planner and the next
passes (the Skyhook's WriteRefused condition), said once in a Warning Event, and not sent
again while the Skyhook's spec stays the same (`without_held`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

from skyhook_operator.kube.client import ApiError
from skyhook_operator.store import ObjectKey, Refusals
from skyhook_planner.model.actions import (
    Action,
    AddFinalizer,
    CreatePod,
    EmitEvent,
    PatchNode,
    Plan,
    UpsertConfigMap,
    lane_of,
)
from skyhook_planner.model.snapshot import WriteRefusal
from skyhook_schemas import keys

log = logging.getLogger(__name__)


class RefusedWrites:
    """The refusals of the writes of the current specs, kept in the store for the planner."""

    def __init__(self, refusals: Refusals) -> None:
        self._refusals = refusals
        self._generations: Mapping[str, int] = {}  # each Skyhook's, as the last plan saw it

    def without_held(self, plan: Plan, generations: Mapping[str, int]) -> Plan:
        """`plan` without the writes the apiserver refused as invalid for the current spec of
        their Skyhook (`generations`), nor what their node's lane holds after them: a refused
        write is sent once per spec, not every pass (the Skyhook's status names it)."""
        self._generations = dict(generations)
        stopped: set[str] = set()
        kept: list[Action] = []
        for action in plan.actions:
            lane = lane_of(action)
            if lane is not None and lane in stopped:
                continue
            key = object_of(action)
            if key is not None and self._refusals.held(key, generations):
                if lane is not None:
                    stopped.add(lane)
                continue
            kept.append(action)
        return plan if len(kept) == len(plan.actions) else replace(plan, actions=tuple(kept))

    def refused(self, action: Action, error: ApiError) -> EmitEvent | None:
        """Record that the apiserver refused `action` as invalid; the Warning Event that says
        so on its Skyhook, the first time only."""
        key, skyhook = object_of(action), _skyhook_of(action)
        if key is None or not skyhook:
            return None
        refusal = WriteRefusal(
            skyhook, *key, message=error.reason, generation=self._generations.get(skyhook, 0)
        )
        if not self._refusals.refused(refusal):
            return None
        fields = ", ".join(error.fields) or "a field it did not name"
        message = (
            f"{refusal.object}: the apiserver refused {fields}, not sent again until the "
            f"spec changes: {error.reason}"
        )
        log.warning("Skyhook %s: %s", skyhook, message)
        return EmitEvent(keys.KIND, skyhook, "WriteRefused", message, "Warning", "RefuseWrite")

    def written(self, action: Action) -> None:
        """`action` went through: a refusal of its object is over."""
        key = object_of(action)
        if key is not None:
            self._refusals.written(key)


# Per-Skyhook node keys (`<group>/nodeState_<skyhook>`, ...): what names a node patch's Skyhook.
_NODE_KEY_PREFIXES = tuple(
    key("")
    for key in (
        keys.node_state_key,
        keys.node_status_key,
        keys.cordon_key,
        keys.version_key,
        keys.image_selection_key,
    )
)


def object_of(action: Action) -> ObjectKey | None:
    """The object a write creates or changes, for those the apiserver may refuse as invalid."""
    if isinstance(action, CreatePod):
        return ("Pod", action.namespace, action.name)
    if isinstance(action, UpsertConfigMap):
        return ("ConfigMap", str(action.manifest["metadata"].get("namespace", "")), action.name)
    if isinstance(action, PatchNode):
        return ("Node", "", action.name)
    if isinstance(action, AddFinalizer):
        return (keys.KIND, "", action.name)
    return None


def _skyhook_of(action: Action) -> str:
    """The Skyhook a write is for ("" if none can be told)."""
    if isinstance(action, CreatePod | UpsertConfigMap):
        labels = action.manifest["metadata"].get("labels") or {}
        return str(labels.get(keys.NAME_LABEL) or labels.get(keys.NODE_META_LABEL) or "")
    if isinstance(action, PatchNode):
        for key in sorted({**action.annotations, **action.labels}):
            for prefix in _NODE_KEY_PREFIXES:
                if key.startswith(prefix) and len(key) > len(prefix):
                    return key[len(prefix) :]
    if isinstance(action, AddFinalizer):
        return action.name
    return ""
