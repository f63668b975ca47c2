"""Every bad Skyhook is refused at `kubectl create` naming its field, through the sandbox
apiserver and the operator's webhooks; a Skyhook using every field still admitted is created,
and the pods and ConfigMap the planner builds from it are ones the apiserver takes."""

from __future__ import annotations

import copy
import subprocess
from typing import Any

import yaml
from unit.admission_cases import BAD_SKYHOOKS

from skyhook_planner import podbuilder
from skyhook_planner.model.settings import PlannerSettings
from skyhook_planner.model.snapshot import SkyhookView
from skyhook_schemas import keys

from .conftest import NAMESPACE
from .helpers import Cluster

MIB = 1024 * 1024
FOO = {"version": "1.0.0", "image": "example.com/foo"}
DIGEST = "sha256:" + "0123456789abcdef" * 4

# Every field a Skyhook may set, each with a value the apiserver takes in our pods.
EVERY_FIELD: dict[str, Any] = {
    "apiVersion": keys.API_VERSION,
    "kind": keys.KIND,
    "metadata": {"name": "every-field"},
    "spec": {
        "nodeSelectors": {
            "matchLabels": {"admission-every-field": "yes"},
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
        "packages": {
            "foo": {
                "version": "1.2.3",
                "image": "registry.example.com:5000/team/foo",
                "containerSHA": DIGEST,
                "agentImageOverride": "registry.example.com:5000/team/agent:6.4.1",
                "interrupt": {"type": "service", "services": ["containerd", "kubelet"]},
                "configMap": {
                    "settings.conf": "a=1",
                    "extra.sh": "echo hi",
                    ".hidden": "",
                    # Just under the limit once the other keys and values are counted.
                    "large.bin": "x" * (MIB - 200),
                },
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
                    {
                        "name": "MEM",
                        "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}},
                    },
                    {
                        "name": "CM",
                        "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k.conf"}},
                    },
                    {
                        "name": "SECRET",
                        "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}},
                    },
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
    },
}


def kubectl_create(sandbox: Any, body: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(sandbox.kubeconfig), "create", "-f", "-"],
        input=yaml.safe_dump(body),
        capture_output=True,
        text=True,
        check=False,
    )


def test_every_bad_skyhook_is_refused_at_kubectl_create_naming_its_field(
    cluster: Cluster, sandbox: Any
) -> None:
    wrong = []
    for case in BAD_SKYHOOKS:
        refused = kubectl_create(sandbox, case.body)
        if refused.returncode == 0:
            cluster.skyhooks.append(case.body["metadata"]["name"])
            wrong.append(f"{case.id}: created")
        elif case.field not in refused.stderr:
            wrong.append(f"{case.id}: expected {case.field!r} in {refused.stderr!r}")
    assert wrong == []
    # Larger than a webhook request used to be allowed to be: refused by us, not by the server.
    large = copy.deepcopy(BAD_SKYHOOKS[0].body)
    large["metadata"]["name"] = "configmap-2mib"
    large["spec"] = {"packages": {"foo": {**FOO, "configMap": {"big": "x" * 2 * MIB}}}}
    refused = kubectl_create(sandbox, large)
    assert refused.returncode == 1
    assert 'admission webhook "validate-skyhook.nvidia.com" denied the request' in refused.stderr
    assert (
        "spec.packages.foo.configMap: keys and values come to 2097155 bytes; the package's "
        "ConfigMap holds at most 1048576 (1 MiB)"
    ) in refused.stderr
    assert len(refused.stderr) < 10_000  # the value itself is not echoed back


def test_every_field_still_admitted_is_created_and_kubernetes_takes_its_pods(
    cluster: Cluster, sandbox: Any
) -> None:
    # The one Secret of the operator's namespace its packages may read.
    cluster.operator.stop()
    cluster.operator = cluster.start_operator(SKYHOOK_PACKAGE_SECRETS="s")
    cluster.skyhooks.append("every-field")
    created = kubectl_create(sandbox, EVERY_FIELD)
    assert created.returncode == 0, created.stderr
    assert "Warning:" not in created.stderr
    view = SkyhookView.from_api(cluster.get_skyhook("every-field"))
    assert view.spec is not None, view.spec_errors
    settings = PlannerSettings(namespace=NAMESPACE)
    foo, bar = view.spec.packages["foo"], view.spec.packages["bar"]
    assert foo.interrupt is not None
    kube = cluster.kube
    built = [
        podbuilder.build_stage_pod(settings, view, foo, "no-such-node", "apply"),
        podbuilder.build_stage_pod(settings, view, bar, "no-such-node", "config"),
        podbuilder.build_interrupt_pod(settings, view, foo, "no-such-node", foo.interrupt),
    ]
    for pod in built:  # a server-side dry run: validated and admitted, never stored
        kube.request("POST", kube.namespaced_path("pods", NAMESPACE), pod, query={"dryRun": "All"})
    configmap = podbuilder.build_package_configmap(settings, view, foo)
    kube.request(
        "POST", kube.namespaced_path("configmaps", NAMESPACE), configmap, query={"dryRun": "All"}
    )
    # Upstream admits autoTaintNewNodes alone (and ignores it): admitted, with a warning.
    alone = copy.deepcopy(BAD_SKYHOOKS[0].body)
    alone["metadata"]["name"] = "auto-taint-alone"
    alone["spec"] = {"autoTaintNewNodes": True, "packages": {"foo": FOO}}
    cluster.skyhooks.append("auto-taint-alone")
    created = kubectl_create(sandbox, alone)
    assert created.returncode == 0, created.stderr
    assert "Warning: spec.autoTaintNewNodes: has no effect without spec.runtimeRequired" in (
        created.stderr
    )
