"""The drain before an interrupt on the sandbox (real apiserver and controller-manager,
simulated nodes, the real operator): which pods it evicts, deletes, leaves or is blocked by,
as `spec.drainConfig` says, and that the interrupt starts only once the drain is done.

The sandbox has no scheduler: the test binds a controller's pod to its node through the
`pods/binding` subresource, as kube-scheduler would. After an eviction the ReplicaSet's
replacement stays unscheduled (the node is cordoned), as on a real cluster.

Every assertion is made on recorded watches (the test's pods, the Skyhook, the Node's Events,
the operator's own pods and the node); resourceVersions order writes across them. An eviction
is told from a plain delete by what the apiserver's eviction subresource writes first: the
condition `DisruptionTarget` with reason `EvictionByEvictionAPI` (a DELETE writes none).
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from skyhook_dev.harness import node_state, wait_until
from skyhook_operator.kube.client import ApiError, Json
from skyhook_schemas import keys

from .helpers import (
    SHELLSCRIPT,
    TEST_LABEL,
    Cluster,
    Recording,
    dry_run_eviction,
    pod_stage,
    refusing_removals,
    rv,
)

BUSYBOX = "docker.io/library/busybox:1"
PACKAGE = "kernel"
STEPS = "/skyhook-steps"
GATE_DIR = "drain-gate"  # on the node's host: the protected pod exits once `done` is there
Version = tuple[str, Json]  # (watch event type, object)


def reboot_package() -> dict[str, Any]:
    """A reboot-interrupt package whose apply and post-interrupt leave a line on the host."""
    return {
        "version": "1.0.0",
        "image": SHELLSCRIPT,
        "interrupt": {"type": "reboot"},
        "configMap": {
            "apply.sh": f"#!/bin/bash\necho applied >> {STEPS}\n",
            "apply_check.sh": f"#!/bin/bash\ngrep -q applied {STEPS}\n",
            "post_interrupt.sh": f"#!/bin/bash\necho post-interrupt >> {STEPS}\n",
            "post_interrupt_check.sh": f"#!/bin/bash\ngrep -q post-interrupt {STEPS}\n",
        },
    }


# --- the workloads on the node ---------------------------------------------------------------


@dataclass
class Workloads:
    """Pods of this test's own namespace on its node: bare, or a controller's, bound here."""

    cluster: Cluster
    namespace: str

    def pods_path(self, name: str = "", subresource: str = "") -> str:
        return self.cluster.kube.namespaced_path("pods", self.namespace, name, subresource)

    def _post(self, group_path: str, resource: str, body: Json) -> None:
        self.cluster.kube.request(
            "POST", f"{group_path}/namespaces/{self.namespace}/{resource}", body
        )

    @staticmethod
    def spec(
        *,
        empty_dir: bool = False,
        lingering: bool = False,
        command: Sequence[str] = ("sleep", "600"),
        volumes: Sequence[Json] = (),
    ) -> Json:
        """`lingering`: the pod ignores SIGTERM, so it is gone only when its grace period ends
        (the node then kills it): an interrupt that does not wait for it starts before."""
        if lingering:
            command = ("sh", "-c", f"trap '' TERM; exec {' '.join(command)}")
        container: Json = {"name": "work", "image": BUSYBOX, "command": list(command)}
        mounted = [*volumes, *([{"name": "scratch", "emptyDir": {}}] if empty_dir else [])]
        if mounted:
            container["volumeMounts"] = [{"name": v["name"], "mountPath": f"/{v['name']}"} for v in mounted]  # fmt: skip
        body: Json = {"terminationGracePeriodSeconds": 2, "containers": [container]}
        return {**body, "volumes": mounted} if mounted else body

    def bare(self, name: str, node: str, **spec: Any) -> Json:
        """A pod no controller owns, placed on `node` by its spec."""
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"nodeName": node, "restartPolicy": "Never", **self.spec(**spec)},
        }
        self._post("/api/v1", "pods", pod)
        return self.running(name)

    def replica_set(self, name: str, node: str, **spec: Any) -> Json:
        """One replica, its pod bound to `node`."""
        template = {"metadata": {"labels": {"app": name}}, "spec": self.spec(**spec)}
        body = {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": name},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": name}},
                "template": template,
            },
        }
        self._post("/apis/apps/v1", "replicasets", body)
        return self.bind(name, node)

    def daemon_set(self, name: str, node: str) -> Json:
        """On this test's nodes only (its one node); the controller adds the cordon
        toleration, as it does to every DaemonSet pod."""
        spec = {**self.spec(), "nodeSelector": {TEST_LABEL: self.cluster.label}}
        body = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
            },
        }
        self._post("/apis/apps/v1", "daemonsets", body)
        return self.bind(name, node)

    def bind(self, app: str, node: str) -> Json:
        """As kube-scheduler would: the controller's unscheduled pod goes to `node`."""

        def unbound() -> list[Json]:
            found = self.cluster.kube.request(
                "GET", self.pods_path(), query={"labelSelector": f"app={app}"}
            )["items"]
            return [p for p in found if not p["spec"].get("nodeName")]

        (pod,) = wait_until(unbound, 30, f"the pod of {app}")
        name = pod["metadata"]["name"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": self.namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self.cluster.kube.request("POST", self.pods_path(name, "binding"), binding)
        return self.running(name)

    def running(self, name: str) -> Json:
        def pod() -> Json | None:
            found = self.cluster.kube.request("GET", self.pods_path(name))
            return found if found.get("status", {}).get("phase") == "Running" else None

        return wait_until(pod, 60, f"pod {name} running")

    def budget(self, app: str) -> None:
        """A PodDisruptionBudget allowing no disruption of `app`'s one pod, once the
        disruption controller has counted it (before that an eviction is refused anyway, with
        other words)."""
        body = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": app},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": app}}},
        }
        self._post("/apis/policy/v1", "poddisruptionbudgets", body)
        path = f"/apis/policy/v1/namespaces/{self.namespace}/poddisruptionbudgets/{app}"

        def counted() -> bool:
            found = self.cluster.kube.request("GET", path)
            status = found.get("status", {})
            return bool(
                status.get("observedGeneration") == found["metadata"]["generation"]
                and status.get("currentHealthy") == 1
                and status.get("disruptionsAllowed") == 0
            )

        wait_until(counted, 30, f"the budget of {app} counted")

    def delete(self, pod: Json) -> int:
        """Delete the pod by hand; the resourceVersion of that write."""
        return rv(self.cluster.kube.request("DELETE", self.pods_path(pod["metadata"]["name"])))


