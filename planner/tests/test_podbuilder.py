"""Stage and interrupt pods look exactly like upstream's."""

from __future__ import annotations

import base64
import json
import re
from dataclasses import replace

import pytest

from skyhook_planner import podbuilder
from skyhook_planner.model.settings import PlannerSettings
from skyhook_planner.model.snapshot import NodeView, PodView, SkyhookView
from skyhook_planner.model.spec import Interrupt, decode_spec
from skyhook_schemas import keys
from skyhook_schemas.podpackage import PodPackage

SETTINGS = PlannerSettings()
DIGEST = "sha256:" + "ab" * 32


def scr(**package: object) -> SkyhookView:
    spec = decode_spec(
        {
            "additionalTolerations": [{"key": "gpu", "operator": "Exists"}],
            "packages": {
                "dexter": {
                    "version": "1.2.3",
                    "image": "ghcr.io/nvidia/skyhook/agentless",
                    **package,
                }
            },
        }
    )
    return SkyhookView("simple-skyhook", uid="u1", generation=2, spec=spec)


def test_safe_names_follow_upstream_examples() -> None:
    assert keys.safe_name(63, "metadata", "kind-worker") == "metadata-kind-worker-8bfc3f3a"
    name = podbuilder.stage_pod_name("simple-skyhook", "dexter", "1.2.3", "apply", "kind-worker")
    assert name.startswith("simple-skyhook-dexter-1-2-3-apply-kind-worker-")
    assert len(name) <= 63
    long = podbuilder.stage_pod_name("s" * 60, "p" * 43, "1.0.0", "post-interrupt", "n" * 60)
    assert len(long) == 63


def test_each_attempt_is_a_pod_of_its_own() -> None:
    view = scr()
    package = view.spec.packages["dexter"]  # type: ignore[union-attr]
    first = podbuilder.build_stage_pod(SETTINGS, view, package, "node-1", "apply")
    third = podbuilder.build_stage_pod(SETTINGS, view, package, "node-1", "apply", attempt=2)
    assert first["metadata"]["name"] == podbuilder.stage_pod_name(
        "simple-skyhook", "dexter", "1.2.3", "apply", "node-1"
    )
    assert keys.ATTEMPT_ANNOTATION not in first["metadata"]["annotations"]
    assert third["metadata"]["name"] != first["metadata"]["name"]
    assert len(third["metadata"]["name"]) <= 63
    assert third["metadata"]["annotations"][keys.ATTEMPT_ANNOTATION] == "2"
    assert podbuilder.pod_attempt(PodView.from_api(third)) == 2
    assert podbuilder.pod_attempt(PodView.from_api(first)) == 0


@pytest.mark.parametrize(
    ("stage_timeout", "default", "deadline"),
    [
        pytest.param(None, 3600.0, 3600, id="unset-the-operator-default"),
        pytest.param("30m", 3600.0, 1800, id="the-package-wins"),
        pytest.param("1.2s", 3600.0, 2, id="rounded-up"),
        pytest.param("1ns", 3600.0, 1, id="at-least-one-second"),
        pytest.param("0", 3600.0, None, id="zero-no-limit"),
        pytest.param(None, 0.0, None, id="default-zero-no-limit"),
        pytest.param("1000000h", 3600.0, 2147483647, id="clamped-to-int32"),
    ],
)
def test_stage_timeout_is_the_pods_active_deadline(
    stage_timeout: str | None, default: float, deadline: int | None
) -> None:
    view = scr(**({"stageTimeout": stage_timeout} if stage_timeout is not None else {}))
    package = view.spec.packages["dexter"]  # type: ignore[union-attr]
    settings = replace(SETTINGS, stage_timeout_s=default)
    stage = podbuilder.build_stage_pod(settings, view, package, "node-1", "apply")
    interrupt = podbuilder.build_interrupt_pod(
        settings, view, package, "node-1", Interrupt("reboot")
    )
    for pod in (stage, interrupt):
        assert pod["spec"].get("activeDeadlineSeconds") == deadline
    assert interrupt["spec"]["restartPolicy"] == "OnFailure"  # restarts in place after a reboot


