"""A spec whose values Kubernetes would refuse in the pods and ConfigMaps built from it is refused
while decoding, naming the field, so admission refuses it (and the planner reports it when the
webhooks are off) instead of the apiserver refusing every pod or ConfigMap write afterwards."""

from __future__ import annotations

from typing import Any

import pytest

from skyhook_planner import podbuilder
from skyhook_planner.model.apirules import (
    MAX_CONFIG_MAP_BYTES,
    config_map_key_problem,
    env_name_problem,
)
from skyhook_planner.model.settings import PlannerSettings
from skyhook_planner.model.snapshot import SkyhookView
from skyhook_planner.model.spec import SpecError, decode_spec
from skyhook_planner.sim.driver import Driver

DIGEST = "sha256:" + "0123456789abcdef" * 4


def pkg(**fields: Any) -> dict[str, Any]:
    return {"version": "1.0.0", "image": "example.com/foo", **fields}


def spec(**foo: Any) -> dict[str, Any]:
    return {"packages": {"foo": pkg(**foo)}}


def tolerations(*given: dict[str, Any]) -> dict[str, Any]:
    return {"additionalTolerations": list(given), "packages": {"foo": pkg()}}


BAD = [
    # images
    pytest.param(
        spec(agentImageOverride="Example.com/Agent:1"),
        "spec.packages.foo.agentImageOverride: 'Example.com/Agent:1': repository",
        id="agent-image-uppercase-path",
    ),
    pytest.param(
        spec(agentImageOverride="example.com/agent:"),
        "spec.packages.foo.agentImageOverride: 'example.com/agent:': tag ''",
        id="agent-image-empty-tag",
    ),
    pytest.param(
        spec(containerSHA="sha256:abc"),
        "spec.packages.foo.containerSHA: digest 'sha256:abc' is not valid: sha256 takes 64",
        id="container-sha-short",
    ),
    pytest.param(
        spec(containerSHA="0123456789abcdef" * 4),
        "spec.packages.foo.containerSHA: digest '0123",
        id="container-sha-without-algorithm",
    ),
    # environment variables
    pytest.param(
        spec(env=[{"name": "", "value": "x"}]),
        "spec.packages.foo.env[0].name: required",
        id="env-empty-name",
    ),
    pytest.param(
        spec(env=[{"value": "x"}]),
        "spec.packages.foo.env[0].name: required",
        id="env-no-name",
    ),
    pytest.param(
        spec(env=[{"name": "OK"}, {"name": "A=B", "value": "x"}]),
        "spec.packages.foo.env[1].name: 'A=B' is not a valid environment variable name",
        id="env-name-with-equals",
    ),
    pytest.param(
        spec(env=[{"name": "A\tB"}]),
        "spec.packages.foo.env[0].name: 'A\\tB' is not a valid",
        id="env-name-control-character",
    ),
    pytest.param(
        spec(env=[{"name": "CAFÉ"}]),
        "spec.packages.foo.env[0].name: 'CAFÉ' is not a valid",
        id="env-name-not-ascii",
    ),
    pytest.param(
        spec(
            env=[
                {
                    "name": "N",
                    "value": "x",
                    "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                }
            ]
        ),
        "spec.packages.foo.env[0].valueFrom: must not be set together with a non-empty value",
        id="env-value-and-value-from",
    ),
    pytest.param(
        spec(env=[{"name": "N", "valueFrom": {}}]),
        "spec.packages.foo.env[0].valueFrom: must set one of fieldRef",
        id="env-value-from-empty",
    ),
    pytest.param(
        spec(
            env=[
                {
                    "name": "N",
                    "valueFrom": {
                        "fieldRef": {"fieldPath": "spec.nodeName"},
                        "secretKeyRef": {"name": "s", "key": "k"},
                    },
                }
            ]
        ),
        "spec.packages.foo.env[0].valueFrom: sets fieldRef, secretKeyRef; exactly one",
        id="env-value-from-two-sources",
    ),
    pytest.param(
        spec(env=[{"name": "N", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "a/b"}}}]),
        "spec.packages.foo.env[0].valueFrom.configMapKeyRef.key: key 'a/b' is not a valid",
        id="env-config-map-key-ref-bad-key",
    ),
    pytest.param(
        spec(env=[{"name": "N", "valueFrom": {"secretKeyRef": {"name": "Bad_Name", "key": "k"}}}]),
        "spec.packages.foo.env[0].valueFrom.secretKeyRef.name: 'Bad_Name' is not a valid",
        id="env-secret-key-ref-bad-name",
    ),
    pytest.param(
        spec(env=[{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "spec.hostname"}}}]),
        "spec.packages.foo.env[0].valueFrom.fieldRef.fieldPath: 'spec.hostname' is not a pod field",
        id="env-field-ref-unknown-field",
    ),
    pytest.param(
        spec(env=[{"name": "N", "valueFrom": {"resourceFieldRef": {"resource": "limits.gpu"}}}]),
        "spec.packages.foo.env[0].valueFrom.resourceFieldRef.resource: 'limits.gpu' is not one of",
        id="env-resource-field-ref-unknown",
    ),
    # tolerations
    pytest.param(
        tolerations(
            {"key": "a", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}
        ),
        "spec.additionalTolerations[0].effect: must be NoExecute when tolerationSeconds is set",
        id="toleration-seconds-without-no-execute",
    ),
    pytest.param(
        tolerations({"key": "a", "operator": "Exists", "tolerationSeconds": 5}),
        "spec.additionalTolerations[0].effect: must be NoExecute when tolerationSeconds is set",
        id="toleration-seconds-without-effect",
    ),
    pytest.param(
        tolerations({"operator": "Equal", "value": "x"}),
        "spec.additionalTolerations[0].operator: must be Exists when key is empty",
        id="toleration-equal-without-key",
    ),
    pytest.param(
        tolerations({"operator": "Exists"}, {"key": "bad key!", "operator": "Exists"}),
        "spec.additionalTolerations[1].key: label key 'bad key!'",
        id="toleration-bad-key",
    ),
    pytest.param(
        tolerations({"key": "a", "operator": "Equal", "value": "not a label value"}),
        "spec.additionalTolerations[0].value: label value 'not a label value'",
        id="toleration-bad-value",
    ),
    # configMap
    pytest.param(
        spec(configMap={"ok.conf": "a", "etc/passwd": "b"}),
        "spec.packages.foo.configMap.etc/passwd: key 'etc/passwd' is not a valid ConfigMap key",
        id="config-map-key-with-slash",
    ),
    pytest.param(
        spec(configMap={"..data": "b"}),
        "spec.packages.foo.configMap...data: key '..data' is not a valid ConfigMap key",
        id="config-map-key-dot-dot",
    ),
    pytest.param(
        spec(configMap={"big": "x" * (2 * MAX_CONFIG_MAP_BYTES)}),
        "spec.packages.foo.configMap: keys and values come to 2097155 bytes; the package's "
        "ConfigMap holds at most 1048576 (1 MiB)",
        id="config-map-over-1-mib",
    ),
    # interrupts
    pytest.param(
        spec(interrupt={"type": "service", "services": [""]}),
        "spec.packages.foo.interrupt.services[0]: required",
        id="interrupt-empty-service-name",
    ),
    pytest.param(
        spec(configMap={"a": "1"}, configInterrupts={"a": {"type": "service", "services": [""]}}),
        "spec.packages.foo.configInterrupts.a.services[0]: required",
        id="config-interrupt-empty-service-name",
    ),
    pytest.param(
        spec(interrupt={"type": "service"}),
        "spec.packages.foo.interrupt.services: required when type is service",
        id="interrupt-service-without-services",
    ),
    pytest.param(
        spec(configMap={"a": "1"}, configInterrupts={"a": {"type": "service", "services": []}}),
        "spec.packages.foo.configInterrupts.a.services: required when type is service",
        id="config-interrupt-service-without-services",
    ),
    pytest.param(
        spec(interrupt={"type": "reboot", "services": ["containerd"]}),
        "spec.packages.foo.interrupt.services: must be empty when type is reboot",
        id="interrupt-reboot-with-services",
    ),
    pytest.param(
        spec(configMap={"a": "1"}, configInterrupts={"a": {"type": "reboot", "services": ["x"]}}),
        "spec.packages.foo.configInterrupts.a.services: must be empty when type is reboot",
        id="config-interrupt-reboot-with-services",
    ),
    # dependsOn
    pytest.param(
        {
            "packages": {
                "foo": pkg(dependsOn={"bar": "1.0.0"}),
                "bar": pkg(dependsOn={"foo": "1.0.0"}),
            }
        },
        "spec.packages.bar.dependsOn: dependsOn cycle: bar -> foo -> bar",
        id="depends-on-cycle",
    ),
]