@pytest.fixture
def workloads(cluster: Cluster) -> Iterator[Workloads]:
    """A namespace of the test's own (deleted at the end, its pods, controllers and budgets
    with it), ready for pods once its default ServiceAccount exists."""
    namespace = f"{cluster.label[:40].strip('-')}-{uuid.uuid4().hex[:5]}"
    kube = cluster.kube
    kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})

    def service_account() -> bool:
        try:
            kube.request("GET", kube.namespaced_path("serviceaccounts", namespace, "default"))
        except ApiError:
            return False
        return True

    wait_until(service_account, 30, f"the default ServiceAccount of {namespace}")
    yield Workloads(cluster, namespace)
    with contextlib.suppress(ApiError):
        kube.request("DELETE", f"/api/v1/namespaces/{namespace}")


# --- reading the recording -------------------------------------------------------------------


def record(cluster: Cluster, scr: str, workloads: Workloads, node: str) -> Recording:
    """The node and our stage pods (as `cluster.record`), plus the test's pods ("work"), the
    Skyhook ("skyhook") and the Node's Events ("event")."""
    events = {"fieldSelector": f"involvedObject.kind=Node,involvedObject.name={node}"}
    return cluster.record(
        scr,
        extra={
            "work": (workloads.pods_path(), {}),
            "skyhook": (cluster.kube.skyhook_path(), {"fieldSelector": f"metadata.name={scr}"}),
            "event": (cluster.kube.namespaced_path("events", "default"), events),
        },
    )


