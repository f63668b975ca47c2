"""The helm chart, rendered by a real helm (built from the Go module proxy and cached).

Asserts what an installer gets: the objects, the operator's environment, the exact RBAC, the
shared CRD, and install-time errors that name the bad value.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

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

Obj = dict[str, Any]


@pytest.fixture(scope="session")
def helm(pytestconfig: pytest.Config) -> Path:
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")

    def say(line: str) -> None:  # progress reaches the terminal even under capture
        with capture.global_and_fixture_disabled():
            print(f"[test_chart] {line}", file=sys.stderr, flush=True)

    if not SKYHOOK_CRD_PATH.is_file():
        pytest.fail(
            f"{SKYHOOK_CRD_PATH.relative_to(REPO)} is missing; chart/crds/ links to it, so helm "
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


def test_chart_identity_tracks_the_operator_release() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["name"] == "skyhook-operator"
    assert chart["version"] == "0.1.0"
    assert chart["appVersion"] == project_version("operator")
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["agent"]["image"]["tag"] == "v" + project_version("agent")


# --- default render ------------------------------------------------------------------------


def test_defaults_render_exactly_the_operator_objects(render: Callable[..., list[Obj]]) -> None:
    objects = render()
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == sorted(
        ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment"]
    )
    for obj in objects:
        assert obj["metadata"]["name"] == FULLNAME
        if obj["kind"] not in {"ClusterRole", "ClusterRoleBinding"}:
            assert obj["metadata"]["namespace"] == NAMESPACE


def test_deployment_runs_one_elected_operator_replica_rolled_out_new_first(
    render: Callable[..., list[Obj]],
) -> None:
    objects = render()
    deployment = only(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 1
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
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
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
        "DEFAULT_INTERVAL": "10m",
        "LOG_LEVEL": "info",
        "LEADER_ELECTION": "true",
    }
    # Every name must be one the operator's settings actually read (a typo would be ignored).
    settings_source = (REPO / "operator/src/skyhook_operator/settings.py").read_text()
    read_by_operator = set(re.findall(r'_meta\(\s*"([A-Z_]+)"', settings_source))
    assert set(env) <= read_by_operator


# --- overrides ------------------------------------------------------------------------------

OVERRIDES: Obj = {
    "operator": {
        "image": {"repository": "registry.example.com/sky/operator", "tag": "v9.9.9"},
        "logLevel": "debug",
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
    assert env["DEFAULT_INTERVAL"] == "1h30m"
    assert env["LOG_LEVEL"] == "debug"
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
    account = only(objects, "ServiceAccount")
    assert account["metadata"]["name"] == "skyhook-sa"
    assert account["metadata"]["annotations"] == {"example.com/role": "x"}
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        assert only(objects, kind)["subjects"] == [
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


# --- RBAC -----------------------------------------------------------------------------------


def grants(rules: list[Obj]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def expand(group: str, resources: str, verbs: str) -> set[tuple[str, str, str]]:
    return {(group, r, v) for r in resources.split() for v in verbs.split()}


def test_cluster_role_grants_exactly_what_the_operator_uses(
    render: Callable[..., list[Obj]],
) -> None:
    objects = render()
    expected = (
        expand("", "nodes", "get list watch patch")
        | expand("", "nodes/status", "patch")
        | expand("", "pods", "create delete get list watch patch")
        | expand("", "pods/eviction", "create")
        | expand("", "events", "create patch")
        | expand("skyhook.nvidia.com", "skyhooks", "get list watch patch update")
        | expand("skyhook.nvidia.com", "skyhooks/status skyhooks/finalizers", "get patch update")
        | expand("skyhook.nvidia.com", "deploymentpolicies", "get list watch")
        | expand("apiextensions.k8s.io", "customresourcedefinitions", "get list watch")
    )
    assert grants(only(objects, "ClusterRole")["rules"]) == expected
    # ConfigMaps are watched and written only in the release namespace.
    role = only(objects, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert grants(role["rules"]) == expand(
        "", "configmaps", "create get list watch update patch delete"
    ) | expand("coordination.k8s.io", "leases", "create get update")
    for kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        binding = only(objects, kind)
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role_kind,
            "name": FULLNAME,
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}
        ]


# --- CRD ------------------------------------------------------------------------------------


def test_chart_crds_are_the_schemas_crds(helm: Path) -> None:
    for path in CRD_PATHS:
        link = CHART / "crds" / path.name
        assert link.is_symlink(), "chart/crds must link to the schemas CRDs, not hold copies"
        assert link.resolve() == path.resolve()
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == sorted(p.name for p in CRD_PATHS)
    shown = run_helm(helm, "show", "crds", str(CHART))
    assert shown.returncode == 0, shown.stderr
    rendered = [doc for doc in yaml.safe_load_all(shown.stdout) if doc]
    expected = [yaml.safe_load(p.read_text()) for p in CRD_PATHS]
    key = lambda doc: doc["metadata"]["name"]  # noqa: E731
    assert sorted(rendered, key=key) == sorted(expected, key=key)


def test_packaged_chart_carries_the_crd_content(helm: Path, tmp_path: Path) -> None:
    packaged = run_helm(helm, "package", str(CHART), "--destination", str(tmp_path))
    assert packaged.returncode == 0, packaged.stderr
    archive = tmp_path / "skyhook-operator-0.1.0.tgz"
    shown = run_helm(helm, "show", "crds", str(archive))
    assert shown.returncode == 0, shown.stderr
    rendered = {d["metadata"]["name"]: d for d in yaml.safe_load_all(shown.stdout) if d}
    assert rendered == {
        doc["metadata"]["name"]: doc for doc in (yaml.safe_load(p.read_text()) for p in CRD_PATHS)
    }


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
        ({"reapplyOnReboot": "yes"}, "reapplyOnReboot: yes must be true or false"),
        ({"operator": {"logLevel": "trace"}}, 'operator.logLevel: "trace" must be'),
        ({"operator": {"interval": "59s"}}, 'operator.interval: "59s" is shorter than the minimum'),
        (
            {"operator": {"interval": "ten minutes"}},
            'operator.interval: "ten minutes" is not a duration',
        ),
        ({"operator": {"tolerations": {"key": "x"}}}, "operator.tolerations: must be a list"),
        ({"operator": {"nodeSelector": ["a"]}}, "operator.nodeSelector: must be a map"),
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
        ({"serviceAccount": {"name": "Bad_Name"}}, "serviceAccount.name:"),
        ({"operator": {"replicas": 0}}, "operator.replicas: 0 must be a whole number"),
        (
            {"operator": {"replicas": 2, "leaderElection": False}},
            "operator.replicas: 2 replicas need operator.leaderElection: true",
        ),
    ],
)
def test_bad_values_fail_the_install_naming_the_value(
    render_error: Callable[[Obj], str], values: Obj, message: str
) -> None:
    assert message in render_error(values)


def test_every_bad_value_is_reported_at_once(render_error: Callable[[Obj], str]) -> None:
    error = render_error(
        {"copyDirRoot": "x", "agentLogRoot": "y", "operator": {"logLevel": "loud"}}
    )
    assert "invalid values for the skyhook-operator chart" in error
    for path in ("copyDirRoot:", "agentLogRoot:", "operator.logLevel:"):
        assert f"- {path}" in error


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

FREE_FORM = {"resources", "annotations"}  # maps whose inner keys are the user's, not knobs


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
# (verb, resource[/subresource], namespace or "" for cluster-wide/all namespaces)
ALLOWED = [
    *((verb, "nodes", "") for verb in ("get", "list", "watch", "patch")),
    ("patch", "nodes/status", ""),
    *((verb, "pods", "") for verb in ("create", "delete", "get", "list", "watch", "patch")),
    ("create", "pods/eviction", "default"),
    ("create", "events", "default"),
    ("patch", "events", RBAC_NAMESPACE),
    *(
        (verb, "configmaps", RBAC_NAMESPACE)
        for verb in ("create", "get", "list", "watch", "update", "patch", "delete")
    ),
    *(
        (verb, "skyhooks.skyhook.nvidia.com", "")
        for verb in ("get", "list", "watch", "patch", "update")
    ),
    ("patch", "skyhooks.skyhook.nvidia.com/status", ""),
    ("update", "skyhooks.skyhook.nvidia.com/finalizers", ""),
    ("watch", "customresourcedefinitions.apiextensions.k8s.io", ""),
    *((verb, "leases.coordination.k8s.io", RBAC_NAMESPACE) for verb in ("create", "get", "update")),
]
DENIED = [
    ("get", "secrets", RBAC_NAMESPACE),
    ("list", "namespaces", ""),
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


def can_i(kubeconfig: Path, verb: str, resource: str, namespace: str) -> bool:
    name, _, subresource = resource.partition("/")
    args = ["kubectl", "--kubeconfig", str(kubeconfig), "auth", "can-i", verb, name]
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
        helm, "template", RBAC_RELEASE, str(CHART), "--namespace", RBAC_NAMESPACE, "--include-crds"
    )
    assert rendered.returncode == 0, rendered.stderr
    documents = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    applied = [doc for doc in documents if doc["kind"] != "Deployment"]
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
    finally:
        name = f"{RBAC_RELEASE}-skyhook-operator"
        kubectl(
            sandbox_kubeconfig, "delete", "clusterrole,clusterrolebinding", name, "--wait=false"
        )
        kubectl(sandbox_kubeconfig, "delete", "namespace", RBAC_NAMESPACE, "--wait=false")
