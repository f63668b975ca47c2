"""spec.drainConfig and what a held drain shows: the per-pod decision in its order, the drain
clock and its timeout, DrainBlocked and Blocked/NonInterruptPodsRunning, the drainBlocked
annotation, PodDisruptionBudget refusals as waits."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from skyhook_planner.model.actions import EvictPod
from skyhook_planner.model.snapshot import EvictionRefusal, NodeView, PodView
from skyhook_planner.model.spec import DrainConfig, SpecError, decode_spec
from skyhook_planner.model.vocabulary import LabelSelector
from skyhook_planner.rules import drain
from skyhook_planner.sim.driver import START, Driver, package, pod_stage
from skyhook_schemas import keys

SEL = {"nodeSelectors": {"matchLabels": {"role": "gpu"}}}
NODE = "node-0000"
REBOOT = {"kernel": package(interrupt={"type": "reboot"})}


def pod(**extra: Any) -> PodView:
    fields: dict[str, Any] = {"phase": "Running", "controller_kind": "ReplicaSet", **extra}
    return PodView("p", "default", NODE, **fields)


@pytest.mark.parametrize(
    ("view", "config", "expected"),
    [
        pytest.param(pod(phase="Succeeded"), DrainConfig(), drain.LEAVE, id="finished"),
        pytest.param(
            PodView("s", "skyhook", NODE, labels={keys.NAME_LABEL: "x"}, phase="Running"),
            DrainConfig(),
            drain.LEAVE,
            id="our-stage-pod",
        ),
        pytest.param(pod(tolerates_unschedulable=True), DrainConfig(), drain.LEAVE, id="tolerant"),
        pytest.param(pod(controller_kind="DaemonSet"), DrainConfig(), drain.LEAVE, id="daemonset"),
        pytest.param(
            pod(controller_kind="DaemonSet"),
            DrainConfig(ignore_daemon_sets=False),
            drain.EVICT,
            id="daemonset-not-ignored",
        ),
        pytest.param(
            PodView("k", "kube-system", NODE, phase="Running"),
            DrainConfig(force=False),
            drain.LEAVE,
            id="kube-system-before-force",
        ),
        pytest.param(pod(mirror=True, controller_kind=""), DrainConfig(), drain.LEAVE, id="mirror"),
        pytest.param(
            pod(deleting=True, controller_kind=""),
            DrainConfig(force=False),
            drain.WAIT,
            id="terminating-before-unmanaged",
        ),
        pytest.param(
            pod(controller_kind=""), DrainConfig(force=False), drain.BLOCK, id="unmanaged"
        ),
        pytest.param(pod(controller_kind=""), DrainConfig(), drain.EVICT, id="unmanaged-forced"),
        pytest.param(
            pod(empty_dir=True),
            DrainConfig(delete_empty_dir_data=False),
            drain.BLOCK,
            id="emptydir",
        ),
        pytest.param(
            pod(controller_kind="", empty_dir=True),
            DrainConfig(force=False, delete_empty_dir_data=False),
            drain.BLOCK,
            id="unmanaged-named-before-emptydir",
        ),
        pytest.param(pod(), DrainConfig(disable_eviction=True), drain.DELETE, id="delete"),
        pytest.param(pod(), DrainConfig(), drain.EVICT, id="evict"),
    ],
)
def test_each_pod_is_decided_in_order(view: PodView, config: DrainConfig, expected: str) -> None:
    what, why = drain.decide(view, config, "skyhook")
    assert what == expected
    if view.controller_kind == "" and not config.force and what == drain.BLOCK:
        assert why == drain.UNMANAGED


def test_the_spec_takes_upstream_fields_and_names_bad_ones() -> None:
    config = decode_spec({"drainConfig": {"timeout": "90s", "gracePeriod": "1500ms"}}).drain
    assert (config.timeout_s, config.grace_period_s) == (90, 2), "grace rounded up"
    assert decode_spec({"drainConfig": {"force": None}}).drain == DrainConfig()
    assert decode_spec({"drainConfig": {"timeout": "0"}}).drain.timeout_s is None
    with pytest.raises(SpecError) as refused:
        decode_spec({"drainConfig": {"timeout": "-5m", "gracePeriod": "-1s", "force": "no"}})
    print(refused.value.messages)
    assert sorted(refused.value.messages) == [
        "spec.drainConfig.force: 'no' is not a boolean",
        "spec.drainConfig.gracePeriod: must be greater than or equal to 0",
        "spec.drainConfig.timeout: must be greater than or equal to 0",
    ]


def workload(name: str, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default", "labels": {"app": name}}
    if spec.pop("managed", True):
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": "rs", "controller": True}]
    return {
        "metadata": meta,
        "spec": {"nodeName": NODE, **spec},
        "status": {"phase": "Running"},
    }


def steps(d: Driver, count: int, seconds: float = 5) -> list[Any]:
    """`count` passes `seconds` apart; every stage pod finishes at once."""
    plans = []
    for _ in range(count):
        plans.append(d.step())
        for key in d.pending_pods():
            d.sim.finish_pod(key, 0, at=d.now.strftime("%Y-%m-%dT%H:%M:%SZ"))
        d.now += timedelta(seconds=seconds)
    return plans


def annotations(d: Driver) -> dict[str, str]:
    return d.sim.nodes[NODE]["metadata"]["annotations"]


def condition(d: Driver, kind: str) -> dict[str, Any] | None:
    return next((c for c in d.status("scr").get("conditions", []) if c["type"] == kind), None)


def interrupts(d: Driver) -> list[Any]:
    return [p for p in d.sim.created_pods if pod_stage(p)[2] == "interrupt"]


def test_an_unmanaged_pod_blocks_the_drain_until_it_is_gone() -> None:
    d = Driver(1, {"role": "gpu"})
    d.sim.add_pod(workload("bare", managed=False))
    d.sim.add_pod(workload("web"))
    d.sim.add_skyhook("scr", {**SEL, "drainConfig": {"force": False}, "packages": REBOOT})
    plans = steps(d, 4)
    evicted = {a.name for p in plans for a in p.actions if isinstance(a, EvictPod)}
    assert evicted == {"web"}, "the managed pod is evicted, the bare one left"
    assert ("default", "bare") in d.sim.pods
    assert json.loads(annotations(d)[keys.drain_blocked_key("scr")]) == [
        {"namespace": "default", "name": "bare", "reason": "UnmanagedPod"}
    ]
    blocked = condition(d, "DrainBlocked")
    assert blocked is not None and blocked["reason"] == "UnmanagedPod"
    assert "1/1 nodes blocked draining (node-0000)" in blocked["message"]
    assert "default/bare" in blocked["message"]
    assert not interrupts(d)
    warnings = [e for e in d.sim.events if e.type == "Warning" and e.reason == "Drain"]
    assert len([e for e in warnings if e.kind == "Skyhook"]) == 1, "one Warning when it starts"
    assert len([e for e in warnings if e.kind == "Node"]) == 1
    assert keys.drain_start_key("scr") in annotations(d)
    reasons = [r for p in plans[-1:] for r in p.waiting[("scr", NODE)]]
    assert reasons[0].hold == "UnmanagedPod"

    del d.sim.pods[("default", "bare")]
    d.run()
    assert interrupts(d), "the interrupt runs once the blocker is gone"
    assert condition(d, "DrainBlocked") is None
    assert keys.drain_blocked_key("scr") not in annotations(d)
    assert keys.drain_start_key("scr") not in annotations(d)
    assert d.node_status("scr", NODE) == "complete"


def test_an_emptydir_pod_blocks_when_its_data_must_be_kept() -> None:
    d = Driver(1, {"role": "gpu"})
    d.sim.add_pod(workload("cache", volumes=[{"name": "v", "emptyDir": {}}]))
    d.sim.add_skyhook(
        "scr", {**SEL, "drainConfig": {"deleteEmptyDirData": False}, "packages": REBOOT}
    )
    steps(d, 4)
    assert ("default", "cache") in d.sim.pods
    blocked = condition(d, "DrainBlocked")
    assert blocked is not None and blocked["reason"] == "EmptyDirData"
    assert not interrupts(d)


def test_a_budget_refusal_waits_and_the_timeout_marks_the_node_erroring() -> None:
    d = Driver(1, {"role": "gpu"})
    d.sim.add_pod(workload("web"))
    d.sim.budgeted[("default", "web")] = (
        "Cannot evict pod as it would violate the pod's disruption budget."
    )
    d.sim.add_skyhook("scr", {**SEL, "drainConfig": {"timeout": "60s"}, "packages": REBOOT})
    steps(d, 4)
    blocked = condition(d, "DrainBlocked")
    assert blocked is not None and blocked["reason"] == "PodDisruptionBudget"
    assert "violate the pod's disruption budget" in blocked["message"]
    assert d.node_status("scr", NODE) == "in_progress", "a refusal is a wait, not a failure"
    plans = steps(d, 12)  # past the minute
    assert d.node_status("scr", NODE) == "erroring"
    assert d.entries("scr", NODE) == {"kernel|1.0.0": ("apply", "erroring")}
    assert d.sim.nodes[NODE]["spec"].get("unschedulable") is True, "it stays cordoned"
    timeouts = [e for e in d.sim.events if "drain timed out after [1m]" in e.message]
    assert {e.kind for e in timeouts} == {"Node", "Skyhook"} and len(timeouts) == 2
    last = [a for a in plans[-1].actions if isinstance(a, EvictPod)]
    assert last == [], "nothing more is evicted once the drain timed out"
    assert ("default", "web") in d.sim.pods and not interrupts(d)

    del d.sim.budgeted[("default", "web")]
    del d.sim.pods[("default", "web")]  # the blocker goes: the node carries on
    d.run()
    assert d.node_status("scr", NODE) == "complete"
    assert interrupts(d)


def test_eviction_off_deletes_with_the_grace_period() -> None:
    d = Driver(1, {"role": "gpu"})
    d.sim.add_pod(workload("web"))
    d.sim.budgeted[("default", "web")] = "refused"
    d.sim.add_skyhook(
        "scr",
        {
            **SEL,
            "drainConfig": {"disableEviction": True, "gracePeriod": "1500ms"},
            "packages": REBOOT,
        },
    )
    plans = steps(d, 3)
    removed = [a for p in plans for a in p.actions if isinstance(a, EvictPod)]
    assert removed == [EvictPod("default", "web", NODE, 2, delete=True)]
    d.run()
    assert d.node_status("scr", NODE) == "complete"


FORBIDDEN = (
    '403 pods "{}" is forbidden: User "system:serviceaccount:skyhook:skyhook-operator" '
    'cannot create resource "pods/eviction" in API group "" in the namespace "default"'
)


def node_warnings(d: Driver, pod_name: str) -> list[str]:
    """The node's Warning Drain Events naming `pod_name`."""
    return [
        e.message
        for e in d.sim.events
        if e.kind == "Node" and e.type == "Warning" and f"default/{pod_name} (" in e.message
    ]


