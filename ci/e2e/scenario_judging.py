"""How the end-to-end scenarios (ci/e2e/scenarios.py) judge what the API shows: pure
functions of recorded objects (Skyhooks, nodes, pods, as `kubectl get -o json` and watches give
them), each returning the problems it found, empty when all is well, so ci/tests exercise them
without a cluster.

Standard library only, like the runner.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

GROUP = "skyhook.nvidia.com"
NODE_LABEL = f"{GROUP}/test-node"
NODE_LABEL_VALUE = "demo"
Obj = Mapping[str, Any]


WORKLOAD_LABEL = f"{GROUP}/e2e-workload"  # a scenario's own pods on a node, by name


@dataclass(frozen=True)
class Recording:
    """What `Record` kept, in arrival order: Skyhook versions, pods added, node versions; and
    every (watch event type, version) of the scenario's workload pods since the first."""

    skyhooks: Sequence[Obj]
    pods: Sequence[Obj]
    nodes: Sequence[Obj]
    workloads: Sequence[tuple[str, Obj]] = ()


def under_test(nodes: Sequence[Obj]) -> list[Obj]:
    return [
        n for n in nodes if (n["metadata"].get("labels") or {}).get(NODE_LABEL) == NODE_LABEL_VALUE
    ]


def selected(scr: Obj, nodes: Sequence[Obj]) -> list[Obj]:
    """The nodes under test the Skyhook's `nodeSelectors.matchLabels` select (the scenarios
    use no other kind of selector)."""
    wanted = ((scr["spec"].get("nodeSelectors") or {}).get("matchLabels") or {}).items()
    return [n for n in under_test(nodes) if wanted <= (n["metadata"].get("labels") or {}).items()]


def ours(taint: Obj) -> bool:
    return str(taint.get("key", "")).startswith(GROUP)


def completion_problems(scr: Obj, nodes: Sequence[Obj]) -> list[str]:
    """Why the Skyhook is not complete on every node under test; empty when it is."""
    name = scr["metadata"]["name"]
    expected = {
        f"{key}|{p['version']}"
        for key, p in scr["spec"]["packages"].items()
        if not uninstalling(p)  # an uninstalled package has no entry
    }
    status = (scr.get("status") or {}).get("status")
    problems = [] if status == "complete" else [f"Skyhook {name} status is {status!r}"]
    chosen = selected(scr, nodes)
    if not chosen:
        return [*problems, f"no node labelled {NODE_LABEL}={NODE_LABEL_VALUE} is selected"]
    for node in chosen:
        meta = node["metadata"]
        raw = (meta.get("annotations") or {}).get(f"{GROUP}/nodeState_{name}")
        if raw is None:
            problems.append(f"{meta['name']}: no {GROUP}/nodeState_{name} annotation")
            continue
        state = json.loads(raw)
        if set(state) != expected:
            problems.append(
                f"{meta['name']}: nodeState has {sorted(state)}, want {sorted(expected)}"
            )
        problems += [
            f"{meta['name']}: {key} is {entry.get('stage')}/{entry.get('state')}, not complete"
            for key, entry in sorted(state.items())
            if entry.get("state") != "complete"
        ]
        label = (meta.get("labels") or {}).get(f"{GROUP}/status_{name}")
        if label != "complete":
            problems.append(f"{meta['name']}: label {GROUP}/status_{name} is {label!r}")
        problems += [
            f"{meta['name']}: taint {t['key']} still set"
            for t in (node.get("spec") or {}).get("taints") or []
            if ours(t)
        ]
        if (node.get("spec") or {}).get("unschedulable"):
            problems.append(f"{meta['name']}: still cordoned")
    return problems


def uninstalling(package_spec: Obj) -> bool:
    """The spec asks for the package to be uninstalled (`uninstall.enabled` and `.apply`)."""
    block = package_spec.get("uninstall") or {}
    return bool(block.get("enabled") and block.get("apply"))


