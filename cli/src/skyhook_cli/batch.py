"""Resetting a Skyhook's deployment-policy batch state (every compartment back to batch 1) and
its node order.

Every counter is written explicitly (zeros and false), so a rollout stopped by its failure
threshold really starts again: a merge patch that left out the zero values would keep
`shouldStop: true` and the old counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from skyhook_schemas.status import BatchState, CompartmentStatus, SkyhookStatus

# Clears the node order: the offset is written as an explicit 0, the pick times removed.
NODE_ORDER_RESET: Mapping[str, Any] = {"status": {"nodeOrderOffset": 0, "nodePriority": None}}


def compartments(skyhook: Mapping[str, Any]) -> dict[str, CompartmentStatus]:
    return dict(SkyhookStatus.from_json(skyhook.get("status")).compartment_statuses)


def reset_patch(skyhook: Mapping[str, Any]) -> dict[str, Any]:
    """Status merge patch that sets every compartment's batchState to a fresh one."""
    return {
        "status": {
            "compartmentStatuses": {
                name: {"batchState": BatchState().to_json(explicit=True)}
                for name in compartments(skyhook)
            }
        }
    }
