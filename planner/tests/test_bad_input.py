"""Bad input from people and from older versions never crashes the operator or writes half
a change: malformed SCRs, DeploymentPolicies, nodeState annotations written by hand (corrupt,
or in an older upstream shape) and config.json documents get a clear error naming the field,
or are recovered from; the planner always returns a plan."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyhook_planner.model.actions import CreatePod, PatchNode
from skyhook_planner.model.policy import PolicyError, decode_policy
from skyhook_planner.model.spec import SpecError, decode_spec
from skyhook_planner.sim.driver import Driver, package
from skyhook_schemas import keys
from skyhook_schemas.nodestate import NodeStateError, decode_entries
from skyhook_schemas.package_config import ConfigError, parse_config, validate_config

# Field names the decoders know, so random documents reach deep into them, not only the top.
FIELDS = [
    "packages", "version", "image", "env", "name", "value", "dependsOn", "interrupt", "type",
    "services", "configMap", "configInterrupts", "resources", "cpuRequest", "cpuLimit",
    "memoryRequest", "memoryLimit", "nodeSelectors", "matchLabels", "matchExpressions", "key",
    "operator", "values", "interruptionBudget", "percent", "count", "podNonInterruptLabels",
    "additionalTolerations", "effect", "serial", "pause", "runtimeRequired", "priority",
    "deploymentPolicy", "agentImageOverride", "gracefulShutdown", "containerSHA",
    "compartments", "selector", "strategy", "fixed", "linear", "exponential", "initialBatch",
    "delta", "growthFactor", "batchThreshold", "failureThreshold", "safetyLimit", "budget",
    "default", "resetBatchStateOnCompletion", "schema_version", "package_name",
    "package_version", "expected_config_files", "modes", "apply", "config", "path",
    "arguments", "returncodes", "on_host", "idempotence", "upgrade_step",
]  # fmt: skip
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(["1.0.0", "v1", "reboot", "service", "Exists", "In", "50%", "-1", ""])
)
documents = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), inner, max_size=6)
    ),
    max_leaves=40,
)
objects = st.dictionaries(st.sampled_from(FIELDS), documents, max_size=8)


def _valid_spec() -> dict[str, Any]:
    return {"packages": {"alpha": package("1.0.0")}, "interruptionBudget": {"count": 1}}


@st.composite
def mutated_specs(draw: st.DrawFn) -> dict[str, Any]:
    """A valid spec with one field at some depth replaced by anything."""
    spec = _valid_spec()
    target: Any = spec
    for step in draw(st.lists(st.sampled_from([*FIELDS, "alpha"]), min_size=1, max_size=3)):
        if isinstance(target, dict) and isinstance(target.get(step), dict):
            target = target[step]
        else:
            if isinstance(target, dict):
                target[step] = draw(documents)
            break
    return spec


FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(raw=objects | mutated_specs())
def test_skyhook_spec_decodes_or_names_every_bad_field(raw: dict[str, Any]) -> None:
    try:
        decode_spec(raw)
    except SpecError as error:
        assert error.messages and all(": " in m for m in error.messages), error.messages


@FUZZ
@given(raw=objects)
def test_policy_decodes_or_names_every_bad_field(raw: dict[str, Any]) -> None:
    try:
        decode_policy("fuzz", raw)
    except PolicyError as error:
        assert error.messages and all(m.strip() for m in error.messages), error.messages


@FUZZ
@given(document=documents | objects)
def test_config_json_validates_or_lists_errors(document: Any) -> None:
    errors = validate_config(document)
    assert all(e.message for e in errors)
    try:
        parse_config(document)
    except ConfigError:
        assert errors
    else:
        assert not errors


# --- nodeState annotations written by hand --------------------------------------------------------

OLD_AND_BROKEN = {
    "truncated": '{"alpha|1.0.0": {"name": "alpha", "version": "1.0.0", "stage": "app',
    "not-an-object": '["alpha|1.0.0"]',
    "entry-null": '{"alpha|1.0.0": null}',
    "unknown-stage": '{"alpha|1.0.0": {"name": "alpha", "version": "1.0.0", "stage": "warp"}}',
    "no-image-no-state": '{"alpha|1.0.0": {"name": "alpha", "version": "1.0.0", "stage": "apply"}}',
    "restarts-as-text": '{"alpha|1.0.0": {"name": "alpha", "version": "1.0.0", "image": "i", '
    '"stage": "config", "state": "complete", "restarts": "3"}}',
    "numeric-version": '{"alpha|1": {"name": "alpha", "version": 1, "stage": "apply"}}',
    "other-package": '{"gone|0.1.0": {"name": "gone", "version": "0.1.0", "image": "i", '
    '"stage": "config", "state": "complete"}}',
    "unknown-state": '{"alpha|1.0.0": {"name": "alpha", "version": "1.0.0", "image": "i", '
    '"stage": "config", "state": "sideways"}}',
    "empty-object": "{}",
    "not-json": "complete",
}

annotation_texts = (
    st.sampled_from(list(OLD_AND_BROKEN.values()))
    | st.text(max_size=40)
    | documents.map(json.dumps)
    | st.dictionaries(st.sampled_from(["alpha|1.0.0", "alpha|0.9.0", "x"]), documents).map(
        json.dumps
    )
)


@FUZZ
@given(text=annotation_texts)
def test_node_state_decodes_or_says_why(text: str) -> None:
    try:
        decode_entries(text)
    except NodeStateError as error:
        assert str(error)


def _plan_with_annotation(text: str, status: str | None) -> Driver:
    driver = Driver(nodes=2)
    driver.sim.add_skyhook("fuzz", _valid_spec())
    annotations = driver.sim.nodes["node-0000"]["metadata"].setdefault("annotations", {})
    annotations[keys.node_state_key("fuzz")] = text
    if status is not None:
        annotations[keys.node_status_key("fuzz")] = status
    return driver


def _check_writes(driver: Driver) -> None:
    """Whatever the planner writes for our SCR on a node decodes again: no half-written state."""
    for plan in driver.plans:
        for action in plan.actions:
            if isinstance(action, PatchNode):
                written = action.annotations.get(keys.node_state_key("fuzz"))
                if written is not None:
                    decode_entries(written)


@pytest.mark.parametrize("text", list(OLD_AND_BROKEN.values()), ids=list(OLD_AND_BROKEN))
def test_hand_written_node_state_is_recovered_or_reported(text: str) -> None:
    driver = _plan_with_annotation(text, "in_progress")
    driver.run(max_steps=60)
    _check_writes(driver)
    status = driver.node_status("fuzz", "node-0001")
    assert status == "complete", "the other node must not be held back"


@FUZZ
@given(
    text=annotation_texts,
    status=st.none() | st.sampled_from(["complete", "in_progress", "erroring", "junk", ""]),
)
def test_planner_returns_a_plan_whatever_the_node_annotation(text: str, status: str | None) -> None:
    driver = _plan_with_annotation(text, status)
    for _ in range(3):
        driver.step()
    _check_writes(driver)


@FUZZ
@given(raw=objects | mutated_specs())
def test_planner_on_a_bad_spec_reports_and_touches_no_node(raw: dict[str, Any]) -> None:
    driver = Driver(nodes=2)
    driver.sim.add_skyhook("fuzz", raw)
    try:
        decode_spec(raw)
        valid = True
    except SpecError:
        valid = False
    for _ in range(2):
        driver.step()
    if not valid:
        touched = [
            a
            for p in driver.plans
            for a in p.actions
            if isinstance(a, CreatePod)
            or (isinstance(a, PatchNode) and keys.node_state_key("fuzz") in a.annotations)
        ]
        assert not touched, touched
        conditions = driver.status("fuzz").get("conditions") or []
        assert any(c["type"].endswith("SpecInvalid") for c in conditions), conditions


def test_a_spec_made_valid_runs_and_no_longer_reads_invalid() -> None:
    driver = Driver(nodes=1)
    driver.sim.add_skyhook("scr", {"packages": {"t": package()}})  # a name of one letter
    driver.step()
    (invalid,) = [
        c for c in driver.status("scr")["conditions"] if c["type"].endswith("SpecInvalid")
    ]
    assert invalid["status"] == "True" and "spec.packages.t" in invalid["message"]
    driver.sim.skyhooks["scr"]["spec"]["packages"] = {"tools": package()}
    driver.sim.skyhooks["scr"]["metadata"]["generation"] = 2
    driver.run()
    assert driver.node_status("scr", "node-0000") == "complete"
    types = [c["type"] for c in driver.status("scr")["conditions"]]
    assert not any(t.endswith("SpecInvalid") for t in types), types