def node_state(name: str, node: Obj) -> dict[str, Any] | None:
    """The node's `nodeState_<name>` annotation decoded; None when absent."""
    raw = (node["metadata"].get("annotations") or {}).get(f"{GROUP}/nodeState_{name}")
    return None if raw is None else dict(json.loads(raw))


def by_name(nodes: Sequence[Obj]) -> list[Obj]:
    """The nodes under test in name order (what a step's `node` index counts)."""
    return sorted(under_test(nodes), key=lambda n: str(n["metadata"]["name"]))


def conditions_of(scr: Obj) -> dict[str, Obj]:
    return {c["type"]: c for c in (scr.get("status") or {}).get("conditions") or []}


def condition_problems(
    scr: Obj, type_: str, reason: str | None = None, contains: Sequence[str] = ()
) -> list[str]:
    """Why the Skyhook has no True condition `type_` with `reason` and a message holding each
    of `contains`; empty when it has."""
    name = scr["metadata"]["name"]
    found = conditions_of(scr).get(type_)
    if found is None or found.get("status") != "True":
        return [f"{name}: no True condition {type_} (has {sorted(conditions_of(scr))})"]
    problems = []
    if reason is not None and found.get("reason") != reason:
        problems.append(f"{name}: condition {type_} has reason {found.get('reason')!r}")
    problems += [
        f"{name}: condition {type_} message {found.get('message')!r} lacks {text!r}"
        for text in contains
        if text not in str(found.get("message", ""))
    ]
    return problems


def no_condition(scr: Obj, type_: str) -> list[str]:
    """A problem while the Skyhook has a True condition `type_`."""
    found = conditions_of(scr).get(type_)
    if found is not None and found.get("status") == "True":
        return [f"{scr['metadata']['name']}: condition {type_} still True: {found.get('message')}"]
    return []


def status_is(scr: Obj, want: str) -> list[str]:
    status = (scr.get("status") or {}).get("status")
    return [] if status == want else [f"{scr['metadata']['name']} status is {status!r}, not {want}"]


def progress_problems(name: str, nodes: Sequence[Obj], started: Sequence[bool | None]) -> list[str]:
    """For the i-th node under test (name order): `started[i]` False, the Skyhook started
    nothing there (no nodeState entry); True, it finished there (entries, all complete);
    None, either."""
    problems = []
    for node, want in zip(by_name(nodes), started, strict=True):
        state = node_state(name, node) or {}
        node_name = node["metadata"]["name"]
        if want is False and state:
            problems.append(f"{node_name}: {name} started there: {sorted(state)}")
        if want and (not state or any(e.get("state") != "complete" for e in state.values())):
            problems.append(f"{node_name}: {name} not complete there: {state}")
    return problems


def stage_seen(name: str, nodes: Sequence[Obj], stage: str) -> list[str]:
    """A problem until some node under test has an entry of `name` at `stage`."""
    for node in under_test(nodes):
        if any(e.get("stage") == stage for e in (node_state(name, node) or {}).values()):
            return []
    return [f"no node has an entry of {name} at stage {stage}"]


# Ready's reason for each overall status; anything else is Unknown.
READY_REASONS = {
    "complete": "NodesConverged",
    "in_progress": "Progressing",
    "blocked": "Blocked",
    "erroring": "Erroring",
    "paused": "Paused",
    "waiting": "Waiting",
    "disabled": "Disabled",
}
SUMMARY_BUCKETS = (
    ("in_progress", "in progress"),
    ("blocked", "blocked"),
    ("erroring", "erroring"),
    ("waiting", "waiting"),
    ("paused", "paused"),
    ("disabled", "disabled"),
    ("unknown", "unknown"),
)
# Conditions written under a bare type and under the prefixed one, with the same content.
MIRRORED = (
    "Ready",
    "TaintNotTolerable",
    "NodesIgnored",
    "ApplyPackage",
    "DeploymentPolicyNotFound",
)