@pytest.mark.parametrize(("raw", "expected"), BAD)
def test_values_kubernetes_refuses_are_refused_naming_the_field(
    raw: dict[str, Any], expected: str
) -> None:
    with pytest.raises(SpecError) as refused:
        decode_spec(raw)
    assert any(line.startswith(expected) for line in refused.value.messages), refused.value.messages


@pytest.mark.parametrize(("raw", "expected"), BAD)
def test_with_the_webhooks_off_the_planner_reports_them_and_runs_nothing(
    raw: dict[str, Any], expected: str
) -> None:
    driver = Driver(1)
    driver.sim.add_skyhook("scr", raw)
    driver.run()
    assert driver.sim.created_pods == []
    status = driver.status("scr")
    assert status["status"] == "blocked"
    invalid = [c["message"] for c in status["conditions"] if c["type"].endswith("SpecInvalid")]
    assert expected in invalid[0]


@pytest.mark.parametrize(
    "name", ["PATH", "_x", "a.b-c", "1ST", "with space", "~!@#$%^&*()", "x" * 300]
)
def test_env_names_kubernetes_takes(name: str) -> None:
    assert env_name_problem(name) is None


@pytest.mark.parametrize("key", ["a", "a.conf", "-_.x", ".hidden", "x" * 253])
def test_config_map_keys_kubernetes_takes(key: str) -> None:
    assert config_map_key_problem(key) is None


