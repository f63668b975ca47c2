"""Pure rules: go.mod wrapping, kubelet env/command rules, the image map, pod conditions."""

from __future__ import annotations

import configparser
import socket
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skyhook_sandbox import gomod, podenv, podstatus, processes, versions
from skyhook_sandbox.images import (
    ImageMap,
    ImageMapError,
    ImageNotFound,
    PullRule,
    repository,
    validate_rules,
)
from skyhook_sandbox.pull import split_reference

KUBERNETES_GO_MOD = """module k8s.io/kubernetes

require (
\tk8s.io/api v0.0.0
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
\tk8s.io/client-go => ./staging/src/k8s.io/client-go // comment
)
replace go.etcd.io/etcd => ./FORBIDDEN_DEPENDENCY
"""


def test_local_replaces_skip_forbidden_guards():
    assert gomod.local_replaces(KUBERNETES_GO_MOD) == ["k8s.io/api", "k8s.io/client-go"]


def test_kubernetes_wrapper_maps_staging_to_published_modules():
    wrapper = gomod.kubernetes_wrapper("v1.34.4", KUBERNETES_GO_MOD, ("kube-apiserver",))
    text = wrapper.go_mod()
    assert "\tk8s.io/kubernetes v1.34.4" in text
    assert "\tk8s.io/api => k8s.io/api v0.34.4" in text
    assert '_ "k8s.io/kubernetes/cmd/kube-apiserver/app"' in wrapper.imports_go()


def test_kubernetes_wrapper_finds_kubectl_in_its_staging_module():
    wrapper = gomod.kubernetes_wrapper("v1.34.4", KUBERNETES_GO_MOD, ("kubelet", "kubectl"))
    imports = wrapper.imports_go()
    assert '_ "k8s.io/kubernetes/cmd/kubelet/app"' in imports
    assert '_ "k8s.io/kubectl/pkg/cmd"' in imports  # cmd/kubectl has no app package
    assert "cmd/kubectl/app" not in imports


def test_version_ldflags_and_bad_versions():
    flags = gomod.version_ldflags("v1.34.4")
    assert "version.gitVersion=v1.34.4" in flags and "gitMinor=34" in flags
    with pytest.raises(ValueError, match=r"1\.34"):
        gomod.staging_version("1.34")


@given(st.text(alphabet=st.characters(blacklist_characters="$"), max_size=40))
def test_expand_leaves_text_without_dollars_alone(text):
    assert podenv.expand(text, {"A": "x"}) == text


@given(st.text(alphabet="abcXYZ_", min_size=1, max_size=10), st.text(max_size=10))
def test_expand_substitutes_defined_and_keeps_undefined(name, value):
    assert podenv.expand(f"<$({name})>", {name: value}) == f"<{value}>"
    assert podenv.expand(f"<$({name})>", {}) == f"<$({name})>"
    assert podenv.expand(f"$$({name})", {name: value}) == f"$({name})"


def test_env_order_and_sources():
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "x"}},
        "spec": {"nodeName": "n1"},
    }
    container = {
        "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [
            {"name": "A", "value": "1"},
            {"name": "B", "value": "$(A)-2"},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
            {"name": "S", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "k"}}},
            {
                "name": "OPT",
                "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k", "optional": True}},
            },
        ],
    }
    objects = {("configmap", "cm"): {"data": {"x": "y"}}, ("secret", "sec"): {"data": {"k": "c2VjcmV0"}},
               ("configmap", "gone"): None}  # fmt: skip
    key, values = podenv.lookups(objects)
    env = podenv.container_env(container, pod, key, values)
    assert env == {"CM_x": "y", "A": "1", "B": "1-2", "NODE": "n1", "APP": "x", "S": "secret"}
    assert podenv.referenced_objects(container) == {
        ("configmap", "cm"),
        ("secret", "sec"),
        ("configmap", "gone"),
    }


