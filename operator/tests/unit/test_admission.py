"""What the admission webhooks answer, decided without a cluster (skyhook_planner.admission)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from admission_cases import BAD_POLICIES, BAD_SKYHOOKS, Case

from skyhook_planner.admission import (
    MAX_MESSAGE,
    MAX_SKYHOOK_NAME,
    default_policy,
    review_policy,
    review_skyhook,
)
from skyhook_planner.model.policy import decode_policy
from skyhook_planner.model.status import MAX_CONDITION_MESSAGE, summarize

PACKAGE = {"version": "1.0.0", "image": "ghcr.io/nvidia/skyhook-packages/shellscript"}


def skyhook(name: str = "ok", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"packages": {"foo": dict(PACKAGE)}, **spec}}


def test_the_tables_hold_enough_cases() -> None:
    assert len(BAD_SKYHOOKS) >= 25 and len(BAD_POLICIES) >= 10


@pytest.mark.parametrize("case", BAD_SKYHOOKS, ids=lambda c: c.id)
def test_bad_skyhooks_are_refused_naming_the_field(case: Case) -> None:
    verdict = review_skyhook("CREATE", case.body, None, policies={"admission-policy"})
    assert not verdict.allowed
    assert case.field in verdict.message


@pytest.mark.parametrize("case", BAD_POLICIES, ids=lambda c: c.id)
def test_bad_policies_are_refused_naming_the_field(case: Case) -> None:
    verdict = review_policy("CREATE", case.body, None, referenced_by=())
    assert not verdict.allowed
    assert case.field in verdict.message


def test_a_valid_skyhook_is_admitted_on_create_and_update() -> None:
    assert review_skyhook("CREATE", skyhook(), None, policies=()).allowed
    assert review_skyhook("UPDATE", skyhook(priority=5), skyhook(), policies=()).allowed


def test_every_problem_is_listed_one_per_line() -> None:
    body = skyhook(interruptionBudget={"percent": 10, "count": 1})
    body["spec"]["packages"]["foo"]["version"] = "one"
    verdict = review_skyhook("CREATE", body, None, policies=())
    assert verdict.message.splitlines() == [
        "spec.packages.foo.version: 'one' is not a semver version: expected "
        "MAJOR.MINOR.PATCH[-prerelease][+build], such as 1.2.0 or 2.0.0-rc.1",
        "spec.interruptionBudget: set percent or count, not both",
    ]


def test_upstream_spellings_are_admitted_with_a_warning() -> None:
    body = skyhook()
    body["spec"]["packages"]["foo"]["version"] = "v1.2"
    verdict = review_skyhook("CREATE", body, None, policies=())
    assert verdict.allowed
    assert [w.split(":")[0] for w in verdict.warnings] == ["spec.packages.foo.version"]


def test_a_policy_named_must_exist() -> None:
    body = skyhook(deploymentPolicy="rollout")
    refused = review_skyhook("CREATE", body, None, policies={"other"})
    assert not refused.allowed
    assert refused.message.startswith('spec.deploymentPolicy: DeploymentPolicy "rollout" not found')
    assert review_skyhook("CREATE", body, None, policies={"rollout"}).allowed


def test_a_metadata_only_update_is_admitted_even_when_the_spec_is_invalid() -> None:
    # The operator's finalizer and annotation writes on an object admitted before the
    # webhook existed must go through, or it could never be deleted.
    bad = skyhook(interruptionBudget={"percent": 10, "count": 1})
    annotated = copy.deepcopy(bad)
    annotated["metadata"]["finalizers"] = ["skyhook.nvidia.com/skyhook"]
    assert review_skyhook("UPDATE", annotated, bad, policies=()).allowed
    changed = copy.deepcopy(bad)
    changed["spec"]["priority"] = 3
    assert not review_skyhook("UPDATE", changed, bad, policies=()).allowed


@pytest.mark.parametrize(
    ("length", "allowed"), [(MAX_SKYHOOK_NAME, True), (MAX_SKYHOOK_NAME + 1, False)]
)
def test_the_name_must_leave_room_for_the_node_keys(length: int, allowed: bool) -> None:
    verdict = review_skyhook("CREATE", skyhook("a" * length), None, policies=())
    assert verdict.allowed is allowed
    # `skyhook.nvidia.com/nodeState_<name>`: the name part of a key is at most 63 characters.
    assert len("nodeState_") + MAX_SKYHOOK_NAME == 63


def test_a_policy_in_use_cannot_be_deleted() -> None:
    policy = {"metadata": {"name": "rollout"}, "spec": {}}
    refused = review_policy("DELETE", None, policy, referenced_by=["b-scr", "a-scr"])
    assert not refused.allowed
    assert refused.message == (
        'cannot delete DeploymentPolicy "rollout": still referenced by 2 Skyhook(s): a-scr, b-scr'
    )
    assert review_policy("DELETE", None, policy, referenced_by=[]).allowed


def test_policy_defaults_fill_only_what_is_missing() -> None:
    body = {
        "metadata": {"name": "p"},
        "spec": {
            "default": {"budget": {"percent": 10}, "strategy": {"linear": {"delta": 3}}},
            "compartments": [
                {"name": "a", "selector": {}, "budget": {"count": 1}},
                {
                    "name": "b",
                    "selector": {"matchLabels": {"x": "y"}},
                    "budget": {"count": 2},
                    "strategy": {"exponential": {"batchThreshold": 80}},
                },
            ],
        },
    }
    defaulted = default_policy(body)
    assert defaulted is not None
    assert defaulted["default"]["strategy"] == {
        "linear": {"delta": 3, "initialBatch": 1, "batchThreshold": 100, "safetyLimit": 50}
    }
    assert "strategy" not in defaulted["compartments"][0]  # no inheritance from the default
    assert defaulted["compartments"][1]["strategy"]["exponential"] == {
        "batchThreshold": 80,
        "initialBatch": 1,
        "safetyLimit": 50,
        "growthFactor": 2,
    }
    assert body["spec"]["default"]["strategy"] == {"linear": {"delta": 3}}  # input untouched
    # Defaulting changes nothing the planner decides: it applies the same defaults on read.
    assert decode_policy("p", defaulted) == decode_policy("p", body["spec"])
    assert default_policy({"metadata": {"name": "p"}, "spec": defaulted}) is None


def test_three_hundred_bad_packages_fit_the_status_and_the_refusal() -> None:
    packages = {f"pkg-{i:03d}-x": {"version": "not-a-version", "image": ""} for i in range(300)}
    body = {"metadata": {"name": "huge"}, "spec": {"packages": packages}}
    verdict = review_skyhook("CREATE", body, None, policies=())
    assert not verdict.allowed and len(verdict.message) <= MAX_MESSAGE
    assert verdict.message.endswith("(600 problems in all)")
    problems = [f"spec.packages.pkg-{i:03d}.version: {'x' * 120}" for i in range(300)]
    message = summarize(problems)
    assert len(message) <= MAX_CONDITION_MESSAGE
    kept = message.split("; ")[:-1]
    assert kept == problems[: len(kept)] and len(kept) > 100
    assert message.endswith(f"... and {300 - len(kept)} more (300 problems in all)")
    assert summarize(problems[:3]) == "; ".join(problems[:3])
