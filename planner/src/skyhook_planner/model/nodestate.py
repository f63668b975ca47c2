"""One Skyhook's view of a Node: its package entries, status annotation/label, cordon marker,
version and image selections, and the two node conditions it keeps.

`read(node, scr)` decodes one Skyhook's view of a node into a `NodeState`; `diff(node, scr, before,
after)` encodes the difference back as the fields of a `PatchNode`. The annotation formats
themselves are `skyhook_schemas.nodestate`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from types import MappingProxyType

from skyhook_planner.model.snapshot import NodeView
from skyhook_planner.model.vocabulary import NodeCondition
from skyhook_schemas import keys
from skyhook_schemas.nodestate import (
    ERRORING,
    IN_PROGRESS,
    SKIPPED,
    UNINSTALL_CYCLE,
    NodeStateError,
    PackageEntry,
    decode_entries,
    decode_image_selections,
    encode_entries,
    encode_image_selections,
)

# --- one Skyhook's view of a node --------------------------------------------------------------


@dataclass(frozen=True)
class NodeState:
    """What one Skyhook recorded on one node. `entries` None means "no nodeState annotation"."""

    entries: Mapping[str, PackageEntry] | None = None
    status: str | None = None
    cordoned: bool = False
    version: str | None = None
    error: str = ""  # why the nodeState annotation could not be decoded
    # Ours (image compatibility): per package, {"image", "matched"} of the image its pods were
    # last started with, or {"unmatched": reason}. None means "no such annotation".
    images: Mapping[str, Mapping[str, str]] | None = None
    # The drain before an interrupt (rules/drain.py): when it began, and the pods blocking it
    # (JSON), as their annotations hold them; None: no such annotation.
    drain_start: str | None = None
    drain_blocked: str | None = None

    @property
    def holds_slot(self) -> bool:
        """In progress (erroring included) or cordoned by us: the node holds a budget slot."""
        return self.status in {IN_PROGRESS, ERRORING} or self.cordoned

    @property
    def packages(self) -> Mapping[str, PackageEntry]:
        return self.entries or {}

    # A quiet node keeps its state object from pass to pass (passes/memory.py): what every pass
    # asks of each node's entries is found once per state, not once per pass.
    @cached_property
    def started(self) -> bool:
        """Some package in progress, erroring or skipped: work began and did not finish."""
        return any(e.state in {IN_PROGRESS, ERRORING, SKIPPED} for e in self.packages.values())

    @cached_property
    def uninstalling(self) -> Mapping[str, PackageEntry]:
        """The entries in their uninstall cycle, by package key."""
        return {k: e for k, e in self.packages.items() if e.stage in UNINSTALL_CYCLE}

    def with_entry(self, entry: PackageEntry) -> NodeState:
        return replace(self, entries={**self.packages, entry.key: entry})

    def without(self, key: str) -> NodeState:
        return replace(self, entries={k: v for k, v in self.packages.items() if k != key})


@lru_cache(maxsize=16384)
def _decode_shared(text: str) -> Mapping[str, PackageEntry]:
    """Most nodes' annotations do not change between passes: decode each text once. The
    result is read-only because it is shared."""
    return MappingProxyType(decode_entries(text))


def read(node: NodeView, scr: str) -> NodeState:
    annotations = node.annotations
    raw = annotations.get(keys.node_state_key(scr))
    entries: Mapping[str, PackageEntry] | None
    error = ""
    try:
        entries = _decode_shared(raw) if raw is not None else None
    except NodeStateError as err:
        entries, error = None, f"{keys.node_state_key(scr)}: {err}"
    return NodeState(
        entries=entries,
        status=annotations.get(keys.node_status_key(scr)),
        cordoned=annotations.get(keys.cordon_key(scr)) == "true",
        version=annotations.get(keys.version_key(scr)),
        error=error,
        images=decode_image_selections(annotations.get(keys.image_selection_key(scr))),
        drain_start=annotations.get(keys.drain_start_key(scr)),
        drain_blocked=annotations.get(keys.drain_blocked_key(scr)),
    )


@dataclass
class NodeChanges:
    """Annotation/label changes for one node, gathered across Skyhooks (None = remove)."""

    annotations: dict[str, str | None] = field(default_factory=dict)
    labels: dict[str, str | None] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.annotations or self.labels)

    def merge(self, other: NodeChanges) -> None:
        """Take `other`'s changes too (a later Skyhook's win on the same key)."""
        self.annotations.update(other.annotations)
        self.labels.update(other.labels)


def diff(node: NodeView, scr: str, before: NodeState, after: NodeState) -> NodeChanges:
    """What must change on `node` so that `read(node, scr)` gives `after`. `before` is
    `read(node, scr)`; entries are re-encoded only when they really changed, so a foreign but
    equivalent encoding is left alone."""
    changes = NodeChanges()

    def put(
        store: dict[str, str | None], current: Mapping[str, str], key: str, value: str | None
    ) -> None:
        if current.get(key) != value and not (value is None and key not in current):
            store[key] = value

    annotations = node.annotations
    if after.entries is not None and (
        before.entries is None
        or (before.entries is not after.entries and dict(before.entries) != dict(after.entries))
    ):
        changes.annotations[keys.node_state_key(scr)] = encode_entries(after.entries)
    status_key = keys.node_status_key(scr)
    put(changes.annotations, annotations, status_key, after.status)
    put(changes.labels, node.labels, status_key, after.status)
    put(changes.annotations, annotations, keys.cordon_key(scr), "true" if after.cordoned else None)
    put(changes.annotations, annotations, keys.version_key(scr), after.version)
    put(changes.annotations, annotations, keys.drain_start_key(scr), after.drain_start)
    put(changes.annotations, annotations, keys.drain_blocked_key(scr), after.drain_blocked)
    if after.images is not None and after.images != before.images:
        put(
            changes.annotations,
            annotations,
            keys.image_selection_key(scr),
            encode_image_selections(after.images) if after.images else None,
        )
    return changes


_CORDON_PREFIX = keys.cordon_key("")


def is_cordon_key(key: str) -> bool:
    """Is `key` some Skyhook's cordon marker?"""
    return key.startswith(_CORDON_PREFIX)