def test_stage_pod_shape() -> None:
    view = scr(env=[{"name": "X", "value": "1"}], configMap={"a.sh": "x"}, gracefulShutdown="46s")
    pod = podbuilder.build_stage_pod(
        SETTINGS, view, view.spec.packages["dexter"], "node-1", "apply"
    )  # type: ignore[union-attr]
    spec = pod["spec"]
    assert (spec["nodeName"], spec["restartPolicy"], spec["hostPID"], spec["hostNetwork"]) == (
        "node-1",
        "Never",  # a retry is the planner's: a new pod, the failed one kept for its logs
        True,
        True,
    )
    assert spec["terminationGracePeriodSeconds"] == 46
    assert spec["activeDeadlineSeconds"] == 3600  # the operator's default stage timeout
    names = [c["name"] for c in spec["initContainers"]]
    assert names == ["dexter-init", "dexter-apply", "dexter-applycheck"]
    copy_dir = "/var/lib/skyhook/simple-skyhook/dexter-1.2.3-u1-2"
    assert spec["initContainers"][0]["image"] == "ghcr.io/nvidia/skyhook/agentless:1.2.3"
    assert spec["initContainers"][0]["env"] == [{"name": "SKYHOOK_DIR", "value": copy_dir}]
    assert spec["initContainers"][1]["args"] == ["apply", "/root", copy_dir]
    assert spec["initContainers"][2]["args"] == ["apply-check", "/root", copy_dir]
    env = spec["initContainers"][1]["env"]
    assert [e["name"] for e in env] == ["X", *podbuilder.OP_ENV_NAMES]
    assert env[-2]["value"] == "simple-skyhook-u1-2_dexter_1.2.3"
    assert env[-1] == {"name": "SKYHOOK_NODE_ORDER", "value": "0"}
    assert [t.get("key") for t in spec["tolerations"]] == [
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "skyhook.nvidia.com",
        "gpu",
    ]
    # A node NotReady for as long as a reboot takes keeps its pods: no tolerationSeconds.
    assert [t for t in spec["tolerations"] if t.get("effect") == "NoExecute"] == [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    ]
    mounts = {m["mountPath"]: m for m in spec["initContainers"][1]["volumeMounts"]}
    assert set(mounts) == {
        "/root",
        "/skyhook-package/node-metadata",
        "/skyhook-package/configmaps/a.sh",
    }
    # Each key its own read-only file: the image's other files in that directory stay visible.
    assert mounts["/skyhook-package/configmaps/a.sh"] == {
        "name": "dexter",
        "mountPath": "/skyhook-package/configmaps/a.sh",
        "subPath": "a.sh",
        "readOnly": True,
    }
    assert pod["metadata"]["annotations"][keys.RESOURCE_ID_ANNOTATION] == (
        "simple-skyhook-u1-2_dexter_1.2.3"
    )
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["dexter"]["configMap"]["name"] == "simple-skyhook-dexter-1.2.3"
    assert volumes["root-mount"]["hostPath"]["path"] == "/"
    # It ends once its steps pass (the pod Succeeded, kept for its logs): the package image's
    # shell exits at once.
    (done,) = spec["containers"]
    assert done["name"] == "done"
    assert done["image"] == spec["initContainers"][0]["image"]
    assert done["command"] == ["/bin/sh", "-c", "exit 0"]
    meta = pod["metadata"]
    assert meta["labels"] == {
        keys.NAME_LABEL: "simple-skyhook",
        keys.PACKAGE_LABEL: "dexter-1.2.3",
        keys.STAGE_LABEL: "apply",
        keys.NODE_LABEL: "node-1",
        keys.GENERATION_LABEL: "2",
    }
    assert meta["annotations"][keys.PACKAGE_ANNOTATION] == (
        '{"name":"dexter","version":"1.2.3","skyhook":"simple-skyhook","stage":"apply",'
        '"image":"ghcr.io/nvidia/skyhook/agentless"}'
    )
    assert meta["ownerReferences"][0]["controller"] is True


def test_resources_and_sha_and_override() -> None:
    view = scr(
        containerSHA=DIGEST,
        agentImageOverride="example/agent:9",
        resources={
            "cpuRequest": "100m",
            "cpuLimit": "200m",
            "memoryRequest": "64Mi",
            "memoryLimit": "128Mi",
        },
    )
    pod = podbuilder.build_stage_pod(SETTINGS, view, view.spec.packages["dexter"], "n", "config")  # type: ignore[union-attr]
    init = pod["spec"]["initContainers"]
    assert init[0]["image"] == f"ghcr.io/nvidia/skyhook/agentless@{DIGEST}"
    assert init[1]["image"] == "example/agent:9"
    for container in init:
        assert container["resources"] == {
            "limits": {"cpu": "200m", "memory": "128Mi"},
            "requests": {"cpu": "100m", "memory": "64Mi"},
        }