def test_a_refused_eviction_blocks_the_drain_with_the_answer_and_one_warning_per_pod() -> None:
    d = Driver(1, {"role": "gpu"})
    d.sim.add_pod(workload("web"))
    d.sim.add_pod(workload("api"))
    for name in ("web", "api"):
        d.sim.failing[("default", name)] = FORBIDDEN.format(name)
    d.sim.add_skyhook("scr", {**SEL, "packages": REBOOT})
    plans = steps(d, 6)
    listed = json.loads(annotations(d)[keys.drain_blocked_key("scr")])
    assert listed == [
        {
            "namespace": "default",
            "name": n,
            "reason": "EvictionFailed",
            "detail": FORBIDDEN.format(n),
        }
        for n in ("api", "web")
    ]
    blocked = condition(d, "DrainBlocked")
    assert blocked is not None and blocked["reason"] == "EvictionFailed"
    assert f"default/web on {NODE}: {FORBIDDEN.format('web')}" in blocked["message"]
    assert d.node_status("scr", NODE) == "in_progress", "blocked, not failed: the drain waits"
    assert plans[-1].waiting[("scr", NODE)][0].hold == "EvictionFailed"
    # Asked again pass after pass (the operator spaces the requests), said once per pod.
    assert [a.name for a in plans[-1].actions if isinstance(a, EvictPod)] == ["api", "web"]
    assert len(node_warnings(d, "web")) == 1 and len(node_warnings(d, "api")) == 1
    skyhook_warnings = [e for e in d.sim.events if e.kind == "Skyhook" and e.type == "Warning"]
    assert len(skyhook_warnings) == 1, skyhook_warnings

    # Another pod fails later in the same drain: a Warning of its own, none again for the rest.
    d.sim.add_pod(workload("late"))
    d.sim.failing[("default", "late")] = FORBIDDEN.format("late")
    steps(d, 4)
    assert len(node_warnings(d, "late")) == 1
    assert len(node_warnings(d, "web")) == 1 and len(node_warnings(d, "api")) == 1
    assert not interrupts(d)

    d.sim.failing.clear()  # the grant comes: the next asks are accepted
    d.run()
    assert d.node_status("scr", NODE) == "complete"
    assert interrupts(d)
    assert condition(d, "DrainBlocked") is None
    assert keys.drain_blocked_key("scr") not in annotations(d)


