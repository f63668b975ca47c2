"""Decoding and validating a Skyhook spec: every error names its field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from skyhook_planner.model.spec import (
    SpecError,
    decode_spec,
    find_cycle,
    normalising_patch,
    parse_quantity,
)
from skyhook_schemas.durations import parse_duration

DEMO = Path("/work/shared/examples/demo-scr.yaml")


def pkg(**extra: Any) -> dict[str, Any]:
    return {"version": "1.0.0", "image": "ghcr.io/nvidia/skyhook/agentless", **extra}


def errors_of(spec: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as caught:
        decode_spec(spec)
    return caught.value.messages


def test_demo_scr_decodes() -> None:
    spec = decode_spec(yaml.safe_load(DEMO.read_text())["spec"])
    tuning = spec.packages["tuning"]
    assert tuning.version == "1.1.0"
    assert tuning.image == "ghcr.io/nvidia/skyhook-packages/shellscript"
    assert set(tuning.config_map) == {"apply.sh", "apply_check.sh", "config.sh", "config_check.sh"}
    assert spec.priority == 200
    assert spec.node_selector.matches({"skyhook.nvidia.com/test-node": "demo"})
    assert not spec.node_selector.matches({})


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            {"packages": {"tuning": pkg(version="1.2.3.4")}},
            "spec.packages.tuning.version: '1.2.3.4' is not a semver version",
            id="four-parts",
        ),
        pytest.param(
            {"packages": {"tuning": pkg(version="latest")}},
            "spec.packages.tuning.version: 'latest' is not a semver version",
            id="not-a-version",
        ),
        pytest.param(
            {"packages": {"tuning": {"image": "x"}}},
            "spec.packages.tuning.version: required",
            id="no-version",
        ),
        pytest.param(
            {"packages": {"tuning": pkg(image="")}},
            "spec.packages.tuning.image: required",
            id="no-image",
        ),
        pytest.param(
            {"packages": {"tuning": pkg(image="repo/img@sha256:" + "ab" * 32)}},
            "spec.packages.tuning.image: 'repo/img@sha256:",
            id="image-digest",
        ),
        pytest.param(
            {"packages": {"t": pkg()}},
            "spec.packages.t: package name 't' must match",
            id="short-name",
        ),
        pytest.param(
            {"packages": {"tuning": pkg(name="other")}},
            "spec.packages.tuning.name: 'other' differs from the package key",
            id="name-differs",
        ),
        pytest.param(
            {"packages": {"tuning": pkg(resources={"cpuRequest": "100m"})}},
            "spec.packages.tuning.resources: if any resource override is set, all four must be; "
            "missing cpuLimit, memoryRequest, memoryLimit",
            id="resources-partial",
        ),
        pytest.param(
            {
                "packages": {
                    "tuning": pkg(
                        resources={
                            "cpuRequest": "1",
                            "cpuLimit": "500m",
                            "memoryRequest": "1Gi",
                            "memoryLimit": "2Gi",
                        }
                    )
                }
            },
            "spec.packages.tuning.resources.cpuLimit: '500m' must be >= cpuRequest ('1')",
            id="limit-below-request",
        ),
        pytest.param(
            {
                "packages": {
                    "tuning": pkg(
                        resources={
                            "cpuRequest": "0",
                            "cpuLimit": "1",
                            "memoryRequest": "1Gi",
                            "memoryLimit": "2Gi",
                        }
                    )
                }
            },
            "spec.packages.tuning.resources.cpuRequest: '0' must be positive",
            id="zero-resource",
        ),
        pytest.param(
            {
                "packages": {
                    "tuning": pkg(
                        configMap={"a.sh": "x"}, configInterrupts={"b.sh": {"type": "reboot"}}
                    )
                }
            },
            "spec.packages.tuning.configInterrupts.b.sh: 'b.sh' is not a key of spec.packages.tuning.configMap",
            id="config-interrupt-missing-key",
        ),
        pytest.param(
            {
                "packages": {
                    "tuning": pkg(
                        configMap={"a.sh": "x"}, configInterrupts={"*.conf": {"type": "reboot"}}
                    )
                }
            },
            "spec.packages.tuning.configInterrupts.*.conf: glob '*.conf' matches no configMap key",
            id="config-interrupt-glob",
        ),
        pytest.param(
            {"packages": {"tuning": pkg(interrupt={"type": "kexec"})}},
            "spec.packages.tuning.interrupt.type: 'kexec' is not one of service, reboot, noop, restartAllServices",
            id="interrupt-type",
        ),
        pytest.param(
            {"packages": {"tuning": pkg(dependsOn={"base": "1.0.0"})}},
            "spec.packages.tuning.dependsOn.base: no package 'base' in spec.packages",
            id="depends-missing",
        ),
        pytest.param(
            {"packages": {"tuning": pkg(dependsOn={"base": "2.0.0"}), "base": pkg()}},
            "spec.packages.tuning.dependsOn.base: base|2.0.0 does not exist",
            id="depends-wrong-version",
        ),
        pytest.param(
            {
                "packages": {
                    "aa": pkg(dependsOn={"bb": "1.0.0"}),
                    "bb": pkg(dependsOn={"cc": "1.0.0"}),
                    "cc": pkg(dependsOn={"aa": "1.0.0"}),
                }
            },
            "spec.packages.aa.dependsOn: dependsOn cycle: aa -> bb -> cc -> aa",
            id="depends-cycle",
        ),
        pytest.param(
            {"interruptionBudget": {"percent": 10, "count": 1}},
            "spec.interruptionBudget: set percent or count, not both",
            id="budget-both",
        ),
        pytest.param(
            {"interruptionBudget": {"percent": 101}},
            "spec.interruptionBudget.percent: 101 is out of range (allowed 0..100)",
            id="budget-percent-range",
        ),
        pytest.param(
            {"deploymentPolicy": "p", "interruptionBudget": {"count": 1}},
            "spec.deploymentPolicy: deploymentPolicy and interruptionBudget are mutually exclusive",
            id="policy-and-budget",
        ),
        pytest.param(
            {"priority": 0}, "spec.priority: 0 is out of range (allowed >= 1)", id="priority"
        ),
        pytest.param(
            {"nodeSelectors": {"matchExpressions": [{"key": "a", "operator": "Near"}]}},
            "spec.nodeSelectors.matchExpressions[0].operator: 'Near' is not one of In, NotIn, Exists, DoesNotExist",
            id="selector-operator",
        ),
        pytest.param(
            {"packages": {"tuning": pkg(gracefulShutdown="soon")}},
            "spec.packages.tuning.gracefulShutdown: 'soon' is not a duration",
            id="grace-duration",
        ),
        pytest.param(
            {"packages": {"tuning": pkg(stageTimeout="-5m")}},
            "spec.packages.tuning.stageTimeout: must be greater than or equal to 0",
            id="stage-timeout-negative",
        ),
        pytest.param(
            {"packages": {"tuning": pkg(stageTimeout="a while")}},
            "spec.packages.tuning.stageTimeout: 'a while' is not a duration",
            id="stage-timeout-not-a-duration",
        ),
    ],
)
def test_errors_name_the_field(spec: dict[str, Any], expected: str) -> None:
    messages = errors_of(spec)
    assert any(m.startswith(expected) for m in messages), messages


@pytest.mark.parametrize(
    ("given", "seconds"),
    [
        pytest.param({}, None, id="unset"),
        pytest.param({"stageTimeout": "0"}, 0.0, id="zero"),
        pytest.param({"stageTimeout": "1h30m"}, 5400.0, id="go-duration"),
        pytest.param({"stageTimeout": "+45s"}, 45.0, id="signed"),
    ],
)
def test_stage_timeout(given: dict[str, Any], seconds: float | None) -> None:
    spec = decode_spec({"packages": {"tuning": pkg(**given)}})
    assert spec.packages["tuning"].stage_timeout_s == seconds


def test_all_errors_are_reported_together() -> None:
    messages = errors_of({"priority": 0, "packages": {"tuning": pkg(version="1.2.3.4", image="")}})
    assert len(messages) == 3


@pytest.mark.parametrize(
    ("graph", "cycle"),
    [
        pytest.param({"a": (), "b": ("a",)}, None, id="dag"),
        pytest.param({"a": ("a",)}, ["a", "a"], id="self"),
        pytest.param({"a": ("b",), "b": ("a",), "c": ()}, ["a", "b", "a"], id="pair"),
    ],
)
def test_find_cycle(graph: dict[str, tuple[str, ...]], cycle: list[str] | None) -> None:
    assert find_cycle(graph) == cycle


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("46s", 46),
        ("2m", 120),
        ("1h30m", 5400),
        ("1.5s", 1.5),
        ("", None),
        ("5", None),
        ("m", None),
    ],
)
def test_parse_duration(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", "0.5"),
        ("1", "1"),
        ("1Gi", str(2**30)),
        ("2k", "2000"),
        ("1e3", "1000"),
        ("abc", None),
    ],
)
def test_parse_quantity(text: str, value: str | None) -> None:
    parsed = parse_quantity(text)
    assert (None if parsed is None else parsed.normalize()) == (
        None if value is None else type(parsed)(value).normalize()
    )


def test_defaults() -> None:
    spec = decode_spec({})
    assert (spec.priority, spec.serial, spec.runtime_required) == (200, False, False)
    assert spec.budget.percent is None and spec.budget.count is None
    assert spec.node_selector.empty and spec.node_selector.matches({"any": "thing"})


@pytest.mark.parametrize(
    ("package", "version", "image", "warning"),
    [
        pytest.param(
            pkg(version="1.2"),
            "1.2",
            "ghcr.io/nvidia/skyhook/agentless",
            "spec.packages.tuning.version: version '1.2' is not strict SemVer",
            id="shorthand-version",
        ),
        pytest.param(
            pkg(version="v1.2.3"),
            "v1.2.3",
            "ghcr.io/nvidia/skyhook/agentless",
            "spec.packages.tuning.version: version 'v1.2.3' is not strict SemVer",
            id="v-prefix",
        ),
        pytest.param(
            pkg(image="repo/img:0.9.0"),
            "1.0.0",
            "repo/img",
            "spec.packages.tuning.image: image tag '0.9.0' differs from version '1.0.0'",
            id="image-tag-differs",
        ),
        pytest.param(
            pkg(image="registry.local:5000/team/img:1.0.0"),
            "1.0.0",
            "registry.local:5000/team/img",
            None,
            id="registry-port-and-same-tag",
        ),
    ],
)
def test_upstream_spellings_run_with_a_warning(
    package: dict[str, Any], version: str, image: str, warning: str | None
) -> None:
    """What upstream's operator runs, ours runs: the version as written, the image's repository."""
    spec = decode_spec({"packages": {"tuning": package}})
    decoded = spec.packages["tuning"]
    assert (decoded.version, decoded.image) == (version, image)
    if warning is None:
        assert spec.warnings == ()
    else:
        assert any(w.startswith(warning) for w in spec.warnings), spec.warnings


COMPAT = {
    "version": "v1alpha1",
    "compatibilities": [
        {
            "tag": "repo/p:1",
            "rules": [{"matchFeatures": [{"matchExpressions": {"os": {"op": "Exists"}}}]}],
        }
    ],
}


@pytest.mark.parametrize(
    ("given", "source"),
    [
        pytest.param({"inline": COMPAT}, "inline", id="inline"),
        pytest.param(
            {"configMapRef": {"name": "compat", "key": "a.json"}},
            "configmap:compat/a.json",
            id="configmap",
        ),
        pytest.param(
            {"ref": "registry.local:5000/compat:v1"}, "oci:registry.local:5000/compat:v1", id="oci"
        ),
    ],
)
def test_image_compatibility_sources(given: dict[str, Any], source: str) -> None:
    package = decode_spec({"packages": {"pk": pkg(imageCompatibility=given)}}).packages["pk"]
    assert package.image_compatibility is not None
    assert package.image_compatibility.source == source


@pytest.mark.parametrize(
    ("given", "message"),
    [
        pytest.param(
            {},
            "spec.packages.pk.imageCompatibility: exactly one of inline, configMapRef, ref",
            id="none",
        ),
        pytest.param({"inline": COMPAT, "ref": "r/x:1"}, "exactly one of", id="two"),
        pytest.param(
            {"ref": "r/x:bad tag"}, "spec.packages.pk.imageCompatibility.ref: ", id="bad-ref"
        ),
        pytest.param(
            {"configMapRef": {"name": "x"}},
            "imageCompatibility.configMapRef: name and key are required",
            id="no-key",
        ),
        pytest.param(
            {"inline": {"version": "v1alpha1", "compatibilities": [{"rules": []}]}},
            "spec.packages.pk.imageCompatibility.inline.compatibilities[0].tag: required",
            id="inline-malformed",
        ),
    ],
)
def test_image_compatibility_errors_name_the_field(given: dict[str, Any], message: str) -> None:
    assert any(message in m for m in errors_of({"packages": {"pk": pkg(imageCompatibility=given)}}))


def test_packages_without_image_compatibility_are_unchanged() -> None:
    assert decode_spec({"packages": {"pk": pkg()}}).packages["pk"].image_compatibility is None


def test_the_normalising_patch_names_packages_and_drops_image_tags() -> None:
    raw = {
        "packages": {
            "tools": {"version": "1.0.0", "image": "host:5000/team/tools:1.0.0"},
            "named": {"name": "named", "version": "2.0.0", "image": "ghcr.io/x/named"},
        }
    }
    assert normalising_patch(raw) == {
        "packages": {"tools": {"name": "tools", "image": "host:5000/team/tools"}}
    }
    assert normalising_patch({"packages": {"named": raw["packages"]["named"]}}) is None
    assert normalising_patch({"packages": "not a map"}) is None
