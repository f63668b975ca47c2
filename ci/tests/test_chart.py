"""The helm chart, rendered by a real helm (built from the Go module proxy and cached).

Asserts what an installer gets: the objects, the operator's environment, the exact RBAC, the
shared CRD, and install-time errors that name the bad value.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.machinery
import json
import re
import shutil
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import AliasChoices
from pydantic.fields import FieldInfo

from skyhook_operator.kube import carryover, events, webhooks
from skyhook_operator.kube.client import ApiError, connect_async
from skyhook_operator.kube.events import EVENT_NAMESPACE
from skyhook_operator.kube.webhooks import (
    MUTATING_CONFIGURATION,
    VALIDATING_CONFIGURATION,
    WEBHOOKS,
    configuration,
)
from skyhook_operator.settings import Settings, load_settings
from skyhook_operator.store import ClusterStore
from skyhook_planner.admission import review_skyhook
from skyhook_schemas.crds import CRD_PATHS, SKYHOOK_CRD_PATH

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "chart"
sys.path.insert(0, str(REPO / "ci"))
from _helm import ensure_helm  # noqa: E402
from _project import project_version  # noqa: E402

NAMESPACE = "skyhook"
RELEASE = "sky"
FULLNAME = "sky-skyhook-operator"
DIGEST = "sha256:" + "ab" * 32
CHART_VERSION = str(yaml.safe_load((CHART / "Chart.yaml").read_text())["version"])

Obj = dict[str, Any]


@pytest.fixture(scope="session")
def helm(pytestconfig: pytest.Config) -> Path:
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")

    def say(line: str) -> None:  # progress reaches the terminal even under capture
        with capture.global_and_fixture_disabled():
            print(f"[test_chart] {line}", file=sys.stderr, flush=True)

    if not SKYHOOK_CRD_PATH.is_file():
        pytest.fail(
            f"{SKYHOOK_CRD_PATH.relative_to(REPO)} is missing; chart/files/crds/ links to it, so helm "
            "cannot load the chart until the Skyhook CRD is written there"
        )
    return ensure_helm(say)


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, cwd=REPO)


@pytest.fixture(scope="session")
def render(helm: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., list[Obj]]:
    def _render(values: Obj | None = None, *extra: str) -> list[Obj]:
        result = run_helm(helm, *template_args(tmp_path_factory, values), *extra)
        assert result.returncode == 0, result.stderr
        return [doc for doc in yaml.safe_load_all(result.stdout) if doc]

    return _render


@pytest.fixture(scope="session")
def render_error(helm: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[Obj], str]:
    def _render_error(values: Obj) -> str:
        result = run_helm(helm, *template_args(tmp_path_factory, values))
        assert result.returncode != 0, f"helm accepted {values}:\n{result.stdout[:400]}"
        return result.stderr

    return _render_error


def template_args(factory: pytest.TempPathFactory, values: Obj | None) -> list[str]:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    if values is not None:
        path = factory.mktemp("values") / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        args += ["-f", str(path)]
    return args


def only(objects: list[Obj], kind: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def named(objects: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name}, got {len(found)}"
    return found[0]


def operator_container(objects: list[Obj]) -> Obj:
    containers = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["operator"]
    return containers[0]


def env_of(objects: list[Obj]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in operator_container(objects)["env"]}


# --- lint and metadata ---------------------------------------------------------------------


def test_helm_lint_strict_passes(helm: Path, tmp_path: Path) -> None:
    result = run_helm(helm, "lint", "--strict", str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout
    overrides = tmp_path / "overrides.yaml"
    overrides.write_text(yaml.safe_dump({"agent": {"image": {"digest": DIGEST}}}))
    result = run_helm(helm, "lint", "--strict", str(CHART), "-f", str(overrides))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_released_chart_names_its_home_sources_icon_and_maintainers(
    helm: Path, tmp_path: Path
) -> None:
    """What Artifact Hub and `helm show chart` print for the pushed package: ci/publish-chart's
    stamped copy, packaged by helm."""
    loader = importlib.machinery.SourceFileLoader(
        "publish_chart", str(REPO / "ci" / "publish-chart")
    )
    publish_chart = types.ModuleType(loader.name)
    publish_chart.__file__ = loader.path
    loader.exec_module(publish_chart)
    source, tag = "https://github.com/someone/skyhook", f"chart/v{CHART_VERSION}"
    chart = publish_chart.stamp_chart(source, tag, tmp_path)
    lint = run_helm(helm, "lint", "--strict", str(chart))
    assert lint.returncode == 0 and "icon is recommended" not in lint.stdout, lint.stdout
    packaged = run_helm(helm, "package", str(chart), "--destination", str(tmp_path))
    assert packaged.returncode == 0, packaged.stderr
    shown = run_helm(helm, "show", "chart", str(tmp_path / f"skyhook-operator-{CHART_VERSION}.tgz"))
    metadata = yaml.safe_load(shown.stdout)
    assert metadata["home"] == source
    assert metadata["sources"][0] == source
    assert metadata["icon"] == f"{source}/raw/{tag}/chart/icon.svg"
    assert (CHART / "icon.svg").read_text().startswith("<svg")
    assert metadata["maintainers"] == [{"name": "The Skyhook (Python) authors"}]
    assert metadata["version"] == CHART_VERSION and metadata["appVersion"] == project_version(
        "operator"
    )


def test_chart_identity_tracks_the_operator_release() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["name"] == "skyhook-operator"
    assert chart["version"] == "0.1.0"
    assert chart["appVersion"] == project_version("operator")
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["agent"]["image"]["tag"] == "v" + project_version("agent")


# --- default render ------------------------------------------------------------------------


CLEANUP = f"{FULLNAME}-cleanup"
WEBHOOK_SERVICE = "skyhook-operator-webhook-service"
VALIDATING = "skyhook-operator-validating-webhook"
MUTATING = "skyhook-operator-mutating-webhook"
CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration"}
CLUSTER_SCOPED |= {"MutatingWebhookConfiguration", "CustomResourceDefinition"}


def names(objects: list[Obj]) -> list[tuple[str, str]]:
    return sorted((o["kind"], o["metadata"]["name"]) for o in objects)


def test_defaults_render_exactly_the_operator_objects(render: Callable[..., list[Obj]]) -> None:
    objects = render()
    assert names(objects) == sorted(
        [
            *((kind, FULLNAME) for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")),
            *((kind, FULLNAME) for kind in ("Role", "RoleBinding", "Deployment", "LimitRange")),
            *((kind, f"{FULLNAME}-events") for kind in ("Role", "RoleBinding")),
            ("Service", f"{FULLNAME}-metrics"),
            ("Service", WEBHOOK_SERVICE),
            ("ValidatingWebhookConfiguration", VALIDATING),
            ("MutatingWebhookConfiguration", MUTATING),
            ("ClusterRole", f"{FULLNAME}-viewer"),
            ("ClusterRole", f"{FULLNAME}-editor"),
            ("ClusterRole", f"{FULLNAME}-metrics-reader"),
            *((kind, CLEANUP) for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")),
            *((kind, CLEANUP) for kind in ("Role", "RoleBinding", "Job")),
            ("PodDisruptionBudget", FULLNAME),
            ("Pod", f"{FULLNAME}-test-webhooks"),  # `helm test`
            *(("CustomResourceDefinition", path.name.removesuffix(".yaml")) for path in CRD_PATHS),
        ]
    )
    for obj in objects:
        if obj["kind"] not in CLUSTER_SCOPED:
            # The Events role lives where the operator posts Events.
            events = obj["metadata"]["name"] == f"{FULLNAME}-events"
            assert obj["metadata"]["namespace"] == (EVENT_NAMESPACE if events else NAMESPACE)


def test_deployment_runs_two_elected_operator_replicas_rolled_out_new_first(
    render: Callable[..., list[Obj]],
) -> None:
    objects = render()
    deployment = only(objects, "Deployment")
    # Two, as upstream runs: a stand-by takes the Lease over when the leader's node drains.
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate"}
    pod = deployment["spec"]["template"]
    assert (
        deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    )
    assert pod["spec"]["serviceAccountName"] == FULLNAME
    container = operator_container(objects)
    assert container["command"] + container["args"] == ["skyhook-operator", "run"]
    assert container["image"] == f"ghcr.io/nvidia/skyhook/operator:v{project_version('operator')}"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    # The replicas prefer different nodes, softly: a one-node cluster still runs both.
    assert pod["spec"]["affinity"] == {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": deployment["spec"]["selector"],
                    },
                }
            ]
        }
    }
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "https": 8443,
        "probes": 8081,
        "webhook": 9443,
    }
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "probes"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}
    budget = only(objects, "PodDisruptionBudget")
    assert budget["spec"] == {"maxUnavailable": 1, "selector": deployment["spec"]["selector"]}
    # One replica: a disruption budget would only block node drains.
    single = render({"operator": {"replicas": 1}})
    assert not [o for o in single if o["kind"] == "PodDisruptionBudget"]
    assert "nodeSelector" not in pod["spec"] and "tolerations" not in pod["spec"]
    assert "imagePullSecrets" not in pod["spec"]


def test_default_environment_is_what_the_operator_reads(render: Callable[..., list[Obj]]) -> None:
    env = env_of(render())
    assert env == {
        "NAMESPACE": NAMESPACE,
        "AGENT_IMAGE": f"ghcr.io/nvidia/skyhook/agent:v{project_version('agent')}",
        "PAUSE_IMAGE": "registry.k8s.io/pause:3.10",
        "COPY_DIR_ROOT": "/var/lib/skyhook",
        "AGENT_LOG_ROOT": "/var/log/skyhook",
        "RUNTIME_REQUIRED_TAINT": "skyhook.nvidia.com=runtime-required:NoSchedule",
        "REAPPLY_ON_REBOOT": "false",
        "IMAGE_PULL_SECRET": "",
        "SKYHOOK_PACKAGE_SECRETS": "",
        "PACKAGE_PRIORITY_CLASS_NAME": "",
        "SKYHOOK_API_GROUP": "skyhook.nvidia.com",
        "LEGACY_CLEANUP_DELAY": "24h",
        "DEFAULT_INTERVAL": "10m",
        "LOG_LEVEL": "info",
        "LOG_ENCODER": "console",
        "LOG_TIME_ENCODER": "",
        "LOG_STACK_TRACE_LEVEL": "",
        "LEADER_ELECTION": "true",
        "SKYHOOK_LEASE_DURATION": "15",
        "SKYHOOK_LEASE_RENEW_DEADLINE": "10",
        "SKYHOOK_LEASE_RETRY_PERIOD": "2",
        "METRICS_PORT": ":8443",
        "SKYHOOK_METRICS_SECURE": "true",
        "PUBLISH_LEGACY_METRICS": "true",
        "PROBE_PORT": ":8081",
        "SKYHOOK_PASS_DEBOUNCE": "0.05",
        "SKYHOOK_RETRY_INTERVAL": "2",
        "SKYHOOK_WRITE_CONCURRENCY": "16",
        "SKYHOOK_DRAIN_TIMEOUT": "600",
        "SKYHOOK_RETRY_BACKOFF_BASE": "10",
        "SKYHOOK_RETRY_BACKOFF_MAX": "300",
        "SKYHOOK_STAGE_TIMEOUT": "1h",
        "SKYHOOK_STAGE_RETRIES": "3",
        "SKYHOOK_POD_TTL_SUCCEEDED": "1h",
        "SKYHOOK_POD_TTL_FAILED": "24h",
        "SKYHOOK_STATUS_NODE_LISTS_BYTES": "1048576",
        "SKYHOOK_ALERT_POLL_INTERVAL": "30",
        "SKYHOOK_ALERT_QUERY_TIMEOUT": "5",
        "SKYHOOK_EVENT_INTERVAL": "30",
        "SKYHOOK_IMAGE_ARTIFACT_REFRESH": "30",
        "SKYHOOK_INSECURE_REGISTRIES": "",
        "SKYHOOK_IMAGE_ARTIFACT_REGISTRIES": "",
        "SKYHOOK_IMAGE_ARTIFACT_MAX_BYTES": "1048576",
        "SKYHOOK_IMAGE_ARTIFACT_CACHE_SIZE": "256",
        "SKYHOOK_WEBHOOK_CHECK_INTERVAL": "60",
        "SKYHOOK_SHUTDOWN_TIMEOUT": "20",
        **WEBHOOK_ENV,
    }
    # Every name must be one the operator's settings read (a typo would be ignored), and every
    # setting has a value, except the few the chart leaves to the operator on purpose.
    variables = {name: _variables(info) for name, info in Settings.model_fields.items()}
    assert set(env) - set(WEBHOOK_ENV) <= {v for names in variables.values() for v in names}
    by_field = {name for name, names in variables.items() if set(names) & set(env)}
    assert set(variables) - by_field == LEFT_TO_THE_OPERATOR
    # And the operator accepts every value as the chart spells it.
    load_settings(env)


# The webhook settings (the admission server's interface; upstream's names where it has them).
WEBHOOK_ENV = {
    "ENABLE_WEBHOOKS": "true",
    "SKYHOOK_WEBHOOK_PORT": ":9443",
    "WEBHOOK_SECRET_NAME": "webhook-cert",
    "WEBHOOK_SERVICE_NAME": WEBHOOK_SERVICE,
    "SKYHOOK_WEBHOOK_CERT_DIR": "/tmp/k8s-webhook-server/serving-certs",
    "SKYHOOK_WEBHOOK_CERTS": "operator",
}
# Fixed for compatibility with upstream (the Lease name), derived in the pod (operator
# version from the image, leader identity from the pod name), or never for a cluster (the
# out-of-cluster webhook URL and the namespaces it registers the pod webhook without, the
# tests' clock hook), or the operator's own by default (the metrics certificate: self-signed;
# mount one and set it through operator.extraEnv).
LEFT_TO_THE_OPERATOR = {
    "metrics_cert_dir",
    "lease_name",
    "operator_version",
    "leader_identity",
    "webhook_url",
    "pod_image_excluded_namespaces",
    "clock_offset_file",
}


def _variables(info: FieldInfo) -> list[str]:
    """The environment variables a setting is read from (ours, then upstream's)."""
    alias = info.validation_alias
    assert isinstance(alias, AliasChoices), alias
    return [choice for choice in alias.choices if isinstance(choice, str)]


# --- overrides ------------------------------------------------------------------------------

OVERRIDES: Obj = {
    "operator": {
        "image": {"repository": "registry.example.com/sky/operator", "tag": "v9.9.9"},
        "logLevel": "debug",
        "logEncoder": "json",
        "logTimeEncoder": "epoch",
        "logStackTraceLevel": "error",
        "interval": "1h30m",
        "resources": {"requests": {"cpu": "250m"}},
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
        "extraEnv": [{"name": "SKYHOOK_DRAIN_TIMEOUT", "value": "900"}],
    },
    "agent": {
        "image": {"repository": "registry.example.com/sky/agent", "tag": "v2.0.0", "digest": DIGEST}
    },
    "pauseImage": "registry.example.com/pause:3.9",
    "runtimeRequiredTaint": "example.com/not-ready=true:NoExecute",
    "copyDirRoot": "/opt/skyhook",
    "agentLogRoot": "/opt/skyhook-logs",
    "reapplyOnReboot": True,
    "imagePullSecrets": ["regcred", {"name": "other-cred"}],
    "packagePullSecret": "pkgcred",
    "packageSecrets": ["license", "site-token"],
    "packagePriorityClassName": "system-node-critical",
    "serviceAccount": {"name": "skyhook-sa", "annotations": {"example.com/role": "x"}},
}


def test_overrides_reach_the_pod_and_the_operator(render: Callable[..., list[Obj]]) -> None:
    objects = render(OVERRIDES)
    env = env_of(objects)
    assert env["AGENT_IMAGE"] == f"registry.example.com/sky/agent:v2.0.0@{DIGEST}"
    assert env["PAUSE_IMAGE"] == "registry.example.com/pause:3.9"
    assert env["RUNTIME_REQUIRED_TAINT"] == "example.com/not-ready=true:NoExecute"
    assert env["COPY_DIR_ROOT"] == "/opt/skyhook"
    assert env["AGENT_LOG_ROOT"] == "/opt/skyhook-logs"
    assert env["REAPPLY_ON_REBOOT"] == "true"
    assert env["IMAGE_PULL_SECRET"] == "pkgcred"
    assert env["SKYHOOK_PACKAGE_SECRETS"] == "license,site-token"
    secrets = {"SKYHOOK_PACKAGE_SECRETS": env["SKYHOOK_PACKAGE_SECRETS"]}
    assert load_settings(secrets).for_planner().package_secrets == {"license", "site-token"}
    assert env["PACKAGE_PRIORITY_CLASS_NAME"] == "system-node-critical"
    assert env["DEFAULT_INTERVAL"] == "1h30m"
    assert env["LOG_LEVEL"] == "debug"
    assert (env["LOG_ENCODER"], env["LOG_TIME_ENCODER"], env["LOG_STACK_TRACE_LEVEL"]) == (
        "json",
        "epoch",
        "error",
    )
    assert env["SKYHOOK_DRAIN_TIMEOUT"] == "900"
    container = operator_container(objects)
    assert container["image"] == "registry.example.com/sky/operator:v9.9.9"
    # helm merges maps: the override replaces one request and keeps the other defaults.
    assert container["resources"] == {
        "requests": {"cpu": "250m", "memory": "128Mi"},
        "limits": {"memory": "512Mi"},
    }
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["tolerations"] == OVERRIDES["operator"]["tolerations"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}, {"name": "other-cred"}]
    assert pod["serviceAccountName"] == "skyhook-sa"
    account = named(objects, "ServiceAccount", "skyhook-sa")
    assert account["metadata"]["annotations"] == {"example.com/role": "x"}
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        assert named(objects, kind, FULLNAME)["subjects"] == [
            {"kind": "ServiceAccount", "name": "skyhook-sa", "namespace": NAMESPACE}
        ]