def node_summary(node_status: Mapping[str, str]) -> str:
    """Ready's message for these node statuses: `<c>/<n> nodes complete (<names>)`, then each
    other status that has nodes, in a fixed order, with its nodes' names (sorted)."""
    words = {word for word, _ in SUMMARY_BUCKETS} | {"complete"}
    buckets: dict[str, list[str]] = {}
    for node in sorted(node_status):
        word = node_status[node] if node_status[node] in words else "unknown"
        buckets.setdefault(word, []).append(node)

    def names(found: list[str]) -> str:
        if not found:
            return ""
        return (
            " (list truncated; see status.nodeStatus)"
            if len(found) > 10
            else (f" ({', '.join(found)})")
        )

    complete = buckets.get("complete", [])
    parts = [f"{len(complete)}/{len(node_status)} nodes complete{names(complete)}"]
    parts += [
        f"{len(buckets[word])} {label}{names(buckets[word])}"
        for word, label in SUMMARY_BUCKETS
        if buckets.get(word)
    ]
    return ", ".join(parts)


def status_problems(scr: Obj) -> list[str]:
    """What one version of the Skyhook's status says that does not agree with itself: the
    counts with `nodeStatus`, `Ready` with the overall status and `nodeStatus`, and each
    mirrored condition with its `skyhook.nvidia.com/` copy."""
    status = scr.get("status") or {}
    overall = status.get("status")
    if overall is None:
        return []
    node_status = status.get("nodeStatus") or {}
    values = list(node_status.values())
    problems = []
    complete = f"{values.count('complete')}/{len(node_status)}"
    if status.get("completeNodes") != complete:
        problems.append(
            f"completeNodes {status.get('completeNodes')!r}, nodeStatus says {complete}"
        )
    busy = values.count("in_progress") + values.count("erroring")
    if status.get("nodesInProgress", 0) != busy:
        problems.append(f"nodesInProgress {status.get('nodesInProgress')}, nodeStatus says {busy}")
    found = conditions_of(scr)
    ready = found.get("Ready")
    if ready is None:
        return [*problems, f"{overall}: no Ready condition"]
    want = (
        "True" if overall == "complete" else "False",
        READY_REASONS.get(overall, "Unknown"),
        node_summary(node_status),
    )
    got = (ready.get("status"), ready.get("reason"), ready.get("message"))
    if got != want:
        problems.append(f"{overall}: Ready is {got}, want {want}")
    for bare in MIRRORED:
        plain, copy = found.get(bare), found.get(f"{GROUP}/{bare}")
        if plain is None and copy is None:
            continue
        if plain is None or copy is None:
            problems.append(f"{overall}: condition {bare} without its copy, or the other way")
        elif {**plain, "type": ""} != {**copy, "type": ""}:
            problems.append(f"{overall}: {bare} differs from its copy: {plain} vs {copy}")
    return problems


def mirror_problems(scr: Obj, nodes: Sequence[Obj]) -> list[str]:
    """Where the Skyhook's status does not mirror the nodes under test: `nodeState` (the
    annotations), `nodeStatus` (the status labels), `nodeBootIds` (each node's boot id), plus
    `status_problems`."""
    name = scr["metadata"]["name"]
    status = scr.get("status") or {}
    problems = status_problems(scr)
    for node in under_test(nodes):
        node_name = node["metadata"]["name"]
        state = node_state(name, node)
        mirrored = (status.get("nodeState") or {}).get(node_name)
        if (state or None) != (mirrored or None):
            problems.append(f"{node_name}: status.nodeState {mirrored}, annotation {state}")
        label = (node["metadata"].get("labels") or {}).get(f"{GROUP}/status_{name}")
        said = (status.get("nodeStatus") or {}).get(node_name)
        if said != label:
            problems.append(f"{node_name}: status.nodeStatus {said!r}, label {label!r}")
        problems += boot_id_problems(scr, node)
    return problems