def test_a_refused_delete_blocks_the_drain_as_a_failed_delete() -> None:
    d = Driver(1, {"role": "gpu"})
    d.sim.add_pod(workload("web"))
    d.sim.failing[("default", "web")] = "500 Internal error occurred: etcdserver: timeout"
    d.sim.add_skyhook("scr", {**SEL, "drainConfig": {"disableEviction": True}, "packages": REBOOT})
    steps(d, 4)
    (listed,) = json.loads(annotations(d)[keys.drain_blocked_key("scr")])
    assert listed["reason"] == "DeleteFailed"
    assert listed["detail"] == "500 Internal error occurred: etcdserver: timeout"
    blocked = condition(d, "DrainBlocked")
    assert blocked is not None and blocked["reason"] == "DeleteFailed"
    assert len(node_warnings(d, "web")) == 1


@pytest.mark.parametrize(
    ("by_budget", "refused_delete", "removal", "expected"),
    [
        (True, False, drain.EVICT, drain.PDB),
        (True, False, drain.DELETE, ""),  # a delete is no budget's to refuse
        (False, False, drain.EVICT, drain.EVICTION_FAILED),
        (False, False, drain.DELETE, ""),  # disableEviction turned on since: not refused yet
        (False, True, drain.DELETE, drain.DELETE_FAILED),
        (False, True, drain.EVICT, ""),
    ],
)
def test_a_refusal_blocks_only_the_removal_it_refused(
    by_budget: bool, refused_delete: bool, removal: str, expected: str
) -> None:
    refusal = EvictionRefusal(
        "default", "p", NODE, "uid", "answer", datetime.now(UTC), by_budget, refused_delete
    )
    assert drain.refused_reason(refusal, removal) == expected
    view = pod()
    config = DrainConfig(disable_eviction=removal == drain.DELETE)
    checked = drain.check(
        NodeView(NODE, unschedulable=True),
        [view],
        LabelSelector(),
        "skyhook",
        config=config,
        refusals={("default", "p"): refusal},
    )
    assert [b.reason for b in checked.blocked] == ([expected] if expected else [])
    assert checked.to_remove == (view,), "asked again however it was refused"