def test_interrupt_pod_and_payload() -> None:
    view = scr()
    interrupt = Interrupt("service", ("containerd", "cron"))
    pod = podbuilder.build_interrupt_pod(
        SETTINGS, view, view.spec.packages["dexter"], "n", interrupt
    )  # type: ignore[union-attr]
    assert pod["metadata"]["labels"][keys.INTERRUPT_LABEL] == "True"
    assert pod["metadata"]["labels"][keys.STAGE_LABEL] == "interrupt"
    assert pod["metadata"]["labels"][keys.NODE_LABEL] == "n"
    assert pod["metadata"]["annotations"][keys.RESOURCE_ID_ANNOTATION] == (
        "simple-skyhook-u1-2_dexter_1.2.3"
    )
    assert pod["metadata"]["name"].startswith("simple-skyhook-interrupt-service-n-")
    (container,) = pod["spec"]["initContainers"]
    assert container["name"] == "interrupt"
    assert container["args"][:3] == [
        "interrupt",
        "/root",
        "/var/lib/skyhook/simple-skyhook/dexter-1.2.3-u1-2",
    ]
    assert json.loads(base64.b64decode(container["args"][3])) == {
        "type": "service_restart",
        "services": ["containerd", "cron"],
    }
    assert json.loads(base64.b64decode(podbuilder.interrupt_payload(Interrupt("reboot")))) == {
        "type": "node_restart"
    }


def test_stage_and_interrupt_pods_mount_no_service_account_token() -> None:
    view = scr()
    package = view.spec.packages["dexter"]  # type: ignore[union-attr]
    pods = [
        podbuilder.build_stage_pod(SETTINGS, view, package, "n", "apply"),
        podbuilder.build_interrupt_pod(SETTINGS, view, package, "n", Interrupt("reboot")),
    ]
    assert [pod["spec"]["automountServiceAccountToken"] for pod in pods] == [False, False]


def test_a_priority_class_goes_on_stage_and_interrupt_pods_only_when_set() -> None:
    view = scr()
    package = view.spec.packages["dexter"]  # type: ignore[union-attr]
    critical = replace(SETTINGS, package_priority_class_name="system-node-critical")
    for settings, wanted in ((SETTINGS, None), (critical, "system-node-critical")):
        pods = [
            podbuilder.build_stage_pod(settings, view, package, "n", "apply"),
            podbuilder.build_interrupt_pod(settings, view, package, "n", Interrupt("reboot")),
        ]
        assert [pod["spec"].get("priorityClassName") for pod in pods] == [wanted, wanted]


def test_decode_is_the_inverse_of_build() -> None:
    view = scr()
    pod = podbuilder.build_stage_pod(SETTINGS, view, view.spec.packages["dexter"], "n", "upgrade")  # type: ignore[union-attr]
    decoded = podbuilder.decode_pod_package(PodView.from_api(pod))
    assert decoded == PodPackage(
        "dexter", "1.2.3", "simple-skyhook", "upgrade", "ghcr.io/nvidia/skyhook/agentless"
    )


@pytest.mark.parametrize(
    ("edit", "still_matches"),
    [
        pytest.param(lambda c: None, True, id="unchanged"),
        pytest.param(
            lambda c: c[1]["env"].append({"name": "NEW", "value": "1"}), False, id="env-added"
        ),
        pytest.param(lambda c: c[0].update(image="other:1"), False, id="image-changed"),
        pytest.param(
            lambda c: c[1].update(args=["apply", "/root", "/elsewhere"]), True, id="args-ignored"
        ),
        pytest.param(
            lambda c: c[1]["env"][-1].update(value="other-generation"), True, id="op-env-ignored"
        ),
        pytest.param(
            lambda c: c[1].update(resources={"limits": {"cpu": "1"}}),
            False,
            id="resources-appeared",
        ),
    ],
)
def test_matches(edit: object, still_matches: bool) -> None:
    view = scr()
    package = view.spec.packages["dexter"]  # type: ignore[union-attr]
    expected = podbuilder.build_stage_pod(SETTINGS, view, package, "n", "apply")
    actual = json.loads(json.dumps(expected))
    edit(actual["spec"]["initContainers"])  # type: ignore[operator]
    assert podbuilder.matches(PodView.from_api(actual), expected) is still_matches


