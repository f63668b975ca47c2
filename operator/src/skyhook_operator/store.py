"""The store a pass reads its ClusterSnapshot from: in-memory indexes plus our own recent writes.

No LIST call on the hot path: one watch per kind (kube/watch.py: Skyhooks, policies, nodes,
pods and ConfigMaps) turns every object into the planner's view (`NodeView.from_api` etc.) as
it changes, tagged with its resourceVersion.

Read-your-writes: the watch delivers our own writes a little later, and a pass that ran on
the stale copy would redo work (start a second stage, exceed the budget). So the writer
records every object the API returned to it in `Overlay`, and the snapshot takes, per object,
whichever copy is newer by resourceVersion. An overlay entry is dropped as soon as the watch
has caught up with it. resourceVersions are compared as integers, which holds for every
etcd-backed apiserver; an unparsable one counts as newest so the watch copy wins.

Writes still queued are not here: the reconciler replays them onto the snapshot
(skyhook_planner.model.replay), so a pass sees the cluster as every decided write leaves it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from skyhook_planner.model.snapshot import (
    BY_NAME,
    BY_NAMESPACE_AND_NAME,
    ClusterSnapshot,
    ConfigMapView,
    EvictionRefusal,
    NodeView,
    PodView,
    PolicyView,
    SkyhookView,
    WriteRefusal,
)

View = TypeVar("View")
Key = tuple[str, str]  # (namespace or "", name)

# An overlay entry the watch never confirms (the object was changed again by someone else
# and then deleted, or the watch restarted) must not shadow the index forever.
_OVERLAY_TTL = 120.0


def resource_version(body: Mapping[str, Any]) -> int:
    text = (body.get("metadata") or {}).get("resourceVersion") or ""
    try:
        return int(text)
    except ValueError:
        return 1 << 62


@dataclass(frozen=True, slots=True)
class Versioned(Generic[View]):
    """One object's view as the index or the overlay holds it."""

    key: Key
    resource_version: int
    view: View | None  # None: we deleted it
    created: bool = False  # by our own create: show it even before the watch has it
    uid: str = ""  # tells the object apart from a later one of the same name


def versioned(
    body: Mapping[str, Any], decode: Callable[[Mapping[str, Any]], View], created: bool = False
) -> Versioned[View]:
    meta = body.get("metadata") or {}
    return Versioned(
        key=(meta.get("namespace") or "", meta.get("name") or ""),
        resource_version=resource_version(body),
        view=decode(body),
        created=created,
        uid=str(meta.get("uid") or ""),
    )


class Overlay(Generic[View]):
    """Objects as our own writes left them, until the watch shows the same or newer."""

    def __init__(self, decode: Callable[[Mapping[str, Any]], View]) -> None:
        self._decode = decode
        self._entries: dict[Key, tuple[float, Versioned[View]]] = {}

    def wrote(self, body: Mapping[str, Any], created: bool = False) -> None:
        """Record the object as the API returned it after our write."""
        entry = versioned(body, self._decode, created)
        current = self._entries.get(entry.key)
        if created or current is None or current[1].resource_version <= entry.resource_version:
            self._entries[entry.key] = (time.monotonic(), entry)

    def deleted(self, namespace: str, name: str, last_version: int) -> None:
        """The object is gone (or going) as of `last_version`; hide index copies up to it."""
        key = (namespace, name)
        self._entries[key] = (time.monotonic(), Versioned(key, last_version, None))

    def merge(self, indexed: Iterable[Versioned[View]]) -> list[View]:
        """Index copies, replaced or hidden by newer overlay entries; stale entries pruned."""
        now = time.monotonic()
        pending = dict(self._entries)
        result: list[View] = []
        for item in indexed:
            found = pending.pop(item.key, None)
            ours = None if found is None else found[1]
            if ours is None or _watch_caught_up(item, ours):
                if ours is not None:
                    self._forget(item.key, ours)
                if item.view is not None:
                    result.append(item.view)
            elif ours.view is not None:
                result.append(ours.view)
            # else: we deleted it and the watch has not seen a newer version: leave it out.
        for key, (written, entry) in pending.items():
            if not entry.created or now - written > _OVERLAY_TTL:
                # Gone from the watch: deleted, whatever we last wrote to it.
                self._forget(key, entry)
            elif entry.view is not None:
                result.append(entry.view)  # created by us, not yet seen by the watch
        return result

    def _forget(self, key: Key, entry: Versioned[View]) -> None:
        current = self._entries.get(key)
        if current is not None and current[1] is entry:
            del self._entries[key]