def test_an_unreadable_blocked_annotation_lists_no_pod() -> None:
    assert drain.listed_pods(None) == frozenset()
    assert drain.listed_pods("not json") == frozenset()
    assert drain.listed_pods('{"namespace": "default"}') == frozenset()
    assert drain.listed_pods('[{"namespace": "default", "name": "web", "reason": "x"}]') == {
        ("default", "web")
    }


def test_protected_pods_show_blocked_while_they_run() -> None:
    d = Driver(1, {"role": "gpu"})
    d.sim.add_pod(workload("training"))
    d.sim.add_skyhook(
        "scr",
        {**SEL, "podNonInterruptLabels": {"matchLabels": {"app": "training"}}, "packages": REBOOT},
    )
    plans = steps(d, 3)
    blocked = condition(d, "Blocked")
    assert blocked is not None and blocked["reason"] == "NonInterruptPodsRunning"
    assert blocked["message"] == "1 node blocked by non-interrupt pods (node-0000). Waiting."
    assert not any(isinstance(a, EvictPod) for p in plans for a in p.actions)
    assert keys.drain_start_key("scr") not in annotations(d), "the drain has not begun"
    said = [e.message for e in d.sim.events if e.kind == "Node" and e.type == "Warning"]
    assert said == [
        "waiting for non-interrupt pods default/training before package [kernel:1.0.0] "
        "from [skyhook:scr] interrupts node [node-0000]"
    ], "one Warning on the node when the wait begins"
    d.sim.pods[("default", "training")]["status"]["phase"] = "Succeeded"
    d.run()
    assert condition(d, "Blocked") is None
    assert d.node_status("scr", NODE) == "complete"