def test_matches_accepts_normalised_quantities() -> None:
    view = scr(
        resources={
            "cpuRequest": "0.1",
            "cpuLimit": "0.2",
            "memoryRequest": "64Mi",
            "memoryLimit": "128Mi",
        }
    )
    package = view.spec.packages["dexter"]  # type: ignore[union-attr]
    expected = podbuilder.build_stage_pod(SETTINGS, view, package, "n", "apply")
    actual = json.loads(json.dumps(expected))
    for container in actual["spec"]["initContainers"]:
        container["resources"] = {
            "limits": {"cpu": "200m", "memory": "128Mi"},
            "requests": {"cpu": "100m", "memory": "64Mi"},
        }
    assert podbuilder.matches(PodView.from_api(actual), expected)


def test_metadata_configmap() -> None:
    view = scr(interrupt={"type": "reboot"})
    progress = {
        keys.node_state_key("other"): "{}",
        keys.node_status_key("simple-skyhook"): "in_progress",
        keys.cordon_key("simple-skyhook"): "true",
    }
    cm = podbuilder.build_metadata_configmap(
        SETTINGS,
        view,
        NodeView("kind-worker"),
        labels={"b": "2", "a": "1", keys.node_status_key("simple-skyhook"): "in_progress"},
        annotations={**progress, keys.version_key("simple-skyhook"): "v0.1.0", "x": "y"},
    )
    assert cm["metadata"]["name"] == keys.node_metadata_configmap_name(
        "simple-skyhook", "kind-worker"
    )
    # Everything the node carries, rollout progress included, sorted, in Go's JSON spelling.
    assert cm["data"]["labels.json"] == (
        '{"a":"1","b":"2","skyhook.nvidia.com/status_simple-skyhook":"in_progress"}'
    )
    assert json.loads(cm["data"]["annotations.json"]) == {
        **progress,
        keys.version_key("simple-skyhook"): "v0.1.0",
        "x": "y",
    }
    assert json.loads(cm["data"]["packages.json"]) == {
        "agentVersion": "latest",
        "packages": {
            "dexter": {
                "name": "dexter",
                "version": "1.2.3",
                "image": "ghcr.io/nvidia/skyhook/agentless",
                "interrupt": {"type": "reboot"},
            }
        },
    }


LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
OBJECT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


@pytest.mark.parametrize(
    ("version", "label"),
    [
        pytest.param("1.2.3", "dexter-1.2.3", id="plain-as-upstream"),
        pytest.param("1.2.3+b1", "dexter-1.2.3_b1", id="build-metadata"),
        pytest.param("1.2.3-rc.1+build.5", "dexter-1.2.3-rc.1_build.5", id="prerelease-and-build"),
        pytest.param("1.0.0-" + "x" * 60, None, id="too-long-for-a-label"),
    ],
)
def test_package_label_is_always_a_valid_label_value(version: str, label: str | None) -> None:
    view = scr(version=version)
    pod = podbuilder.build_stage_pod(
        SETTINGS, view, view.spec.packages["dexter"], "node-1", "apply"
    )  # type: ignore[union-attr]
    value = pod["metadata"]["labels"][keys.PACKAGE_LABEL]
    assert LABEL_VALUE.match(value) and len(value) <= 63
    if label is not None:
        assert value == label
    configmap = podbuilder.build_package_configmap(
        SETTINGS, scr(version=version, configMap={"a": "b"}), view.spec.packages["dexter"]
    )  # type: ignore[union-attr]
    assert OBJECT_NAME.match(configmap["metadata"]["name"])


def test_the_interrupt_container_has_room_for_a_reboot() -> None:
    """256Mi: 64Mi was killed for memory mid-reboot on arm64 kernels with 64K pages."""
    view = scr()
    pod = podbuilder.build_interrupt_pod(
        SETTINGS, view, view.spec.packages["dexter"], "n", Interrupt("reboot")
    )  # type: ignore[union-attr]
    (container,) = pod["spec"]["initContainers"]
    amount = {"cpu": "500m", "memory": "256Mi"}
    assert container["resources"] == {"requests": amount, "limits": amount}


def test_a_node_name_past_63_characters_is_labelled_by_its_short_form() -> None:
    view = scr()
    long_name = "a" * 70 + ".example.com"
    pod = podbuilder.build_stage_pod(
        SETTINGS, view, view.spec.packages["dexter"], long_name, "apply"
    )  # type: ignore[union-attr]
    label = pod["metadata"]["labels"][keys.NODE_LABEL]
    assert len(label) == 63
    assert label == keys.safe_name(63, long_name)
