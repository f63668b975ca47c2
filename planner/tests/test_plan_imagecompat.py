"""Whole passes with image compatibility: each node runs the variant its labels match, a node
no candidate matches is skipped with its reason, a new choice reruns like a new version, and
an unavailable artifact blocks the Skyhook before anything runs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyhook_planner.model import status as statuses
from skyhook_planner.model.imagecompat import Choice, choose, parse, pinned
from skyhook_planner.sim.driver import Driver, package, pod_stage
from skyhook_schemas import keys

OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
OS_VERSION = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
SEL = {"nodeSelectors": {"matchLabels": {"role": "gpu"}}}
REPO = "ghcr.io/nvidia/skyhook-packages/shellscript"


def flavour(os_id: str, version: str, image: str) -> dict[str, Any]:
    return {
        "tag": image,
        "description": f"{os_id} {version}",
        "rules": [
            {
                "matchFeatures": [
                    {
                        "matchExpressions": {
                            OS_ID: {"op": "In", "value": [os_id]},
                            OS_VERSION: {"op": "In", "value": [version]},
                        }
                    }
                ]
            }
        ],
    }


ARTIFACT = {
    "version": "v1alpha1",
    "compatibilities": [
        flavour("ubuntu", "22.04", f"{REPO}:1.0.0-ubuntu22"),
        flavour("ubuntu", "24.04", f"{REPO}:1.0.0-ubuntu24"),
        flavour("rhel", "9", REPO),  # no tag: the package version is pulled
    ],
}
OSES = [("ubuntu", "22.04"), ("ubuntu", "24.04"), ("rhel", "9"), ("debian", "12")]


def driver() -> Driver:
    d = Driver(4, {"role": "gpu"})
    for node, (os_id, version) in zip(sorted(d.sim.nodes), OSES, strict=True):
        d.sim.nodes[node]["metadata"]["labels"].update({OS_ID: os_id, OS_VERSION: version})
    return d


def pulled(d: Driver, node: str) -> list[str]:
    images = []
    for pod in d.sim.created_pods:
        if pod["spec"]["nodeName"] == node:
            images += [
                c["image"] for c in pod["spec"]["initContainers"] if c["name"].endswith("-init")
            ]
    return images


def selection(d: Driver, node: str) -> dict[str, Any]:
    raw = d.sim.nodes[node]["metadata"]["annotations"].get(keys.image_selection_key("scr"))
    return json.loads(raw) if raw else {}


def condition(d: Driver, kind: str) -> dict[str, Any]:
    return next(c for c in d.status("scr").get("conditions", []) if c["type"] == kind)


def test_each_node_runs_its_variant_and_the_unmatched_node_is_skipped() -> None:
    d = driver()
    d.sim.add_skyhook(
        "scr",
        {
            **SEL,
            "packages": {"tuning": package(image=REPO, imageCompatibility={"inline": ARTIFACT})},
        },
    )
    d.run()
    expected = {
        "node-0000": f"{REPO}:1.0.0-ubuntu22",
        "node-0001": f"{REPO}:1.0.0-ubuntu24",
        "node-0002": f"{REPO}:1.0.0",
    }
    for node, image in expected.items():
        assert set(pulled(d, node)) == {image}
        assert d.entries("scr", node) == {"tuning|1.0.0": ("config", "complete")}
        assert selection(d, node)["tuning"]["image"] == image
        assert d.node_status("scr", node) == "complete"
    assert selection(d, "node-0000")["tuning"]["matched"] == "compatibilities[0] (ubuntu 22.04)"
    assert pulled(d, "node-0003") == []
    assert d.node_status("scr", "node-0003") == "blocked"
    assert "no compatible image" in selection(d, "node-0003")["tuning"]["unmatched"]
    skipped = condition(d, statuses.CONDITION_NO_COMPATIBLE_IMAGE)
    assert skipped["status"] == "True" and "node-0003" in skipped["message"]


def test_a_new_choice_reruns_the_package_like_a_new_version() -> None:
    d = driver()
    d.sim.add_skyhook(
        "scr",
        {
            **SEL,
            "packages": {"tuning": package(image=REPO, imageCompatibility={"inline": ARTIFACT})},
        },
    )
    d.run()
    before = len(d.sim.created_pods)
    d.sim.nodes["node-0000"]["metadata"]["labels"][OS_VERSION] = "24.04"
    d.run()
    reran = [pod_stage(p) for p in d.sim.created_pods[before:]]
    assert reran == [
        ("node-0000", "tuning|1.0.0", "upgrade"),
        ("node-0000", "tuning|1.0.0", "config"),
    ]
    assert pulled(d, "node-0000")[-1] == f"{REPO}:1.0.0-ubuntu24"
    assert selection(d, "node-0000")["tuning"]["image"] == f"{REPO}:1.0.0-ubuntu24"
    assert d.entries("scr", "node-0000") == {"tuning|1.0.0": ("config", "complete")}


def test_a_node_that_gains_a_match_is_no_longer_skipped() -> None:
    d = driver()
    d.sim.add_skyhook(
        "scr",
        {
            **SEL,
            "packages": {"tuning": package(image=REPO, imageCompatibility={"inline": ARTIFACT})},
        },
    )
    d.run()
    d.sim.nodes["node-0003"]["metadata"]["labels"].update({OS_ID: "rhel", OS_VERSION: "9"})
    d.run()
    assert set(pulled(d, "node-0003")) == {f"{REPO}:1.0.0"}
    assert "unmatched" not in selection(d, "node-0003")["tuning"]
    assert condition(d, statuses.CONDITION_NO_COMPATIBLE_IMAGE)["status"] == "False"
    assert d.status("scr")["status"] == "complete"


@pytest.mark.parametrize(
    ("fetched", "message"),
    [
        pytest.param(
            None, "package tuning: oci:registry.local/compat:v1 not fetched yet", id="not-fetched"
        ),
        pytest.param(
            "OCI artifact registry.local/compat:v1: 404 not found",
            "package tuning: OCI artifact registry.local/compat:v1: 404 not found",
            id="registry-error",
        ),
    ],
)
def test_an_unavailable_artifact_blocks_the_skyhook(fetched: str | None, message: str) -> None:
    d = driver()
    if fetched is not None:
        d.sim.image_artifacts["oci:registry.local/compat:v1"] = fetched
    d.sim.add_skyhook(
        "scr",
        {
            **SEL,
            "packages": {
                "tuning": package(
                    image=REPO, imageCompatibility={"ref": "registry.local/compat:v1"}
                )
            },
        },
    )
    d.step()
    assert d.sim.created_pods == []
    assert d.status("scr")["status"] == "blocked"
    found = condition(d, statuses.CONDITION_IMAGE_COMPATIBILITY)
    assert found["status"] == "True" and found["message"] == message
    d.sim.image_artifacts["oci:registry.local/compat:v1"] = parse(ARTIFACT)
    d.run()
    assert set(pulled(d, "node-0001")) == {f"{REPO}:1.0.0-ubuntu24"}
    assert all(
        c["type"] != statuses.CONDITION_IMAGE_COMPATIBILITY for c in d.status("scr")["conditions"]
    )


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.sampled_from(OSES), min_size=1, max_size=4),
    st.lists(st.sampled_from(range(3)), min_size=1, max_size=3, unique=True),
)
def test_every_node_ends_with_its_chosen_image_or_skipped(
    node_oses: list[tuple[str, str]], offered: list[int]
) -> None:
    body = {
        "version": "v1alpha1",
        "compatibilities": [ARTIFACT["compatibilities"][i] for i in offered],
    }
    d = Driver(len(node_oses), {"role": "gpu"})
    for node, (os_id, version) in zip(sorted(d.sim.nodes), node_oses, strict=True):
        d.sim.nodes[node]["metadata"]["labels"].update({OS_ID: os_id, OS_VERSION: version})
    d.sim.add_skyhook(
        "scr",
        {**SEL, "packages": {"tuning": package(image=REPO, imageCompatibility={"inline": body})}},
    )
    d.run()
    artifact = parse(body)
    for node in d.sim.nodes:
        choice = choose(artifact, d.sim.nodes[node]["metadata"]["labels"])
        if isinstance(choice, Choice):
            assert set(pulled(d, node)) == {pinned(choice.image, "1.0.0")}
            assert d.node_status("scr", node) == "complete"
        else:
            assert pulled(d, node) == []
            assert selection(d, node)["tuning"]["unmatched"] == choice.reason
