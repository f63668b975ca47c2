"""Image selection on the sandbox: one SCR whose image compatibility artifact, pushed with
ORAS to a local OCI registry, gives nodes of three OS flavours three image variants; a fourth
node no candidate matches is skipped with its reason until a new artifact version covers it.
The sandbox maps every tag of a package repository to the package's directory, so the
variants (tags of the shellscript image) all resolve."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import oras.provider
import pytest

from skyhook_dev.harness import node_state, node_status, wait_until
from skyhook_dev.registry import LocalRegistry, digest_of
from skyhook_operator.kube.artifacts import (
    ArtifactFetcher,
    FetchError,
    fetch_for_pod,
    pod_image_patch,
)
from skyhook_operator.kube.client import MERGE_PATCH, ApiError, Kube, connect_async
from skyhook_planner.model.imagecompat import (
    ENABLED_LABEL,
    IMAGE_REF_ANNOTATION,
    MEDIA_TYPE,
    TARGET_IMAGE_ANNOTATION,
)
from skyhook_planner.model.spec import ImageCompatibility
from skyhook_sandbox.sandbox import Sandbox
from skyhook_schemas import keys

from .conftest import NAMESPACE
from .helpers import SHELLSCRIPT, Cluster, agentless

OS_ID = "feature.node.kubernetes.io/system-os_release.ID"
OS_VERSION = "feature.node.kubernetes.io/system-os_release.VERSION_ID"
FLAVOURS = [("ubuntu", "22.04"), ("ubuntu", "24.04"), ("rocky", "9"), ("debian", "12")]


def candidate(os_id: str, version: str) -> dict[str, Any]:
    return {
        "tag": f"{SHELLSCRIPT}:1.0.0-{os_id}{version}",
        "description": f"{os_id} {version}",
        "rules": [
            {
                "name": "os release",
                "matchFeatures": [
                    {
                        "feature": "system.osrelease",
                        "matchExpressions": {
                            OS_ID: {"op": "In", "value": [os_id]},
                            OS_VERSION: {"op": "In", "value": [version]},
                        },
                    }
                ],
            }
        ],
    }


def artifact(flavours: list[tuple[str, str]]) -> dict[str, Any]:
    return {"version": "v1alpha1", "compatibilities": [candidate(*f) for f in flavours]}


def push(registry: LocalRegistry, target: str, body: dict[str, Any], tmp_path: Path) -> str:
    """Push `body` as the artifact layer with ORAS; returns the layer's digest."""
    path = tmp_path / f"compat-{len(registry.blobs)}.json"
    path.write_text(json.dumps(body))
    oras.provider.Registry(insecure=True).push(
        target=target, files=[f"{path}:{MEDIA_TYPE}"], disable_path_validation=True
    )
    return digest_of(path.read_bytes())


@pytest.fixture
def registry() -> Iterator[LocalRegistry]:
    with LocalRegistry() as served:
        yield served


def init_images(pods: list[dict[str, Any]], node: str) -> set[str]:
    return {
        c["image"]
        for p in pods
        if p["spec"]["nodeName"] == node
        for c in p["spec"]["initContainers"]
        if c["name"].endswith("-init")
    }


def selection(kube: Kube, node: str, scr: str) -> dict[str, Any]:
    annotations = kube.request("GET", kube.node_path(node))["metadata"].get("annotations", {})
    return json.loads(annotations.get(keys.image_selection_key(scr), "{}"))