def test_missing_required_key_is_a_config_error_naming_it():
    container = {
        "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}]
    }
    key, values = podenv.lookups({("configmap", "cm"): {"data": {}}})
    with pytest.raises(podenv.ContainerConfigError, match=r'env X: configmap "cm" has no key "k"'):
        podenv.container_env(container, {"metadata": {}, "spec": {}}, key, values)


def test_command_line_follows_docker_rules():
    env = {"V": "v"}
    assert podenv.command_line({"command": ["a", "$(V)"], "args": ["b"]}, ["ep"], ["cmd"], env) == [
        "a",
        "v",
        "b",
    ]
    assert podenv.command_line({"args": ["$(V)"]}, ["ep"], ["cmd"], env) == ["ep", "v"]
    assert podenv.command_line({}, ["ep"], ["cmd"], env) == ["ep", "cmd"]
    with pytest.raises(podenv.ContainerConfigError, match="no command"):
        podenv.command_line({"name": "c"}, [], [], env)


@pytest.mark.parametrize(
    ("reference", "repo"),
    [
        ("busybox", "docker.io/library/busybox"),
        ("busybox:1.36", "docker.io/library/busybox"),
        ("me/tool:v1", "docker.io/me/tool"),
        ("localhost:5000/x:1", "localhost:5000/x"),
        ("ghcr.io/nvidia/skyhook/agent@sha256:abc", "ghcr.io/nvidia/skyhook/agent"),
    ],
)
def test_repository_normalisation(reference, repo):
    assert repository(reference) == repo


def test_default_image_map(tmp_path):
    (tmp_path / "shellscript").mkdir()
    images = ImageMap(packages_dir=tmp_path)
    package = images.resolve("ghcr.io/nvidia/skyhook-packages/shellscript:1.1.1")
    assert package.content == [(str(tmp_path / "shellscript"), "/skyhook-package")]
    agent = images.resolve("ghcr.io/nvidia/skyhook/agent:v6.3.0")
    assert agent.entrypoint[1:] == ["-m", "skyhook_agent.controller"]
    assert not any(part.startswith("/root/") for part in agent.env["PYTHONPATH"].split(":"))
    with pytest.raises(ImageNotFound, match=r"ghcr\.io/nvidia/skyhook-packages/nope"):
        images.resolve("ghcr.io/nvidia/skyhook-packages/nope:1")
    with pytest.raises(ImageNotFound, match=r"quay\.io/x/y:1"):
        images.resolve("quay.io/x/y:1")


def test_only_pause_and_agentless_entrypoints_may_skip_the_mount_namespace(tmp_path):
    (tmp_path / "shellscript").mkdir()
    images = ImageMap(
        [
            {"image": "example.com/sleeper", "run": "pause"},
            {"image": "example.com/custom", "run": "agentless", "entrypoint": ["/bin/cat"]},
        ],
        packages_dir=tmp_path,
    )
    plain = [
        "registry.k8s.io/pause:3.10",
        "ghcr.io/nvidia/skyhook/agentless:1",
        "example.com/sleeper",
    ]
    isolated = [
        "ghcr.io/nvidia/skyhook/agent:1",
        "ghcr.io/nvidia/skyhook-packages/shellscript:1",
        "busybox:1.36",
        "example.com/custom",
    ]
    assert all(images.resolve(ref).touches_no_files for ref in plain)
    assert not any(images.resolve(ref).touches_no_files for ref in isolated)


def test_user_rules_come_first_and_errors_name_the_field(tmp_path):
    images = ImageMap([{"image": "busybox", "run": "pause"}], packages_dir=tmp_path)
    assert "trap" in " ".join(images.resolve("busybox:1").entrypoint)
    with pytest.raises(ImageMapError, match=r"images\[0\]\.run"):
        validate_rules([{"image": "x", "run": "docker"}], "map.yaml")
    with pytest.raises(ImageMapError, match=r"images\[0\]\.source"):
        validate_rules([{"image": "x", "run": "files", "path": "/p"}], "map.yaml")