def test_replicas_without_leader_election_stop_the_old_pod_first(
    render: Callable[..., list[Obj]],
) -> None:
    objects = render({"operator": {"replicas": 1, "leaderElection": False}})
    assert only(objects, "Deployment")["spec"]["strategy"] == {"type": "Recreate"}
    assert env_of(objects)["LEADER_ELECTION"] == "false"
    assert only(render({"operator": {"replicas": 3}}), "Deployment")["spec"]["replicas"] == 3


def test_operator_digest_pins_the_operator_image(render: Callable[..., list[Obj]]) -> None:
    container = operator_container(render({"operator": {"image": {"digest": DIGEST}}}))
    version = project_version("operator")
    assert container["image"] == f"ghcr.io/nvidia/skyhook/operator:v{version}@{DIGEST}"


# --- webhooks, metrics, availability, cleanup -------------------------------------------------


def webhooks_by_name(objects: list[Obj]) -> dict[str, Obj]:
    configurations = [named(objects, "ValidatingWebhookConfiguration", VALIDATING)]
    configurations.append(named(objects, "MutatingWebhookConfiguration", MUTATING))
    return {hook["name"]: hook for config in configurations for hook in config["webhooks"]}


def test_webhooks_reach_the_operator_through_the_service(render: Callable[..., list[Obj]]) -> None:
    objects = render()
    service = named(objects, "Service", WEBHOOK_SERVICE)
    assert service["spec"]["ports"] == [{"name": "webhook", "port": 443, "targetPort": "webhook"}]
    hooks = webhooks_by_name(objects)
    paths = {name: hook["clientConfig"]["service"]["path"] for name, hook in hooks.items()}
    assert paths == {
        "validate-skyhook.nvidia.com": "/validate-skyhook-nvidia-com-v1alpha1-skyhook",
        "validate-deploymentpolicy.nvidia.com": "/validate-skyhook-nvidia-com-v1alpha1-deploymentpolicy",
        "validate-deploymentpolicy-delete.nvidia.com": (
            "/validate-skyhook-nvidia-com-v1alpha1-deploymentpolicy-delete"
        ),
        "mutate-skyhook.nvidia.com": "/mutate-skyhook-nvidia-com-v1alpha1-skyhook",
        "mutate-deploymentpolicy.nvidia.com": "/mutate-skyhook-nvidia-com-v1alpha1-deploymentpolicy",
        "mutate-pod-image.skyhook.nvidia.com": "/mutate-v1-pod-image",
        "validate-readonly.nodewright.nvidia.com": (
            "/validate-readonly-nodewright-nvidia-com-v1alpha1-nodewright"
        ),
        "validate-readonly-deploymentpolicy.nodewright.nvidia.com": (
            "/validate-readonly-nodewright-nvidia-com-v1alpha1-deploymentpolicy"
        ),
    }
    # Every webhook the chart registers is one the operator serves, at the same path.
    assert paths == {hook.name: hook.path for hook in WEBHOOKS}
    operations = {name: hook["rules"][0]["operations"] for name, hook in hooks.items()}
    assert operations["validate-deploymentpolicy.nvidia.com"] == ["CREATE", "UPDATE"]
    assert operations["validate-deploymentpolicy-delete.nvidia.com"] == ["DELETE"]
    assert operations["validate-skyhook.nvidia.com"] == ["CREATE", "UPDATE"]
    assert operations["mutate-pod-image.skyhook.nvidia.com"] == ["CREATE"]
    assert hooks["mutate-pod-image.skyhook.nvidia.com"]["objectSelector"] == {
        "matchLabels": {"oci.image.compatibilities.selection/enabled": "true"}
    }
    # Never for the system namespaces or the operator's own, as the operator registers it out
    # of the cluster.
    assert hooks["mutate-pod-image.skyhook.nvidia.com"]["namespaceSelector"] == (
        webhooks.namespace_selector(["kube-system", "kube-public", "kube-node-lease", NAMESPACE])
    )
    assert [name for name, hook in hooks.items() if "namespaceSelector" in hook] == [
        "mutate-pod-image.skyhook.nvidia.com"
    ]
    for hook in hooks.values():
        assert hook["clientConfig"]["service"] == {
            **hook["clientConfig"]["service"],
            "name": WEBHOOK_SERVICE,
            "namespace": NAMESPACE,
            "port": 443,
        }
        assert "caBundle" not in hook["clientConfig"], "filled in later; upgrades keep it"
        assert (hook["failurePolicy"], hook["sideEffects"], hook["timeoutSeconds"]) == (
            "Ignore" if hook["name"] == "validate-deploymentpolicy-delete.nvidia.com" else "Fail",
            "None",
            10,
        )
        assert hook["admissionReviewVersions"] == ["v1"]
    # The same rules and conditions as the operator registers out of the cluster: metadata
    # writes and deletions never wait for a webhook.
    registered = {
        hook["name"]: hook
        for mutating in (False, True)
        for hook in configuration(mutating, "https://127.0.0.1:9443", b"")["webhooks"]
    }
    for name, hook in hooks.items():
        for field in ("failurePolicy", "matchConditions", "objectSelector"):
            assert hook.get(field) == registered[name].get(field), (name, field)
        for field in ("apiGroups", "operations", "resources"):
            ours = registered[name]["rules"][0][field]
            assert hook["rules"][0][field] == ours, (name, field)
    assert not [
        name
        for name, hook in hooks.items()
        if "pod" not in name
        and not ("matchConditions" in hook or hook["failurePolicy"] == "Ignore")
    ]
    # Operator-made certificates are written under /tmp, an emptyDir.
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "tmp", "emptyDir": {}}]
    assert not [o for o in objects if o["kind"] in {"Issuer", "Certificate"}]


