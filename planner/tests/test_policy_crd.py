"""The DeploymentPolicy CRD: upstream's identity and fields, with ranges and rules the API
server enforces itself (the sandbox tests check that it refuses bad policies)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
import yaml

from skyhook_schemas.crds import POLICY_CRD_PATH

CRD = yaml.safe_load(POLICY_CRD_PATH.read_text())
VERSION = CRD["spec"]["versions"][0]
SPEC = VERSION["schema"]["openAPIV3Schema"]["properties"]["spec"]
STRATEGY = SPEC["properties"]["default"]["properties"]["strategy"]
COMPARTMENT = SPEC["properties"]["compartments"]["items"]


def test_identity() -> None:
    assert CRD["metadata"]["name"] == "deploymentpolicies.skyhook.nvidia.com"
    assert CRD["spec"]["scope"] == "Cluster"
    assert CRD["spec"]["names"] == {
        "kind": "DeploymentPolicy",
        "listKind": "DeploymentPolicyList",
        "plural": "deploymentpolicies",
        "singular": "deploymentpolicy",
    }
    assert [v["name"] for v in CRD["spec"]["versions"]] == ["v1alpha1"]
    assert "subresources" not in VERSION  # upstream has no status


@pytest.mark.parametrize(
    ("kind", "field", "minimum", "maximum"),
    [
        pytest.param("fixed", "initialBatch", 1, None, id="initial-batch"),
        pytest.param("fixed", "batchThreshold", 1, 100, id="batch-threshold"),
        pytest.param("fixed", "failureThreshold", 1, None, id="failure-threshold"),
        pytest.param("fixed", "safetyLimit", 1, 100, id="safety-limit"),
        pytest.param("linear", "delta", 1, None, id="delta"),
        pytest.param("exponential", "growthFactor", 2, None, id="growth-factor"),
    ],
)
def test_strategy_ranges(kind: str, field: str, minimum: int, maximum: int | None) -> None:
    prop = STRATEGY["properties"][kind]["properties"][field]
    assert (prop.get("minimum"), prop.get("maximum")) == (minimum, maximum)


def _schema_without_cel(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: _schema_without_cel(v) for k, v in node.items() if not k.startswith("x-kubernetes")
        }
    if isinstance(node, list):
        return [_schema_without_cel(v) for v in node]
    return node


@pytest.mark.parametrize(
    ("policy", "valid"),
    [
        pytest.param(
            {"default": {"budget": {"percent": 50}, "strategy": {"fixed": {}}}}, True, id="minimal"
        ),
        pytest.param({"default": {"budget": {"count": 0}, "strategy": {}}}, False, id="count-0"),
        pytest.param(
            {"default": {"budget": {"percent": 101}, "strategy": {}}}, False, id="percent-101"
        ),
        pytest.param(
            {"default": {"budget": {"count": 1}, "strategy": {"exponential": {"growthFactor": 1}}}},
            False,
            id="growth-1",
        ),
        pytest.param({"compartments": []}, False, id="no-default"),
    ],
)
def test_openapi_part_of_the_schema(policy: dict[str, Any], valid: bool) -> None:
    schema = _schema_without_cel(SPEC)
    errors = list(jsonschema.Draft7Validator(schema).iter_errors(policy))
    assert not errors if valid else errors


def test_rules_the_api_server_checks() -> None:
    assert STRATEGY["x-kubernetes-validations"][0]["message"] == (
        "exactly one of fixed, linear, or exponential must be set"
    )
    budget = SPEC["properties"]["default"]["properties"]["budget"]
    assert budget["x-kubernetes-validations"][0]["rule"] == "has(self.percent) != has(self.count)"
    assert COMPARTMENT["x-kubernetes-validations"][0]["rule"] == "self.name != '__default__'"
    # Unique names: a list-map keyed by name, so the API server refuses a duplicate.
    assert SPEC["properties"]["compartments"]["x-kubernetes-list-map-keys"] == ["name"]
