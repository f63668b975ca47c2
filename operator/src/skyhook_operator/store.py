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
from typing import Any, Generic, Protocol, TypeVar

from skyhook_planner.model.snapshot import (
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
    """One kind's objects as a pass reads them: the watch's index, with our own writes laid
    over it until the watch shows the same or newer.

    Kept between passes rather than merged anew for each: the watch reports each key it
    changes (`index_changed`), the writer each object it wrote, and `views()` merges again only
    those keys: every other object keeps its view object, as incremental passes need
    (skyhook_planner passes/memory.py, the object-identity contract). Its views stay in key
    order, which is the order of (namespace, name), so a pass gets them as a tuple built in C
    rather than sorted in Python.
    """

    def __init__(self, decode: Callable[[Mapping[str, Any]], View]) -> None:
        self._decode = decode
        self._index: Mapping[Key, Versioned[View]] = {}
        self._entries: dict[Key, tuple[float, Versioned[View]]] = {}
        self._views: dict[Key, View] = {}  # the merged views, in key order
        self._changed: set[Key] = set()  # keys to merge again before the next read
        self._everything = False  # the index was refilled: merge every key again
        self._unconfirmed: set[Key] = set()  # created by us, not in the index yet
        self._current: tuple[View, ...] | None = ()

    def follow(self, index: Mapping[Key, Versioned[View]]) -> None:
        """Read `index` (a watch's, which reports its changes to `index_changed`)."""
        self._index = index
        self._everything = True

    def index_changed(self, key: Key | None) -> None:
        """The index changed `key`; None: it was refilled (a new listing)."""
        if key is None:
            self._everything = True
        else:
            self._changed.add(key)

    def wrote(self, body: Mapping[str, Any], created: bool = False) -> None:
        """Record the object as the API returned it after our write."""
        entry = versioned(body, self._decode, created)
        current = self._entries.get(entry.key)
        if created or current is None or current[1].resource_version <= entry.resource_version:
            self._entries[entry.key] = (time.monotonic(), entry)
            self._changed.add(entry.key)

    def deleted(self, namespace: str, name: str, last_version: int) -> None:
        """The object is gone (or going) as of `last_version`; hide index copies up to it."""
        key = (namespace, name)
        self._entries[key] = (time.monotonic(), Versioned(key, last_version, None))
        self._changed.add(key)

    def resource_version(self, key: Key) -> str | None:
        """The newest resourceVersion this process has seen of `key` (the watch's, or that of
        our last write), None when it knows of no such object."""
        known = [
            found.resource_version
            for found in (self._index.get(key), (self._entries.get(key) or (0.0, None))[1])
            if found is not None and found.view is not None
        ]
        return str(max(known)) if known else None

    def views(self) -> tuple[View, ...]:
        """Every object, in (namespace, name) order: the index's copy, or ours where ours is
        newer. Entries the watch has caught up with are dropped here."""
        now = time.monotonic()
        for key in self._unconfirmed:
            if now - self._entries[key][0] > _OVERLAY_TTL:
                self._changed.add(key)
        if self._everything:
            self._changed.update(self._index.keys(), self._entries.keys(), self._views.keys())
            self._everything = False
        if self._changed:
            added = False
            for key in self._changed:
                added |= self._merge(key, now)
            self._changed.clear()
            if added:
                self._views = dict(sorted(self._views.items()))
            self._current = None
        if self._current is None:
            self._current = tuple(self._views.values())
        return self._current

    def _merge(self, key: Key, now: float) -> bool:
        """Merge `key` again; True if it was not among the views before."""
        indexed = self._index.get(key)
        found = self._entries.get(key)
        self._unconfirmed.discard(key)
        view: View | None
        if found is None:
            view = None if indexed is None else indexed.view
        elif indexed is not None:
            if _watch_caught_up(indexed, found[1]):
                del self._entries[key]
                view = indexed.view
            else:
                view = found[1].view  # None: we deleted it
        elif not found[1].created or now - found[0] > _OVERLAY_TTL:
            del self._entries[key]  # gone from the watch: deleted, whatever we last wrote
            view = None
        else:
            view = found[1].view  # created by us, not yet seen by the watch
            self._unconfirmed.add(key)
        if view is None:
            self._views.pop(key, None)
            return False
        new = key not in self._views
        self._views[key] = view
        return new


def _watch_caught_up(indexed: Versioned[Any], ours: Versioned[Any]) -> bool:
    if ours.view is None:  # our delete: only a newer version proves the object lives on
        return indexed.resource_version > ours.resource_version
    return indexed.resource_version >= ours.resource_version


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


class Source(Protocol[View]):
    """A watch's index as the store follows it (kube/watch.py's WatchedIndex)."""

    @property
    def index(self) -> Mapping[Key, Versioned[View]]:
        """The objects by (namespace, name)."""

    def observe(self, changed: Callable[[Key | None], None]) -> None:
        """Call `changed` with each key the index changes, None when it is refilled."""


class ClusterStore:
    """The overlays, each following its watch's index; builds a snapshot on demand.

    Everything here lives on the event loop: the watches fill the indexes, the writer's tasks
    the overlays, and `snapshot()` (which merges only what changed since the last one) is
    called there too.
    """

    def __init__(self) -> None:
        self.skyhooks: Overlay[SkyhookView] = Overlay(SkyhookView.from_api)
        self.nodes: Overlay[NodeView] = Overlay(NodeView.from_api)
        self.pods: Overlay[PodView] = Overlay(PodView.from_api)
        self.configmaps: Overlay[ConfigMapView] = Overlay(ConfigMapView.from_api)
        # Policies are only read, never written by us: their overlay stays empty.
        self.policies: Overlay[PolicyView] = Overlay(PolicyView.from_api)
        self._by_index: dict[str, Overlay[Any]] = {
            "skyhook_index": self.skyhooks,
            "node_index": self.nodes,
            "pod_index": self.pods,
            "configmap_index": self.configmaps,
            "policy_index": self.policies,
        }
        self.refusals = Refusals()
        # The evictions a PodDisruptionBudget refused that still hold (kube/drain.py's
        # Evictor answers; none until it is attached).
        self.eviction_refusals: Callable[[], Mapping[Key, EvictionRefusal]] = dict
        # SCRs whose state the carry-over has not carried yet (kube/carryover.py): out of the
        # snapshot, so no pass starts a stage from state that is not ours yet.
        self.withheld: frozenset[str] = frozenset()

    def attach(self, name: str, source: Source[Any]) -> None:
        """Follow the watch of index `name` (runtime.py's names)."""
        overlay = self._by_index[name]
        overlay.follow(source.index)
        source.observe(overlay.index_changed)

    def skyhook_views(self) -> tuple[SkyhookView, ...]:
        """Our SCRs as the next snapshot will have them (the index and our own writes)."""
        return self.skyhooks.views()

    def policy_names(self) -> set[str]:
        return {policy.name for policy in self.policies.views()}

    def snapshot(self) -> ClusterSnapshot:
        skyhooks = self.skyhooks.views()
        if self.withheld:
            skyhooks = tuple(s for s in skyhooks if s.name not in self.withheld)
        return ClusterSnapshot(
            skyhooks=skyhooks,
            nodes=self.nodes.views(),
            pods=self.pods.views(),
            configmaps=self.configmaps.views(),
            policies=self.policies.views(),
            refusals=self.refusals.current(s.name for s in skyhooks),
            eviction_refusals=self.eviction_refusals(),
        )