def test_each_flavour_gets_its_variant_and_an_unmatched_node_is_skipped(
    cluster: Cluster, registry: LocalRegistry, tmp_path: Path
) -> None:
    cluster.operator.stop()  # type: ignore[union-attr]
    cluster.operator = cluster.start_operator(
        log_name="operator-oci.log",
        SKYHOOK_INSECURE_REGISTRIES=registry.host,
        SKYHOOK_IMAGE_ARTIFACT_REFRESH="1",
    )
    nodes = cluster.add_nodes(4)
    for node, (os_id, version) in zip(nodes, FLAVOURS, strict=True):
        labels = {OS_ID: os_id, OS_VERSION: version}
        cluster.kube.request(
            "PATCH", cluster.kube.node_path(node), {"metadata": {"labels": labels}}, MERGE_PATCH
        )
    target = f"{registry.host}/compat/shellscript:v1"
    first = push(registry, target, artifact(FLAVOURS[:3]), tmp_path)
    recording = cluster.record("variants")
    cluster.skyhook(
        "variants",
        {"tuning": agentless("1.0.0", imageCompatibility={"ref": target})},
    )
    matched, unmatched = nodes[:3], nodes[3]

    def three_done_and_one_skipped() -> bool:
        done = all(node_status(cluster.node(n), "variants") == "complete" for n in matched)
        return done and "unmatched" in selection(cluster.kube, unmatched, "variants").get(
            "tuning", {}
        )

    wait_until(three_done_and_one_skipped, 180, "three variants complete, one node skipped")
    pods = [obj for _, kind, obj in recording.of("pod") if kind == "ADDED"]
    for node, (os_id, version) in zip(matched, FLAVOURS, strict=False):
        image = f"{SHELLSCRIPT}:1.0.0-{os_id}{version}"
        assert init_images(pods, node) == {image}
        chosen = selection(cluster.kube, node, "variants")["tuning"]
        assert chosen == {"image": image, "matched": chosen["matched"]}
        assert chosen["matched"].endswith(f"({os_id} {version})")
        state = node_state(cluster.node(node), "variants")["tuning|1.0.0"]
        assert (state["stage"], state["state"]) == ("config", "complete")
    assert init_images(pods, unmatched) == set()
    assert node_status(cluster.node(unmatched), "variants") == "blocked"
    reason = selection(cluster.kube, unmatched, "variants")["tuning"]["unmatched"]
    assert "no compatible image" in reason and "'debian'" in reason
    conditions = cluster.get_skyhook("variants")["status"]["conditions"]
    skipped = next(c for c in conditions if c["type"].endswith("/NoCompatibleImage"))
    assert skipped["status"] == "True" and unmatched in skipped["message"]
    # Checked every second, pulled once: the layer is cached by its digest.
    assert registry.manifest_pulls("v1") >= 2
    assert registry.blob_pulls(first) == 1

    # A new artifact under the same tag (a new digest) covers the fourth flavour.
    second = push(registry, target, artifact(FLAVOURS), tmp_path)
    cluster.wait_complete("variants", timeout=120)
    assert registry.blob_pulls(second) == 1
    debian = f"{SHELLSCRIPT}:1.0.0-debian12"
    assert selection(cluster.kube, unmatched, "variants")["tuning"]["image"] == debian
    pods = [obj for _, kind, obj in recording.of("pod") if kind == "ADDED"]
    assert init_images(pods, unmatched) == {debian}


def test_artifact_sources_fetch_or_say_why(
    sandbox: Sandbox, kube: Kube, registry: LocalRegistry, tmp_path: Path
) -> None:
    body = artifact(FLAVOURS[:1])
    configmap = {
        "metadata": {"name": "compat-test", "namespace": NAMESPACE},
        "data": {"compat.json": json.dumps(body), "broken.json": "{"},
    }
    kube.request("POST", kube.namespaced_path("configmaps", NAMESPACE), configmap)
    target = f"{registry.host}/compat/pod:v1"
    push(registry, target, body, tmp_path)
    push(registry, f"{registry.host}/compat/bad:v1", {"version": "v1alpha1"}, tmp_path)

    async def scenario() -> None:  # the fetcher works on a loop, as in the operator
        aio = connect_async(str(sandbox.kubeconfig))
        fetcher = ArtifactFetcher(
            aio,
            NAMESPACE,
            refresh=0,
            insecure=[registry.host],
            registries=lambda: {registry.host},
        )
        try:
            found = await fetcher.fetch(
                ImageCompatibility(config_map=("compat-test", "compat.json"))
            )
            assert not isinstance(found, str)
            assert found.compatibilities[0].description == "ubuntu 22.04"
            broken = await fetcher.fetch(
                ImageCompatibility(config_map=("compat-test", "broken.json"))
            )
            assert broken == (
                f"ConfigMap {NAMESPACE}/compat-test key broken.json: not valid JSON: "
                "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
            )
            missing = await fetcher.fetch(
                ImageCompatibility(config_map=("compat-absent", "compat.json"))
            )
            assert isinstance(missing, str) and missing.startswith(
                f"ConfigMap {NAMESPACE}/compat-absent key compat.json: "
            )
            pulled = await fetch_for_pod(fetcher, target)
            assert pulled.compatibilities[0].image.endswith("ubuntu22.04")
            with pytest.raises(
                FetchError, match=f"OCI artifact {registry.host}/compat/pod:v9: .*Not Found"
            ):
                await fetch_for_pod(fetcher, f"{registry.host}/compat/pod:v9")
            with pytest.raises(FetchError, match="compatibilities: required non-empty list"):
                await fetch_for_pod(fetcher, f"{registry.host}/compat/bad:v1")
        finally:
            await aio.close()

    try:
        asyncio.run(scenario())
    finally:
        kube.request("DELETE", kube.namespaced_path("configmaps", NAMESPACE, "compat-test"))


