"""What the integration tests share: SCR builders, a recording watch, deadline-bound waits."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import urllib3

from skyhook_dev.harness import (
    OperatorProcess,
    WaitTimeout,
    apply_skyhook,
    node_state,
    node_status,
    wait_until,
    watch,
)
from skyhook_operator.kube.client import MERGE_PATCH, ApiError, Json, Kube, connect
from skyhook_sandbox.sandbox import Sandbox
from skyhook_schemas import keys

TEST_LABEL = "skyhook.nvidia.com/test-node"
AGENTLESS = "ghcr.io/nvidia/skyhook/agentless:test"
SHELLSCRIPT = "ghcr.io/nvidia/skyhook-packages/shellscript"


def agentless(version: str, sleep: float = 1, **fields: Any) -> dict[str, Any]:
    """A package whose stages only sleep: the agentless test image runs them.

    The copy init container still uses a real package image (files are copied), the agent
    containers are replaced through `agentImageOverride`, as upstream's e2e suite does.
    """
    env = [{"name": "SLEEP_LEN", "value": str(sleep)}, *fields.pop("env", [])]
    return {
        "version": version,
        "image": SHELLSCRIPT,
        "agentImageOverride": AGENTLESS,
        "env": env,
        **fields,
    }


def marker_scripts(marker: str = "/skyhook-markers") -> dict[str, str]:
    """shellscript configMap whose every step appends one line to `marker` (run counter)."""
    scripts = {}
    for step in ("apply", "config"):
        scripts[f"{step}.sh"] = f"#!/bin/bash\necho {step} >> {marker}\nsleep 1\n"
        scripts[f"{step}_check.sh"] = f"#!/bin/bash\ngrep -q {step} {marker}\n"
    return scripts


EXISTING = "EXISTING"  # a recording's first version of an object that was there when it began


@dataclass
class Recording:
    """Every version of every node and pod a watch delivered, in arrival order."""

    events: list[tuple[float, str, str, Json]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, what: str, kind: str, obj: Json) -> None:
        with self.lock:
            self.events.append((time.monotonic(), what, kind, obj))

    def of(self, what: str) -> list[tuple[float, str, Json]]:
        with self.lock:
            return [(t, k, o) for t, w, k, o in self.events if w == what]


@dataclass
class Cluster:
    sandbox: Sandbox
    kube: Kube
    label: str
    start_operator: Callable[..., OperatorProcess]
    operator: OperatorProcess | None = None
    nodes: list[str] = field(default_factory=list)
    skyhooks: list[str] = field(default_factory=list)

    # --- setup ------------------------------------------------------------------------------

    def add_nodes(self, count: int, taints: Iterable[Mapping[str, str]] = ()) -> list[str]:
        names = self.sandbox.add_nodes(
            count,
            labels={TEST_LABEL: self.label},
            taints=[dict(t) for t in taints],
            prefix=self.label[:30].strip("-"),
        )
        self.nodes.extend(names)
        return names

    def skyhook(self, name: str, packages: Mapping[str, Any], **spec: Any) -> Json:
        manifest = {
            "apiVersion": keys.API_VERSION,
            "kind": keys.KIND,
            "metadata": {"name": name},
            "spec": {
                "nodeSelectors": {"matchLabels": {TEST_LABEL: self.label}},
                "packages": dict(packages),
                **spec,
            },
        }
        if name not in self.skyhooks:
            self.skyhooks.append(name)
        return apply_skyhook(self.kube, manifest)

    def patch_skyhook(self, name: str, patch: Mapping[str, Any]) -> None:
        self.kube.request("PATCH", self.kube.skyhook_path(name), dict(patch), MERGE_PATCH)

    def record(
        self,
        scr: str,
        seconds: float = 600,
        extra: Mapping[str, tuple[str, Mapping[str, str]]] | None = None,
    ) -> Recording:
        """Start watches on this test's nodes and `scr`'s pods; every version is kept.

        Returns once both watches have delivered the objects that exist now.
        """
        recording = Recording()
        sources = [
            ("node", "/api/v1/nodes", {"labelSelector": f"{TEST_LABEL}={self.label}"}),
            ("pod", "/api/v1/pods", {"labelSelector": f"{keys.NAME_LABEL}={scr}"}),
            *((what, path, query) for what, (path, query) in (extra or {}).items()),
        ]
        synced = [threading.Event() for _ in sources]
        for (what, path, query), flag in zip(sources, synced, strict=True):
            # A client of its own: on the shared one a watch would hold a pooled connection for
            # its whole timeout, after its test, and a session of tests would run out of them.
            client = connect(str(self.sandbox.kubeconfig))
            threading.Thread(
                target=self._pump,
                args=(recording, client),
                kwargs={
                    "what": what,
                    "path": path,
                    "query": query,
                    "seconds": seconds,
                    "synced": flag,
                },
                daemon=True,
            ).start()
        for flag in synced:
            assert flag.wait(30), "watch did not start"
        return recording

    def _pump(
        self,
        recording: Recording,
        client: Kube,
        *,
        what: str,
        path: str,
        query: Mapping[str, str],
        seconds: float,
        synced: threading.Event,
    ) -> None:
        try:
            for kind, obj in watch(client, path, query, timeout=seconds):
                if kind == "SYNCED":
                    synced.set()
                else:
                    # ADDED means created while recording; what was there before is EXISTING.
                    recording.add(what, kind if synced.is_set() else EXISTING, obj)
        except (ApiError, OSError, urllib3.exceptions.HTTPError):
            return
        finally:
            client.close()  # the watch is over: its connection and loop go

    # --- reading ----------------------------------------------------------------------------

    def node(self, name: str) -> Json:
        return self.kube.request("GET", self.kube.node_path(name))

    def get_skyhook(self, name: str) -> Json:
        return self.kube.request("GET", self.kube.skyhook_path(name))

    def states(self, scr: str) -> dict[str, dict[str, Any]]:
        return {name: node_state(self.node(name), scr) for name in self.nodes}

    def host_file(self, node: str, path: str) -> str:
        file = self.sandbox.host_root(node) / path.lstrip("/")
        return file.read_text() if file.exists() else ""

    def pods(self, scr: str) -> list[Json]:
        query = {"labelSelector": f"{keys.NAME_LABEL}={scr}"}
        return list(self.kube.request("GET", "/api/v1/pods", query=query)["items"])

    # --- waiting ----------------------------------------------------------------------------

    def wait_complete(
        self, scr: str, timeout: float = 180, nodes: Iterable[str] | None = None
    ) -> None:
        """Until the SCR's status says complete for its current generation and every node's
        status for it says complete."""
        names = list(nodes or self.nodes)
        last: dict[str, Any] = {}

        def complete() -> bool:
            if self.operator is not None and not self.operator.running:
                raise AssertionError("the operator exited:\n" + self.operator.log_tail())
            skyhook = self.get_skyhook(scr)
            status = skyhook.get("status", {})
            last["scr"] = status.get("status")
            # complete for the current spec, not a status left from before a spec change
            observed, generation = (
                status.get("observedGeneration"),
                skyhook["metadata"]["generation"],
            )
            last["generation"] = f"observed {observed} of {generation}"
            last["nodes"] = {n: node_status(self.node(n), scr) for n in names}
            return (
                observed == generation
                and last["scr"] == "complete"
                and all(s == "complete" for s in last["nodes"].values())
            )

        try:
            wait_until(complete, timeout, f"{scr} complete", interval=0.5)
        except WaitTimeout as error:
            raise WaitTimeout(
                f"{error}; last seen {json.dumps(last)}; states {self.states(scr)}"
            ) from None

    # --- teardown ---------------------------------------------------------------------------

    def cleanup(self) -> None:
        # Without a running operator nobody removes the finalizer: no use waiting for it.
        finalizing = 60 if self.operator is not None and self.operator.running else 0
        for name in self.skyhooks:
            try:
                self.kube.request("DELETE", self.kube.skyhook_path(name))
            except ApiError:
                continue
            try:
                wait_until(lambda n=name: self._gone(n), finalizing, f"Skyhook {name} deleted")
            except WaitTimeout:  # operator dead: let the object go anyway
                body = {"metadata": {"finalizers": []}}
                with contextlib.suppress(ApiError):
                    self.kube.request("PATCH", self.kube.skyhook_path(name), body, MERGE_PATCH)
        self.sandbox.remove_nodes(self.nodes)

    def _gone(self, name: str) -> bool:
        try:
            self.get_skyhook(name)
        except ApiError as error:
            return error.status == 404
        return False


def entry(state: Mapping[str, Any], package: str, version: str) -> dict[str, Any]:
    return dict(state.get(keys.package_key(package, version)) or {})


def rv(obj: Mapping[str, Any]) -> int:
    """The object's resourceVersion: the sandbox's one etcd revision, so it orders writes to
    different objects as they happened (arrival times from separate watches need not)."""
    return int(obj["metadata"]["resourceVersion"])


def pod_stage(pod: Mapping[str, Any]) -> str:
    text = (pod.get("metadata", {}).get("annotations") or {}).get(keys.PACKAGE_ANNOTATION, "{}")
    return str(json.loads(text).get("stage", ""))


def first_time(events: list[tuple[float, str, Json]], predicate: Callable[[Json], bool]) -> float:
    for at, _, obj in events:
        if predicate(obj):
            return at
    raise AssertionError("no recorded event matched")


def create_policy(kube: Kube, name: str, spec: Mapping[str, Any]) -> None:
    body = {
        "apiVersion": keys.API_VERSION,
        "kind": keys.POLICY_KIND,
        "metadata": {"name": name},
        "spec": dict(spec),
    }
    kube.request("POST", kube.policy_path(), body)


def batch_status(cluster: Cluster, scr: str, compartment: str) -> dict[str, Any]:
    statuses = cluster.get_skyhook(scr).get("status", {}).get("compartmentStatuses") or {}
    return dict((statuses.get(compartment) or {}).get("batchState") or {})


def ordered(cluster: Cluster, names: list[str]) -> list[str]:
    """Nodes in the operator's order: oldest first, then by name."""
    nodes = [cluster.node(n) for n in names]
    nodes.sort(key=lambda n: (n["metadata"]["creationTimestamp"], n["metadata"]["name"]))
    return [n["metadata"]["name"] for n in nodes]


