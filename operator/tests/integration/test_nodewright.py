"""An operator speaking upstream's newer API (SKYHOOK_API_GROUP=nodewright.nvidia.com): a
NodeWright written as upstream v0.18+ documents it is admitted by our webhooks, rolls out, and
every key the operator writes on nodes, pods, ConfigMaps and Events is under
`nodewright.nvidia.com/`, none under `skyhook.nvidia.com/`."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import urllib3

from skyhook_dev.harness import OperatorProcess, WaitTimeout, wait_until
from skyhook_operator.kube.client import MERGE_PATCH, ApiError, Json, Kube
from skyhook_sandbox.sandbox import Sandbox

from .conftest import NAMESPACE
from .helpers import SHELLSCRIPT, TEST_LABEL, Cluster, Recording, marker_scripts

GROUP = "nodewright.nvidia.com"
NODEWRIGHTS = f"/apis/{GROUP}/v1alpha1/nodewrights"
LEGACY = "skyhook.nvidia.com/"


@pytest.fixture
def switching(
    sandbox: Sandbox,
    kube: Kube,
    test_label: str,
    start_operator: Callable[..., OperatorProcess],
) -> Iterator[Cluster]:
    """This test's nodes and no operator yet. At the end its NodeWright goes (through its
    finalizer while an operator speaking nodewright.nvidia.com runs), then its policy, its
    Skyhooks and its nodes."""
    cluster = Cluster(sandbox=sandbox, kube=kube, label=test_label, start_operator=start_operator)
    yield cluster
    name = cluster.label
    with contextlib.suppress(ApiError):
        kube.request("DELETE", f"{NODEWRIGHTS}/{name}")
    try:
        wait_until(lambda: _gone(kube, name), 60, f"NodeWright {name} deleted")
    except WaitTimeout:
        with contextlib.suppress(ApiError):
            body = {"metadata": {"finalizers": []}}
            kube.request("PATCH", f"{NODEWRIGHTS}/{name}", body, MERGE_PATCH)
    with contextlib.suppress(ApiError):  # the test's policy, once no NodeWright names it
        kube.request("DELETE", f"/apis/{GROUP}/v1alpha1/deploymentpolicies/{name}")
    cluster.cleanup()


@pytest.fixture
def nodewright_cluster(switching: Cluster) -> Cluster:
    """`switching` with an operator speaking nodewright.nvidia.com."""
    switching.operator = switching.start_operator(SKYHOOK_API_GROUP=GROUP)
    return switching


def _gone(kube: Kube, name: str) -> bool:
    try:
        kube.request("GET", f"{NODEWRIGHTS}/{name}")
    except ApiError as error:
        return error.status == 404
    return False


def nodewright(name: str, label: str, **package: Any) -> dict[str, Any]:
    """A NodeWright as upstream v0.18+'s docs write one."""
    return {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "NodeWright",
        "metadata": {"name": name},
        "spec": {
            "nodeSelectors": {"matchLabels": {TEST_LABEL: label}},
            "interruptionBudget": {"count": 1},
            "drainConfig": {"timeout": "5m", "gracePeriod": "10s", "deleteEmptyDirData": True},
            "packages": {
                "marker": {
                    "version": "1.0.0",
                    "image": SHELLSCRIPT,
                    "stageTimeout": "5m",
                    "interrupt": {"type": "service", "services": ["demo"]},
                    "configMap": marker_scripts(),
                    **package,
                }
            },
        },
    }


def ours(obj: Json) -> dict[str, str]:
    """The annotations, labels, condition types and taints an object carries, by key."""
    meta = obj.get("metadata") or {}
    found = {**(meta.get("annotations") or {}), **(meta.get("labels") or {})}
    found.pop(TEST_LABEL, None)  # the test's own node label
    for condition in (obj.get("status") or {}).get("conditions") or ():
        found[condition["type"]] = condition.get("status", "")
    for taint in (obj.get("spec") or {}).get("taints") or ():
        found[taint["key"]] = taint.get("effect", "")
    for finalizer in meta.get("finalizers") or ():
        found[finalizer] = "finalizer"
    return found


def legacy_keys(obj: Json) -> list[str]:
    return sorted(k for k in ours(obj) if k.startswith(LEGACY) or k == LEGACY.rstrip("/"))