def test_api_group_nodewright_names_the_webhooks_and_the_operator_speaks_it(
    render: Callable[..., list[Obj]], render_error: Callable[[Obj], str]
) -> None:
    objects = render({"apiGroup": "nodewright.nvidia.com"})
    hooks = webhooks_by_name(objects)
    found = {
        name: (
            hook["clientConfig"]["service"]["path"],
            hook["rules"][0]["apiGroups"],
            hook["rules"][0]["resources"],
        )
        for name, hook in hooks.items()
    }
    group = ["nodewright.nvidia.com"]
    assert found == {
        "validate-nodewright.nvidia.com": (
            "/validate-nodewright-nvidia-com-v1alpha1-nodewright",
            group,
            ["nodewrights"],
        ),
        "validate-deploymentpolicy.nvidia.com": (
            "/validate-nodewright-nvidia-com-v1alpha1-deploymentpolicy",
            group,
            ["deploymentpolicies"],
        ),
        "validate-deploymentpolicy-delete.nvidia.com": (
            "/validate-nodewright-nvidia-com-v1alpha1-deploymentpolicy-delete",
            group,
            ["deploymentpolicies"],
        ),
        "mutate-nodewright.nvidia.com": (
            "/mutate-nodewright-nvidia-com-v1alpha1-nodewright",
            group,
            ["nodewrights"],
        ),
        "mutate-deploymentpolicy.nvidia.com": (
            "/mutate-nodewright-nvidia-com-v1alpha1-deploymentpolicy",
            group,
            ["deploymentpolicies"],
        ),
        "mutate-pod-image.nodewright.nvidia.com": ("/mutate-v1-pod-image", [""], ["pods"]),
        "validate-readonly.skyhook.nvidia.com": (
            "/validate-readonly-skyhook-nvidia-com-v1alpha1-skyhook",
            ["skyhook.nvidia.com"],
            ["skyhooks"],
        ),
        "validate-readonly-deploymentpolicy.skyhook.nvidia.com": (
            "/validate-readonly-skyhook-nvidia-com-v1alpha1-deploymentpolicy",
            ["skyhook.nvidia.com"],
            ["deploymentpolicies"],
        ),
    }
    env = env_of(objects)
    assert env["SKYHOOK_API_GROUP"] == "nodewright.nvidia.com"
    assert env["RUNTIME_REQUIRED_TAINT"] == "nodewright.nvidia.com=runtime-required:NoSchedule"
    # Both groups' definitions, whichever the operator speaks.
    crds = {o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"}
    assert crds == {
        "skyhooks.skyhook.nvidia.com",
        "deploymentpolicies.skyhook.nvidia.com",
        "nodewrights.nodewright.nvidia.com",
        "deploymentpolicies.nodewright.nvidia.com",
    }
    assert "apiGroup" in render_error({"apiGroup": "example.com"})


def test_cert_manager_certificates(render: Callable[..., list[Obj]]) -> None:
    objects = render({"webhook": {"certificates": "cert-manager", "secretName": "sky-cert"}})
    certificate = named(objects, "Certificate", FULLNAME)
    assert certificate["spec"]["secretName"] == "sky-cert"
    assert certificate["spec"]["dnsNames"] == [
        f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc",
        f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc.cluster.local",
    ]
    assert certificate["spec"]["issuerRef"] == {"kind": "Issuer", "name": FULLNAME}
    assert named(objects, "Issuer", FULLNAME)["spec"] == {"selfSigned": {}}
    for kind, name in (
        ("ValidatingWebhookConfiguration", VALIDATING),
        ("MutatingWebhookConfiguration", MUTATING),
    ):
        annotations = named(objects, kind, name)["metadata"]["annotations"]
        assert annotations == {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/{FULLNAME}"}
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    assert {"name": "webhook-cert", "secret": {"secretName": "sky-cert"}} in pod["volumes"]
    mounts = {m["name"]: m["mountPath"] for m in operator_container(objects)["volumeMounts"]}
    assert mounts["webhook-cert"] == WEBHOOK_ENV["SKYHOOK_WEBHOOK_CERT_DIR"]
    env = env_of(objects)
    assert (env["SKYHOOK_WEBHOOK_CERTS"], env["WEBHOOK_SECRET_NAME"]) == (
        "cert-manager",
        "sky-cert",
    )
    # An Issuer of the user's: no Issuer of ours.
    issuer = {"kind": "ClusterIssuer", "name": "corp-ca"}
    objects = render(
        {"webhook": {"certificates": "cert-manager", "certManager": {"issuerRef": issuer}}}
    )
    assert named(objects, "Certificate", FULLNAME)["spec"]["issuerRef"] == issuer
    assert not [o for o in objects if o["kind"] == "Issuer"]


def test_webhooks_off(render: Callable[..., list[Obj]]) -> None:
    objects = render({"webhook": {"enable": False}})
    assert not [
        o for o in objects if "Webhook" in o["kind"] or o["metadata"]["name"] == WEBHOOK_SERVICE
    ]
    env = env_of(objects)
    assert env["ENABLE_WEBHOOKS"] == "false"
    assert not {"WEBHOOK_SECRET_NAME", "WEBHOOK_SERVICE_NAME", "SKYHOOK_WEBHOOK_PORT"} & set(env)


NON_DEFAULT: Obj = {
    "operator": {
        "replicas": 3,
        "probePort": 9081,
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}
        },
        "spreadReplicas": False,
        "lease": {"duration": 30, "renewDeadline": 20, "retryPeriod": 4},
        "tuning": {"drainTimeout": 900, "writeConcurrency": 32},
        "securityContext": {"readOnlyRootFilesystem": False},
    },
    "metrics": {
        "port": 9090,
        "secure": False,
        "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
    },
    "webhook": {
        "serviceName": "sky-webhook",
        "port": 10443,
        "podImage": {
            "excludedNamespaces": ["monitoring"],
            "namespaceSelector": {
                "matchLabels": {"image-selection": "enabled"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}],
            },
        },
    },
    "limitRange": None,
    "networkPolicy": {"enabled": True, "metricsFrom": [{"podSelector": {}}]},
    "rbac": {"createViewerRole": False, "createEditorRole": False},
    "cleanup": {"enabled": False},
    "argocdHealth": {"enabled": True},
}


def test_non_default_values(render: Callable[..., list[Obj]]) -> None:
    objects = render(NON_DEFAULT)
    env = env_of(objects)
    assert (env["METRICS_PORT"], env["PROBE_PORT"]) == (":9090", ":9081")
    assert env["SKYHOOK_LEASE_DURATION"] == "30"
    assert (env["SKYHOOK_DRAIN_TIMEOUT"], env["SKYHOOK_WRITE_CONCURRENCY"]) == ("900", "32")
    assert (env["WEBHOOK_SERVICE_NAME"], env["SKYHOOK_WEBHOOK_PORT"]) == ("sky-webhook", ":10443")
    load_settings(env)  # every value as the operator reads it
    pod = only(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["affinity"] == {"nodeAffinity": NON_DEFAULT["operator"]["nodeAffinity"]}
    container = operator_container(objects)
    assert container["securityContext"]["readOnlyRootFilesystem"] is False
    assert container["securityContext"]["allowPrivilegeEscalation"] is False, "merged"
    budget = only(objects, "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"] == only(objects, "Deployment")["spec"]["selector"]
    monitor = only(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prom"
    metrics = named(objects, "Service", f"{FULLNAME}-metrics")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= metrics["metadata"]["labels"].items()
    )
    assert metrics["spec"]["ports"] == [{"name": "http", "port": 9090, "targetPort": "http"}]
    assert monitor["spec"]["endpoints"] == [
        {"port": "http", "scheme": "http", "path": "/metrics", "interval": "30s"}
    ]
    assert env["SKYHOOK_METRICS_SECURE"] == "false"
    assert {p["name"]: p["containerPort"] for p in container["ports"]}["http"] == 9090
    for hook in webhooks_by_name(objects).values():
        assert hook["clientConfig"]["service"]["name"] == "sky-webhook"
    pod_image = webhooks_by_name(objects)["mutate-pod-image.skyhook.nvidia.com"]
    assert pod_image["namespaceSelector"] == {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["monitoring", NAMESPACE],
            },
            {"key": "tier", "operator": "In", "values": ["gpu"]},
        ],
        "matchLabels": {"image-selection": "enabled"},
    }
    policy = only(objects, "NetworkPolicy")
    assert policy["spec"]["ingress"] == [
        {"ports": [{"port": 9081}, {"port": 10443}]},
        {"from": [{"podSelector": {}}], "ports": [{"port": 9090}]},
    ]
    kinds = {o["kind"] for o in objects}
    assert not {"LimitRange", "Job"} & kinds
    assert {o["metadata"]["name"] for o in objects if o["kind"] == "ClusterRole"} == {FULLNAME}
    health = named(objects, "ConfigMap", f"{FULLNAME}-argocd-health")["data"]
    assert health["resource.customizations.health.skyhook.nvidia.com_Skyhook"].strip() == (
        (CHART / "docs/skyhook-health.lua").read_text().strip()
    )