def test_a_labelled_pod_gets_the_image_its_node_flavour_needs(
    cluster: Cluster, registry: LocalRegistry, tmp_path: Path
) -> None:
    # Through the operator's pod image webhook, as any user's pod would be.
    cluster.operator.stop()  # type: ignore[union-attr]
    cluster.operator = cluster.start_operator(
        log_name="operator-pods.log",
        SKYHOOK_INSECURE_REGISTRIES=registry.host,
        SKYHOOK_IMAGE_ARTIFACT_REGISTRIES=registry.host,
    )
    kube = cluster.kube
    flavour = {OS_ID: "rocky", OS_VERSION: "9", "skyhook.nvidia.com/test-flavour": "rocky9"}
    (node,) = cluster.add_nodes(1)
    kube.request("PATCH", kube.node_path(node), {"metadata": {"labels": flavour}}, MERGE_PATCH)
    body = {
        "version": "v1alpha1",
        "compatibilities": [
            {**candidate(*f), "tag": f"docker.io/library/busybox:{f[0]}{f[1]}"} for f in FLAVOURS
        ],
    }
    target = f"{registry.host}/compat/busybox:v1"
    push(registry, target, body, tmp_path)
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"selected-{node}"[:60],
            "namespace": "default",
            "labels": {ENABLED_LABEL: "true"},
            "annotations": {
                TARGET_IMAGE_ANNOTATION: "placeholder:latest",
                IMAGE_REF_ANNOTATION: target,
            },
        },
        "spec": {
            "nodeSelector": {"skyhook.nvidia.com/test-flavour": "rocky9"},
            "containers": [{"name": "work", "image": "placeholder:latest", "command": ["true"]}],
        },
    }
    created = kube.request("POST", kube.namespaced_path("pods", "default"), pod)
    try:
        assert created["spec"]["containers"][0]["image"] == "docker.io/library/busybox:rocky9"
        assert created["metadata"]["annotations"][
            "oci.image.compatibilities.selection/matched"
        ] == ("compatibilities[2] (rocky 9)")
    finally:
        kube.request("DELETE", kube.namespaced_path("pods", "default", pod["metadata"]["name"]))
    # An artifact that cannot be fetched: the pod is refused, saying which, not created as is.
    missing = copy.deepcopy(pod)
    missing["metadata"]["annotations"][IMAGE_REF_ANNOTATION] = f"{registry.host}/compat/absent:v1"
    with pytest.raises(ApiError) as refused:
        kube.request("POST", kube.namespaced_path("pods", "default"), missing)
    assert 'admission webhook "mutate-pod-image.skyhook.nvidia.com" denied' in refused.value.reason
    assert "compat/absent:v1" in refused.value.reason
    # The same decisions, for cluster shapes the sandbox does not have.
    fetcher = ArtifactFetcher(
        None, NAMESPACE, refresh=30, insecure=[registry.host], registries=lambda: {registry.host}
    )
    del pod["spec"]["nodeSelector"]
    pod["spec"]["containers"][0]["image"] = "placeholder:latest"
    mixed = [flavour, {OS_ID: "ubuntu", OS_VERSION: "22.04"}]
    decision = asyncio.run(pod_image_patch(fetcher, pod, mixed))
    assert "cluster is not homogeneous" in decision.refusal
    pod["metadata"]["annotations"][IMAGE_REF_ANNOTATION] = f"{registry.host}/compat/absent:v1"
    assert "compat/absent:v1" in asyncio.run(pod_image_patch(fetcher, pod, mixed)).refusal


# --- the pod webhook's bounds: any pod author names the artifact, so the operator asks only
# registries on its allowlist, reads only so much, follows redirects only to listed hosts,
# remembers only so many artifacts, and is never called for the system namespaces.

