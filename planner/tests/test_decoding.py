"""The pydantic decoding both specs share (model/decoding.py): each problem is one
`path: problem` line with the path dotted from `spec`, null means absent, and the leniencies the
hand-written decoders had are kept."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest

from skyhook_planner.model.policy import PolicyError, decode_policy
from skyhook_planner.model.spec import SpecError, decode_spec

IMAGE = "ghcr.io/nvidia/skyhook/agentless"


def pkg(**extra: Any) -> dict[str, Any]:
    return {"version": "1.0.0", "image": IMAGE, **extra}


def spec_errors(spec: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as caught:
        decode_spec(spec)
    return caught.value.messages


def policy_errors(spec: dict[str, Any]) -> list[str]:
    with pytest.raises(PolicyError) as caught:
        decode_policy("p", spec)
    return caught.value.messages


POLICY = {"default": {"budget": {"count": 1}, "strategy": {"fixed": {}}}}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({"serial": "yes"}, "spec.serial: 'yes' is not a boolean", id="bool"),
        pytest.param({"priority": True}, "spec.priority: True is not an integer", id="int"),
        pytest.param({"deploymentPolicy": 3}, "spec.deploymentPolicy: 3 is not a string", id="str"),
        pytest.param({"nodeSelectors": "gpu"}, "spec.nodeSelectors: must be an object", id="obj"),
        pytest.param(
            {"additionalTolerations": "x"}, "spec.additionalTolerations: must be a list", id="list"
        ),
        pytest.param(
            {"packages": {"foo": pkg(configMap={"a.sh": 5})}},
            "spec.packages.foo.configMap.a.sh: 5 is not a string",
            id="map-value-by-key",
        ),
        pytest.param(
            {"packages": {"foo": pkg(interrupt={"type": "service", "services": ["a", 1]})}},
            "spec.packages.foo.interrupt.services[1]: 1 is not a string",
            id="list-item-by-index",
        ),
        pytest.param(
            {"packages": {"Foo": pkg()}}, "spec.packages.Foo: package name 'Foo'", id="map-key"
        ),
        pytest.param(
            {"packages": {"foo": pkg(imageCompatibility={"ref": "r/x:1", "typo": 1})}},
            "spec.packages.foo.imageCompatibility.typo: unknown field; known: configMapRef, "
            "inline, ref",
            id="unknown-field-of-ours",
        ),
    ],
)
def test_every_problem_names_its_path_from_spec(spec: dict[str, Any], expected: str) -> None:
    assert any(m.startswith(expected) for m in spec_errors(spec)), spec_errors(spec)


def test_policy_paths_use_list_indices() -> None:
    messages = policy_errors(
        {
            **POLICY,
            "compartments": [
                {"name": "a", "selector": {}, "budget": {"count": 1}},
                {"name": "b", "selector": {"matchLabels": {"k": 1}}, "budget": {"percent": 0}},
            ],
        }
    )
    assert messages == [
        "spec.compartments[1].selector.matchLabels.k: 1 is not a string",
        "spec.compartments[1].budget.percent: 0 is out of range (allowed 1..100)",
    ]


def test_an_unknown_strategy_field_lists_the_known_ones() -> None:
    messages = policy_errors(
        {"default": {"budget": {"count": 1}, "strategy": {"linear": {"x": 1}}}}
    )
    assert messages == [
        "spec.default.strategy.linear.x: unknown field for a linear strategy; known: "
        "batchThreshold, delta, failureThreshold, initialBatch, safetyLimit"
    ]


def test_null_is_absent() -> None:
    fields = [
        "packages", "nodeSelectors", "podNonInterruptLabels", "interruptionBudget",
        "deploymentPolicy", "deploymentPolicyOptions", "additionalTolerations", "runtimeRequired",
        "autoTaintNewNodes", "priority", "serial", "pause", "maintenanceWindow", "alertGate",
    ]  # fmt: skip
    assert decode_spec(dict.fromkeys(fields)) == decode_spec({})
    package = {"name": None, "interrupt": None, "configMap": None, "resources": None, **pkg()}
    assert decode_spec({"packages": {"foo": package}}) == decode_spec({"packages": {"foo": pkg()}})
    assert decode_policy("p", {**POLICY, "compartments": None, "alertGate": None}) == (
        decode_policy("p", POLICY)
    )


def test_falsy_values_the_old_decoder_read_as_unset_still_are() -> None:
    lenient = {
        "packages": [],
        "interruptionBudget": 0,
        "additionalTolerations": {},
        "nodeSelectors": {"matchLabels": "", "matchExpressions": 0},
    }
    assert decode_spec(lenient) == decode_spec({})
    toleration = decode_spec({"additionalTolerations": [{"key": "k", "operator": ""}]})
    assert toleration.additional_tolerations[0].operator == "Equal"


def test_any_mapping_decodes() -> None:
    spec = {"packages": {"foo": pkg(interrupt={"type": "reboot"})}, "priority": 5}
    frozen = MappingProxyType({**spec, "packages": MappingProxyType(spec["packages"])})
    assert decode_spec(frozen) == decode_spec(spec)


def test_packages_decode_in_name_order_with_their_warnings() -> None:
    spec = decode_spec({"packages": {"zz": pkg(version="v1.0.0"), "aa": pkg(image=f"{IMAGE}:2")}})
    assert list(spec.packages) == ["aa", "zz"]
    assert [w.split(":")[0] for w in spec.warnings] == [
        "spec.packages.aa.image",
        "spec.packages.zz.version",
    ]


def test_a_zone_that_names_a_directory_is_refused_not_a_crash() -> None:
    messages = spec_errors(
        {"maintenanceWindow": {"start": "01:00", "end": "02:00", "timeZone": "America"}}
    )
    assert messages == ["spec.maintenanceWindow.timeZone: 'America' is not an IANA time zone name"]


def test_identical_selectors_are_compared_as_selectors() -> None:
    compartments = [
        {"name": "a", "selector": {}, "budget": {"count": 1}},
        {"name": "b", "selector": {"matchLabels": {}}, "budget": {"count": 1}},
    ]
    assert policy_errors({**POLICY, "compartments": compartments}) == [
        'spec.compartments[1].selector: identical to the selector of compartment "a"'
    ]