def test_metrics_are_https_for_readers_as_upstreams_kube_rbac_proxy_serves_them(
    render: Callable[..., list[Obj]], render_error: Callable[[Obj], str]
) -> None:
    objects = render({"metrics": {"serviceMonitor": {"enabled": True}}})
    service = named(objects, "Service", f"{FULLNAME}-metrics")
    assert service["spec"]["ports"] == [{"name": "https", "port": 8443, "targetPort": "https"}]
    # The certificate is checked against the serving CA, the operator serving the webhook's.
    assert only(objects, "ServiceMonitor")["spec"]["endpoints"] == [
        {
            "port": "https",
            "scheme": "https",
            "path": "/metrics",
            "interval": "30s",
            "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
            "tlsConfig": {
                "serverName": f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc",
                "ca": {"secret": {"name": "webhook-cert", "key": "ca.crt"}},
            },
        }
    ]
    env = env_of(objects)
    assert env["SKYHOOK_METRICS_CERT_DIR"] == env["SKYHOOK_WEBHOOK_CERT_DIR"]
    load_settings(env)
    # Turned off only by saying so.
    unchecked = render(
        {"metrics": {"serviceMonitor": {"enabled": True, "insecureSkipVerify": True}}}
    )
    tls = only(unchecked, "ServiceMonitor")["spec"]["endpoints"][0]["tlsConfig"]
    assert tls == {"insecureSkipVerify": True}
    assert "SKYHOOK_METRICS_CERT_DIR" not in env_of(unchecked)
    # Without webhooks there is no serving CA to check it against.
    refused = render_error(
        {"webhook": {"enable": False}, "metrics": {"serviceMonitor": {"enabled": True}}}
    )
    assert "metrics.serviceMonitor.insecureSkipVerify: false needs webhook.enable" in refused
    # The rules test_metrics_auth.py binds on the sandbox, where the operator checks them.
    reader = named(objects, "ClusterRole", f"{FULLNAME}-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert not [o for o in objects if o["kind"] == "ClusterRoleBinding" and "metrics" in str(o)]
    # Upstream's keys bind it to Prometheus' account.
    bound = render(
        {
            "metrics": {
                "addServiceAccountBinding": True,
                "serviceAccountName": "prometheus-k8s",
            }
        }
    )
    binding = named(bound, "ClusterRoleBinding", f"{FULLNAME}-metrics-reader")
    assert binding["roleRef"]["name"] == f"{FULLNAME}-metrics-reader"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}
    ]


def test_limit_range_gives_stage_containers_upstreams_defaults(
    render: Callable[..., list[Obj]],
) -> None:
    (limits,) = only(render(), "LimitRange")["spec"]["limits"]
    assert limits == {
        "type": "Container",
        "default": {"cpu": "500m", "memory": "512Mi"},
        "defaultRequest": {"cpu": "250m", "memory": "256Mi"},
    }


# The SCR resource of each API group the chart serves.
SCR_RESOURCES = (("skyhook.nvidia.com", "skyhooks"), ("nodewright.nvidia.com", "nodewrights"))


def scr_grants(group: str, scrs: str) -> set[Grant]:
    """What the operator needs of one API group's SCRs and DeploymentPolicies; create: the
    carry-over makes the spoken group's twin of each of the other group's SCRs and policies
    (operator kube/carryover.py `mirror`)."""
    return (
        expand(group, scrs, "get list watch patch create")
        | expand(group, f"{scrs}/status", "get patch")
        | expand(group, f"{scrs}/finalizers", "update")
        | expand(group, "deploymentpolicies", "get list watch create")
    )


AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"


def aggregated_into(role: Obj) -> set[str]:
    """The built-in ClusterRoles (view, edit, admin) `role` is aggregated into."""
    labels = role["metadata"].get("labels") or {}
    return {
        key.removeprefix(AGGREGATE)
        for key, value in labels.items()
        if key.startswith(AGGREGATE) and value == "true"
    }


def test_user_roles_view_and_edit_both_kinds(render: Callable[..., list[Obj]]) -> None:
    objects = render()
    viewer = named(objects, "ClusterRole", f"{FULLNAME}-viewer")
    editor = named(objects, "ClusterRole", f"{FULLNAME}-editor")
    viewing: set[Grant] = set()
    for group, scrs in SCR_RESOURCES:
        kinds = f"{scrs} deploymentpolicies"
        viewing |= expand(group, kinds, "get list watch") | expand(group, f"{scrs}/status", "get")
        assert grants(editor["rules"]) >= expand(
            group, kinds, "create delete get list patch update watch"
        )
    # Read-only, and nothing but Skyhooks and policies: harmless inside `view`.
    assert grants(viewer["rules"]) == viewing
    assert aggregated_into(viewer) == {"view"}
    # Whoever may create a Skyhook is root on the nodes it selects: `edit` and `admin` (which
    # takes in `edit`) get the editor only when asked to.
    assert aggregated_into(editor) == set()
    assert not [o for o in objects if aggregated_into(o) - {"view"}]
    asked = render({"rbac": {"aggregateEditorRole": True, "aggregateViewerRole": False}})
    assert aggregated_into(named(asked, "ClusterRole", f"{FULLNAME}-editor")) == {"edit"}
    assert aggregated_into(named(asked, "ClusterRole", f"{FULLNAME}-viewer")) == set()


def cleanup_steps(objects: list[Obj]) -> list[list[str]]:
    pod = named(objects, "Job", CLEANUP)["spec"]["template"]["spec"]
    return [c["command"] for c in [*pod["initContainers"], *pod["containers"]]]


def test_pre_delete_job_removes_skyhooks_then_policies_then_webhooks(
    render: Callable[..., list[Obj]],
) -> None:
    objects = render()
    job = named(objects, "Job", CLEANUP)
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-delete"
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == CLEANUP
    delete_all = ["--all", "--ignore-not-found", "--wait", "--timeout=300s"]
    configurations = [
        f"validatingwebhookconfiguration/{VALIDATING}",
        f"mutatingwebhookconfiguration/{MUTATING}",
    ]
    secret = ["secret", "webhook-cert", "--namespace", NAMESPACE]
    assert cleanup_steps(objects) == [
        [
            "kubectl",
            "delete",
            "skyhooks.skyhook.nvidia.com,nodewrights.nodewright.nvidia.com",
            *delete_all,
        ],
        [
            "kubectl",
            "delete",
            "deploymentpolicies.skyhook.nvidia.com,deploymentpolicies.nodewright.nvidia.com",
            *delete_all,
        ],
        ["kubectl", "delete", *configurations, "--ignore-not-found"],
        ["kubectl", "delete", *secret, "--ignore-not-found"],
    ]
    # Its account exists only for the hook, created before the Job.
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
        annotations = named(objects, kind, CLEANUP)["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-delete"
        assert int(annotations["helm.sh/hook-weight"]) < 0


@pytest.mark.parametrize(
    ("values", "path"),
    [
        pytest.param({"webhook": {"certificates": "vault"}}, "/webhook/certificates", id="certs"),
        pytest.param({"metrics": {"port": 0}}, "/metrics/port", id="port"),
        pytest.param({"operator": {"tuning": {"writeConcurrency": 0}}}, "writeConcurrency", id="c"),
        pytest.param({"cleanup": {"enabled": "yes"}}, "/cleanup/enabled", id="bool"),
        pytest.param({"webhok": {"enable": False}}, "'webhok'", id="typo"),
        pytest.param({"webhook": {"serviceName": "Bad_Name"}}, "/webhook/serviceName", id="name"),
        pytest.param({"operator": {"replicas": "two"}}, "/operator/replicas", id="count"),
        pytest.param({"operator": {"image": {"tagg": "v1"}}}, "'tagg'", id="image-typo"),
        pytest.param({"serviceAccount": {"annotations": {"a": 1}}}, "/annotations/a", id="map"),
    ],
)
def test_schema_rejects_a_bad_value_naming_it(
    render_error: Callable[[Obj], str], values: Obj, path: str
) -> None:
    error = render_error(values)
    assert "values don't meet the specifications of the schema" in error
    assert path in error


# Upstream's values, refused by templates/_upstream.tpl with their new names: any type.
UPSTREAM_ONLY = "upstream Skyhook's value: refused"


def untyped_leaves(schema: Obj, path: str = "") -> Iterator[str]:
    """The values the schema declares without saying what they may hold."""
    properties = schema.get("properties")
    if properties:
        for key, sub in properties.items():
            yield from untyped_leaves(sub, f"{path}.{key}" if path else key)
        return
    said = set(schema) - {"description", "default", "examples", "title", "$comment"}
    if not said and not str(schema.get("description", "")).startswith(UPSTREAM_ONLY):
        yield path


def test_every_value_has_a_type_in_the_schema() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert list(untyped_leaves(schema)) == []


# --- RBAC -----------------------------------------------------------------------------------


# (API group, resource, verb, object name or "" for any)
Grant = tuple[str, str, str, str]


def grants(rules: list[Obj]) -> set[Grant]:
    return {
        (group, resource, verb, name)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        for name in rule.get("resourceNames") or [""]
    }


def expand(group: str, resources: str, verbs: str, names: str = "") -> set[Grant]:
    return {
        (group, r, v, n)
        for r in resources.split()
        for v in verbs.split()
        for n in names.split() or [""]
    }


def test_cluster_role_grants_exactly_what_the_operator_uses(
    render: Callable[..., list[Obj]],
) -> None:
    objects = render()
    # Only the chart's two configurations, by the names the operator reads and patches
    # (kube/webhooks.py `set_ca_bundle`): never list, watch or create.
    webhook_configurations = expand(
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        "get patch",
        VALIDATING_CONFIGURATION,
    ) | expand(
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "get patch",
        MUTATING_CONFIGURATION,
    )
    reviews = expand("authentication.k8s.io", "tokenreviews", "create") | expand(
        "authorization.k8s.io", "subjectaccessreviews", "create"
    )
    cluster_wide = (
        expand("", "nodes", "get list watch patch")
        | expand("", "nodes/status", "patch")
        | expand("", "pods", "get list watch delete")
        | expand("", "pods/eviction", "create")
        | scr_grants("skyhook.nvidia.com", "skyhooks")
        | scr_grants("nodewright.nvidia.com", "nodewrights")
    )
    assert grants(named(objects, "ClusterRole", FULLNAME)["rules"]) == (
        cluster_wide | webhook_configurations | reviews
    )
    # The reviews are for the secure /metrics only.
    plain = named(render({"metrics": {"secure": False}}), "ClusterRole", FULLNAME)
    assert grants(plain["rules"]) == cluster_wide | webhook_configurations
    # Pods deleted in every namespace only for drainConfig.disableEviction, which may be off.
    evicting = named(render({"rbac": {"allowPodDeletion": False}}), "ClusterRole", FULLNAME)
    assert grants(evicting["rules"]) == (cluster_wide | webhook_configurations | reviews) - expand(
        "", "pods", "delete"
    )
    # ConfigMaps, stage pods and the webhook Secret only in the release namespace; the Secret
    # by name (kube/webhooks.py `sync_secret` reads and patches it), but create, which RBAC
    # cannot restrict by name.
    certificate = expand("", "secrets", "get patch", "webhook-cert") | expand(
        "", "secrets", "create"
    )
    in_namespace = (
        expand("", "configmaps", "create get list watch patch delete")
        | expand("", "pods", "create delete patch")  # patch: an interrupt stopped in place
        | expand("coordination.k8s.io", "leases", "create get update")
    )
    role = named(objects, "Role", FULLNAME)
    assert role["metadata"]["namespace"] == NAMESPACE
    assert grants(role["rules"]) == in_namespace | certificate
    renamed = render({"webhook": {"secretName": "sky-cert"}})
    assert grants(named(renamed, "Role", FULLNAME)["rules"]) == in_namespace | expand(
        "", "secrets", "get patch", "sky-cert"
    ) | expand("", "secrets", "create")
    # Events, about Nodes and Skyhooks (cluster-scoped), only where kube/events.py posts them.
    events = named(objects, "Role", f"{FULLNAME}-events")
    assert events["metadata"]["namespace"] == EVENT_NAMESPACE
    assert grants(events["rules"]) == expand("", "events", "create patch")
    # With cert-manager's certificate (mounted), or no webhooks, neither the Secret nor the
    # configurations are read through the API.
    for values in ({"webhook": {"certificates": "cert-manager"}}, {"webhook": {"enable": False}}):
        other = render(values)
        assert grants(named(other, "ClusterRole", FULLNAME)["rules"]) == cluster_wide | reviews
        assert grants(named(other, "Role", FULLNAME)["rules"]) == in_namespace
    for kind, role_kind, name in (
        ("ClusterRoleBinding", "ClusterRole", FULLNAME),
        ("RoleBinding", "Role", FULLNAME),
        ("RoleBinding", "Role", f"{FULLNAME}-events"),
    ):
        binding = named(objects, kind, name)
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role_kind,
            "name": name,
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}
        ]