def failing_on(cluster: Cluster, nodes: Iterable[str]) -> dict[str, Any]:
    """A shellscript package whose apply step fails on `nodes` (a marker file on their hosts)
    and passes everywhere else."""
    for node in nodes:
        marker = cluster.sandbox.host_root(node) / "etc/skyhook-test-fail"
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("fail\n")
    return {
        "version": "1.0.0",
        "image": SHELLSCRIPT,
        "configMap": {
            "apply.sh": "#!/bin/bash\ntest ! -e /etc/skyhook-test-fail\n",
            "apply_check.sh": "#!/bin/bash\ntrue\n",
        },
    }


ADMISSION_POLICIES = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
ADMISSION_BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"


def refusing_removals(name: str, namespace: str, message: str) -> list[tuple[str, Json]]:
    """A ValidatingAdmissionPolicy and its binding that refuse every eviction and delete of a
    pod in `namespace` with a 403 carrying `message`, as a policy engine would: (collection
    path, object) to POST, in order. Delete the binding before the namespace: its pods could
    not go."""
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
                        "apiVersions": ["*"],
                        "operations": ["CREATE"],
                        "resources": ["pods/eviction"],
                    },
                    {
                        "apiGroups": [""],
                        "apiVersions": ["*"],
                        "operations": ["DELETE"],
                        "resources": ["pods"],
                    },
                ]
            },
            "validations": [{"expression": "false", "message": message, "reason": "Forbidden"}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            },
        },
    }
    return [(ADMISSION_POLICIES, policy), (ADMISSION_BINDINGS, binding)]


def dry_run_eviction(namespace: str, name: str) -> tuple[str, Json]:
    """(path, body) of an eviction of pod `namespace`/`name` the apiserver only admits, to
    learn whether a policy refusing it is in force yet."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
        "deleteOptions": {"dryRun": ["All"]},
    }
    return f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body