def history(recording: Recording, pod: Json) -> list[Version]:
    """Every recorded version of `pod` (this uid, not a replacement of the same name)."""
    uid = pod["metadata"]["uid"]
    return [(k, o) for _, k, o in recording.of("work") if o["metadata"]["uid"] == uid]


def evicted_rv(versions: list[Version]) -> int | None:
    """The first version the eviction subresource marked, None if never evicted."""
    for _, pod in versions:
        for found in pod.get("status", {}).get("conditions") or []:
            if (
                found["type"] == "DisruptionTarget"
                and found.get("reason") == "EvictionByEvictionAPI"
            ):
                return rv(pod)
    return None


def deleting_rv(versions: list[Version]) -> int | None:
    """The first version with a deletionTimestamp (evicted or deleted), None if never."""
    return next((rv(p) for _, p in versions if p["metadata"].get("deletionTimestamp")), None)


def gone_rv(versions: list[Version]) -> int | None:
    return next((rv(p) for kind, p in versions if kind == "DELETED"), None)


def created_rv(recording: Recording, stage: str) -> int | None:
    """When the first stage pod of `stage` was created (its first version), None if never."""
    found = [rv(p) for _, _, p in recording.of("pod") if pod_stage(p) == stage]
    return min(found) if found else None


def conditions(recording: Recording, type_: str) -> list[tuple[int, Json | None]]:
    """Each recorded version of the Skyhook: its rv and its True condition `type_`, if any."""
    found = []
    for _, _, scr in recording.of("skyhook"):
        current = [
            c
            for c in scr.get("status", {}).get("conditions") or []
            if c["type"] == type_ and c["status"] == "True"
        ]
        found.append((rv(scr), current[0] if current else None))
    return found


def node_versions(recording: Recording) -> list[Json]:
    return [o for _, _, o in recording.of("node")]


def annotation(node: Json, key: str) -> str | None:
    return (node["metadata"].get("annotations") or {}).get(key)


