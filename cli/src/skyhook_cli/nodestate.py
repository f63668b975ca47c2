"""Reading the per-node package state the operator writes (`nodeState_<skyhook>`).

The annotation maps `<package>|<version>` to a package status; this module decodes it and
rolls a node's packages up into one status, as upstream's plugin does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from skyhook_schemas import keys

COMPLETE = "complete"
ERRORING = "erroring"
IN_PROGRESS = "in_progress"
UNKNOWN = "unknown"

# The stages a user may rerun or read logs of; uninstall and upgrade belong to the operator.
USER_STAGES = ("apply", "config", "interrupt", "post-interrupt")


@dataclass(frozen=True)
class PackageStatus:
    name: str
    version: str
    image: str
    stage: str
    state: str = ""
    restarts: int = 0
    container_sha: str = ""

    @classmethod
    def decode(cls, raw: Any) -> PackageStatus:
        if not isinstance(raw, Mapping):
            raise ValueError(f"a package entry is {type(raw).__name__}, not an object")
        restarts = raw.get("restarts", 0)
        if not isinstance(restarts, int):
            raise ValueError(f"restarts is {restarts!r}, not an integer")
        return cls(
            name=str(raw.get("name", "")),
            version=str(raw.get("version", "")),
            image=str(raw.get("image", "")),
            stage=str(raw.get("stage", "")),
            state=str(raw.get("state", "")),
            restarts=restarts,
            container_sha=str(raw.get("containerSHA", "")),
        )

    def encode(self) -> dict[str, Any]:
        """The operator's JSON shape: containerSHA, state and restarts only when set."""
        out: dict[str, Any] = {"name": self.name, "version": self.version, "image": self.image}
        if self.container_sha:
            out["containerSHA"] = self.container_sha
        out["stage"] = self.stage
        if self.state:
            out["state"] = self.state
        if self.restarts:
            out["restarts"] = self.restarts
        return out


NodeState = dict[str, PackageStatus]


def decode(text: str) -> NodeState:
    """Decode one annotation value; ValueError says what is wrong with it."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(str(error)) from None
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"expected an object of packages, got {type(raw).__name__}")
    return {key: PackageStatus.decode(value) for key, value in raw.items()}


def encode(state: NodeState) -> str:
    """Compact JSON with sorted keys, as the operator writes it."""
    body = {key: state[key].encode() for key in sorted(state)}
    return json.dumps(body, separators=(",", ":"))


def states_on_node(annotations: Mapping[str, str]) -> dict[str, str]:
    """Skyhook name -> raw nodeState annotation, for every Skyhook with state on a node."""
    prefix = keys.node_state_key("")
    return {
        key[len(prefix) :]: value for key, value in annotations.items() if key.startswith(prefix)
    }


@dataclass(frozen=True)
class Rollup:
    status: str
    complete: int
    total: int
    restarts: int


def rollup(state: NodeState) -> Rollup:
    """One status for a node's packages: erroring, complete, in_progress, else unknown."""
    states = [package.state for package in state.values()]
    complete = states.count(COMPLETE)
    if ERRORING in states:
        status = ERRORING
    elif states and complete == len(states):
        status = COMPLETE
    elif IN_PROGRESS in states or complete:
        status = IN_PROGRESS
    else:
        status = UNKNOWN
    restarts = sum(package.restarts for package in state.values())
    return Rollup(status, complete, len(states), restarts)


def image_selection(annotations: Mapping[str, str], skyhook: str, package: str) -> dict[str, str]:
    """Our operator's image selection record for one package on a node (the chosen `image`
    and the candidate `matched`, or why none is `unmatched`); empty when there is none."""
    try:
        record = json.loads(annotations.get(keys.image_selection_key(skyhook), "{}")).get(package)
    except (ValueError, AttributeError):
        return {}
    if not isinstance(record, Mapping):
        return {}
    return {str(k): str(v) for k, v in record.items()}