def test_pull_rules_name_the_image_and_the_directory_to_mount(tmp_path):
    rule = {"image": "127.0.0.1:5000/pkgs/*", "run": "pull", "path": "/skyhook-package"}
    images = ImageMap([{**rule, "insecure": True}], packages_dir=tmp_path)
    resolved = images.resolve("127.0.0.1:5000/pkgs/shellscript:1.1.1")
    assert resolved.pull == PullRule(
        "127.0.0.1:5000/pkgs/shellscript:1.1.1", "/skyhook-package", True
    )
    assert resolved.content == []  # filled once pulled (ImageMap.pulled)
    with pytest.raises(ImageMapError, match=r"images\[0\]\.path: required for run: pull"):
        validate_rules([{**rule, "path": "relative"}], "map.yaml")
    with pytest.raises(ImageMapError, match=r"images\[0\]\.insecure"):
        validate_rules([{**rule, "insecure": "yes"}], "map.yaml")


@pytest.mark.parametrize(
    ("reference", "parts"),
    [
        ("127.0.0.1:5000/a/b:1.0", ("127.0.0.1:5000/a/b", ":1.0")),
        ("127.0.0.1:5000/a/b", ("127.0.0.1:5000/a/b", ":latest")),
        ("host/a@sha256:00ff", ("host/a", "@sha256:00ff")),
    ],
    ids=["tag", "no-tag", "digest"],
)
def test_split_reference(reference, parts):
    assert split_reference(reference) == parts


def test_conditions_of_a_pod_waiting_on_init_containers():
    first = podstatus.ContainerRecord("a", "img", True)
    first.finish(0)
    second = podstatus.ContainerRecord("b", "img", True)
    main = podstatus.ContainerRecord("c", "img", False)
    conditions = {
        c["type"]: c for c in podstatus.conditions("Pending", True, [first, second], [main])
    }
    assert conditions["Initialized"]["status"] == "False"
    assert conditions["Initialized"]["message"] == "containers with incomplete status: [b]"
    assert conditions["Ready"]["status"] == "False"
    assert podstatus.exit_code(-15) == 143


def test_the_kubernetes_release_is_chosen_by_minor_or_release_and_refused_naming_the_variable():
    assert versions.kubernetes_release({}) == "v1.34.4"  # the oldest when unset
    assert versions.kubernetes_release({"SKYHOOK_KUBERNETES": "1.37"}) == "v1.37.2"
    assert versions.kubernetes_release({"SKYHOOK_KUBERNETES": "v1.36"}) == "v1.36.3"
    assert versions.kubernetes_release({"SKYHOOK_KUBERNETES": "v1.35.4"}) == "v1.35.4"
    with pytest.raises(ValueError, match=r"SKYHOOK_KUBERNETES='1\.33': the sandbox runs 1\.34"):
        versions.kubernetes_release({"SKYHOOK_KUBERNETES": "1.33"})
    with pytest.raises(ValueError, match=r"SKYHOOK_KUBERNETES='v1\.37\.0'"):
        versions.kubernetes_release({"SKYHOOK_KUBERNETES": "v1.37.0"})  # not a pinned release


def test_ci_runs_the_newest_release_the_sandbox_supports():
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(Path(__file__).parents[2] / "tox.ini")
    setenv = tox["testenv:kubernetes-newest"]["setenv"]
    # The newest unless the caller names another release.
    assert f"SKYHOOK_KUBERNETES = {{env:SKYHOOK_KUBERNETES:{versions.NEWEST}}}" in setenv
    ci_run = (Path(__file__).parents[2] / ".ci" / "run").read_text()
    assert "python3 -m tox -e kubernetes-newest\n" in ci_run
    assert (versions.OLDEST, versions.NEWEST) == ("1.34", "1.37")


def test_the_ports_handed_out_are_distinct_bindable_and_outside_the_ephemeral_range():
    """One operator asks for its metrics, probe and webhook ports in a row; two of them the same
    and it cannot start. A port in the ephemeral range can be taken by any outgoing connection."""
    ports = [processes.free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)
    assert all(1024 < port < 32768 for port in ports)
    with socket.socket() as server:
        server.bind(("127.0.0.1", processes.free_port()))