# --- CRD ------------------------------------------------------------------------------------


def crds_of(objects: list[Obj]) -> dict[str, Obj]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == "CustomResourceDefinition"}


def schemas_crds(annotated: bool = True) -> dict[str, Obj]:
    """The schemas package's CRDs, as the chart installs them (kept on uninstall)."""
    crds = {}
    for path in CRD_PATHS:
        crd = yaml.safe_load(path.read_text())
        if annotated:
            crd["metadata"].setdefault("annotations", {})["helm.sh/resource-policy"] = "keep"
        crds[crd["metadata"]["name"]] = crd
    return crds


def test_chart_crds_are_the_schemas_crds(helm: Path, render: Callable[..., list[Obj]]) -> None:
    links = CHART / "files" / "crds"
    for path in CRD_PATHS:
        link = links / path.name
        assert link.is_symlink(), "chart/files/crds must link to the schemas CRDs, not hold copies"
        assert link.resolve() == path.resolve()
    assert sorted(p.name for p in links.iterdir()) == sorted(p.name for p in CRD_PATHS)
    assert crds_of(render()) == schemas_crds()
    # Templates, not crds/: helm installs crds/ once and never upgrades them.
    assert not (CHART / "crds").exists()
    shown = run_helm(helm, "show", "crds", str(CHART))
    assert shown.returncode == 0 and not shown.stdout.strip(), shown.stdout + shown.stderr
    assert not crds_of(render({"crds": {"install": False}}))


def test_packaged_chart_carries_the_crd_content(helm: Path, tmp_path: Path) -> None:
    packaged = run_helm(helm, "package", str(CHART), "--destination", str(tmp_path))
    assert packaged.returncode == 0, packaged.stderr
    archive = (
        tmp_path
        / f"skyhook-operator-{yaml.safe_load((CHART / 'Chart.yaml').read_text())['version']}.tgz"
    )
    rendered = run_helm(helm, "template", RELEASE, str(archive), "--namespace", NAMESPACE)
    assert rendered.returncode == 0, rendered.stderr
    assert crds_of([d for d in yaml.safe_load_all(rendered.stdout) if d]) == schemas_crds()


# --- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"agent": {"image": {"tag": ""}}}, "agent.image.tag: must not be empty"),
        (
            {"agent": {"image": {"digest": "sha256:abc"}}},
            'agent.image.digest: "sha256:abc" is not sha256:',
        ),
        ({"agent": {"image": {"repository": "ghcr.io/x/agent:v1"}}}, "agent.image.repository:"),
        (
            {"operator": {"image": {"repository": ""}}},
            "operator.image.repository: must not be empty",
        ),
        (
            {"operator": {"image": {"tag": "bad tag"}}},
            'operator.image.tag: "bad tag" is not a valid',
        ),
        ({"operator": {"image": {"pullPolicy": "Sometimes"}}}, "operator.image.pullPolicy:"),
        (
            {"pauseImage": "registry.k8s.io/pause"},
            'pauseImage: "registry.k8s.io/pause" must name a tag',
        ),
        ({"runtimeRequiredTaint": "skyhook.nvidia.com=x:Sometimes"}, "runtimeRequiredTaint:"),
        ({"runtimeRequiredTaint": "skyhook.nvidia.com-"}, "runtimeRequiredTaint:"),
        (
            {"copyDirRoot": "var/lib/skyhook"},
            'copyDirRoot: "var/lib/skyhook" must be an absolute path',
        ),
        ({"agentLogRoot": ""}, "agentLogRoot:"),
        ({"reapplyOnReboot": "yes"}, "at '/reapplyOnReboot': got string, want boolean"),
        ({"operator": {"logLevel": "trace"}}, 'operator.logLevel: "trace" must be'),
        ({"operator": {"logEncoder": "xml"}}, 'operator.logEncoder: "xml" must be console or json'),
        ({"operator": {"logTimeEncoder": "julian"}}, 'operator.logTimeEncoder: "julian" must be'),
        ({"operator": {"logStackTraceLevel": "loud"}}, 'operator.logStackTraceLevel: "loud"'),
        ({"operator": {"interval": "59s"}}, 'operator.interval: "59s" is shorter than the minimum'),
        (
            {"operator": {"interval": "ten minutes"}},
            'operator.interval: "ten minutes" is not a duration',
        ),
        ({"operator": {"tolerations": {"key": "x"}}}, "at '/operator/tolerations': got object"),
        ({"operator": {"nodeSelector": ["a"]}}, "at '/operator/nodeSelector': got array"),
        (
            {"operator": {"extraEnv": [{"value": "1"}]}},
            "operator.extraEnv[0]: must be an env entry",
        ),
        (
            {"imagePullSecrets": ["Reg_Cred"]},
            'imagePullSecrets[0]: "Reg_Cred" is not a secret name',
        ),
        (
            {"packagePullSecret": "Bad Secret"},
            'packagePullSecret: "Bad Secret" is not a secret name',
        ),
        (
            {"packageSecrets": ["ok", "Bad_Secret"]},
            'packageSecrets[1]: "Bad_Secret" is not a secret name',
        ),
        (
            {"packagePriorityClassName": "Critical"},
            'packagePriorityClassName: "Critical" is not a PriorityClass name',
        ),
        ({"serviceAccount": {"name": "Bad_Name"}}, "serviceAccount.name:"),
        ({"operator": {"replicas": 0}}, "operator.replicas: 0 must be a whole number"),
        (
            {"operator": {"replicas": 2, "leaderElection": False}},
            "operator.replicas: 2 replicas need operator.leaderElection: true",
        ),
        (
            {"operator": {"tuning": {"shutdownTimeout": 30}}},
            "operator.tuning.shutdownTimeout: 30 must be below "
            "operator.terminationGracePeriodSeconds (30)",
        ),
    ],
)
def test_bad_values_fail_the_install_naming_the_value(
    render_error: Callable[[Obj], str], values: Obj, message: str
) -> None:
    assert message in render_error(values)


def test_every_bad_value_is_reported_at_once(render_error: Callable[[Obj], str]) -> None:
    error = render_error(
        {"copyDirRoot": "x", "agentLogRoot": "var/log", "operator": {"logLevel": "loud"}}
    )
    assert "invalid values for the skyhook-operator chart" in error
    for path in ("copyDirRoot:", "agentLogRoot:", "operator.logLevel:"):
        assert f"- {path}" in error


# upstream Skyhook's values.yaml layout, with its defaults: installing it here must not quietly
# ignore them, so each key is refused with the name it has in this chart.
UPSTREAM_VALUES: Obj = {
    "controllerManager": {
        "tolerations": [],
        "selectors": {},
        "nodeAffinity": {"matchExpressions": []},
        "manager": {
            "containerSecurityContext": {"allowPrivilegeEscalation": False},
            "env": {
                "copyDirRoot": "/var/lib/skyhook",
                "agentLogRoot": "/var/log/skyhook",
                "leaderElection": "true",
                "logLevel": "info",
                "metricsPort": ":8443",
                "probePort": ":8081",
                "reapplyOnReboot": "false",
                "runtimeRequiredTaint": "skyhook.nvidia.com=runtime-required:NoSchedule",
                "pauseImage": "registry.k8s.io/pause:3.10",
            },
            "image": {"repository": "ghcr.io/nvidia/skyhook/operator", "tag": "v0.13.0"},
            "agent": {"repository": "ghcr.io/nvidia/skyhook/agent", "tag": "v6.4.1"},
        },
        "replicas": 2,
        "podDisruptionBudget": {"minAvailable": 1},
        "serviceAccount": {"annotations": {}},
    },
    "kubernetesClusterDomain": "cluster.local",
    "metricsService": {"type": "ClusterIP"},
    "webhookService": {"type": "ClusterIP"},
    "rbac": {"createSkyhookViewerRole": False, "createSkyhookEditorRole": False},
    "imagePullSecret": "",
    "useHostNetwork": False,
    "estimatedPackageCount": 1,
    "estimatedNodeCount": 1,
    "webhook": {"secretName": "webhook-cert", "enable": True, "removalImage": "bitnami/kubectl"},
    "cleanup": {"enabled": True, "jobTimeoutSeconds": 120},
    "metrics": {"addServiceAccountBinding": False},
    "limitRange": {"default": {"cpu": "500m", "memory": "512Mi"}},
}
# What each refused key is called here; the keys both charts share (webhook.enable,
# cleanup.*, limitRange) install with the same meaning.
UPSTREAM_NEW_NAMES = {
    "controllerManager.tolerations": "operator.tolerations",
    "controllerManager.selectors": "operator.nodeSelector",
    "controllerManager.nodeAffinity.matchExpressions": "operator.nodeAffinity",
    "controllerManager.manager.containerSecurityContext.allowPrivilegeEscalation": (
        "operator.securityContext.allowPrivilegeEscalation"
    ),
    "controllerManager.manager.env.copyDirRoot": "copyDirRoot",
    "controllerManager.manager.env.agentLogRoot": "agentLogRoot",
    "controllerManager.manager.env.leaderElection": "operator.leaderElection",
    "controllerManager.manager.env.logLevel": "operator.logLevel",
    "controllerManager.manager.env.metricsPort": "metrics.port",
    "controllerManager.manager.env.probePort": "operator.probePort",
    "controllerManager.manager.env.reapplyOnReboot": "reapplyOnReboot",
    "controllerManager.manager.env.runtimeRequiredTaint": "runtimeRequiredTaint",
    "controllerManager.manager.env.pauseImage": "pauseImage",
    "controllerManager.manager.image.repository": "operator.image.repository",
    "controllerManager.manager.image.tag": "operator.image.tag",
    "controllerManager.manager.agent.repository": "agent.image.repository",
    "controllerManager.manager.agent.tag": "agent.image.tag",
    "controllerManager.replicas": "operator.replicas",
    "controllerManager.podDisruptionBudget.minAvailable": "operator.podDisruptionBudget.maxUnavailable",
    "controllerManager.serviceAccount.annotations": "serviceAccount.annotations",
    "metricsService.type": "metrics.port and metrics.service.enabled",
    "webhookService.type": "webhook.port",
    "rbac.createSkyhookViewerRole": "rbac.createViewerRole",
    "rbac.createSkyhookEditorRole": "rbac.createEditorRole",
    "imagePullSecret": "imagePullSecrets",
    "estimatedPackageCount": "operator.resources",
    "estimatedNodeCount": "operator.resources",
    "webhook.removalImage": "cleanup.image",
}
UPSTREAM_UNUSED = {"kubernetesClusterDomain", "useHostNetwork"}


