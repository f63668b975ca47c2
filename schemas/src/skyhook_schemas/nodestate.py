"""What Skyhook writes on a Node for each Skyhook, as words and as JSON: the stage, state and
status words, the nodeState annotation (per-package progress, upstream's map of PackageStatus by
`<name>|<version>`) and our image selection annotation. The operator writes these, the planner,
the forecast and `kubectl skyhook` read them: all through this one codec.

The nodeState JSON is byte-compatible with upstream's Go `json.Marshal` output: compact, map
keys sorted, struct fields in declaration order, omitempty fields left out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from skyhook_schemas import keys
from skyhook_schemas.gojson import go_json, sorted_map

# Stages of a package on a node, in the order a fresh install runs them (upgrade stands where
# apply does); uninstall [-> uninstall-interrupt] is the cycle that removes a package.
UNINSTALL, UPGRADE, APPLY, CONFIG, INTERRUPT, POST_INTERRUPT = (
    "uninstall", "upgrade", "apply", "config", "interrupt", "post-interrupt",
)  # fmt: skip
UNINSTALL_INTERRUPT = "uninstall-interrupt"
STAGES = (UNINSTALL, UPGRADE, APPLY, CONFIG, INTERRUPT, POST_INTERRUPT, UNINSTALL_INTERRUPT)
UNINSTALL_CYCLE = frozenset({UNINSTALL, UNINSTALL_INTERRUPT})

# A package entry's state, and a node's (or a Skyhook's) status. The two share four words.
COMPLETE, IN_PROGRESS, SKIPPED, ERRORING, UNKNOWN = (
    "complete", "in_progress", "skipped", "erroring", "unknown",
)  # fmt: skip
WAITING, BLOCKED, PAUSED, DISABLED = "waiting", "blocked", "paused", "disabled"
STATES = (COMPLETE, IN_PROGRESS, SKIPPED, ERRORING, UNKNOWN)
STATUSES = (UNKNOWN, COMPLETE, BLOCKED, WAITING, DISABLED, PAUSED, IN_PROGRESS, ERRORING)


class NodeStateError(ValueError):
    """A nodeState annotation that is not the JSON object of package entries it should be."""


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
    """The nodeState annotation as entries by `<name>|<version>`; a missing, empty or `null`
    annotation has none. NodeStateError says what is wrong with a bad one."""
    if text is None or text == "":
        return {}
    try:
        body = json.loads(text)
    except ValueError as err:
        raise NodeStateError(f"not JSON: {err}") from None
    if body is None:
        return {}
    if not isinstance(body, Mapping):
        raise NodeStateError("expected a JSON object of package entries")
    return {key: PackageEntry.from_json(key, value) for key, value in body.items()}


def encode_entries(entries: Mapping[str, PackageEntry]) -> str:
    return go_json({key: entries[key].to_json() for key in sorted(entries)})


def states_on_node(annotations: Mapping[str, str]) -> dict[str, str]:
    """Skyhook name -> raw nodeState annotation, for every Skyhook with state on a node."""
    prefix = keys.node_state_key("")
    return {
        key[len(prefix) :]: value for key, value in annotations.items() if key.startswith(prefix)
    }


# --- image selection (ours) ---------------------------------------------------------------------

# Per package, {"image", "matched"} of the image its pods were last started with, or
# {"unmatched": reason}.
ImageSelections = Mapping[str, Mapping[str, str]]


def decode_image_selections(text: str | None) -> ImageSelections | None:
    """The image selection annotation; None when it is absent or unreadable (it is rewritten
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


def encode_image_selections(selections: ImageSelections) -> str:
    return go_json({name: sorted_map(selections[name]) for name in sorted(selections)})