def test_a_nodewright_rolls_out_under_its_own_keys(nodewright_cluster: Cluster) -> None:
    cluster = nodewright_cluster
    kube = cluster.kube
    nodes = cluster.add_nodes(2)
    name = cluster.label
    label = f"{GROUP}/name={name}"
    recording = cluster.record(name, extra={"nw-pod": ("/api/v1/pods", {"labelSelector": label})})
    # A DeploymentPolicy of the same group: batches of two, a budget of one node.
    policy = {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "DeploymentPolicy",
        "metadata": {"name": name},
        "spec": {"default": {"budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 2}}}},
    }
    kube.request("POST", f"/apis/{GROUP}/v1alpha1/deploymentpolicies", policy)
    manifest = nodewright(name, cluster.label)
    del manifest["spec"]["interruptionBudget"]
    manifest["spec"]["deploymentPolicy"] = name
    created = kube.request("POST", NODEWRIGHTS, manifest)
    assert created["kind"] == "NodeWright"

    def complete() -> bool:
        status = kube.request("GET", f"{NODEWRIGHTS}/{name}").get("status") or {}
        states = [
            (cluster.node(n)["metadata"].get("annotations") or {}).get(f"{GROUP}/status_{name}")
            for n in nodes
        ]
        return status.get("status") == "complete" and states == ["complete", "complete"]

    wait_until(complete, 180, f"NodeWright {name} complete", interval=0.5)

    scr = kube.request("GET", f"{NODEWRIGHTS}/{name}")
    assert scr["metadata"]["finalizers"] == [f"{GROUP}/nodewright"]
    assert scr["status"]["nodeState"].keys() == set(nodes)
    for node_name in nodes:
        node = cluster.node(node_name)
        found = ours(node)
        state = json.loads(found[f"{GROUP}/nodeState_{name}"])
        assert state["marker|1.0.0"]["state"] == "complete", state
        assert found[f"{GROUP}/status_{name}"] == "complete"
        assert found[f"{GROUP}/{name}/NotReady"] == "False"
        assert f"{GROUP}/version_{name}" in found
        assert cluster.host_file(node_name, "/skyhook-markers").splitlines() == ["apply", "config"]
        assert legacy_keys(node) == [], node_name

    # Every version of every node the watch saw: cordoned by this NodeWright for its interrupt,
    # and never a legacy key.
    seen = [n for _, _, n in recording.of("node")]
    assert any(
        (n["metadata"].get("annotations") or {}).get(f"{GROUP}/cordon_{name}") == "true"
        and n["spec"].get("unschedulable")
        for n in seen
    ), "never cordoned under the nodewright key"
    assert {tuple(legacy_keys(n)) for n in seen} == {()}

    _pods_configmaps_events_and_metrics_speak_nodewright(cluster, name, recording)
    # The policy's budget of one node: never both nodes in progress at once.
    status_key = f"{GROUP}/status_{name}"
    latest: dict[str, str | None] = {}
    most = 0
    for node in seen:
        latest[node["metadata"]["name"]] = (node["metadata"].get("annotations") or {}).get(
            status_key
        )
        most = max(most, sum(1 for status in latest.values() if status == "in_progress"))
    assert most == 1, "the DeploymentPolicy's budget of one node was not kept"


def _pods_configmaps_events_and_metrics_speak_nodewright(
    cluster: Cluster, name: str, recording: Recording
) -> None:
    kube = cluster.kube
    pods = [p for _, _, p in recording.of("nw-pod")]
    assert {p["metadata"]["labels"].get(f"{GROUP}/interrupt") for p in pods} >= {"True"}
    for pod in pods:
        assert legacy_keys(pod) == [], pod["metadata"]["name"]
        owner = pod["metadata"]["ownerReferences"][0]
        assert (owner["apiVersion"], owner["kind"]) == (f"{GROUP}/v1alpha1", "NodeWright")
    assert not recording.of("pod"), "a pod labelled skyhook.nvidia.com/name"

    configmaps = kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps")["items"]
    mine = [c for c in configmaps if name in c["metadata"]["name"]]
    assert {c["metadata"]["name"] for c in mine} >= {f"{name}-marker-1.0.0"}
    meta = [c for c in mine if f"{GROUP}/skyhook-node-meta" in c["metadata"]["labels"]]
    assert len(meta) == 2, [c["metadata"]["name"] for c in mine]
    for configmap in mine:
        assert legacy_keys(configmap) == [], configmap["metadata"]["name"]

    # Events about cluster-scoped objects live in "default", as kubectl describe looks for them.
    # Upstream v0.18+'s gauges, with the skyhook_* ones beside them (PUBLISH_LEGACY_METRICS).
    # The gauges follow the pass after the one that wrote the status: wait for it.
    operator = cluster.operator
    assert operator is not None
    wanted = [
        f'{p}_status{{{p}_name="{name}",status="complete"}} 1' for p in ("nodewright", "skyhook")
    ]

    def scraped() -> list[str] | None:
        lines = urllib3.request("GET", operator.metrics_url).data.decode().splitlines()
        return lines if all(series in lines for series in wanted) else None

    lines = wait_until(scraped, 30, "both status gauges at complete")
    for series in wanted:
        assert series in lines, [line for line in lines if "_status{" in line]

    events = kube.request("GET", "/api/v1/namespaces/default/events")["items"]
    about = [e["involvedObject"] for e in events if e["involvedObject"].get("name") == name]
    assert about, "no Event about the NodeWright"
    assert {(o["apiVersion"], o["kind"]) for o in about} == {(f"{GROUP}/v1alpha1", "NodeWright")}
    # Messages name the object as the group spells it, as upstream v0.18+ writes them.
    messages = [e.get("message") or "" for e in events if name in (e.get("message") or "")]
    assert any(f"[nodewright:{name}]" in m for m in messages), messages
    assert f"NodeWright [{name}] complete." in messages, messages
    assert not [m for m in messages if f"skyhook:{name}" in m or f"Skyhook [{name}]" in m]
    # As upstream v0.18+'s users read them: events.k8s.io/v1, an action beside each reason.
    read = kube.request("GET", "/apis/events.k8s.io/v1/namespaces/default/events")["items"]
    mine = [e for e in read if name in (e.get("note") or "") or e["regarding"]["name"] == name]
    actions = {(e["regarding"]["kind"], e["reason"], e.get("action")) for e in mine}
    # The reporter: the controller and the replica (its Lease identity, the pod's name).
    assert {(e["reportingController"], e["reportingInstance"]) for e in mine} == {
        ("skyhook-controller", socket.gethostname())
    }
    assert {
        ("Node", "Apply", "StartStage"),
        ("Node", "State", "MarkComplete"),
        ("NodeWright", "Interrupt", "InterruptNode"),
        ("NodeWright", "State", "Transition"),
    } <= actions, actions


def test_a_bad_nodewright_is_refused_by_the_nodewright_webhook(
    nodewright_cluster: Cluster,
) -> None:
    manifest = nodewright(nodewright_cluster.label, nodewright_cluster.label)
    manifest["spec"]["packages"]["marker"]["dependsOn"] = {"missing": "1.0.0"}
    with pytest.raises(ApiError) as refused:
        nodewright_cluster.kube.request("POST", NODEWRIGHTS, manifest)
    message = str(refused.value)
    assert 'admission webhook "validate-nodewright.nvidia.com" denied the request' in message
    assert "spec.packages.marker.dependsOn.missing: no package 'missing'" in message


def _markers(cluster: Cluster, node: str) -> list[str]:
    return cluster.host_file(node, "/skyhook-markers").splitlines()


def _complete_under(cluster: Cluster, group: str, name: str) -> list[str]:
    """The nodes whose status for `name` reads complete under `group`'s key."""
    return [
        n
        for n in cluster.nodes
        if (cluster.node(n)["metadata"].get("annotations") or {}).get(f"{group}/status_{name}")
        == "complete"
    ]


def _half_rolled_out_as_skyhook(cluster: Cluster, nodes: int) -> tuple[str, list[str]]:
    """A Skyhook over `nodes` new nodes, one node at a time, stopped (SIGTERM) once a node is
    complete: its name and the nodes it completed."""
    cluster.add_nodes(nodes)
    name = cluster.label
    cluster.operator = cluster.start_operator(log_name="skyhook-1.log")
    package = {"version": "1.0.0", "image": SHELLSCRIPT, "configMap": marker_scripts()}
    cluster.skyhook(name, {"marker": package}, interruptionBudget={"count": 1})
    wait_until(lambda: _complete_under(cluster, "skyhook.nvidia.com", name), 120, "a node done")
    cluster.operator.stop()
    done = _complete_under(cluster, "skyhook.nvidia.com", name)
    assert len(done) < nodes, "finished before the switch: nothing left to carry over"
    return name, done


def test_a_half_finished_rollout_moves_to_nodewright_and_back_running_no_stage_twice(
    switching: Cluster,
) -> None:
    """Skyhook, then NodeWright (the operator stopped mid-rollout, a stage pod maybe still
    running), then back to Skyhook (the operator killed): every node runs apply and config
    once, and each switch carries the rollout on from where the other group left it."""
    cluster, kube = switching, switching.kube
    start_operator = cluster.start_operator
    name, skyhook_done = _half_rolled_out_as_skyhook(cluster, 4)
    nodes = cluster.nodes

    cluster.operator = start_operator(log_name="nodewright.log", SKYHOOK_API_GROUP=GROUP)
    mirror = wait_until(lambda: _nodewright(kube, name), 30, "NodeWright mirrored")
    annotations = mirror["metadata"]["annotations"]
    assert annotations[f"{GROUP}/mirrored-from"] == name
    assert mirror["spec"]["packages"]["marker"]["version"] == "1.0.0"
    # The nodes the Skyhook finished are complete under the new keys before any pass.
    wait_until(
        lambda: set(skyhook_done) <= set(_complete_under(cluster, GROUP, name)),
        30,
        "the finished nodes carried over",
    )
    legacy = cluster.get_skyhook(name)
    assert "skyhook.nvidia.com/skyhook" not in (legacy["metadata"].get("finalizers") or ())
    wait_until(
        lambda: len(_complete_under(cluster, GROUP, name)) >= len(skyhook_done) + 1,
        120,
        "the NodeWright completes a node of its own",
    )
    cluster.operator.kill()
    nodewright_done = _complete_under(cluster, GROUP, name)

    cluster.operator = start_operator(log_name="skyhook-2.log")
    cluster.wait_complete(name, timeout=180)
    for node in nodes:
        assert _markers(cluster, node) == ["apply", "config"], (node, _markers(cluster, node))
    # The copies under the group spoken before stay (a later switch finds them).
    for node in nodewright_done:
        assert cluster.node(node)["metadata"]["annotations"].get(f"{GROUP}/version_{name}")


def _nodewright(kube: Kube, name: str) -> Json | None:
    try:
        return kube.request("GET", f"{NODEWRIGHTS}/{name}")
    except ApiError as error:
        if error.status == 404:
            return None
        raise


def test_a_skyhook_made_while_speaking_nodewright_is_mirrored_and_then_read_only(
    nodewright_cluster: Cluster,
) -> None:
    cluster = nodewright_cluster
    kube = cluster.kube
    (node,) = cluster.add_nodes(1)
    name = cluster.label
    package = {"version": "1.0.0", "image": SHELLSCRIPT, "configMap": marker_scripts()}
    cluster.skyhook(name, {"marker": package})  # skyhook.nvidia.com, as before the switch
    mirror = wait_until(lambda: _nodewright(kube, name), 60, "NodeWright mirrored")
    assert mirror["metadata"]["annotations"][f"{GROUP}/mirrored-from"] == name
    wait_until(lambda: _complete_under(cluster, GROUP, name) == [node], 120, "rolled out")

    # Its twin decides now: the legacy object's spec and pause are refused, named.
    bumped = {"spec": {"packages": {"marker": {"version": "1.0.1"}}}}
    paused = {"metadata": {"annotations": {"skyhook.nvidia.com/pause": "true"}}}
    for patch in (bumped, paused):
        with pytest.raises(ApiError) as refused:
            cluster.patch_skyhook(name, patch)
        assert refused.value.status == 403
        assert (
            f'skyhook.nvidia.com Skyhook "{name}" is carried over to nodewright.nvidia.com '
            f'NodeWright and is read-only; edit NodeWright "{name}" instead'
        ) in str(refused.value)
    # Anything else of its metadata may change; the NodeWright is left as it was.
    cluster.patch_skyhook(name, {"metadata": {"labels": {"team": "gpu"}}})
    assert _nodewright(kube, name)["spec"]["packages"]["marker"]["version"] == "1.0.0"
    assert _markers(cluster, node) == ["apply", "config"]


def _legacy_keys_of(cluster: Cluster, name: str) -> dict[str, list[str]]:
    """Per node, the skyhook.nvidia.com keys it still has for `name`."""
    found = {}
    for node in cluster.nodes:
        keys_for = [k for k in legacy_keys(cluster.node(node)) if name in k]
        if keys_for:
            found[node] = keys_for
    return found


def test_the_old_groups_copies_go_after_the_cleanup_delay_and_a_switch_back_still_resumes(
    switching: Cluster,
) -> None:
    cluster, kube = switching, switching.kube
    start_operator = cluster.start_operator
    name, _ = _half_rolled_out_as_skyhook(cluster, 2)
    nodes = cluster.nodes

    cluster.operator = start_operator(
        log_name="nodewright.log", SKYHOOK_API_GROUP=GROUP, SKYHOOK_LEGACY_CLEANUP_DELAY="0"
    )
    wait_until(lambda: len(_complete_under(cluster, GROUP, name)) == 2, 120, "rolled out")
    wait_until(lambda: not _legacy_keys_of(cluster, name), 90, "old copies removed")
    stamp = f"{GROUP}/legacy-migrated-at"
    wait_until(
        lambda: stamp not in (_nodewright(kube, name) or {})["metadata"]["annotations"],
        30,
        "the carry-over's stamp cleared",
    )
    configmaps = kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps")["items"]
    assert not [c for c in configmaps if name in c["metadata"]["name"] and legacy_keys(c)]
    cluster.operator.stop()

    # Back to Skyhook: its copies are gone, the NodeWright's are carried back.
    cluster.operator = start_operator(log_name="skyhook-2.log")
    cluster.wait_complete(name, timeout=120)
    for node in nodes:
        assert _markers(cluster, node) == ["apply", "config"], node


def _policy_with_a_bad_topology_key() -> Json:
    """A policy spec the CRD's schema admits and the decoder does not: the topology key
    is no label key."""
    return {
        "default": {"budget": {"count": 1}, "strategy": {"fixed": {"initialBatch": 1}}},
        "topology": {"key": "not a label key", "maxPerDomain": 1},
    }


def _kubectl_json(sandbox: Sandbox, *args: str) -> Json:
    """What kubectl reads, as JSON: a client other than the operator's."""
    found = subprocess.run(
        ["kubectl", "--kubeconfig", str(sandbox.kubeconfig), *args, "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return json.loads(found.stdout)


def _warnings_about(sandbox: Sandbox, kind: str, name: str) -> list[Json]:
    selector = f"involvedObject.kind={kind},involvedObject.name={name},type=Warning"
    listed = _kubectl_json(sandbox, "get", "events", "-n", "default", "--field-selector", selector)
    return list(listed["items"])


def _not_carried_over(sandbox: Sandbox, name: str) -> Json | None:
    found = _kubectl_json(sandbox, "get", f"nodewrights.{GROUP}", name)
    conditions = (found.get("status") or {}).get("conditions") or ()
    wanted = f"{LEGACY}NotCarriedOver"
    return next((c for c in conditions if c["type"] == wanted), None)


def test_an_invalid_nodewright_is_not_carried_over_says_so_once_and_holds_up_nothing(
    switching: Cluster, sandbox: Sandbox
) -> None:
    """Admitted while no webhook looked at nodewright.nvidia.com, a NodeWright whose version
    is not semver and a policy of that group that does not decode are skipped by the
    carry-over, each told so on itself once; a good Skyhook beside them rolls out. Fixed, the
    NodeWright is carried over and its condition goes."""
    cluster, kube = switching, switching.kube
    name = cluster.label
    cluster.add_nodes(1)
    invalid = nodewright(name, "no-such-nodes")  # selects no node: mirrored, it is done at once
    invalid["spec"]["packages"]["marker"]["version"] = "latest"
    kube.request("POST", NODEWRIGHTS, invalid)
    policy = {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "DeploymentPolicy",
        "metadata": {"name": name},
        "spec": _policy_with_a_bad_topology_key(),
    }
    kube.request("POST", f"/apis/{GROUP}/v1alpha1/deploymentpolicies", policy)

    cluster.operator = cluster.start_operator()  # speaks skyhook.nvidia.com
    ready = time.monotonic()
    good = f"{name[:40]}-ok"
    package = {"version": "1.0.0", "image": SHELLSCRIPT, "configMap": marker_scripts()}
    cluster.skyhook(good, {"marker": package})
    cluster.wait_complete(good, timeout=120)

    condition = wait_until(
        lambda: _not_carried_over(sandbox, name), 30, "the NotCarriedOver condition"
    )
    assert condition["status"] == "True" and condition["reason"] == "SpecInvalid"
    assert "spec.packages.marker.version" in condition["message"], condition
    with pytest.raises(ApiError) as missing:
        cluster.get_skyhook(name)
    assert missing.value.status == 404
    # Said once: still one Warning, counted once, after a mirror round more (30 s).
    time.sleep(max(0.0, ready + 40 - time.monotonic()))
    for kind, field in (
        ("NodeWright", "spec.packages.marker.version"),
        ("DeploymentPolicy", "spec.topology.key"),
    ):
        (warning,) = _warnings_about(sandbox, kind, name)
        assert warning["reason"] == "NotCarriedOver" and warning["count"] == 1, warning
        assert field in warning["message"], warning
        assert warning["involvedObject"]["apiVersion"] == f"{GROUP}/v1alpha1", warning

    # Fixed: carried over within a mirror round, and the condition goes.
    cluster.skyhooks.append(name)  # the mirror, deleted with the test's Skyhooks
    fixed = {"spec": {"packages": {"marker": {"version": "1.0.0"}}}}
    kube.request("PATCH", f"{NODEWRIGHTS}/{name}", fixed, MERGE_PATCH)
    wait_until(lambda: _exists(cluster, name), 45, "the fixed NodeWright mirrored")
    wait_until(lambda: _not_carried_over(sandbox, name) is None, 45, "its condition removed")
    assert len(_warnings_about(sandbox, "NodeWright", name)) == 1


def _exists(cluster: Cluster, name: str) -> bool:
    try:
        cluster.get_skyhook(name)
    except ApiError as error:
        if error.status == 404:
            return False
        raise
    return True


def test_an_invalid_object_of_the_other_group_is_refused_at_admission_naming_its_field(
    switching: Cluster,
) -> None:
    """Speaking skyhook.nvidia.com, the operator's webhooks check nodewright.nvidia.com's
    objects too: one it could never carry over is refused at the door."""
    cluster, kube = switching, switching.kube
    cluster.operator = cluster.start_operator()
    name = cluster.label
    invalid = nodewright(name, name)
    invalid["spec"]["packages"]["marker"]["version"] = "latest"
    with pytest.raises(ApiError) as refused:
        kube.request("POST", NODEWRIGHTS, invalid)
    assert refused.value.status == 403
    assert "spec.packages.marker.version" in refused.value.reason, refused.value.reason
    policy = {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "DeploymentPolicy",
        "metadata": {"name": name},
        "spec": _policy_with_a_bad_topology_key(),
    }
    with pytest.raises(ApiError) as refused:
        kube.request("POST", f"/apis/{GROUP}/v1alpha1/deploymentpolicies", policy)
    assert refused.value.status == 403
    assert "spec.topology.key" in refused.value.reason, refused.value.reason
    # A valid one is admitted, and an edit that breaks it is refused likewise.
    kube.request("POST", NODEWRIGHTS, nodewright(name, "no-such-nodes"))
    cluster.skyhooks.append(name)  # its mirror, deleted with the test's Skyhooks
    broken = {"spec": {"packages": {"marker": {"version": "latest"}}}}
    with pytest.raises(ApiError) as refused:
        kube.request("PATCH", f"{NODEWRIGHTS}/{name}", broken, MERGE_PATCH)
    assert "spec.packages.marker.version" in refused.value.reason, refused.value.reason


def _refuse_carrying(kube: Kube, name: str, annotation: str) -> Callable[[], None]:
    """A ValidatingAdmissionPolicy that refuses every node status write adding `annotation`
    (the carry-over's, for one SCR): the apiserver refusing one object's write. Returns what
    removes it."""
    admission = "/apis/admissionregistration.k8s.io/v1"
    adds = (
        f"has(object.metadata.annotations) && '{annotation}' in object.metadata.annotations "
        f"&& !(has(oldObject.metadata.annotations) && '{annotation}' in "
        "oldObject.metadata.annotations)"
    )
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["UPDATE"],
                        "resources": ["nodes", "nodes/status"],
                    }
                ]
            },
            "validations": [{"expression": f"!({adds})", "message": "refused by the test"}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    kube.request("POST", f"{admission}/validatingadmissionpolicies", policy)
    kube.request("POST", f"{admission}/validatingadmissionpolicybindings", binding)

    def remove() -> None:
        for plural in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
            with contextlib.suppress(ApiError):
                kube.request("DELETE", f"{admission}/{plural}/{name}")

    return remove


def _refused(kube: Kube, node: str, annotation: str) -> bool:
    """Whether the apiserver refuses `annotation` on `node` now (a dry run)."""
    patch = {"metadata": {"annotations": {annotation: "1.0.0"}}}
    try:
        kube.request(
            "PATCH", f"/api/v1/nodes/{node}/status", patch, MERGE_PATCH, query={"dryRun": "All"}
        )
    except ApiError as error:
        return "refused by the test" in error.reason
    return False


def test_a_node_write_the_apiserver_refuses_holds_back_only_the_skyhook_it_carries(
    switching: Cluster,
) -> None:
    """Two NodeWrights carried over to skyhook.nvidia.com; the apiserver refuses the carry-over's
    write of one's state to its node. The other is planned and completes meanwhile; the held
    one is not planned until its state is carried, which happens, with backoff, once the
    apiserver takes the write."""
    cluster, kube = switching, switching.kube
    held_node, free_node = cluster.add_nodes(2)
    held, free = f"{cluster.label[:40]}-held", f"{cluster.label[:40]}-free"
    for node, part in ((held_node, held), (free_node, free)):
        kube.request(
            "PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": {"part": part}}}, MERGE_PATCH
        )
    # The NodeWright operator had started `held` on its node: its state is there to carry.
    theirs, ours_key = f"{GROUP}/version_{held}", f"{LEGACY}version_{held}"
    kube.request(
        "PATCH",
        f"/api/v1/nodes/{held_node}",
        {"metadata": {"annotations": {theirs: "1.0.0"}}},
        MERGE_PATCH,
    )
    for name in (held, free):
        body = nodewright(name, cluster.label)
        body["spec"]["nodeSelectors"]["matchLabels"]["part"] = name
        kube.request("POST", NODEWRIGHTS, body)
        cluster.skyhooks.append(name)  # its mirror, deleted with the test's Skyhooks
    allow = _refuse_carrying(kube, cluster.label, ours_key)
    try:
        wait_until(lambda: _refused(kube, held_node, ours_key), 30, "the refusal in force")
        cluster.operator = cluster.start_operator()  # speaks skyhook.nvidia.com
        for name in (held, free):
            wait_until(lambda n=name: _exists(cluster, n), 30, f"{name} mirrored")
        cluster.wait_complete(free, timeout=120, nodes=[free_node])
        # Mirrored, but not planned while its state is not ours: no status, no stage.
        assert not cluster.get_skyhook(held).get("status"), cluster.get_skyhook(held)
        assert ours_key not in cluster.node(held_node)["metadata"].get("annotations", {})
        assert not cluster.host_file(held_node, "/skyhook-markers").strip()
        allow()
        cluster.wait_complete(held, timeout=240, nodes=[held_node])
        assert cluster.node(held_node)["metadata"]["annotations"][ours_key] == "1.0.0"
    finally:
        allow()
        for name in (held, free):
            with contextlib.suppress(ApiError):
                kube.request("DELETE", f"{NODEWRIGHTS}/{name}")