def test_upstream_values_are_refused_naming_each_key_and_its_new_name(
    render_error: Callable[[Obj], str],
) -> None:
    error = render_error(UPSTREAM_VALUES)
    lines = {
        line[2:].partition(": ")[0]: line for line in error.splitlines() if line.startswith("- ")
    }
    assert set(lines) == set(UPSTREAM_NEW_NAMES) | UPSTREAM_UNUSED
    for key, new in UPSTREAM_NEW_NAMES.items():
        assert f"upstream Skyhook's name; here it is {new}" in lines[key]
    for key in UPSTREAM_UNUSED:
        assert "upstream Skyhook's value, not used here (" in lines[key]


def test_the_keys_both_layouts_share_install_with_the_same_meaning(
    render: Callable[..., list[Obj]],
) -> None:
    shared = {key: UPSTREAM_VALUES[key] for key in ("cleanup", "limitRange", "metrics")}
    shared["webhook"] = {"secretName": "sky-cert", "enable": False}
    objects = render(shared)
    assert named(objects, "Job", CLEANUP)["spec"]["activeDeadlineSeconds"] == 120
    assert only(objects, "LimitRange")["spec"]["limits"][0]["default"]["cpu"] == "500m"
    assert env_of(objects)["ENABLE_WEBHOOKS"] == "false"


def split_duration(hours: int, minutes: int, seconds: int) -> str:
    text = "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (seconds, "s")) if n)
    return text or "0s"


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2), st.integers(0, 70), st.integers(0, 90))
def test_interval_accepted_exactly_when_at_least_a_minute(
    helm: Path, tmp_path_factory: pytest.TempPathFactory, hours: int, minutes: int, seconds: int
) -> None:
    interval = split_duration(hours, minutes, seconds)
    result = run_helm(helm, *template_args(tmp_path_factory, {"operator": {"interval": interval}}))
    total = hours * 3600 + minutes * 60 + seconds
    assert (result.returncode == 0) == (total >= 60), (interval, result.stderr)
    if total < 60:
        assert "operator.interval:" in result.stderr


# --- values.yaml documentation ---------------------------------------------------------------

FREE_FORM = {
    "resources",
    "annotations",
    "podSecurityContext",
    "securityContext",
    "limitRange",
}  # maps whose inner keys are the user's, not knobs


def knob_paths(values: Obj, prefix: str = "") -> Iterator[str]:
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in FREE_FORM:
            yield from knob_paths(value, path + ".")
        else:
            yield path


def comment_blocks(lines: list[str]) -> dict[str, list[str]]:
    """Dotted key path -> the comment lines directly above that key."""
    blocks: dict[str, list[str]] = {}
    stack: list[str] = []
    comments: list[str] = []
    for line in lines:
        if line.strip().startswith("#"):
            comments.append(line)
            continue
        match = re.match(r"^( *)([A-Za-z][\w.-]*):", line)
        if match:
            depth = len(match.group(1)) // 2
            stack = [*stack[:depth], match.group(2)]
            blocks[".".join(stack)] = comments
        comments = []
    return blocks


def test_every_value_is_documented_with_an_example() -> None:
    text = (CHART / "values.yaml").read_text()
    blocks = comment_blocks(text.splitlines())
    undocumented = [
        path
        for path in knob_paths(yaml.safe_load(text))
        if not any("Example:" in line for line in blocks[path])
    ]
    assert not undocumented, f"values without an 'Example:' comment above them: {undocumented}"


# --- RBAC on a real apiserver -----------------------------------------------------------------

RBAC_RELEASE = "rbac-check"
RBAC_NAMESPACE = "chart-rbac-check"
RBAC_ACCOUNT = f"system:serviceaccount:{RBAC_NAMESPACE}:{RBAC_RELEASE}-skyhook-operator"
VALIDATING_RESOURCE = "validatingwebhookconfigurations.admissionregistration.k8s.io"
MUTATING_RESOURCE = "mutatingwebhookconfigurations.admissionregistration.k8s.io"
# (verb, resource[/subresource], namespace or "" for cluster-wide/all namespaces[, name])
ALLOWED = [
    *((verb, "nodes", "") for verb in ("get", "list", "watch", "patch")),
    ("patch", "nodes/status", ""),
    *((verb, "pods", "") for verb in ("get", "list", "watch", "delete")),  # delete: drains
    *((verb, "pods", RBAC_NAMESPACE) for verb in ("create", "delete", "patch")),
    ("create", "pods/eviction", "default"),
    ("create", "secrets", RBAC_NAMESPACE),
    *((verb, "secrets", RBAC_NAMESPACE, "webhook-cert") for verb in ("get", "patch")),
    *((verb, VALIDATING_RESOURCE, "", VALIDATING_CONFIGURATION) for verb in ("get", "patch")),
    *((verb, MUTATING_RESOURCE, "", MUTATING_CONFIGURATION) for verb in ("get", "patch")),
    ("create", "events", EVENT_NAMESPACE),
    ("patch", "events", EVENT_NAMESPACE),
    *(
        (verb, "configmaps", RBAC_NAMESPACE)
        for verb in ("create", "get", "list", "watch", "patch", "delete")
    ),
    *(
        (verb, "skyhooks.skyhook.nvidia.com", "")
        for verb in ("get", "list", "watch", "patch", "create")
    ),
    ("patch", "skyhooks.skyhook.nvidia.com/status", ""),
    ("update", "skyhooks.skyhook.nvidia.com/finalizers", ""),
    # The carry-over's twins, in whichever group the operator speaks.
    ("create", "nodewrights.nodewright.nvidia.com", ""),
    ("create", "deploymentpolicies.skyhook.nvidia.com", ""),
    ("create", "deploymentpolicies.nodewright.nvidia.com", ""),
    *((verb, "leases.coordination.k8s.io", RBAC_NAMESPACE) for verb in ("create", "get", "update")),
]
DENIED = [
    ("get", "secrets", "default"),
    # Of its own namespace's Secrets, only the webhook's, and never listed or watched.
    *((verb, "secrets", RBAC_NAMESPACE) for verb in ("get", "list", "watch")),
    *((verb, "secrets", RBAC_NAMESPACE, "other") for verb in ("get", "patch", "delete")),
    # Of the webhook configurations, only the chart's two, read and patched.
    *((verb, VALIDATING_RESOURCE, "") for verb in ("get", "list", "watch", "create", "patch")),
    *((verb, MUTATING_RESOURCE, "") for verb in ("get", "list", "watch", "create", "patch")),
    ("patch", VALIDATING_RESOURCE, "", "someone-elses"),
    ("patch", MUTATING_RESOURCE, "", "someone-elses"),
    ("delete", VALIDATING_RESOURCE, "", VALIDATING_CONFIGURATION),
    # Events only where it posts them.
    *((verb, "events", "kube-system") for verb in ("create", "patch")),
    ("create", "events", RBAC_NAMESPACE),
    ("create", "events", ""),
    ("create", "pods", "default"),
    ("patch", "pods", "default"),
    ("update", "skyhooks.skyhook.nvidia.com", ""),
    ("update", "configmaps", RBAC_NAMESPACE),
    *((verb, "namespaces", "") for verb in ("get", "list", "watch", "delete")),
    ("watch", "customresourcedefinitions.apiextensions.k8s.io", ""),
    ("delete", "nodes", ""),
    ("update", "nodes", ""),
    ("create", "configmaps", "default"),
    ("list", "configmaps", ""),
    ("watch", "configmaps", "default"),
    ("create", "pods/exec", RBAC_NAMESPACE),
    ("delete", "skyhooks.skyhook.nvidia.com", ""),
    ("create", "customresourcedefinitions.apiextensions.k8s.io", ""),
    ("update", "leases.coordination.k8s.io", "default"),
]


def can_i(kubeconfig: Path, verb: str, resource: str, namespace: str, name: str = "") -> bool:
    kind, _, subresource = resource.partition("/")
    args = ["kubectl", "--kubeconfig", str(kubeconfig), "auth", "can-i", verb]
    args += [f"{kind}/{name}" if name else kind]
    args += [f"--as={RBAC_ACCOUNT}"]
    args += [f"--subresource={subresource}"] if subresource else []
    args += ["-n", namespace] if namespace else ["--all-namespaces"]
    answer = subprocess.run(args, capture_output=True, text=True)
    assert answer.stdout.strip() in {"yes", "no"}, answer.stderr
    return answer.stdout.strip() == "yes"


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


