"""The scenario runner's judging of upstream's newest behaviours (ci/e2e/scenario_judging.py), on
recorded objects: completion with uninstalled packages, the Skyhook's conditions, its status as a
user reads it (counts, Ready and its copies, the mirror of the nodes), the status history, and
SKYHOOK_NODE_ORDER on stage pods. The runner itself plays the scenarios on the sandbox in
operator/tests/integration/test_shared_scenarios.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "ci" / "e2e"))
import scenario_judging as scenarios  # noqa: E402

GROUP = "skyhook.nvidia.com"
IMAGE = "ghcr.io/nvidia/skyhook-packages/shellscript"


def entry(name: str, stage: str = "config", state: str = "complete") -> dict[str, Any]:
    return {"name": name, "version": "1.1.1", "image": IMAGE, "stage": stage, "state": state}


def node(
    name: str,
    state: dict[str, Any] | None = None,
    *,
    status: str | None = None,
    labels: dict[str, str] | None = None,
    boot: str = "boot-1",
    order: str = "s",
) -> dict[str, Any]:
    annotations = {}
    all_labels = {"skyhook.nvidia.com/test-node": "demo", **(labels or {})}
    if state is not None:
        annotations[f"{GROUP}/nodeState_{order}"] = json.dumps(state, separators=(",", ":"))
    if status is not None:
        all_labels[f"{GROUP}/status_{order}"] = status
    return {
        "metadata": {"name": name, "labels": all_labels, "annotations": annotations},
        "spec": {},
        "status": {"nodeInfo": {"bootID": boot}},
    }


def cond(type_: str, status: str = "True", reason: str = "R", message: str = "") -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "observedGeneration": 1,
    }


def ready(status: str, reason: str, message: str) -> list[dict[str, Any]]:
    return [cond("Ready", status, reason, message), cond(f"{GROUP}/Ready", status, reason, message)]


def skyhook(
    overall: str | None,
    node_status: dict[str, str],
    conditions: list[dict[str, Any]] | None = None,
    **status: Any,
) -> dict[str, Any]:
    values = list(node_status.values())
    found: dict[str, Any] = {
        "status": overall,
        "nodeStatus": node_status,
        "completeNodes": f"{values.count('complete')}/{len(values)}",
        "nodesInProgress": values.count("in_progress") + values.count("erroring"),
        "conditions": conditions or [],
        **status,
    }
    return {
        "metadata": {"name": "s", "resourceVersion": "7"},
        "spec": {"packages": {"a": {"version": "1.1.1"}}},
        "status": found,
    }


# --- completion, with uninstalled packages -----------------------------------------------


def test_an_uninstalled_package_must_be_absent_for_completion() -> None:
    scr = {
        "metadata": {"name": "s"},
        "spec": {
            "packages": {
                "a": {"version": "1.1.1", "uninstall": {"enabled": True, "apply": True}},
                "b": {"version": "1.1.1", "uninstall": {"enabled": True, "apply": False}},
            }
        },
        "status": {"status": "complete"},
    }
    done = node("w1", {"b|1.1.1": entry("b")}, status="complete")
    assert scenarios.completion_problems(scr, [done]) == []
    left = node("w1", {"a|1.1.1": entry("a"), "b|1.1.1": entry("b")}, status="complete")
    assert scenarios.completion_problems(scr, [left]) == [
        "w1: nodeState has ['a|1.1.1', 'b|1.1.1'], want ['b|1.1.1']"
    ]


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        pytest.param(None, False, id="no-block"),
        pytest.param({"enabled": True, "apply": False}, False, id="enabled-only"),
        pytest.param({"enabled": False, "apply": True}, False, id="apply-without-enabled"),
        pytest.param({"enabled": True, "apply": True}, True, id="uninstalling"),
    ],
)
def test_uninstalling(block: dict[str, bool] | None, expected: bool) -> None:
    spec = {"version": "1"} if block is None else {"version": "1", "uninstall": block}
    assert scenarios.uninstalling(spec) is expected


def test_completion_looks_only_at_the_nodes_the_skyhook_selects() -> None:
    scr = {
        "metadata": {"name": "s"},
        "spec": {
            "nodeSelectors": {"matchLabels": {f"{GROUP}/test-node": "demo", "gate": "yes"}},
            "packages": {"a": {"version": "1.1.1"}},
        },
        "status": {"status": "complete"},
    }
    gated = node("w1", {"a|1.1.1": entry("a")}, status="complete", labels={"gate": "yes"})
    other = node("w2")  # nothing of the Skyhook: not selected
    assert [n["metadata"]["name"] for n in scenarios.selected(scr, [gated, other])] == ["w1"]
    assert scenarios.completion_problems(scr, [gated, other]) == []


# --- conditions and phases ---------------------------------------------------------------


def test_condition_problems_name_what_is_missing_or_different() -> None:
    scr = skyhook("complete", {}, [cond("NodeStateMalformed", "True", "ParseError", "on 1 node")])
    assert scenarios.condition_problems(scr, "NodeStateMalformed", "ParseError", ("1 node",)) == []
    assert scenarios.condition_problems(scr, "NodeStateMalformed", "Other", ("2 node",)) == [
        "s: condition NodeStateMalformed has reason 'ParseError'",
        "s: condition NodeStateMalformed message 'on 1 node' lacks '2 node'",
    ]
    assert scenarios.condition_problems(scr, "DeletionBlocked") == [
        "s: no True condition DeletionBlocked (has ['NodeStateMalformed'])"
    ]
    assert scenarios.no_condition(scr, "DeletionBlocked") == []
    assert scenarios.no_condition(scr, "NodeStateMalformed") == [
        "s: condition NodeStateMalformed still True: on 1 node"
    ]
    false = skyhook("complete", {}, [cond("NodesIgnored", "False")])
    assert scenarios.no_condition(false, "NodesIgnored") == []
    assert scenarios.condition_problems(false, "NodesIgnored") != []


def test_status_is() -> None:
    assert scenarios.status_is(skyhook("waiting", {}), "waiting") == []
    assert scenarios.status_is(skyhook(None, {}), "waiting") == ["s status is None, not waiting"]


def test_progress_problems_per_node_in_name_order() -> None:
    done = node("b", {"a|1.1.1": entry("a")})
    running = node("c", {"a|1.1.1": entry("a", "apply", "in_progress")})
    untouched = node("a")
    nodes = [running, done, untouched]
    assert scenarios.progress_problems("s", nodes, (False, True, None)) == []
    assert scenarios.progress_problems("s", nodes, (True, False, True)) == [
        "a: s not complete there: {}",
        "b: s started there: ['a|1.1.1']",
        f"c: s not complete there: {{'a|1.1.1': {entry('a', 'apply', 'in_progress')}}}",
    ]


def test_stage_seen() -> None:
    nodes = [node("w1", {"a|1.1.1": entry("a")}), node("w2")]
    assert scenarios.stage_seen("s", nodes, "config") == []
    assert scenarios.stage_seen("s", nodes, "uninstall") == [
        "no node has an entry of s at stage uninstall"
    ]


# --- the status as a user reads it --------------------------------------------------------


@pytest.mark.parametrize(
    ("node_status", "message"),
    [
        pytest.param({}, "0/0 nodes complete", id="no-nodes"),
        pytest.param({"b": "complete", "a": "complete"}, "2/2 nodes complete (a, b)", id="done"),
        pytest.param(
            {"a": "complete", "b": "in_progress", "c": "blocked"},
            "1/3 nodes complete (a), 1 in progress (b), 1 blocked (c)",
            id="upstream-example",
        ),
        pytest.param(
            {"a": "waiting", "b": "odd", "c": "in_progress"},
            "0/3 nodes complete, 1 in progress (c), 1 waiting (a), 1 unknown (b)",
            id="buckets-in-order",
        ),
        pytest.param(
            {f"n{i:02}": "in_progress" for i in range(11)},
            "0/11 nodes complete, 11 in progress (list truncated; see status.nodeStatus)",
            id="truncated",
        ),
    ],
)
def test_node_summary(node_status: dict[str, str], message: str) -> None:
    assert scenarios.node_summary(node_status) == message


IN_PROGRESS = skyhook(
    "in_progress",
    {"w1": "in_progress", "w2": "waiting"},
    ready("False", "Progressing", "0/2 nodes complete, 1 in progress (w1), 1 waiting (w2)"),
)
COMPLETE = skyhook(
    "complete",
    {"w1": "complete", "w2": "complete"},
    [
        *ready("True", "NodesConverged", "2/2 nodes complete (w1, w2)"),
        cond("NodesIgnored", "False", "NodesIgnored", "No nodes have ignore label set."),
        cond(f"{GROUP}/NodesIgnored", "False", "NodesIgnored", "No nodes have ignore label set."),
    ],
)


def test_a_consistent_status_has_no_problem() -> None:
    assert scenarios.status_problems(IN_PROGRESS) == []
    assert scenarios.status_problems(COMPLETE) == []
    assert scenarios.status_problems(skyhook(None, {})) == []  # no status written yet


def test_status_problems_name_each_disagreement() -> None:
    wrong = json.loads(json.dumps(COMPLETE))
    status = wrong["status"]
    status["completeNodes"] = "1/2"
    status["nodesInProgress"] = 1
    status["conditions"][1]["message"] = "stale"  # the prefixed Ready copy
    del status["conditions"][3]  # NodesIgnored without its prefixed copy
    status["conditions"][0]["reason"] = "Progressing"
    assert scenarios.status_problems(wrong) == [
        "completeNodes '1/2', nodeStatus says 2/2",
        "nodesInProgress 1, nodeStatus says 0",
        "complete: Ready is ('True', 'Progressing', '2/2 nodes complete (w1, w2)'), want "
        "('True', 'NodesConverged', '2/2 nodes complete (w1, w2)')",
        f"complete: Ready differs from its copy: {status['conditions'][0]} vs "
        f"{status['conditions'][1]}",
        "complete: condition NodesIgnored without its copy, or the other way",
    ]


def test_ready_is_true_only_when_complete_and_missing_ready_is_named() -> None:
    early = skyhook("in_progress", {"w1": "in_progress"})
    assert scenarios.status_problems(early) == ["in_progress: no Ready condition"]
    wrong = skyhook(
        "in_progress",
        {"w1": "in_progress"},
        ready("True", "Progressing", "0/1 nodes complete, 1 in progress (w1)"),
    )
    assert scenarios.status_problems(wrong) == [
        "in_progress: Ready is ('True', 'Progressing', '0/1 nodes complete, 1 in progress (w1)'), "
        "want ('False', 'Progressing', '0/1 nodes complete, 1 in progress (w1)')"
    ]


def test_mirror_of_the_nodes() -> None:
    state = {"a|1.1.1": entry("a")}
    nodes = [node("w1", state, status="complete"), node("w2", state, status="complete", boot="b2")]
    scr = json.loads(json.dumps(COMPLETE))
    scr["status"]["nodeState"] = {"w1": state, "w2": state}
    scr["status"]["nodeBootIds"] = {"w1": "boot-1", "w2": "b2"}
    assert scenarios.mirror_problems(scr, nodes) == []
    scr["status"]["nodeState"] = {"w1": state}
    scr["status"]["nodeBootIds"]["w2"] = "old"
    nodes[0]["metadata"]["labels"][f"{GROUP}/status_s"] = "in_progress"
    assert scenarios.mirror_problems(scr, nodes) == [
        "w1: status.nodeStatus 'complete', label 'in_progress'",
        f"w2: status.nodeState None, annotation {state}",
        "w2: status.nodeBootIds 'old', node boot id 'b2'",
    ]


def test_history_checks_every_version_and_the_phases_in_order() -> None:
    blocked = skyhook(
        "blocked",
        {"w1": "blocked", "w2": "blocked"},
        ready("False", "Blocked", "0/2 nodes complete, 2 blocked (w1, w2)"),
    )
    recording = scenarios.Recording([skyhook(None, {}), blocked, IN_PROGRESS, COMPLETE], [], [])
    assert scenarios.history_problems(recording, ("blocked", "in_progress", "complete")) == []
    assert scenarios.history_problems(recording, ("in_progress", "blocked")) == [
        "statuses went ['blocked', 'in_progress', 'complete'], want ['in_progress', 'blocked'] "
        "in that order"
    ]
    bad = json.loads(json.dumps(IN_PROGRESS))
    bad["status"]["nodesInProgress"] = 2
    assert scenarios.history_problems(scenarios.Recording([bad], [], []), ()) == [
        "version 7: nodesInProgress 2, nodeStatus says 1"
    ]


def test_never_cordoned() -> None:
    cordoned = {**node("w1"), "spec": {"unschedulable": True}}
    recording = scenarios.Recording([], [], [node("w1"), cordoned, node("w1"), node("w2")])
    assert scenarios.never_cordoned(recording, ["w1", "w2"]) == ["w2 was never cordoned"]


def test_condition_seen_in_some_version() -> None:
    during = skyhook("in_progress", {}, [cond("UninstallInProgress", reason="UninstallInProgress")])
    recording = scenarios.Recording([IN_PROGRESS, during, COMPLETE], [], [])
    assert scenarios.condition_seen(recording, "UninstallInProgress", "UninstallInProgress") == []
    assert scenarios.condition_seen(recording, "UninstallFailed", "UninstallPodFailing") == [
        "no recorded version had condition UninstallFailed (UninstallPodFailing)"
    ]


# --- SKYHOOK_NODE_ORDER --------------------------------------------------------------------


def pod(name: str, node_name: str, order: str | None) -> dict[str, Any]:
    env = [{"name": "SKYHOOK_RESOURCE_ID", "value": "x"}]
    if order is not None:
        env.append({"name": "SKYHOOK_NODE_ORDER", "value": order})
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeName": node_name,
            "initContainers": [{"name": "a-init"}, {"name": "a-apply", "env": env}],
            "containers": [{"name": "pause"}],
        },
    }


def test_node_order_counts_nodes_in_the_order_their_first_pods_arrived() -> None:
    pods = [pod("p1", "w2", "0"), pod("p2", "w2", "0"), pod("p3", "w1", "1")]
    recording = scenarios.Recording([], pods, [])
    assert scenarios.node_orders(pods[0]) == {"0"}
    assert scenarios.node_order_problems(recording, ["w1", "w2"]) == []
    assert scenarios.node_order_problems(recording, ["w1", "w2"], offset=2) == [
        "w2 (started 1.): SKYHOOK_NODE_ORDER ['0'], want 2",
        "w1 (started 2.): SKYHOOK_NODE_ORDER ['1'], want 3",
    ]


def test_node_order_missing_changing_or_never_started_is_named() -> None:
    pods = [pod("p1", "w1", "0"), pod("p2", "w1", "1"), pod("p3", "w1", None)]
    assert scenarios.node_order_problems(scenarios.Recording([], pods, []), ["w1", "w2"]) == [
        "pod p3 has no SKYHOOK_NODE_ORDER",
        "w2: no pod ran",
        "w1 (started 1.): SKYHOOK_NODE_ORDER ['0', '1'], want 0",
    ]


def test_node_priority_while_running_and_retired_at_the_end() -> None:
    running = skyhook("in_progress", {}, nodePriority={"w1": "2026-01-01T00:00:00Z"})
    done = skyhook("complete", {}, nodeOrderOffset=2)
    assert scenarios.node_priority_problems(scenarios.Recording([running, done], [], []), 2) == []
    assert scenarios.node_priority_problems(scenarios.Recording([done], [], []), 3) == [
        "no recorded version had a status.nodePriority",
        "ends with nodeOrderOffset 2 and nodePriority None, want 3 and none",
    ]
    assert scenarios.node_priority_problems(scenarios.Recording([], [], []), 0) == [
        "no recorded version had a status.nodePriority",
        "ends with nodeOrderOffset None and nodePriority None, want 0 and none",
    ]


# --- drains ---------------------------------------------------------------------------------

WORKLOAD = f"{GROUP}/e2e-workload"


def workload(name: str, rv: int, *, uid: str = "u1", node_name: str = "w1", **fields: Any) -> Any:
    evicted = fields.pop("evicted", False)
    status: dict[str, Any] = {"phase": "Running"}
    if evicted:
        status["conditions"] = [{"type": "DisruptionTarget", "reason": "EvictionByEvictionAPI"}]
    return {
        "metadata": {
            "name": name,
            "uid": uid,
            "resourceVersion": str(rv),
            "labels": {WORKLOAD: name},
        },
        "spec": {"nodeName": node_name},
        "status": status,
    }


def stage_pod(stage: str, rv: int, node_name: str = "w1") -> dict[str, Any]:
    annotations = {f"{GROUP}/package": json.dumps({"stage": stage})}
    return {
        "metadata": {"name": stage, "resourceVersion": str(rv), "annotations": annotations},
        "spec": {"nodeName": node_name},
    }


def test_drain_problems_want_evictions_and_every_pod_gone_before_the_interrupt() -> None:
    evicted = [
        ("ADDED", workload("web", 1)),
        ("MODIFIED", workload("web", 5, evicted=True)),
        ("DELETED", workload("web", 8, evicted=True)),
        ("ADDED", workload("web", 20, uid="u2")),  # the replacement, back after the interrupt
    ]
    deleted = [("ADDED", workload("kept", 2, uid="k")), ("DELETED", workload("kept", 9, uid="k"))]
    pods = [stage_pod("apply", 3), stage_pod("interrupt", 10)]
    recording = scenarios.Recording([], pods, [], [*evicted, *deleted])
    assert scenarios.drain_problems(recording, "w1", evicted=("web",), kept=("kept",)) == []
    assert scenarios.drain_problems(recording, "w1", evicted=("web", "kept")) == [
        "kept: not evicted"
    ]
    early = scenarios.Recording([], [stage_pod("interrupt", 6)], [], evicted)
    assert scenarios.drain_problems(early, "w1", evicted=("web",)) == [
        "web: the interrupt pod was created before it was gone"
    ]
    assert scenarios.drain_problems(
        scenarios.Recording([], [], [], evicted[:2]), "w1", ("web",)
    ) == [
        "w1: no interrupt pod",
        "web: still on w1",
    ]


def test_drain_blocked_wants_the_condition_and_the_node_annotation() -> None:
    message = "1/2 nodes blocked draining (w1); default/bare on w1: unmanaged"
    blocked = skyhook(
        "in_progress", {}, [cond("DrainBlocked", reason="UnmanagedPod", message=message)]
    )
    listed = [{"namespace": "default", "name": "bare", "reason": "UnmanagedPod"}]
    held = node("w1")
    held["metadata"]["annotations"][f"{GROUP}/drainBlocked_s"] = json.dumps(listed)
    assert scenarios.drain_blocked_problems(blocked, held, "default/bare", "UnmanagedPod") == []
    assert scenarios.drain_blocked_problems(
        blocked, node("w1"), "default/bare", "UnmanagedPod"
    ) == ["w1: drainBlocked_s lists []"]
    assert scenarios.no_drain_blocked(blocked, [held]) == [
        f"s: condition DrainBlocked still True: {message}",
        f"w1: {GROUP}/drainBlocked_s still set",
    ]
    assert scenarios.no_drain_blocked(COMPLETE, [node("w1")]) == []


def node_version(boot: str, rv: int, name: str = "w1") -> dict[str, Any]:
    version = node(name, boot=boot)
    version["metadata"]["resourceVersion"] = str(rv)
    return version


def test_reboot_problems_want_one_new_boot_id_between_interrupt_and_post_interrupt() -> None:
    nodes = [node_version("b1", 1), node_version("b1", 4), node_version("b2", 7)]
    pods = [stage_pod("apply", 2), stage_pod("interrupt", 3), stage_pod("post-interrupt", 8)]
    assert scenarios.reboot_problems(scenarios.Recording([], pods, nodes), "w1") == []
    twice = [*nodes, node_version("b3", 9)]
    assert scenarios.reboot_problems(scenarios.Recording([], pods, twice), "w1") == [
        "w1: boot ids ['b1', 'b2', 'b3'], want the first and one new one (one reboot)"
    ]
    assert scenarios.reboot_problems(scenarios.Recording([], pods, nodes[:2]), "w1") == [
        "w1: boot ids ['b1'], want the first and one new one (one reboot)"
    ]
    out_of_order = [stage_pod("interrupt", 8), stage_pod("post-interrupt", 5)]
    assert scenarios.reboot_problems(scenarios.Recording([], out_of_order, nodes), "w1") == [
        "w1: the boot id changed before any interrupt pod was created",
        "w1: a post-interrupt pod was created before the node came back",
    ]
    assert scenarios.reboot_problems(scenarios.Recording([], pods[:2], nodes), "w1") == [
        "w1: no post-interrupt pod"
    ]
    assert scenarios.reboot_problems(scenarios.Recording([], pods, nodes), "w2") == [
        "w2: no version of the node recorded"
    ]


def test_boot_id_problems_compare_the_status_with_the_node() -> None:
    scr = json.loads(json.dumps(COMPLETE))
    scr["status"]["nodeBootIds"] = {"w1": "b2"}
    assert scenarios.boot_id_problems(scr, node("w1", boot="b2")) == []
    assert scenarios.boot_id_problems(scr, node("w1", boot="b3")) == [
        "w1: status.nodeBootIds 'b2', node boot id 'b3'"
    ]