@pytest.mark.parametrize("key", ["", ".", "..", "..x", "a b", "x" * 254, "ü"])
def test_config_map_keys_kubernetes_refuses(key: str) -> None:
    assert config_map_key_problem(key) is not None


# Every field a Skyhook may set, each with a value Kubernetes takes in the pods built from it.
EVERY_FIELD: dict[str, Any] = {
    "nodeSelectors": {
        "matchLabels": {"role": "gpu"},
        "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}],
    },
    "podNonInterruptLabels": {"matchLabels": {"app": "training"}},
    "interruptionBudget": {"percent": 25},
    "additionalTolerations": [
        {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
        {
            "key": "dedicated",
            "operator": "Equal",
            "value": "ml",
            "effect": "NoExecute",
            "tolerationSeconds": 30,
        },
        {"operator": "Exists"},
    ],
    "runtimeRequired": True,
    "autoTaintNewNodes": True,
    "priority": 150,
    "serial": True,
    "pause": False,
    "packages": {
        "foo": {
            "version": "1.2.3",
            "image": "registry.example.com:5000/team/foo",
            "containerSHA": DIGEST,
            "agentImageOverride": "registry.example.com:5000/team/agent:6.4.1",
            "interrupt": {"type": "service", "services": ["containerd", "kubelet"]},
            "configMap": {"settings.conf": "a=1", "extra.sh": "echo hi", ".hidden": ""},
            "configInterrupts": {
                "settings.conf": {"type": "reboot"},
                "*.sh": {"type": "service", "services": ["containerd"]},
            },
            "env": [
                {"name": "PLAIN", "value": "x"},
                {"name": "with.dots and space", "value": ""},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {
                    "name": "ZONE",
                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['zone']"}},
                },
                {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}},
                {"name": "CM", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k.conf"}}},
                {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}},
            ],
            "resources": {
                "cpuRequest": "100m",
                "cpuLimit": "500m",
                "memoryRequest": "64Mi",
                "memoryLimit": "128Mi",
            },
            "gracefulShutdown": "30s",
        },
        "bar": {
            "version": "2.0.0",
            "image": "example.com/bar",
            "dependsOn": {"foo": "1.2.3"},
            "interrupt": {"type": "reboot"},
        },
    },
}


def test_a_spec_using_every_field_decodes_without_problems() -> None:
    decoded = decode_spec(EVERY_FIELD)
    assert sorted(decoded.packages) == ["bar", "foo"]
    view = SkyhookView(name="every-field", uid="u", generation=1, spec=decoded)
    pod = podbuilder.build_stage_pod(PlannerSettings(), view, decoded.packages["foo"], "n", "apply")
    assert pod["spec"]["initContainers"][1]["env"][:7] == EVERY_FIELD["packages"]["foo"]["env"]


def test_auto_taint_without_runtime_required_is_admitted_with_a_warning() -> None:
    decoded = decode_spec({**EVERY_FIELD, "runtimeRequired": False})
    assert decoded.auto_taint_new_nodes
    assert any(w.startswith("spec.autoTaintNewNodes: has no effect") for w in decoded.warnings)
    assert not decode_spec(EVERY_FIELD).warnings