@pytest.mark.sandbox
def test_rendered_objects_apply_and_grant_exactly_this_on_a_real_apiserver(
    helm: Path, sandbox_kubeconfig: Path
) -> None:
    rendered = run_helm(
        helm,
        *("template", RBAC_RELEASE, str(CHART), "--namespace", RBAC_NAMESPACE),
        *("--set", "argocdHealth.enabled=true,operator.replicas=2"),
    )
    assert rendered.returncode == 0, rendered.stderr
    documents = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    # No webhook configurations: with no operator to answer them they would block the shared
    # apiserver. Their grants are by name, which needs no object. The Pod is `helm test`'s.
    left_out = {
        "Deployment",
        "Pod",
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    }
    applied = [doc for doc in documents if doc["kind"] not in left_out]
    deployment = [doc for doc in documents if doc["kind"] == "Deployment"]
    kubectl(sandbox_kubeconfig, "create", "namespace", RBAC_NAMESPACE)
    try:
        kubectl(
            sandbox_kubeconfig,
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            "-",
            stdin=yaml.safe_dump_all(applied),
        )
        # No scheduler here to run it: the apiserver validates the Deployment without storing it.
        kubectl(
            sandbox_kubeconfig,
            "apply",
            "--dry-run=server",
            "-f",
            "-",
            stdin=yaml.safe_dump_all(deployment),
        )
        denied = [grant for grant in ALLOWED if not can_i(sandbox_kubeconfig, *grant)]
        assert not denied, f"the chart's RBAC does not allow {denied}"
        allowed = [grant for grant in DENIED if can_i(sandbox_kubeconfig, *grant)]
        assert not allowed, f"the chart's RBAC allows more than the operator needs: {allowed}"
        # rbac.allowPodDeletion off: drains evict and never delete outside the release namespace.
        evicting = run_helm(
            helm,
            *("template", RBAC_RELEASE, str(CHART), "--namespace", RBAC_NAMESPACE),
            *("--set", "webhook.enable=false,rbac.allowPodDeletion=false"),
            *("--show-only", "templates/rbac.yaml"),
        )
        assert evicting.returncode == 0, evicting.stderr
        (cluster_role,) = [
            doc
            for doc in yaml.safe_load_all(evicting.stdout)
            if doc and doc["kind"] == "ClusterRole" and doc["metadata"]["name"] in RBAC_ACCOUNT
        ]
        kubectl(sandbox_kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(cluster_role))
        assert not can_i(sandbox_kubeconfig, "delete", "pods", "default")
        assert can_i(sandbox_kubeconfig, "create", "pods/eviction", "default")
        assert can_i(sandbox_kubeconfig, "delete", "pods", RBAC_NAMESPACE), "stage pods"
    finally:
        for doc in applied:
            if doc["kind"] in {"ClusterRole", "ClusterRoleBinding"}:
                name = f"{doc['kind'].lower()}/{doc['metadata']['name']}"
                kubectl(sandbox_kubeconfig, "delete", name, "--wait=false")
            elif doc["metadata"].get("namespace") == EVENT_NAMESPACE:
                name = f"{doc['kind'].lower()}/{doc['metadata']['name']}"
                kubectl(sandbox_kubeconfig, "delete", name, "-n", EVENT_NAMESPACE, "--wait=false")
        kubectl(sandbox_kubeconfig, "delete", "namespace", RBAC_NAMESPACE, "--wait=false")


