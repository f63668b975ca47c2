"""Image compatibility artifacts: parsing names each bad field; choosing follows NFD's
operators, weights and artifact order; the pod webhook's patch or refusal."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skyhook_planner.model.imagecompat import (
    MATCHED_ANNOTATION,
    NFD_MEDIA_TYPE,
    ArtifactError,
    Choice,
    NoMatch,
    choose,
    parse,
    parse_text,
    pod_patch,
)

OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
OS_VERSION = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
KERNEL = "feature.node.kubernetes.io/kernel-version.major"


def candidate(image: str, expressions: Any, **extra: Any) -> dict[str, Any]:
    return {
        "tag": image,
        "rules": [{"matchFeatures": [{"matchExpressions": expressions}]}],
        **extra,
    }


def artifact(*candidates: dict[str, Any]) -> dict[str, Any]:
    return {"version": "v1alpha1", "compatibilities": list(candidates)}


FLAVOURS = artifact(
    candidate(
        "repo/pkg:ubuntu22",
        {OS_ID: {"op": "In", "value": ["ubuntu"]}, OS_VERSION: {"op": "In", "value": ["22.04"]}},
        description="Ubuntu 22.04",
    ),
    candidate(
        "repo/pkg:ubuntu24",
        [
            {"key": OS_ID, "op": "In", "value": ["ubuntu"]},
            {"key": OS_VERSION, "op": "In", "value": ["24.04"]},
        ],
    ),
    candidate("repo/pkg:rhel9", {OS_ID: {"op": "In", "value": ["rhel", "rocky"]}}),
)


@pytest.mark.parametrize(
    ("labels", "image"),
    [
        pytest.param(
            {OS_ID: "ubuntu", OS_VERSION: "22.04"}, "repo/pkg:ubuntu22", id="nfd-map-form"
        ),
        pytest.param(
            {OS_ID: "ubuntu", OS_VERSION: "24.04"}, "repo/pkg:ubuntu24", id="ocifit-list-form"
        ),
        pytest.param({OS_ID: "rocky", OS_VERSION: "9.3"}, "repo/pkg:rhel9", id="one-of-values"),
    ],
)
def test_each_flavour_gets_its_image(labels: dict[str, str], image: str) -> None:
    chosen = choose(parse(FLAVOURS), labels)
    assert isinstance(chosen, Choice) and chosen.image == image


def test_the_matched_candidate_is_named() -> None:
    chosen = choose(parse(FLAVOURS), {OS_ID: "ubuntu", OS_VERSION: "22.04"})
    assert chosen == Choice("repo/pkg:ubuntu22", "compatibilities[0] (Ubuntu 22.04)")


def test_no_match_says_why_for_each_candidate() -> None:
    chosen = choose(parse(FLAVOURS), {OS_ID: "debian", OS_VERSION: "12"})
    assert isinstance(chosen, NoMatch)
    assert (
        "compatibilities[0] (Ubuntu 22.04): " + OS_ID + "='debian' is not In ['ubuntu']"
        in chosen.reason
    )
    assert "compatibilities[2]: " in chosen.reason


OP_CASES = [
    ("In", ["a", "b"], "b", True),
    ("In", ["a"], "c", False),
    ("NotIn", ["a"], "c", True),
    ("NotIn", ["a"], "a", False),
    ("InRegexp", ["^5\\.1[0-9]"], "5.15.0-91", True),
    ("InRegexp", ["^6\\."], "5.15.0", False),
    ("Exists", [], "anything", True),
    ("DoesNotExist", [], "x", False),
    ("Gt", ["5"], "6", True),
    ("Gt", ["5"], "5", False),
    ("Gt", ["5"], "six", False),
    ("Lt", ["5"], "4", True),
    ("GtLt", ["4", "6"], "5", True),
    ("GtLt", ["4", "6"], "6", False),
    ("IsTrue", [], "true", True),
    ("IsTrue", [], "false", False),
    ("IsFalse", [], "false", True),
]


@pytest.mark.parametrize(
    ("op", "values", "label", "holds"),
    [pytest.param(*case, id=f"{case[0]}-{case[2]}-{case[3]}") for case in OP_CASES],
)
def test_operators_on_a_present_label(op: str, values: list[str], label: str, holds: bool) -> None:
    expression: dict[str, Any] = {"op": op}
    if values:
        expression["value"] = values
    chosen = choose(parse(artifact(candidate("img", {KERNEL: expression}))), {KERNEL: label})
    assert isinstance(chosen, Choice) is holds


@pytest.mark.parametrize("op", ["In", "NotIn", "Exists", "Gt", "IsTrue", "IsFalse"])
def test_a_missing_label_satisfies_only_does_not_exist(op: str) -> None:
    values = {"In": ["a"], "NotIn": ["a"], "Gt": ["1"]}.get(op)
    expression: dict[str, Any] = {"op": op, **({"value": values} if values else {})}
    assert isinstance(choose(parse(artifact(candidate("img", {KERNEL: expression}))), {}), NoMatch)
    absent = parse(artifact(candidate("img", {KERNEL: {"op": "DoesNotExist"}})))
    assert isinstance(choose(absent, {}), Choice)


def test_higher_weight_wins_then_artifact_order() -> None:
    any_node = {OS_ID: {"op": "Exists"}}
    body = artifact(
        candidate("first", any_node),
        candidate("heavy", any_node, weight=10),
        candidate("heavy-later", any_node, weight=10),
    )
    assert choose(parse(body), {OS_ID: "x"}) == Choice("heavy", "compatibilities[1]")


def test_match_any_needs_one_alternative() -> None:
    body = artifact(
        {
            "tag": "img",
            "rules": [
                {
                    "name": "one of two OSes",
                    "matchAny": [
                        {
                            "matchFeatures": [
                                {"matchExpressions": {OS_ID: {"op": "In", "value": ["a"]}}}
                            ]
                        },
                        {
                            "matchFeatures": [
                                {"matchExpressions": {OS_ID: {"op": "In", "value": ["b"]}}}
                            ]
                        },
                    ],
                }
            ],
        }
    )
    assert isinstance(choose(parse(body), {OS_ID: "b"}), Choice)
    missed = choose(parse(body), {OS_ID: "c"})
    assert (
        isinstance(missed, NoMatch) and "rule 'one of two OSes': none of matchAny" in missed.reason
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param([], "artifact: expected an object", id="not-an-object"),
        pytest.param(
            {"compatibilities": [candidate("i", {OS_ID: {"op": "Exists"}})]},
            "artifact.version: required",
            id="no-version",
        ),
        pytest.param(
            {"version": "v1alpha1", "compatibilities": []},
            "artifact.compatibilities: required non-empty list",
            id="no-candidates",
        ),
        pytest.param(
            artifact(
                {"rules": [{"matchFeatures": [{"matchExpressions": {OS_ID: {"op": "Exists"}}}]}]}
            ),
            "artifact.compatibilities[0].tag: required",
            id="no-tag",
        ),
        pytest.param(
            artifact({"tag": "i"}), "artifact.compatibilities[0].rules: required", id="no-rules"
        ),
        pytest.param(
            artifact(candidate("i", {OS_ID: {"op": "Exists"}}, weight=-1)),
            "compatibilities[0].weight: must be a non-negative integer",
            id="negative-weight",
        ),
        pytest.param(
            artifact(candidate("i", {OS_ID: {"op": "Like"}})),
            f"matchExpressions.{OS_ID}.op: 'Like' is not one of",
            id="unknown-op",
        ),
        pytest.param(
            artifact(candidate("i", {OS_ID: {"op": ["In"]}})),
            f"matchExpressions.{OS_ID}.op: ['In'] is not one of",
            id="op-not-a-word",
        ),
        pytest.param(
            artifact(candidate("i", {OS_ID: {"op": "In"}})),
            "value: In needs at least one value",
            id="in-without-values",
        ),
        pytest.param(
            artifact(candidate("i", {OS_ID: {"op": "Exists", "value": ["x"]}})),
            "value: Exists takes 0 values, got 1",
            id="exists-with-value",
        ),
        pytest.param(
            artifact(candidate("i", {OS_ID: {"op": "Gt", "value": ["x"]}})),
            "value: Gt compares integers",
            id="gt-not-integer",
        ),
        pytest.param(
            artifact(candidate("i", {OS_ID: {"op": "GtLt", "value": ["6", "4"]}})),
            "GtLt needs the lower bound first",
            id="gtlt-reversed",
        ),
        pytest.param(
            artifact(candidate("i", {OS_ID: {"op": "InRegexp", "value": ["("]}})),
            "is not a regular expression",
            id="bad-regexp",
        ),
        pytest.param(
            artifact(candidate("i", [{"op": "Exists"}])),
            "matchExpressions[0].key: required",
            id="list-without-key",
        ),
        pytest.param(
            artifact(candidate("i", {})), "matchExpressions: required", id="no-expressions"
        ),
        pytest.param(
            artifact({"tag": "i", "rules": [{"name": "empty"}]}),
            "rules[0]: needs matchFeatures or matchAny",
            id="empty-rule",
        ),
    ],
)
def test_malformed_artifacts_name_the_field(body: Any, message: str) -> None:
    with pytest.raises(ArtifactError) as caught:
        parse(body)
    assert message in str(caught.value)


def test_text_forms() -> None:
    assert parse_text(json.dumps(FLAVOURS)).compatibilities[2].image == "repo/pkg:rhel9"
    nfd_yaml = "version: v1alpha1\ncompatibilities:\n- tag: img\n  rules:\n  - matchFeatures:\n    - feature: kernel.version\n      matchExpressions:\n        major: {op: Gt, value: ['4']}\n"
    assert (
        parse_text(nfd_yaml, NFD_MEDIA_TYPE).compatibilities[0].rules[0].match_features[0].feature
        == "kernel.version"
    )
    with pytest.raises(ArtifactError, match="not valid JSON"):
        parse_text("{", where="spec.packages.p.imageCompatibility")
    with pytest.raises(ArtifactError, match="media type 'text/plain'"):
        parse_text("{}", "text/plain")


labels_strategy = st.dictionaries(
    st.sampled_from([OS_ID, OS_VERSION, KERNEL]),
    st.sampled_from(["ubuntu", "rhel", "22.04", "5", "6"]),
)


@given(labels_strategy, st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=4))
def test_choice_is_a_matching_candidate_of_maximal_weight(
    labels: dict[str, str], weights: list[int]
) -> None:
    values = ["ubuntu", "rhel", "22.04", "5"]
    body = artifact(
        *(
            candidate(f"img{i}", {OS_ID: {"op": "In", "value": [values[i]]}}, weight=w)
            for i, w in enumerate(weights)
        )
    )
    chosen = choose(parse(body), labels)
    matching = [i for i in range(len(weights)) if labels.get(OS_ID) == values[i]]
    if not matching:
        assert isinstance(chosen, NoMatch)
        return
    assert isinstance(chosen, Choice)
    index = int(chosen.image.removeprefix("img"))
    assert index in matching
    assert weights[index] == max(weights[i] for i in matching)
    assert index == min(i for i in matching if weights[i] == weights[index])


# --- the pod webhook's decision -----------------------------------------------------------------


def pod(node_selector: dict[str, str] | None = None, **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {
            "labels": {"oci.image.compatibilities.selection/enabled": "true"},
            "annotations": {
                "oci.image.compatibilities.selection/target-image": "placeholder:latest",
                **annotations,
            },
        },
        "spec": {
            "nodeSelector": node_selector or {},
            "initContainers": [{"name": "init", "image": "placeholder:latest"}],
            "containers": [
                {"name": "side", "image": "busybox"},
                {"name": "app", "image": "placeholder:latest"},
            ],
        },
    }


UBUNTU22 = {OS_ID: "ubuntu", OS_VERSION: "22.04", "flavour": "u22"}
RHEL = {OS_ID: "rhel", OS_VERSION: "9.3", "flavour": "rhel"}


def test_homogeneous_cluster_gets_its_image_in_every_placeholder() -> None:
    decision = pod_patch(pod(), [UBUNTU22, UBUNTU22], parse(FLAVOURS))
    assert decision.allowed
    assert decision.patch == (
        {"op": "replace", "path": "/spec/initContainers/0/image", "value": "repo/pkg:ubuntu22"},
        {"op": "replace", "path": "/spec/containers/1/image", "value": "repo/pkg:ubuntu22"},
        {
            "op": "add",
            "path": "/metadata/annotations/" + MATCHED_ANNOTATION.replace("/", "~1"),
            "value": "compatibilities[0] (Ubuntu 22.04)",
        },
    )


@pytest.mark.parametrize(
    ("selector", "nodes", "outcome"),
    [
        pytest.param(
            {"flavour": "rhel"}, [UBUNTU22, RHEL], "repo/pkg:rhel9", id="selector-picks-flavour"
        ),
        pytest.param(
            {}, [UBUNTU22, RHEL], "cluster is not homogeneous", id="mixed-without-selector"
        ),
        pytest.param(
            {"flavour": "none"},
            [UBUNTU22, RHEL],
            "no node matches nodeSelector",
            id="selector-matches-nothing",
        ),
        pytest.param({}, [{OS_ID: "debian"}], "no compatible image", id="unmatched-node"),
        pytest.param(
            {OS_ID: "ubuntu"},
            [UBUNTU22, {**UBUNTU22, OS_VERSION: "24.04"}],
            "narrow the nodeSelector",
            id="selector-too-wide",
        ),
    ],
)
def test_pod_decisions(selector: dict[str, str], nodes: list[dict[str, str]], outcome: str) -> None:
    decision = pod_patch(pod(selector), nodes, parse(FLAVOURS))
    if decision.allowed:
        assert decision.patch[0]["value"] == outcome
    else:
        assert outcome in decision.refusal


def test_a_pod_without_the_placeholder_is_refused() -> None:
    body = pod()
    body["metadata"]["annotations"]["oci.image.compatibilities.selection/target-image"] = "other:1"
    decision = pod_patch(body, [UBUNTU22], parse(FLAVOURS))
    assert "no container's image is the placeholder 'other:1'" in decision.refusal