def test_a_node_with_protected_pods_is_passed_over_uncordoned_until_the_others_are_done() -> None:
    d = Driver(2, {"role": "gpu"})
    d.sim.add_pod(workload("training"))  # on node-0000, first in node order
    d.sim.add_skyhook(
        "scr",
        {
            **SEL,
            "interruptionBudget": {"count": 1},
            "podNonInterruptLabels": {"matchLabels": {"app": "training"}},
            "packages": REBOOT,
        },
    )
    d.step()
    assert d.sim.nodes[NODE]["spec"].get("unschedulable") is not True, "not cordoned"
    assert d.node_status("scr", NODE) != "in_progress", "no budget slot taken"
    assert d.node_status("scr", "node-0001") == "in_progress", "the other node goes first"
    assert NODE in d.status("scr")["interruptDeferred"]
    reasons = d.plans[-1].waiting[("scr", NODE)]
    assert "passed over, uncordoned, while non-interrupt pods run: default/training" in [
        r.message for r in reasons
    ]
    steps(d, 12)
    assert d.node_status("scr", "node-0001") == "complete"
    # No other node left: it is cordoned and waits for the protected pod, as before.
    assert d.sim.nodes[NODE]["spec"].get("unschedulable") is True
    assert "interruptDeferred" not in d.status("scr") or not d.status("scr")["interruptDeferred"]
    assert not interrupts(d) or all(pod_stage(p)[0] != NODE for p in interrupts(d))
    d.sim.pods[("default", "training")]["status"]["phase"] = "Succeeded"
    d.run()
    assert d.node_status("scr", NODE) == "complete"


def test_the_pass_over_ends_after_the_wait() -> None:
    now = START
    training = (PodView("t", "default", NODE, phase="Running"),)
    first = drain.defer({NODE: training}, True, {}, 3600, now)
    assert set(first.held) == {NODE} and first.recheck_s == 3600
    later = drain.defer({NODE: training}, True, first.since, 3600, now + timedelta(minutes=59))
    assert set(later.held) == {NODE} and later.since == first.since, "the clock is kept"
    assert later.recheck_s == pytest.approx(60)
    over = drain.defer({NODE: training}, True, first.since, 3600, now + timedelta(hours=1))
    assert over.held == {}, "admitted once the wait is over"
    assert drain.defer({NODE: training}, False, {}, None, now).held == {}, "no one else left"
    assert drain.defer({NODE: training}, True, {}, 0, now).held == {}, "0: never passed over"


def test_the_interrupt_waits_for_a_pod_still_terminating() -> None:
    d = Driver(1, {"role": "gpu"})
    leaving = workload("web")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"  # evicted, in its grace
    d.sim.add_pod(leaving)
    d.sim.add_skyhook("scr", {**SEL, "packages": REBOOT})
    plans = steps(d, 6)
    assert not interrupts(d), "no interrupt while an evicted pod is still on the node"
    assert "draining: 1 pods still to leave the node" in [
        r.message for r in plans[-1].waiting[("scr", NODE)]
    ]
    del d.sim.pods[("default", "web")]
    d.run()
    assert interrupts(d)


def test_the_drain_blocked_message_names_ten_pods_and_counts_the_rest() -> None:
    d = Driver(1, {"role": "gpu"})
    names = [f"web-{i:02}" for i in range(25)]
    for name in names:
        d.sim.add_pod(workload(name))
        d.sim.failing[("default", name)] = FORBIDDEN.format(name) + " " + "x" * 200
    d.sim.add_skyhook("scr", {**SEL, "packages": REBOOT})
    steps(d, 4)
    blocked = condition(d, "DrainBlocked")
    assert blocked is not None and blocked["reason"] == "EvictionFailed"
    assert "default/web-09 on" in blocked["message"]
    assert "default/web-10 on" not in blocked["message"]
    assert blocked["message"].endswith("; ... (15 more pods)"), blocked["message"][-80:]
    assert len(blocked["message"]) < 32768 // 4
    listed = json.loads(annotations(d)[keys.drain_blocked_key("scr")])
    assert [b["name"] for b in listed] == names, "the node lists every one"
    assert all(len(node_warnings(d, name)) == 1 for name in names)