ROCKY = {OS_ID: "rocky", OS_VERSION: "9", "skyhook.nvidia.com/test-flavour": "rocky9"}
BUSYBOX = {
    "version": "v1alpha1",
    "compatibilities": [
        {**candidate(*f), "tag": f"docker.io/library/busybox:{f[0]}{f[1]}"} for f in FLAVOURS
    ],
}
REFUSED_BY = 'admission webhook "mutate-pod-image.skyhook.nvidia.com" denied'


@pytest.fixture
def other_registry() -> Iterator[LocalRegistry]:
    with LocalRegistry() as served:
        yield served


def bounded_operator(cluster: Cluster, *registries: LocalRegistry, **env: str) -> str:
    """Restart the test's operator with `env`, reaching `registries` over plain HTTP, and add
    one rocky 9 node; returns the node's name."""
    cluster.operator.stop()  # type: ignore[union-attr]
    cluster.operator = cluster.start_operator(
        log_name="operator-bounds.log",
        SKYHOOK_INSECURE_REGISTRIES=",".join(r.host for r in registries),
        **env,
    )
    (node,) = cluster.add_nodes(1)
    kube = cluster.kube
    kube.request("PATCH", kube.node_path(node), {"metadata": {"labels": ROCKY}}, MERGE_PATCH)
    return node


def selected_pod(name: str, reference: str, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {ENABLED_LABEL: "true"},
            "annotations": {IMAGE_REF_ANNOTATION: reference},
        },
        "spec": {
            "nodeSelector": {"skyhook.nvidia.com/test-flavour": "rocky9"},
            "containers": [{"name": "work", "image": "placeholder:latest", "command": ["true"]}],
        },
    }


def create_pod(kube: Kube, pod: dict[str, Any]) -> str:
    """Create `pod` and delete it again; returns the image it was stored with."""
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    created = kube.request("POST", kube.namespaced_path("pods", namespace), pod)
    kube.request("DELETE", kube.namespaced_path("pods", namespace, name), {"gracePeriodSeconds": 0})
    return str(created["spec"]["containers"][0]["image"])