def history_problems(recording: Recording, phases: Sequence[str]) -> list[str]:
    """Every recorded version of the Skyhook agrees with itself (`status_problems`), and its
    overall status went through each of `phases`, in that order."""
    problems = []
    seen: list[str] = []
    for version in recording.skyhooks:
        overall = (version.get("status") or {}).get("status")
        problems += [
            f"version {version['metadata'].get('resourceVersion')}: {problem}"
            for problem in status_problems(version)
        ]
        if overall is not None and (not seen or seen[-1] != overall):
            seen.append(overall)
    rest = iter(seen)
    if not all(phase in rest for phase in phases):
        problems.append(f"statuses went {seen}, want {list(phases)} in that order")
    return problems


def never_cordoned(recording: Recording, names: Sequence[str]) -> list[str]:
    """A problem for each node of `names` that no recorded version showed cordoned."""
    cordoned = {
        v["metadata"]["name"] for v in recording.nodes if (v.get("spec") or {}).get("unschedulable")
    }
    return [f"{name} was never cordoned" for name in names if name not in cordoned]


def condition_seen(recording: Recording, type_: str, reason: str) -> list[str]:
    """A problem unless some recorded version had a True condition `type_` with `reason`."""
    for version in recording.skyhooks:
        found = conditions_of(version).get(type_)
        if found and found.get("status") == "True" and found.get("reason") == reason:
            return []
    return [f"no recorded version had condition {type_} ({reason})"]


def node_orders(pod: Obj) -> set[str]:
    """The SKYHOOK_NODE_ORDER values a pod's containers carry."""
    spec = pod.get("spec") or {}
    return {
        str(env.get("value"))
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        for env in container.get("env") or []
        if env.get("name") == "SKYHOOK_NODE_ORDER"
    }


def node_order_problems(recording: Recording, nodes: Sequence[str], offset: int = 0) -> list[str]:
    """Every recorded pod carries SKYHOOK_NODE_ORDER, one value per node, numbered `offset`,
    `offset`+1, ... in the order the nodes' first pods arrived; every node ran a pod."""
    problems = []
    first: list[str] = []
    values: dict[str, set[str]] = {}
    for pod in recording.pods:
        node = pod["spec"].get("nodeName", "")
        found = node_orders(pod)
        if not found:
            problems.append(f"pod {pod['metadata']['name']} has no SKYHOOK_NODE_ORDER")
        values.setdefault(node, set()).update(found)
        if node not in first:
            first.append(node)
    problems += [f"{node}: no pod ran" for node in nodes if node not in values]
    for index, node in enumerate(first):
        if values[node] - {str(offset + index)}:
            problems.append(
                f"{node} (started {index + 1}.): SKYHOOK_NODE_ORDER {sorted(values[node])}, "
                f"want {offset + index}"
            )
    return problems


def node_priority_problems(recording: Recording, count: int) -> list[str]:
    """While running, some recorded version of the Skyhook had a `status.nodePriority`; the
    last one has none left and `nodeOrderOffset` `count` (every node retired in turn)."""
    problems = []
    if not any((v.get("status") or {}).get("nodePriority") for v in recording.skyhooks):
        problems.append("no recorded version had a status.nodePriority")
    last = (recording.skyhooks[-1].get("status") or {}) if recording.skyhooks else {}
    if last.get("nodeOrderOffset") != count or last.get("nodePriority"):
        problems.append(
            f"ends with nodeOrderOffset {last.get('nodeOrderOffset')} and nodePriority "
            f"{last.get('nodePriority')}, want {count} and none"
        )
    return problems


