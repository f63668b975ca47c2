"""The Skyhook CRD: upstream's identity, printer columns, defaults and enums."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from skyhook_planner.model.spec import INTERRUPT_TYPES
from skyhook_schemas import nodestate
from skyhook_schemas.crds import SKYHOOK_CRD_PATH

CRD = yaml.safe_load(SKYHOOK_CRD_PATH.read_text())
VERSION = CRD["spec"]["versions"][0]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]
SPEC = SCHEMA["properties"]["spec"]["properties"]
PACKAGE = SPEC["packages"]["additionalProperties"]["properties"]
DEMO = yaml.safe_load(Path("/work/shared/examples/demo-scr.yaml").read_text())


def test_identity() -> None:
    assert CRD["metadata"]["name"] == "skyhooks.skyhook.nvidia.com"
    assert CRD["spec"]["group"] == "skyhook.nvidia.com"
    assert CRD["spec"]["scope"] == "Cluster"
    assert CRD["spec"]["names"] == {
        "kind": "Skyhook",
        "listKind": "SkyhookList",
        "plural": "skyhooks",
        "singular": "skyhook",
    }
    assert [v["name"] for v in CRD["spec"]["versions"]] == ["v1alpha1"]
    assert VERSION["served"] and VERSION["storage"]
    assert VERSION["subresources"] == {"status": {}}


def test_printer_columns_in_upstream_order() -> None:
    columns = [(c["name"], c["type"], c["jsonPath"]) for c in VERSION["additionalPrinterColumns"]]
    assert columns == [
        ("Status", "string", ".status.status"),
        ("Priority", "integer", ".spec.priority"),
        ("Age", "date", ".metadata.creationTimestamp"),
        ("Nodes In-Progress", "integer", ".status.nodesInProgress"),
        ("Complete Nodes", "string", ".status.completeNodes"),
        ("Packages", "string", ".status.packageList"),
        ("Policy", "string", ".spec.deploymentPolicy"),
    ]


@pytest.mark.parametrize(
    ("field", "default"),
    [
        ("priority", 200),
        ("serial", False),
        ("runtimeRequired", False),
        ("autoTaintNewNodes", False),
    ],
)
def test_spec_defaults(field: str, default: object) -> None:
    assert SPEC[field]["default"] == default


def test_spec_pause_is_gone_as_upstream_s() -> None:
    """Pausing is the pause annotation; upstream's newest CRD has no spec.pause."""
    assert "pause" not in SPEC


def test_enums_match_what_the_operator_writes() -> None:
    assert tuple(PACKAGE["interrupt"]["properties"]["type"]["enum"]) == INTERRUPT_TYPES
    status_props = SCHEMA["properties"]["status"]["properties"]
    assert set(status_props["status"]["enum"]) == set(nodestate.STATUSES)
    produced = {
        nodestate.COMPLETE,
        nodestate.IN_PROGRESS,
        nodestate.ERRORING,
        nodestate.WAITING,
        nodestate.BLOCKED,
        nodestate.PAUSED,
        nodestate.DISABLED,
        nodestate.UNKNOWN,
    }
    assert produced <= set(status_props["status"]["enum"])
    entry = status_props["nodeState"]["additionalProperties"]["additionalProperties"]["properties"]
    assert tuple(entry["stage"]["enum"]) == nodestate.STAGES
    assert status_props["completeNodes"]["default"] == "0/0"


def _validate(obj: dict[str, Any]) -> None:
    jsonschema.Draft7Validator(SCHEMA).validate(obj)


def test_demo_scr_is_valid() -> None:
    _validate(DEMO)


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param({"priority": 0}, id="priority-below-1"),
        pytest.param({"interruptionBudget": {"percent": 101}}, id="percent-above-100"),
        pytest.param({"packages": {"tuning": {"image": "x"}}}, id="version-required"),
        pytest.param(
            {
                "packages": {
                    "tuning": {"version": "1.0.0", "image": "x", "interrupt": {"type": "kexec"}}
                }
            },
            id="interrupt-enum",
        ),
    ],
)
def test_schema_rejects(edit: dict[str, Any]) -> None:
    bad = {**DEMO, "spec": {**DEMO["spec"], **edit}}
    with pytest.raises(jsonschema.ValidationError):
        _validate(bad)