def refusal(kube: Kube, pod: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as refused:
        create_pod(kube, pod)
    assert REFUSED_BY in refused.value.reason
    return refused.value.reason


def name_registry_in_a_skyhook(cluster: Cluster, name: str, registry: LocalRegistry) -> None:
    """A Skyhook whose package image is on `registry` (selecting no node): the registries the
    Skyhooks name are on the allowlist."""
    cluster.skyhook(
        name,
        {"tuning": agentless("1.0.0", image=f"{registry.host}/packages/tuning")},
        nodeSelectors={"matchLabels": {"skyhook.nvidia.com/test-flavour": "none"}},
    )


def test_a_pod_naming_a_registry_no_skyhook_names_is_refused_without_a_request(
    cluster: Cluster, registry: LocalRegistry, tmp_path: Path
) -> None:
    bounded_operator(cluster, registry)
    target = f"{registry.host}/compat/busybox:v1"
    push(registry, target, BUSYBOX, tmp_path)
    asked_before = len(registry.requests)
    reason = refusal(cluster.kube, selected_pod("off-the-list", target))
    assert f"registry {registry.host} is not allowed" in reason
    assert "SKYHOOK_IMAGE_ARTIFACT_REGISTRIES" in reason
    assert registry.requests[asked_before:] == []
    # Once a Skyhook's package comes from that registry, its artifacts may too.
    name_registry_in_a_skyhook(cluster, "names-the-registry", registry)
    wait_until(
        lambda: _admitted(cluster.kube, selected_pod("on-the-list", target)),
        30,
        "the pod admitted once a Skyhook names its registry",
    )
    assert registry.manifest_pulls("v1") == 1


def _admitted(kube: Kube, pod: dict[str, Any]) -> bool:
    try:
        return create_pod(kube, pod) == "docker.io/library/busybox:rocky9"
    except ApiError as error:
        if REFUSED_BY in error.reason and "is not allowed" in error.reason:
            return False
        raise


def test_an_artifact_larger_than_the_cap_is_refused_naming_it(
    cluster: Cluster, registry: LocalRegistry, tmp_path: Path
) -> None:
    bounded_operator(
        cluster,
        registry,
        SKYHOOK_IMAGE_ARTIFACT_REGISTRIES=registry.host,
        SKYHOOK_IMAGE_ARTIFACT_MAX_BYTES="4096",
    )
    small = f"{registry.host}/compat/busybox:small"
    push(registry, small, BUSYBOX, tmp_path)
    assert create_pod(cluster.kube, selected_pod("small", small)) == (
        "docker.io/library/busybox:rocky9"
    )
    padded = copy.deepcopy(BUSYBOX)
    padded["compatibilities"][0]["description"] = "x" * 8192  # a valid artifact, only large
    large = f"{registry.host}/compat/busybox:large"
    digest = push(registry, large, padded, tmp_path)
    reason = refusal(cluster.kube, selected_pod("large", large))
    assert f"layer {digest}" in reason
    assert "larger than 4096 bytes (SKYHOOK_IMAGE_ARTIFACT_MAX_BYTES)" in reason


def test_a_blob_redirect_to_another_registry_is_followed_only_to_a_listed_one(
    cluster: Cluster, registry: LocalRegistry, other_registry: LocalRegistry, tmp_path: Path
) -> None:
    bounded_operator(
        cluster,
        registry,
        other_registry,
        SKYHOOK_IMAGE_ARTIFACT_REGISTRIES=registry.host,
        SKYHOOK_IMAGE_ARTIFACT_REFRESH="0",  # each pod asks again
    )
    target = f"{registry.host}/compat/busybox:v1"
    digest = push(registry, target, BUSYBOX, tmp_path)
    push(other_registry, f"{other_registry.host}/compat/busybox:v1", BUSYBOX, tmp_path)
    registry.redirects[digest] = f"http://{other_registry.host}/v2/compat/busybox/blobs/{digest}"
    asked_before = len(other_registry.requests)
    reason = refusal(cluster.kube, selected_pod("redirected", target))
    assert f"redirected to {other_registry.host}, which is not an allowed registry" in reason
    assert "SKYHOOK_IMAGE_ARTIFACT_REGISTRIES" in reason
    assert other_registry.requests[asked_before:] == []
    # Named by a Skyhook, the storage host is on the list: the redirect is followed.
    name_registry_in_a_skyhook(cluster, "names-the-storage", other_registry)
    wait_until(
        lambda: _admitted(cluster.kube, selected_pod("followed", target)),
        30,
        "the redirect followed once a Skyhook names its host",
    )
    assert other_registry.blob_pulls(digest) == 1


def test_the_pod_webhook_remembers_at_most_its_cache_size(
    cluster: Cluster, registry: LocalRegistry, tmp_path: Path
) -> None:
    bounded_operator(
        cluster,
        registry,
        SKYHOOK_IMAGE_ARTIFACT_REGISTRIES=registry.host,
        SKYHOOK_IMAGE_ARTIFACT_CACHE_SIZE="2",
        SKYHOOK_IMAGE_ARTIFACT_REFRESH="3600",
    )
    digests = {}
    for tag in ("v1", "v2", "v3"):
        body = copy.deepcopy(BUSYBOX)
        body["compatibilities"][0]["description"] = tag  # a layer of its own each
        digests[tag] = push(registry, f"{registry.host}/compat/busybox:{tag}", body, tmp_path)
    for index, tag in enumerate(("v1", "v2", "v3", "v3", "v1")):
        pod = selected_pod(f"cached-{index}", f"{registry.host}/compat/busybox:{tag}")
        assert create_pod(cluster.kube, pod) == "docker.io/library/busybox:rocky9"
    # v3 was among the last two: answered from cache. v1 was dropped for v2 and v3: asked again.
    assert registry.manifest_pulls("v3") == 1
    assert registry.manifest_pulls("v1") == 2
    assert registry.blob_pulls(digests["v1"]) == 2


def test_pods_of_the_system_and_operator_namespaces_are_never_sent(
    cluster: Cluster, registry: LocalRegistry
) -> None:
    bounded_operator(cluster, registry)
    unlisted = f"{registry.host}/compat/busybox:v1"  # would be refused: no Skyhook names it
    for namespace in ("kube-system", NAMESPACE):
        pod = selected_pod("not-sent", unlisted, namespace=namespace)
        assert create_pod(cluster.kube, pod) == "placeholder:latest"
    assert "is not allowed" in refusal(cluster.kube, selected_pod("sent", unlisted))
    assert registry.requests == []
