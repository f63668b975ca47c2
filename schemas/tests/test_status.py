"""The Skyhook status read as typed fields: what the operator writes comes back as written, and a
status edited into the wrong shape reads as absent fields instead of failing the rollout."""

from __future__ import annotations

from typing import Any

import pytest

from skyhook_schemas.status import BatchState, CompartmentStatus, SkyhookStatus

WRITTEN: dict[str, Any] = {
    "status": "in_progress",
    "observedGeneration": 3,
    "nodeState": {"n1": {"pk|1.0.0": {"name": "pk", "version": "1.0.0", "stage": "apply"}}},
    "nodeStatus": {"n1": "in_progress"},
    "nodeBootIds": {"n1": "boot-a"},
    "configUpdates": {"pk": ["a.sh"]},
    "completeNodes": "0/1",
    "nodesInProgress": 1,
    "packageList": "pk:1.0.0",
    "compartmentStatuses": {
        "__default__": {
            "matched": 1,
            "ceiling": 1,
            "inProgress": 1,
            "completed": 0,
            "progressPercent": 0,
            "batchState": {"currentBatch": 2},
        }
    },
    "conditions": [{"type": "Ready", "status": "False"}],
}


def test_what_the_operator_writes_reads_back_field_by_field() -> None:
    status = SkyhookStatus.from_json(WRITTEN)
    assert status.status == "in_progress"
    assert status.observed_generation == 3
    assert status.node_status == {"n1": "in_progress"}
    assert status.node_boot_ids == {"n1": "boot-a"}
    assert status.config_updates == {"pk": ("a.sh",)}
    assert status.nodes_in_progress == 1
    assert status.compartment_statuses["__default__"] == CompartmentStatus(
        matched=1, ceiling=1, in_progress=1, batch_state=BatchState(current_batch=2)
    )
    assert status.condition("Ready") == {"type": "Ready", "status": "False"}
    assert status.condition("Stalled") is None
    assert status.to_json() == WRITTEN


def test_a_batch_state_leaves_out_zeros_unless_a_reset_must_spell_them() -> None:
    state = BatchState(current_batch=3, failed_nodes=1, should_stop=True)
    assert state.to_json() == {"currentBatch": 3, "failedNodes": 1, "shouldStop": True}
    assert BatchState.from_json(state.to_json()) == state
    assert BatchState().to_json(explicit=True) == {
        "currentBatch": 1,
        "consecutiveFailures": 0,
        "completedNodes": 0,
        "failedNodes": 0,
        "shouldStop": False,
        "lastBatchSize": 0,
        "lastBatchFailed": False,
    }
    assert BatchState.from_json({"currentBatch": -2, "shouldStop": "yes"}) == BatchState(
        current_batch=0
    )


@pytest.mark.parametrize(
    "edited",
    [
        pytest.param(None, id="no-status"),
        pytest.param("garbage", id="not-an-object"),
        pytest.param(
            {
                "status": 7,
                "observedGeneration": True,
                "nodeStatus": {"n1": 5},
                "configUpdates": {"pk": "a.sh"},
                "compartmentStatuses": {"c": "full"},
                "conditions": {"type": "Ready"},
            },
            id="every-field-the-wrong-shape",
        ),
    ],
)
def test_a_status_of_the_wrong_shape_reads_as_absent_fields(edited: object) -> None:
    status = SkyhookStatus.from_json(edited)
    assert status.status == ""
    assert status.observed_generation is None
    assert status.node_status == {}
    assert status.config_updates == {}
    assert status.conditions == ()
    assert all(c == CompartmentStatus() for c in status.compartment_statuses.values())