def leftover_problems(
    name: str, nodes: Sequence[Obj], objects: Sequence[Obj], kept: Sequence[str] = ()
) -> list[str]:
    """What the deleted Skyhook left on nodes, or as pods/ConfigMaps; empty when clean. With
    `kept`, each node's nodeState (and the version that wrote it) stays and lists exactly those
    packages: they are still installed."""
    problems = []
    record = {f"{GROUP}/nodeState_{name}", f"{GROUP}/version_{name}"} if kept else set()
    for node in nodes:
        meta = node["metadata"]
        for kind in ("annotations", "labels"):
            problems += [
                f"{meta['name']}: {kind[:-1]} {key} left"
                for key in (meta.get(kind) or {})
                if key.startswith(f"{GROUP}/")
                and key.endswith(f"_{name}")
                and (kind == "labels" or key not in record)
            ]
        if kept:
            listed = sorted(
                json.loads((meta.get("annotations") or {}).get(f"{GROUP}/nodeState_{name}", "{}"))
            )
            if listed != sorted(kept):
                problems.append(f"{meta['name']}: nodeState lists {listed}, not {sorted(kept)}")
        problems += [
            f"{meta['name']}: condition {condition['type']} left"
            for condition in (node.get("status") or {}).get("conditions") or []
            if condition["type"].startswith(f"{GROUP}/{name}/")
        ]
        problems += [
            f"{meta['name']}: taint {t['key']} left"
            for t in (node.get("spec") or {}).get("taints") or []
            if ours(t)
        ]
        if (node.get("spec") or {}).get("unschedulable"):
            problems.append(f"{meta['name']}: still cordoned")
    problems += [
        f"{obj['kind']} {obj['metadata'].get('namespace')}/{obj['metadata']['name']} left"
        for obj in objects
    ]
    return problems


def pod_stage(pod: Obj) -> str:
    text = (pod["metadata"].get("annotations") or {}).get(f"{GROUP}/package", "{}")
    return str(json.loads(text).get("stage", ""))


def stage_problems(
    pods: Sequence[Obj], nodes: Sequence[str], stages: Sequence[str], *, final: bool
) -> list[str]:
    """Which nodes have not run a pod of each of `stages`, and (when `final`) which pods ran
    another stage; `pods` are the pods created since recording started."""
    seen: dict[str, set[str]] = {}
    for pod in pods:
        seen.setdefault(pod["spec"].get("nodeName", ""), set()).add(pod_stage(pod))
    problems = [
        f"{node}: no {stage} pod ran"
        for node in nodes
        for stage in stages
        if stage not in seen.get(node, set())
    ]
    if final:
        problems += [
            f"{node}: a pod of stage {stage} ran"
            for node, found in sorted(seen.items())
            for stage in sorted(found - set(stages))
        ]
    return problems


def peak_in_progress(scr: str, versions: Sequence[Obj]) -> int:
    """The most nodes whose status for `scr` was in_progress at once, over node versions in
    arrival order."""
    running: dict[str, bool] = {}
    peak = 0
    for node in versions:
        labels = node["metadata"].get("labels") or {}
        running[node["metadata"]["name"]] = labels.get(f"{GROUP}/status_{scr}") == "in_progress"
        peak = max(peak, sum(running.values()))
    return peak


# --- drains -------------------------------------------------------------------------------


def resource_version(obj: Obj) -> int:
    return int(obj["metadata"]["resourceVersion"])