RUN_RELEASE = "rbac-run"
RUN_NAMESPACE = "chart-rbac-run"
RUN_NODE = "rbac-run-node"  # an Event's subject; no such Node is needed
ADMISSION_KINDS = {"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}


async def operator_round_under_the_account(kubeconfig: Path) -> None:
    """The operator's own code, through its own client, under the chart's account: the
    webhook certificate round (the Secret created, read and renewed by name; the CA patched
    into both configurations by name), Events posted and patched in their namespace, and the
    carry-over creating the spoken group's twin of the other group's SCR."""
    kube = connect_async(str(kubeconfig))
    try:
        names = webhooks.served_names(WEBHOOK_SERVICE, RUN_NAMESPACE, "")
        sync = functools.partial(
            webhooks.sync_secret, kube, RUN_NAMESPACE, "webhook-cert", WEBHOOK_SERVICE
        )
        made = await sync(names)  # create
        assert await sync(names) == made  # get, by name
        renewed = await sync([*names, "renamed.example"])  # patch, by name
        assert renewed.cert != made.cert
        await webhooks.set_ca_bundle(kube, renewed.ca)
        assert await webhooks.configuration_problem(kube, renewed.ca) is None
        # Any other Secret of the namespace is out of reach: forbidden, not merely missing.
        with pytest.raises(ApiError) as refused:
            await kube.request("GET", kube.namespaced_path("secrets", RUN_NAMESPACE, "other"))
        assert refused.value.status == 403
        recorder = events.Recorder(
            kube, events.Correlator(first_delay=0.0, min_interval=0.0, gather=0.0)
        )
        for message in ("first", "second"):  # a POST, then a PATCH of its count
            recorder.record(events.Event(events.Subject("Node", RUN_NODE), "Check", message))
            await recorder.flush()
        await recorder.close()
        told: list[events.Event] = []  # a valid NodeWright: nothing to tell it
        mirrored = await carryover.mirror(
            kube, ClusterStore(), carryover.CarriedOver(), carryover.Notices(told.append)
        )
        assert RUN_RELEASE in mirrored
        assert told == []
    finally:
        await kube.close()


@pytest.mark.sandbox
def test_the_operator_works_under_the_charts_account_with_grants_by_name(
    helm: Path, sandbox_kubeconfig: Path, tmp_path: Path
) -> None:
    admin = sandbox_kubeconfig
    rendered = run_helm(helm, "template", RUN_RELEASE, str(CHART), "--namespace", RUN_NAMESPACE)
    assert rendered.returncode == 0, rendered.stderr
    documents = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    applied = [doc for doc in documents if doc["kind"] not in {"Deployment", "Job", "Pod"}]
    for config in (doc for doc in applied if doc["kind"] in ADMISSION_KINDS):
        for hook in config["webhooks"]:
            # Never called (no operator answers here): no object carries this label.
            hook["objectSelector"] = {"matchLabels": {"chart-rbac-run/never": "true"}}
    other_group = "nodewright.nvidia.com/v1alpha1"
    other = {"apiVersion": other_group, "kind": "NodeWright", "metadata": {"name": RUN_RELEASE}}
    other["spec"] = {"packages": {"foo": {"version": "1.0.0", "image": "example.com/foo"}}}
    kubectl(admin, "create", "namespace", RUN_NAMESPACE)
    try:
        manifest = yaml.safe_dump_all(applied)
        kubectl(admin, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=manifest)
        for crd in ("skyhooks.skyhook.nvidia.com", "nodewrights.nodewright.nvidia.com"):
            kubectl(admin, "wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
        kubectl(admin, "create", "-f", "-", stdin=yaml.safe_dump(other))
        account = f"{RUN_RELEASE}-skyhook-operator"
        token = kubectl(admin, "create", "token", account, "-n", RUN_NAMESPACE).strip()
        config = yaml.safe_load(admin.read_text())
        for user in config["users"]:
            user["user"] = {"token": token}
        account_config = tmp_path / "account.kubeconfig"
        account_config.write_text(yaml.safe_dump(config))

        asyncio.run(operator_round_under_the_account(account_config))

        # What it wrote, read back as the administrator.
        secret = json.loads(
            kubectl(admin, "get", "secret", "webhook-cert", "-n", RUN_NAMESPACE, "-o", "json")
        )
        for kind, name in (("validating", VALIDATING), ("mutating", MUTATING)):
            found = json.loads(
                kubectl(admin, "get", f"{kind}webhookconfiguration", name, "-o", "json")
            )
            bundles = {hook["clientConfig"].get("caBundle") for hook in found["webhooks"]}
            assert bundles == {secret["data"]["ca.crt"]}, name
        posted = json.loads(
            kubectl(
                admin,
                *("get", "events", "-n", EVENT_NAMESPACE, "-o", "json"),
                f"--field-selector=involvedObject.name={RUN_NODE}",
            )
        )["items"]
        assert [(e["count"], e["message"]) for e in posted] == [(2, "second")]
        twin = json.loads(kubectl(admin, "get", "skyhook", RUN_RELEASE, "-o", "json"))
        assert twin["spec"]["packages"]["foo"]["version"] == "1.0.0"
    finally:
        leftovers = [
            f"{doc['kind'].lower()}/{doc['metadata']['name']}"
            for doc in applied
            if doc["kind"] in {"ClusterRole", "ClusterRoleBinding", *ADMISSION_KINDS}
        ]
        scrs = [f"nodewright.nodewright.nvidia.com/{RUN_RELEASE}"]
        scrs += [f"skyhook.skyhook.nvidia.com/{RUN_RELEASE}"]
        for scr in scrs:  # whatever it reached before a failure
            unfinalized = ["patch", scr, "--type=merge", "-p", '{"metadata":{"finalizers":null}}']
            subprocess.run(
                ["kubectl", "--kubeconfig", str(admin), *unfinalized], capture_output=True
            )
        kubectl(admin, "delete", *leftovers, *scrs, "--ignore-not-found", "--wait=false")
        for kind in ("role", "rolebinding"):
            name = f"{kind}/{RUN_RELEASE}-skyhook-operator-events"
            kubectl(admin, "delete", name, "-n", EVENT_NAMESPACE, "--ignore-not-found")
        events_of_run = f"--field-selector=involvedObject.name={RUN_NODE}"
        kubectl(admin, "delete", "events", "-n", EVENT_NAMESPACE, events_of_run)
        kubectl(admin, "delete", "namespace", RUN_NAMESPACE, "--wait=false")


# --- install, upgrade, uninstall on a real apiserver ------------------------------------------

LIFE_RELEASE = "life"
LIFE_NAMESPACE = "chart-life"
LIFE_FULLNAME = f"{LIFE_RELEASE}-skyhook-operator"
INSTANCE = f"app.kubernetes.io/instance={LIFE_RELEASE}"
NAMESPACED = "deployment,service,serviceaccount,role,rolebinding,limitrange,job,configmap,secret"
CLUSTER_WIDE = "clusterrole,clusterrolebinding,validatingwebhookconfiguration"
CLUSTER_WIDE += ",mutatingwebhookconfiguration"
DEMO_POLICY: Obj = {
    "apiVersion": "skyhook.nvidia.com/v1alpha1",
    "kind": "DeploymentPolicy",
    "metadata": {"name": "life-policy"},
    "spec": {"default": {"budget": {"count": 1}, "strategy": {"fixed": {}}}},
}
DEMO_SKYHOOK: Obj = {
    "apiVersion": "skyhook.nvidia.com/v1alpha1",
    "kind": "Skyhook",
    "metadata": {"name": "life-scr"},
    "spec": {
        "nodeSelectors": {"matchLabels": {"chart-life": "yes"}},
        "deploymentPolicy": "life-policy",
        "packages": {"tuning": {"version": "1.0.0", "image": "ghcr.io/nvidia/skyhook/agentless"}},
    },
}


def ours(kubeconfig: Path) -> list[str]:
    """Every object of the release, by label, plus the fixed-name webhook configurations."""
    listed = kubectl(kubeconfig, "get", NAMESPACED, "-A", "-l", INSTANCE, "-o", "name")
    listed += kubectl(kubeconfig, "get", CLUSTER_WIDE, "-l", INSTANCE, "-o", "name")
    for kind, name in (("validating", VALIDATING), ("mutating", MUTATING)):
        listed += kubectl(
            kubeconfig,
            "get",
            f"{kind}webhookconfiguration",
            name,
            "--ignore-not-found",
            "-o",
            "name",
        )
    return sorted(listed.split())


def run_pre_delete_hook(helm: Path, kubeconfig: Path, work: Path) -> None:
    """The pre-delete Job as helm would run it, without a kubelet: its account and roles
    applied, each container's kubectl command run here in order under that account's token."""
    hooks = run_helm(
        helm, "get", "hooks", LIFE_RELEASE, "-n", LIFE_NAMESPACE, "--kubeconfig", str(kubeconfig)
    )
    assert hooks.returncode == 0, hooks.stderr
    documents = [doc for doc in yaml.safe_load_all(hooks.stdout) if doc]
    job = next(doc for doc in documents if doc["kind"] == "Job")
    setup = [doc for doc in documents if doc["kind"] != "Job"]
    kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump_all(setup))
    account = job["spec"]["template"]["spec"]["serviceAccountName"]
    token = kubectl(kubeconfig, "create", "token", account, "-n", LIFE_NAMESPACE).strip()
    config = yaml.safe_load(kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    account_config = work / "cleanup.kubeconfig"
    account_config.write_text(yaml.safe_dump(config))
    pod = job["spec"]["template"]["spec"]
    for container in [*pod["initContainers"], *pod["containers"]]:
        program, *args = container["command"]
        assert program == "kubectl"
        result = subprocess.run(
            ["kubectl", "--kubeconfig", str(account_config), *args], capture_output=True, text=True
        )
        assert result.returncode == 0, f"{container['name']}: {result.stderr}"
    # hook-delete-policy hook-succeeded: helm removes the hook's objects afterwards.
    for doc in setup:
        kubectl(
            kubeconfig,
            "delete",
            f"{doc['kind'].lower()}/{doc['metadata']['name']}",
            *(
                ["-n", LIFE_NAMESPACE]
                if doc["kind"] in {"ServiceAccount", "Role", "RoleBinding"}
                else []
            ),
        )


@pytest.mark.sandbox
def test_install_upgrade_uninstall_leaves_nothing_behind(
    helm: Path, sandbox_kubeconfig: Path, tmp_path: Path
) -> None:
    def helm_on_sandbox(*args: str) -> str:
        result = run_helm(
            helm, *args, "-n", LIFE_NAMESPACE, "--kubeconfig", str(sandbox_kubeconfig)
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    changed = tmp_path / "changed.yaml"
    changed.write_text(
        yaml.safe_dump(
            {
                "webhook": {"enable": False},
                "operator": {"replicas": 2, "logLevel": "debug"},
                "metrics": {"port": 9090},
                "limitRange": None,
                "crds": {"install": False},
            }
        )
    )
    try:
        # The CRDs are the session's (applied by the RBAC test above); the apiserver validates
        # every object the chart installs.
        notes = helm_on_sandbox(
            "install", LIFE_RELEASE, str(CHART), "--create-namespace", "--set", "crds.install=false"
        )
        # NOTES.txt: how to see the operator ready, check its webhooks, and a first Skyhook.
        assert f"rollout status deployment/{LIFE_FULLNAME}" in notes, notes
        assert f"helm test {LIFE_RELEASE} -n {LIFE_NAMESPACE}" in notes, notes
        first = yaml.safe_load(notes.split("kubectl apply -f -\n", 1)[1].split("     EOF", 1)[0])
        assert first["kind"] == "Skyhook" and first["spec"]["packages"], notes
        verdict = review_skyhook("CREATE", first, None, policies=())
        assert verdict.allowed, verdict.message
        assert "docs/security.md" in notes, notes
        installed = ours(sandbox_kubeconfig)
        assert (
            f"validatingwebhookconfiguration.admissionregistration.k8s.io/{VALIDATING}" in installed
        )
        assert f"limitrange/{LIFE_FULLNAME}" in installed
        helm_on_sandbox("upgrade", LIFE_RELEASE, str(CHART), "-f", str(changed))
        upgraded = ours(sandbox_kubeconfig)
        assert not [n for n in upgraded if "webhook" in n or n.startswith("limitrange/")]
        deployment = json.loads(
            kubectl(
                sandbox_kubeconfig,
                "get",
                "deployment",
                LIFE_FULLNAME,
                "-n",
                LIFE_NAMESPACE,
                "-o",
                "json",
            )
        )
        assert deployment["spec"]["replicas"] == 2
        env = {
            e["name"]: e.get("value")
            for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        assert (env["LOG_LEVEL"], env["METRICS_PORT"]) == ("debug", ":9090")
        assert kubectl(
            sandbox_kubeconfig, "get", "pdb", LIFE_FULLNAME, "-n", LIFE_NAMESPACE, "-o", "name"
        )
        # What the operator would have made: an SCR with its policy, and the webhook Secret.
        kubectl(
            sandbox_kubeconfig,
            "apply",
            "-f",
            "-",
            stdin=yaml.safe_dump_all([DEMO_POLICY, DEMO_SKYHOOK]),
        )
        kubectl(
            sandbox_kubeconfig, "create", "secret", "generic", "webhook-cert", "-n", LIFE_NAMESPACE
        )
        run_pre_delete_hook(helm, sandbox_kubeconfig, tmp_path)
        helm_on_sandbox("uninstall", LIFE_RELEASE, "--no-hooks", "--wait")
        assert ours(sandbox_kubeconfig) == []
        for kind, name in (("skyhook", "life-scr"), ("deploymentpolicy", "life-policy")):
            assert not kubectl(sandbox_kubeconfig, "get", kind, name, "--ignore-not-found")
        assert not kubectl(
            sandbox_kubeconfig,
            "get",
            "secret",
            "webhook-cert",
            "-n",
            LIFE_NAMESPACE,
            "--ignore-not-found",
        )
    finally:
        subprocess.run(
            [
                str(helm),
                "uninstall",
                LIFE_RELEASE,
                "-n",
                LIFE_NAMESPACE,
                "--no-hooks",
                "--ignore-not-found",
                "--kubeconfig",
                str(sandbox_kubeconfig),
            ],
            capture_output=True,
        )
        kubectl(
            sandbox_kubeconfig,
            "delete",
            "namespace",
            LIFE_NAMESPACE,
            "--ignore-not-found",
            "--wait=false",
        )


UPGRADE_RELEASE = "crd-upgrade"
UPGRADE_NAMESPACE = "chart-crd-upgrade"
CRD_NAMES = [path.name.removesuffix(".yaml") for path in CRD_PATHS]
SERIAL_SKYHOOK: Obj = {
    "apiVersion": "skyhook.nvidia.com/v1alpha1",
    "kind": "Skyhook",
    "metadata": {"name": "crd-upgrade"},
    "spec": {
        "nodeSelectors": {"matchLabels": {"chart-crd-upgrade": "yes"}},
        "serial": True,
        "packages": {"tuning": {"version": "1.0.0", "image": "ghcr.io/nvidia/skyhook/agentless"}},
    },
}


def keeps_serial(kubeconfig: Path) -> bool:
    """Apply an SCR with spec.serial and read it back: an unknown field is pruned."""
    kubectl(kubeconfig, "apply", "--validate=false", "-f", "-", stdin=json.dumps(SERIAL_SKYHOOK))
    stored = json.loads(kubectl(kubeconfig, "get", "skyhook", "crd-upgrade", "-o", "json"))
    return "serial" in stored["spec"]


@pytest.mark.sandbox
def test_helm_upgrade_serves_the_new_crd_fields_and_uninstall_keeps_the_crds(
    helm: Path, sandbox_kubeconfig: Path, tmp_path: Path
) -> None:
    def helm_on_sandbox(*args: str) -> None:
        result = run_helm(
            helm, *args, "-n", UPGRADE_NAMESPACE, "--kubeconfig", str(sandbox_kubeconfig)
        )
        assert result.returncode == 0, result.stderr

    # An older release of the chart: this one, with a Skyhook CRD that lacks spec.serial.
    old_chart = tmp_path / "old-chart"
    shutil.copytree(CHART, old_chart)  # the CRD links become files
    old_crd = yaml.safe_load(SKYHOOK_CRD_PATH.read_text())
    schema = old_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    del schema["properties"]["spec"]["properties"]["serial"]
    (old_chart / "files" / "crds" / SKYHOOK_CRD_PATH.name).write_text(yaml.safe_dump(old_crd))
    # No operator runs here to answer webhooks; the CRDs start as this release's own.
    values = ("--set", "webhook.enable=false")
    kubectl(sandbox_kubeconfig, "delete", "crd", *CRD_NAMES, "--ignore-not-found", "--wait")
    try:
        helm_on_sandbox("install", UPGRADE_RELEASE, str(old_chart), "--create-namespace", *values)
        kubectl(sandbox_kubeconfig, "wait", "--for=condition=Established", "crd", *CRD_NAMES)
        assert not keeps_serial(sandbox_kubeconfig), "the old CRD should prune spec.serial"
        helm_on_sandbox("upgrade", UPGRADE_RELEASE, str(CHART), *values)
        # The apiserver takes the new schema up shortly after the update.
        deadline = time.monotonic() + 30
        while not keeps_serial(sandbox_kubeconfig):
            assert time.monotonic() < deadline, "spec.serial still pruned after helm upgrade"
            time.sleep(0.2)
        helm_on_sandbox("uninstall", UPGRADE_RELEASE, "--no-hooks", "--wait")
        assert kubectl(sandbox_kubeconfig, "get", "skyhook", "crd-upgrade", "-o", "name")
    finally:
        kubectl(sandbox_kubeconfig, "delete", "skyhook", "crd-upgrade", "--ignore-not-found")
        run_helm(
            helm,
            *("uninstall", UPGRADE_RELEASE, "-n", UPGRADE_NAMESPACE, "--no-hooks"),
            *("--ignore-not-found", "--kubeconfig", str(sandbox_kubeconfig)),
        )
        kubectl(sandbox_kubeconfig, "delete", "namespace", UPGRADE_NAMESPACE, "--ignore-not-found")
    # The CRDs stay as the session's: current, and no longer claimed by the removed release.
    for name in CRD_NAMES:
        ownership = ("meta.helm.sh/release-name-", "meta.helm.sh/release-namespace-")
        kubectl(sandbox_kubeconfig, "annotate", "crd", name, *ownership)
        kubectl(sandbox_kubeconfig, "label", "crd", name, "app.kubernetes.io/managed-by-")


@pytest.mark.sandbox
def test_the_operator_runs_as_the_chart_configures_it(helm: Path) -> None:
    """The Deployment's command and env under the chart's ServiceAccount token, webhooks on:
    the demo rolls out, an invalid SCR is refused at admission, deletion leaves nodes clean,
    and the operator is never Forbidden (ci/chart-on-sandbox, its own sandbox)."""
    result = subprocess.run(
        [sys.executable, str(REPO / "ci" / "chart-on-sandbox")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    for scenario in ("demo-rollout", "invalid-scr-refused", "delete-leaves-nodes-clean"):
        assert f"ok: {scenario}" in output
    assert " 0 Forbidden answers" in output
