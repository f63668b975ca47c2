"""Reading the per-node package state the operator writes (`nodeState_<skyhook>`), and rolling
a node's packages up into one status, as upstream's plugin does. The annotation's format is
`skyhook_schemas.nodestate`, the same codec the operator writes with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from skyhook_schemas import keys
from skyhook_schemas.nodestate import (
    APPLY,
    COMPLETE,
    CONFIG,
    ERRORING,
    IN_PROGRESS,
    INTERRUPT,
    POST_INTERRUPT,
    UNKNOWN,
    PackageEntry,
    decode_entries,
    decode_image_selections,
    encode_entries,
)

# The stages a user may rerun or read logs of; uninstall and upgrade belong to the operator.
USER_STAGES = (APPLY, CONFIG, INTERRUPT, POST_INTERRUPT)

NodeState = dict[str, PackageEntry]


def decode(text: str) -> NodeState:
    """Decode one annotation value; ValueError (NodeStateError) says what is wrong with it."""
    return decode_entries(text)


def encode(state: NodeState) -> str:
    """The annotation as the operator writes it."""
    return encode_entries(state)


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
    selections = decode_image_selections(annotations.get(keys.image_selection_key(skyhook)))
    return dict((selections or {}).get(package) or {})
