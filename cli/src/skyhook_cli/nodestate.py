"""A node's packages rolled up into one status, as upstream's plugin does, and our image
selection record; the annotations themselves are read with `skyhook_schemas.nodestate`, the
codec the operator writes with.
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
    Entries,
    decode_image_selections,
)

# The stages a user may rerun or read logs of; uninstall and upgrade belong to the operator.
USER_STAGES = (APPLY, CONFIG, INTERRUPT, POST_INTERRUPT)


@dataclass(frozen=True)
class Rollup:
    status: str
    complete: int
    total: int
    restarts: int


def rollup(state: Entries) -> Rollup:
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