def soon(check: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    """Wait until the recording shows what `check` looks for."""
    return wait_until(check, timeout, what, interval=0.25)


def blocked_key(scr: str) -> str:
    return f"{keys.GROUP}/drainBlocked_{scr}"


# --- the tests -------------------------------------------------------------------------------


def test_the_default_drain_evicts_every_pod_but_the_daemon_set_one_before_the_interrupt(
    cluster: Cluster, workloads: Workloads
) -> None:
    """A ReplicaSet's pod, a bare pod (lingering: it ignores SIGTERM, so it is gone only at
    the end of its grace period) and a ReplicaSet's pod with an emptyDir are evicted and gone
    before the interrupt pod is created; the DaemonSet's pod is left as it is."""
    (node,) = cluster.add_nodes(1)
    removed = {
        "replicated": workloads.replica_set("replicated", node),
        "bare": workloads.bare("bare", node, lingering=True),
        "scratch": workloads.replica_set("scratch", node, empty_dir=True),
    }
    daemon = workloads.daemon_set("daemon", node)
    scr = cluster.label
    recording = record(cluster, scr, workloads, node)
    cluster.skyhook(scr, {PACKAGE: reboot_package()})
    cluster.wait_complete(scr, timeout=120)

    interrupt = created_rv(recording, "interrupt")
    assert interrupt is not None, "no interrupt pod"
    for role, pod in removed.items():
        versions = history(recording, pod)
        assert evicted_rv(versions) is not None, f"the {role} pod was not evicted"
        gone = gone_rv(versions)
        assert gone is not None, f"the {role} pod is still there"
        assert gone < interrupt, f"the interrupt started while the {role} pod was still there"
    versions = history(recording, daemon)
    assert versions and deleting_rv(versions) is None, "the DaemonSet pod was removed"
    assert gone_rv(versions) is None
    soon(lambda: not node_versions(recording)[-1]["spec"].get("unschedulable"), "uncordoned")
    assert any(n["spec"].get("unschedulable") for n in node_versions(recording))


@pytest.mark.parametrize(
    ("knob", "reason", "blocker"),
    [("force", "UnmanagedPod", "bare"), ("deleteEmptyDirData", "EmptyDirData", "scratch")],
)
def test_a_pod_the_drain_config_keeps_blocks_the_interrupt_until_it_is_gone(
    cluster: Cluster, workloads: Workloads, knob: str, reason: str, blocker: str
) -> None:
    """`force: false` keeps the bare pod, `deleteEmptyDirData: false` the pod with an emptyDir
    (a ReplicaSet's): not evicted, named in DrainBlocked and on the node, the other evicted;
    once deleted by hand, both clear and the interrupt runs."""
    (node,) = cluster.add_nodes(1)
    pods = {
        "bare": workloads.bare("bare", node),
        "scratch": workloads.replica_set("scratch", node, empty_dir=True),
    }
    (other,) = set(pods) - {blocker}
    kept = pods[blocker]
    kept_name = f"{workloads.namespace}/{kept['metadata']['name']}"
    scr = cluster.label
    recording = record(cluster, scr, workloads, node)
    cluster.skyhook(scr, {PACKAGE: reboot_package()}, drainConfig={knob: False})

    blocked = soon(
        lambda: next((c for _, c in conditions(recording, "DrainBlocked") if c), None),
        "DrainBlocked",
    )
    assert blocked["reason"] == reason and kept_name in blocked["message"], blocked
    listed = soon(
        lambda: next(
            (a for n in node_versions(recording) if (a := annotation(n, blocked_key(scr)))), None
        ),
        "the drainBlocked annotation",
    )
    assert {
        "namespace": workloads.namespace,
        "name": kept["metadata"]["name"],
        "reason": reason,
    } in [{k: b.get(k) for k in ("namespace", "name", "reason")} for b in json.loads(listed)], (
        listed
    )
    soon(lambda: gone_rv(history(recording, pods[other])), f"the {other} pod evicted", 30)
    time.sleep(2)  # blocked: time in which nothing else may happen
    assert deleting_rv(history(recording, kept)) is None, f"the {blocker} pod was removed"
    assert created_rv(recording, "interrupt") is None, "the interrupt started while blocked"

    deleted = workloads.delete(kept)
    cluster.wait_complete(scr, timeout=120)

    versions = history(recording, kept)
    assert evicted_rv(versions) is None, f"the {blocker} pod was evicted"
    assert deleting_rv(versions) == deleted, f"the {blocker} pod was removed before our delete"
    interrupt = created_rv(recording, "interrupt")
    assert interrupt is not None and interrupt > (gone_rv(versions) or 0)
    assert evicted_rv(history(recording, pods[other])) is not None, f"the {other} pod kept"
    soon(lambda: conditions(recording, "DrainBlocked")[-1][1] is None, "DrainBlocked cleared")
    soon(
        lambda: annotation(node_versions(recording)[-1], blocked_key(scr)) is None,
        "the drainBlocked annotation removed",
    )


def test_disable_eviction_deletes_pods_a_budget_allowing_no_disruption_protects(
    cluster: Cluster, workloads: Workloads
) -> None:
    (node,) = cluster.add_nodes(1)
    pods = {"guarded": workloads.replica_set("guarded", node), "bare": workloads.bare("bare", node)}
    workloads.budget("guarded")
    scr = cluster.label
    recording = record(cluster, scr, workloads, node)
    cluster.skyhook(scr, {PACKAGE: reboot_package()}, drainConfig={"disableEviction": True})
    cluster.wait_complete(scr, timeout=60)  # an eviction would be refused for ever

    interrupt = created_rv(recording, "interrupt")
    assert interrupt is not None
    for role, pod in pods.items():
        versions = history(recording, pod)
        assert evicted_rv(versions) is None, f"the {role} pod was evicted, not deleted"
        gone = gone_rv(versions)
        assert gone is not None and gone < interrupt, f"the {role} pod was not deleted first"
    assert not any(c for _, c in conditions(recording, "DrainBlocked")), "the budget held it"


def test_a_budget_allowing_no_disruption_holds_the_drain_until_its_timeout(
    cluster: Cluster, workloads: Workloads
) -> None:
    (node,) = cluster.add_nodes(1)
    guarded = workloads.replica_set("guarded", node)
    workloads.budget("guarded")
    scr = cluster.label
    recording = record(cluster, scr, workloads, node)
    cluster.skyhook(scr, {PACKAGE: reboot_package()}, drainConfig={"timeout": "20s"})
    status_key = keys.node_status_key(scr)

    def erroring() -> float | None:
        return next(
            (
                at
                for at, _, n in recording.of("node")
                if (n["metadata"].get("labels") or {}).get(status_key) == "erroring"
            ),
            None,
        )

    erroring_at = soon(erroring, "the node erroring", timeout=90)
    time.sleep(3)  # erroring: time in which the node must stay cordoned and nothing else run

    refusal = "The disruption budget guarded needs 1 healthy pods and has 1 currently"
    blocked = next((c for _, c in conditions(recording, "DrainBlocked") if c), None)
    assert blocked is not None, "no DrainBlocked condition"
    assert blocked["reason"] == "PodDisruptionBudget" and refusal in blocked["message"], blocked
    listed = [a for n in node_versions(recording) if (a := annotation(n, blocked_key(scr)))]
    assert listed, "no drainBlocked annotation"
    (entry,) = json.loads(listed[0])
    assert (entry["namespace"], entry["name"], entry["reason"]) == (
        workloads.namespace,
        guarded["metadata"]["name"],
        "PodDisruptionBudget",
    ), entry
    assert refusal in entry["detail"], entry  # the apiserver's words
    # The drain's clock: from its drainStart to erroring, at least the timeout.
    start_key = f"{keys.GROUP}/drainStart_{scr}"
    started_at = next(at for at, _, n in recording.of("node") if annotation(n, start_key))
    assert erroring_at - started_at >= 20 - 1, f"erroring {erroring_at - started_at:.1f}s in"
    versions = node_versions(recording)
    cordoned = next(i for i, n in enumerate(versions) if n["spec"].get("unschedulable"))
    assert all(n["spec"].get("unschedulable") for n in versions[cordoned:]), "uncordoned"
    timed_out = (
        f"drain timed out after [20s] for node [{node}] package [{PACKAGE}:1.0.0] "
        f"from [skyhook:{scr}]"
    )
    events = [(e["type"], e["reason"], e["message"]) for _, _, e in recording.of("event")]
    assert ("Warning", "Drain", timed_out) in events, events
    assert deleting_rv(history(recording, guarded)) is None, "the guarded pod was removed"
    assert created_rv(recording, "interrupt") is None, "the interrupt ran"


def test_a_non_interrupt_pod_holds_the_drain_and_the_reboot_until_it_exits_by_itself(
    cluster: Cluster, workloads: Workloads
) -> None:
    """The protected pod runs until the test lets it exit, a few seconds after the node is
    cordoned: it must end Succeeded by itself, never evicted or deleted; the ordinary pod
    beside it is evicted only after it exited, and is gone before the interrupt."""
    (node,) = cluster.add_nodes(1)
    boot_before = cluster.node(node)["status"]["nodeInfo"]["bootID"]
    gate = {"name": "gate", "hostPath": {"path": f"/{GATE_DIR}", "type": "DirectoryOrCreate"}}
    protected = workloads.bare(
        "critical",
        node,
        command=("sh", "-c", "until [ -e /gate/done ]; do sleep 0.2; done"),
        volumes=[gate],
    )
    ordinary = workloads.replica_set("ordinary", node)
    scr = cluster.label
    recording = record(cluster, scr, workloads, node)
    cluster.skyhook(
        scr, {PACKAGE: reboot_package()}, podNonInterruptLabels={"matchLabels": {"app": "critical"}}
    )
    soon(
        lambda: any(n["spec"].get("unschedulable") for n in node_versions(recording)),
        "the node cordoned for the interrupt",
        timeout=90,
    )
    time.sleep(3)  # held: time in which the ordinary pod must not be evicted
    (cluster.sandbox.host_root(node) / GATE_DIR / "done").write_text("")
    cluster.wait_complete(scr, timeout=120)

    versions = history(recording, protected)
    assert evicted_rv(versions) is None, "the protected pod was evicted"
    assert deleting_rv(versions) is None, "the protected pod was deleted"
    exited = next((rv(p) for _, p in versions if p["status"].get("phase") == "Succeeded"), None)
    assert exited is not None, f"the protected pod ended {versions[-1][1]['status'].get('phase')}"
    cordoned = min(rv(n) for n in node_versions(recording) if n["spec"].get("unschedulable"))
    assert cordoned < exited, "the node was cordoned only after the protected pod exited"
    evicted = evicted_rv(history(recording, ordinary))
    assert evicted is not None, "the ordinary pod was not evicted"
    assert evicted > exited, "the ordinary pod was evicted while the protected pod ran"
    interrupt = created_rv(recording, "interrupt")
    gone = gone_rv(history(recording, ordinary))
    assert interrupt is not None and gone is not None and gone < interrupt
    assert interrupt > exited, "the interrupt started while the protected pod ran"
    # Reboot detected: the boot ID changed, post-interrupt ran after it, nothing ran twice.
    assert cluster.node(node)["status"]["nodeInfo"]["bootID"] != boot_before
    assert cluster.host_file(node, STEPS) == "applied\npost-interrupt\n"
    soon(lambda: not node_versions(recording)[-1]["spec"].get("unschedulable"), "uncordoned")
    assert node_state(cluster.node(node), scr)[f"{PACKAGE}|1.0.0"]["stage"] == "post-interrupt"

    # NEEDS the lead's Blocked/NonInterruptPodsRunning change (upstream v0.20): the wait is
    # shown on the Skyhook while the protected pod runs, and cleared once it exited.
    held = [(at, c) for at, c in conditions(recording, "Blocked") if c]
    assert held, "no Blocked condition while the protected pod ran"
    assert any(
        at < exited
        and c["reason"] == "NonInterruptPodsRunning"
        and c["message"] == f"1 node blocked by non-interrupt pods ({node}). Waiting."
        for at, c in held
    ), held
    soon(lambda: conditions(recording, "Blocked")[-1][1] is None, "Blocked cleared")


REFUSED_BY_POLICY = "workloads here are not to be removed (test policy)"


def test_a_refused_eviction_is_a_blocked_pod_said_once_and_asked_again_ever_more_slowly(
    cluster: Cluster, workloads: Workloads
) -> None:
    """A policy engine (here a ValidatingAdmissionPolicy; missing RBAC answers with the same
    403) refuses every eviction in the workload's namespace: the pod is named with the
    apiserver's answer in DrainBlocked and the node's drainBlocked annotation, one Warning
    Event on the node says so, the node stays cordoned, and the eviction is asked again after
    1 s, doubling, not in a loop. Once the policy goes, the next ask evicts the pod and the
    rollout completes."""
    (node,) = cluster.add_nodes(1)
    refused = workloads.replica_set("refused", node)
    name, namespace = refused["metadata"]["name"], workloads.namespace
    kube = cluster.kube
    # A short name: the 403 repeats it twice before the message, all cut at 240 characters.
    made = refusing_removals(f"refuse-{uuid.uuid4().hex[:6]}", namespace, REFUSED_BY_POLICY)
    for path, body in made:
        kube.request("POST", path, body)

    def in_force() -> bool:
        try:
            kube.request("POST", *dry_run_eviction(namespace, name))
        except ApiError as error:
            return error.status == 403
        return False

    scr = cluster.label
    try:
        wait_until(in_force, 30, "the refusing policy in force")
        recording = record(cluster, scr, workloads, node)
        cluster.skyhook(scr, {PACKAGE: reboot_package()})

        blocked = soon(
            lambda: next((c for _, c in conditions(recording, "DrainBlocked") if c), None),
            "DrainBlocked",
            timeout=90,
        )
        assert blocked["reason"] == "EvictionFailed", blocked
        assert f"{namespace}/{name} on {node}: 403 " in blocked["message"], blocked
        assert REFUSED_BY_POLICY in blocked["message"], blocked
        listed = soon(
            lambda: next(
                (a for n in node_versions(recording) if (a := annotation(n, blocked_key(scr)))),
                None,
            ),
            "the drainBlocked annotation",
        )
        (entry,) = json.loads(listed)
        assert (entry["namespace"], entry["name"], entry["reason"]) == (
            namespace,
            name,
            "EvictionFailed",
        ), entry
        assert entry["detail"].startswith("403 ") and REFUSED_BY_POLICY in entry["detail"], entry

        before = cluster.operator.log_path.read_text(errors="replace")
        time.sleep(20)  # blocked: the window in which the asks and passes are counted
        log = cluster.operator.log_path.read_text(errors="replace")
        # Passes as while any rollout waits (SKYHOOK_RETRY_INTERVAL, 1 s here), not one after
        # each hand-off to the evictor (every 60 ms or so).
        passes = log[len(before) :].count("] pass: ")
        assert passes <= 40, f"{passes} passes in 20 s"
        asked = re.findall(
            rf"eviction of {namespace}/{name} refused, the drain is blocked, "
            r"asked again in (\d+) s",
            log,
        )
        # Asked at 0, 1, 3, 7, 15 s (and 31 s) from the first refusal: a handful, not a loop.
        assert 4 <= len(asked) <= 7, f"{len(asked)} asks"
        assert [int(s) for s in asked[:4]] == [1, 2, 4, 8], asked

        # One Warning Event on the node, counted once however many passes saw the pod blocked.
        latest = {e["metadata"]["uid"]: e for _, _, e in recording.of("event")}
        warnings = [e for e in latest.values() if e["type"] == "Warning"]
        assert [(e["reason"], e.get("count", 1)) for e in warnings] == [("Drain", 1)], warnings
        assert f"{namespace}/{name} (EvictionFailed: 403 " in warnings[0]["message"], warnings
        on_skyhook = kube.request(
            "GET",
            kube.namespaced_path("events", "default"),
            query={"fieldSelector": f"involvedObject.kind=Skyhook,involvedObject.name={scr}"},
        )["items"]
        said = [e.get("count", 1) for e in on_skyhook if e["type"] == "Warning"]
        assert said == [1], on_skyhook

        assert node_versions(recording)[-1]["spec"].get("unschedulable"), "uncordoned"
        assert deleting_rv(history(recording, refused)) is None, "the pod was removed"
        assert created_rv(recording, "interrupt") is None, "the interrupt ran"
    finally:
        for path, body in reversed(made):
            with contextlib.suppress(ApiError):
                kube.request("DELETE", f"{path}/{body['metadata']['name']}")

    cluster.wait_complete(scr, timeout=120)  # the next ask after the policy went evicts
    assert evicted_rv(history(recording, refused)) is not None, "not evicted"
    soon(lambda: conditions(recording, "DrainBlocked")[-1][1] is None, "DrainBlocked cleared")
