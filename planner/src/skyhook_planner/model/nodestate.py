"""Codecs for what Skyhook keeps on a Node: the nodeState annotation (per-package progress), the
status annotation/label, the cordon marker and the two node conditions.

`read(node, scr)` decodes one Skyhook's view of a node into a `NodeState`; `diff(node, scr, before,
after)` encodes the difference back as the fields of a `PatchNode`. The nodeState JSON is
byte-compatible with upstream's Go `json.Marshal` output: compact, map keys sorted, struct fields
in declaration order, omitempty fields left out, and `<`, `>`, `&` escaped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from skyhook_planner.model.snapshot import NodeView
from skyhook_planner.model.vocabulary import APPLY, STAGES, NodeCondition
from skyhook_schemas import keys


class NodeStateError(ValueError):
    """A nodeState annotation that is not the JSON object of package entries it should be."""


# --- Go-compatible JSON -------------------------------------------------------------------------

_GO_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_GO_RAW = re.compile("[<>&\u2028\u2029]")
_SHORT_ESCAPE = re.compile(r"\\\\|\\b|\\f")
_SHORT_TO_GO = {"\\\\": "\\\\", "\\b": "\\u0008", "\\f": "\\u000c"}


def go_json(value: Any) -> str:
    """`json.Marshal` output for maps/lists/scalars. Dicts are emitted in their own order: callers
    pass struct-like dicts in field order and use `sorted_map` for Go maps."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    text = _SHORT_ESCAPE.sub(lambda m: _SHORT_TO_GO[m.group(0)], text)
    return _GO_RAW.sub(lambda m: _GO_ESCAPES[m.group(0)], text)


def sorted_map(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """A Go map as json.Marshal orders it: keys sorted bytewise (= code point order)."""
    return {k: mapping[k] for k in sorted(mapping)}


# --- package entries ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PackageEntry:
    """One value of the nodeState map (upstream's PackageStatus)."""

    name: str
    version: str
    image: str = ""
    stage: str = APPLY
    state: str = ""
    container_sha: str = ""
    restarts: int = 0

    @property
    def key(self) -> str:
        return keys.package_key(self.name, self.version)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"name": self.name, "version": self.version, "image": self.image}
        if self.container_sha:
            body["containerSHA"] = self.container_sha
        body["stage"] = self.stage
        if self.state:
            body["state"] = self.state
        if self.restarts:
            body["restarts"] = self.restarts
        return body

    @classmethod
    def from_json(cls, key: str, body: object) -> PackageEntry:
        if not isinstance(body, Mapping):
            raise NodeStateError(f"{key}: expected an object, got {type(body).__name__}")
        name, version = body.get("name"), body.get("version")
        if not isinstance(name, str) or not isinstance(version, str):
            raise NodeStateError(f"{key}: name and version must be strings")
        restarts = body.get("restarts") or 0
        stage = body.get("stage") or APPLY
        if stage not in STAGES:
            raise NodeStateError(f"{key}.stage: {stage!r} is not one of {', '.join(STAGES)}")
        return cls(
            name=name,
            version=version,
            image=str(body.get("image") or ""),
            stage=stage,
            state=str(body.get("state") or ""),
            container_sha=str(body.get("containerSHA") or ""),
            restarts=restarts if isinstance(restarts, int) else 0,
        )


Entries = dict[str, PackageEntry]


def decode_entries(text: str | None) -> Entries:
    """The nodeState annotation as entries by `<name>|<version>`; a missing annotation is empty."""
    if text is None or text == "":
        return {}
    try:
        body = json.loads(text)
    except ValueError as err:
        raise NodeStateError(f"not JSON: {err}") from None
    if not isinstance(body, Mapping):
        raise NodeStateError("expected a JSON object of package entries")
    return {key: PackageEntry.from_json(key, value) for key, value in body.items()}


def encode_entries(entries: Mapping[str, PackageEntry]) -> str:
    return go_json({key: entries[key].to_json() for key in sorted(entries)})


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

    @property
    def packages(self) -> Mapping[str, PackageEntry]:
        return self.entries or {}

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
        images=_decode_images(annotations.get(keys.image_selection_key(scr))),
    )


def _decode_images(text: str | None) -> Mapping[str, Mapping[str, str]] | None:
    """Our image selection annotation; one we cannot read counts as absent (it is rewritten
    when the next stage starts)."""
    if text is None:
        return None
    try:
        body = json.loads(text)
    except ValueError:
        return None
    if not isinstance(body, Mapping):
        return None
    return {
        str(name): {str(k): str(v) for k, v in value.items()}
        for name, value in body.items()
        if isinstance(value, Mapping)
    }


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
    if after.images is not None and after.images != before.images:
        images = {name: sorted_map(after.images[name]) for name in sorted(after.images)}
        put(
            changes.annotations,
            annotations,
            keys.image_selection_key(scr),
            go_json(images) if images else None,
        )
    return changes


def removal(node: NodeView, scr: str) -> NodeChanges:
    """The removal of every key this Skyhook keeps on `node` (when the Skyhook is deleted)."""
    changes = NodeChanges()
    for key in (
        keys.node_state_key(scr),
        keys.node_status_key(scr),
        keys.cordon_key(scr),
        keys.version_key(scr),
        keys.image_selection_key(scr),
    ):
        if key in node.annotations:
            changes.annotations[key] = None
    if keys.node_status_key(scr) in node.labels:
        changes.labels[keys.node_status_key(scr)] = None
    return changes


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