# The holder `cordoned_by` names for the runtime-required cordon; no Skyhook is named so (their
# names are lowercase), so every Skyhook sees it as someone else's share of the cordon.
RUNTIME_REQUIRED_HOLDER = "runtimeRequiredCordon"


def cordoned_by(annotations: Mapping[str, str | None]) -> frozenset[str]:
    """Who holds the node's cordon: the Skyhooks whose cordon marker (`cordon_<scr>: "true"`)
    is in `annotations`, and `RUNTIME_REQUIRED_HOLDER` while the runtime-required cordon's
    annotation is there (no Skyhook lifts that one). A node that is cordoned with no holder was
    cordoned by someone else (an administrator): no Skyhook uncordons it
    (docs/fleet-safety.md#admin-cordons-kept)."""
    holders = {
        key[len(_CORDON_PREFIX) :]
        for key, value in annotations.items()
        if key.startswith(_CORDON_PREFIX) and value == "true"
    }
    if annotations.get(keys.RUNTIME_REQUIRED_CORDON_ANNOTATION) is not None:
        holders.add(RUNTIME_REQUIRED_HOLDER)
    return frozenset(holders)


def removal(node: NodeView, scr: str) -> NodeChanges:
    """The removal of the keys this Skyhook keeps on `node` (when the Skyhook is deleted), but
    for the record of what is still installed: a nodeState that lists packages (those whose
    uninstall is not enabled stay on the host) stays, with the version it was written by, so
    the Skyhook created again under that name does not run them again."""
    changes = NodeChanges()
    installed = _lists_packages(node.annotations.get(keys.node_state_key(scr)))
    for key in (
        keys.node_state_key(scr),
        keys.node_status_key(scr),
        keys.cordon_key(scr),
        keys.version_key(scr),
        keys.image_selection_key(scr),
        keys.drain_start_key(scr),
        keys.drain_blocked_key(scr),
    ):
        if installed and key in (keys.node_state_key(scr), keys.version_key(scr)):
            continue
        if key in node.annotations:
            changes.annotations[key] = None
    if keys.node_status_key(scr) in node.labels:
        changes.labels[keys.node_status_key(scr)] = None
    return changes


def _lists_packages(raw: str | None) -> bool:
    """Whether a nodeState annotation reads as a record of at least one package."""
    try:
        return bool(decode_entries(raw))
    except NodeStateError:
        return False


# --- node conditions ----------------------------------------------------------------------------


@lru_cache(maxsize=1024)
def conditions_for(scr: str, complete: bool, erroring: bool) -> tuple[NodeCondition, NodeCondition]:
    """The NotReady and Erroring conditions one Skyhook keeps on a node (the same few for
    every node: built once)."""
    not_ready = NodeCondition(
        type=keys.not_ready_condition(scr),
        status="False" if complete else "True",
        reason="Complete" if complete else "Incomplete",
        message=f"Skyhook {scr} Ready",
    )
    failing = NodeCondition(
        type=keys.erroring_condition(scr),
        status="True" if erroring else "False",
        reason="Package(s) Erroring or Unknown" if erroring else "Not Erroring",
        message=f"Package Erroring or Unknown for {scr}",
    )
    return not_ready, failing


def stale_conditions(
    node: NodeView, wanted: tuple[NodeCondition, ...]
) -> tuple[NodeCondition, ...]:
    """The wanted conditions that the node does not carry exactly (type, status, reason, message).

    Upstream replaces an existing condition only when its reason changed and its message did
    not; we replace it whenever it differs.
    """
    current = {c.type: c for c in node.conditions}
    return tuple(c for c in wanted if current.get(c.type) != c)