def _watch_caught_up(indexed: Versioned[Any], ours: Versioned[Any]) -> bool:
    if ours.view is None:  # our delete: only a newer version proves the object lives on
        return indexed.resource_version > ours.resource_version
    return indexed.resource_version >= ours.resource_version


def index_values(index: Mapping[Any, Iterable[Versioned[View]]]) -> list[Versioned[View]]:
    """Every value of an index (each key holds a store of one or more values)."""
    return [value for store in index.values() for value in store]


ObjectKey = tuple[str, str, str]  # (kind, namespace or "", name)


class Refusals:
    """Writes the apiserver refused as invalid (HTTP 422), by object: the writer records and
    clears them, each snapshot carries them to the planner, which reports them
    in the Skyhook's status. A refused write is not sent again while its Skyhook's
    generation is the one it was refused at."""

    def __init__(self) -> None:
        self._by_object: dict[ObjectKey, WriteRefusal] = {}

    def refused(self, refusal: WriteRefusal) -> bool:
        """Record a refusal; True unless the same was recorded already (for the same spec)."""
        key = (refusal.kind, refusal.namespace, refusal.name)
        new = self._by_object.get(key) != refusal
        self._by_object[key] = refusal
        return new

    def written(self, key: ObjectKey) -> None:
        """The object was written: whatever was refused before is past."""
        self._by_object.pop(key, None)

    def held(self, key: ObjectKey, generations: Mapping[str, int]) -> bool:
        """Whether a write of the object was refused at its Skyhook's current generation."""
        refusal = self._by_object.get(key)
        return refusal is not None and generations.get(refusal.skyhook) == refusal.generation

    def current(self, skyhooks: Iterable[str]) -> tuple[WriteRefusal, ...]:
        """The refusals of these Skyhooks (those of a deleted one are forgotten)."""
        alive = set(skyhooks)
        for key in [k for k, r in self._by_object.items() if r.skyhook not in alive]:
            del self._by_object[key]
        return tuple(self._by_object.values())


class ClusterStore:
    """Holds the index objects and the overlays; builds a snapshot on demand.

    Everything here lives on the event loop: the watches fill the indexes, the writer's tasks
    the overlays, and `snapshot()` (which only copies references) is called there too.
    """

    def __init__(self) -> None:
        self.indexes: dict[str, Mapping[Any, Iterable[Versioned[Any]]]] = {}
        self.skyhooks: Overlay[SkyhookView] = Overlay(SkyhookView.from_api)
        self.nodes: Overlay[NodeView] = Overlay(NodeView.from_api)
        self.pods: Overlay[PodView] = Overlay(PodView.from_api)
        self.configmaps: Overlay[ConfigMapView] = Overlay(ConfigMapView.from_api)
        self.refusals = Refusals()
        # The evictions a PodDisruptionBudget refused that still hold (kube/drain.py's
        # Evictor answers; none until it is attached).
        self.eviction_refusals: Callable[[], Mapping[Key, EvictionRefusal]] = dict

    def attach(self, name: str, index: Mapping[Any, Iterable[Versioned[Any]]]) -> None:
        self.indexes[name] = index

    def skyhook_views(self) -> list[SkyhookView]:
        """Our SCRs as the next snapshot will have them (the index and our own writes)."""
        return self.skyhooks.merge(index_values(self.indexes.get("skyhook_index", {})))

    def policy_names(self) -> set[str]:
        return {v.view.name for v in index_values(self.indexes.get("policy_index", {})) if v.view}

    def snapshot(self) -> ClusterSnapshot:
        def merged(name: str, overlay: Overlay[View]) -> list[View]:
            return overlay.merge(index_values(self.indexes.get(name, {})))

        nodes = sorted(merged("node_index", self.nodes), key=BY_NAME)
        pods = sorted(merged("pod_index", self.pods), key=BY_NAMESPACE_AND_NAME)
        # Policies are only read, never written by us: the index alone is current.
        policies: list[PolicyView] = [
            v.view for v in index_values(self.indexes.get("policy_index", {})) if v.view
        ]
        skyhooks = tuple(sorted(merged("skyhook_index", self.skyhooks), key=BY_NAME))
        return ClusterSnapshot(
            skyhooks=skyhooks,
            nodes=tuple(nodes),
            pods=tuple(pods),
            configmaps=tuple(merged("configmap_index", self.configmaps)),
            policies=tuple(sorted(policies, key=BY_NAME)),
            refusals=self.refusals.current(s.name for s in skyhooks),
            eviction_refusals=self.eviction_refusals(),
        )