def eviction_marked(pod: Obj) -> bool:
    """This version carries what the eviction subresource writes before it deletes the pod (a
    plain DELETE writes none)."""
    return any(
        c.get("type") == "DisruptionTarget" and c.get("reason") == "EvictionByEvictionAPI"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def drain_problems(
    recording: Recording, node: str, evicted: Sequence[str] = (), kept: Sequence[str] = ()
) -> list[str]:
    """On `node`, the first pod of each workload named in `evicted` was evicted, of each in
    `kept` never (removed by hand instead), and every one was gone before the node's first
    interrupt pod was created. resourceVersions order the writes across the two watches."""
    interrupts = [
        resource_version(p)
        for p in recording.pods
        if p["spec"].get("nodeName") == node and pod_stage(p) == "interrupt"
    ]
    problems = [] if interrupts else [f"{node}: no interrupt pod"]
    for name in [*evicted, *kept]:
        on_node = [
            (kind, pod)
            for kind, pod in recording.workloads
            if (pod["metadata"].get("labels") or {}).get(WORKLOAD_LABEL) == name
            and pod["spec"].get("nodeName") == node
        ]
        if not on_node:
            problems.append(f"{node}: no pod of {name} recorded there")
            continue
        uid = on_node[0][1]["metadata"]["uid"]  # a replacement scheduled back later is not it
        versions = [(k, p) for k, p in on_node if p["metadata"]["uid"] == uid]
        was_evicted = any(eviction_marked(p) for _, p in versions)
        if was_evicted != (name in evicted):
            problems.append(f"{name}: {'evicted' if was_evicted else 'not evicted'}")
        gone = [resource_version(p) for k, p in versions if k == "DELETED"]
        if not gone:
            problems.append(f"{name}: still on {node}")
        elif interrupts and min(interrupts) < gone[0]:
            problems.append(f"{name}: the interrupt pod was created before it was gone")
    return problems


def drain_blocked_problems(scr: Obj, node: Obj, pod: str, reason: str) -> list[str]:
    """Why the Skyhook does not show `node`'s drain blocked by `pod` (namespace/name) for
    `reason`: its DrainBlocked condition, and the node's `drainBlocked_<scr>` annotation."""
    name = scr["metadata"]["name"]
    problems = condition_problems(scr, "DrainBlocked", reason, (pod,))
    raw = (node["metadata"].get("annotations") or {}).get(f"{GROUP}/drainBlocked_{name}")
    listed = [
        (f"{b.get('namespace')}/{b.get('name')}", b.get("reason")) for b in json.loads(raw or "[]")
    ]
    if (pod, reason) not in listed:
        problems.append(f"{node['metadata']['name']}: drainBlocked_{name} lists {listed}")
    return problems


def no_drain_blocked(scr: Obj, nodes: Sequence[Obj]) -> list[str]:
    """The DrainBlocked condition and every node's `drainBlocked_<scr>` annotation are gone."""
    name = scr["metadata"]["name"]
    key = f"{GROUP}/drainBlocked_{name}"
    return no_condition(scr, "DrainBlocked") + [
        f"{n['metadata']['name']}: {key} still set"
        for n in nodes
        if key in (n["metadata"].get("annotations") or {})
    ]


# --- reboots --------------------------------------------------------------------------------


def boot_id(node: Obj) -> str | None:
    return ((node.get("status") or {}).get("nodeInfo") or {}).get("bootID")


def reboot_problems(recording: Recording, node: str) -> list[str]:
    """`node` rebooted once, in the interrupt: its boot id changed exactly once, after its
    interrupt pod was created and before its post-interrupt pod was (resourceVersions order
    the writes across the watches)."""
    versions = [n for n in recording.nodes if n["metadata"]["name"] == node]
    if not versions:
        return [f"{node}: no version of the node recorded"]
    boots: list[tuple[str | None, int]] = []
    for version in versions:
        if not boots or boot_id(version) != boots[-1][0]:
            boots.append((boot_id(version), resource_version(version)))
    if len(boots) != 2:
        seen = [b for b, _ in boots]
        return [f"{node}: boot ids {seen}, want the first and one new one (one reboot)"]
    came_back = boots[1][1]
    on_node = [p for p in recording.pods if p["spec"].get("nodeName") == node]
    interrupts = [resource_version(p) for p in on_node if pod_stage(p) == "interrupt"]
    after = [resource_version(p) for p in on_node if pod_stage(p) == "post-interrupt"]
    problems = []
    if not interrupts or min(interrupts) > came_back:
        problems.append(f"{node}: the boot id changed before any interrupt pod was created")
    if not after:
        problems.append(f"{node}: no post-interrupt pod")
    elif min(after) < came_back:
        problems.append(f"{node}: a post-interrupt pod was created before the node came back")
    return problems


def boot_id_problems(scr: Obj, node: Obj) -> list[str]:
    """The Skyhook's `nodeBootIds` does not name `node`'s boot id."""
    name = node["metadata"]["name"]
    recorded = ((scr.get("status") or {}).get("nodeBootIds") or {}).get(name)
    if recorded != boot_id(node):
        return [f"{name}: status.nodeBootIds {recorded!r}, node boot id {boot_id(node)!r}"]
    return []
