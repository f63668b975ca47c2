"""Whole passes with a DeploymentPolicy: compartments roll out batch by batch, a failing
compartment stops, batch state and conditions land in the Skyhook's status."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from skyhook_planner.model.actions import EmitEvent
from skyhook_planner.sim.driver import Driver, package
from skyhook_schemas import keys

SEL = {"nodeSelectors": {"matchLabels": {"role": "gpu"}}}


def _policy(default: Mapping[str, Any], *compartments: Mapping[str, Any], **extra: Any) -> dict:
    return {"default": dict(default), "compartments": list(compartments), **extra}


def _rollout(
    d: Driver, fails: Callable[[str], bool] = lambda node: False, max_steps: int = 200
) -> list[list[str]]:
    """Run passes until nothing moves; every pod finishes right after the pass that created it
    (failing ones exit 1 and stay, as a kubelet restarting them in place would leave them).
    Returns the nodes each pass started, for passes that started any."""
    batches: list[list[str]] = []
    for _ in range(max_steps):
        result = d.step()
        started = sorted(result.starting)
        if started:
            batches.append(started)
        pending = d.pending_pods()
        if not result.actions and not pending:
            return batches
        for key in pending:
            node = d.sim.pods[key]["spec"]["nodeName"]
            d.sim.finish_pod(key, 1 if fails(node) else 0)
        d.now += timedelta(seconds=1)
    return batches


def _driver(nodes: int, labels: Callable[[int], dict[str, str]] | None = None) -> Driver:
    d = Driver(nodes, {"role": "gpu"})
    if labels is not None:
        for i, node in enumerate(sorted(d.sim.nodes)):
            d.sim.nodes[node]["metadata"]["labels"].update(labels(i))
    return d


def test_each_compartment_follows_its_strategy() -> None:
    d = _driver(15, lambda i: {"zone": "a"} if i < 5 else {"zone": "b"} if i < 10 else {})
    d.sim.add_policy(
        "rollout",
        _policy(
            {"budget": {"percent": 100}, "strategy": {"fixed": {"initialBatch": 3}}},
            {
                "name": "a",
                "selector": {"matchLabels": {"zone": "a"}},
                "budget": {"percent": 100},
                "strategy": {"exponential": {}},
            },
            {
                "name": "b",
                "selector": {"matchLabels": {"zone": "b"}},
                "budget": {"count": 2},
                "strategy": {"linear": {}},
            },
        ),
    )
    d.sim.add_skyhook("scr", {**SEL, "deploymentPolicy": "rollout", "packages": {"pkg": package()}})
    nodes = sorted(d.sim.nodes)
    zone = {n: "a" if i < 5 else "b" if i < 10 else "__default__" for i, n in enumerate(nodes)}
    sizes: dict[str, list[int]] = {"a": [], "b": [], "__default__": []}
    for batch in _rollout(d):
        for name, found in sizes.items():
            started = [n for n in batch if zone[n] == name]
            if started:
                found.append(len(started))
    # a: exponential 1, 2, then the 2 left; b: linear 1, 2, then capped by its ceiling of 2;
    # __default__: fixed 3, then the 2 left.
    assert sizes == {"a": [1, 2, 2], "b": [1, 2, 2], "__default__": [3, 2]}
    status = d.status("scr")
    assert status["status"] == "complete"
    compartments = status["compartmentStatuses"]
    assert {k: (v["matched"], v["ceiling"], v["completed"]) for k, v in compartments.items()} == {
        "a": (5, 5, 5),
        "b": (5, 2, 5),
        "__default__": (5, 5, 5),
    }


def test_batch_sizes_per_compartment() -> None:
    d = _driver(10)
    d.sim.add_policy(
        "p", _policy({"budget": {"percent": 100}, "strategy": {"linear": {"delta": 2}}})
    )
    d.sim.add_skyhook("scr", {**SEL, "deploymentPolicy": "p", "packages": {"pkg": package()}})
    assert [len(b) for b in _rollout(d)] == [1, 3, 5, 1]


def test_failing_batches_stop_the_compartment() -> None:
    d = _driver(10)
    d.sim.add_policy(
        "p",
        _policy({"budget": {"percent": 100}, "strategy": {"linear": {"failureThreshold": 2}}}),
    )
    d.sim.add_skyhook("scr", {**SEL, "deploymentPolicy": "p", "packages": {"pkg": package()}})
    nodes = sorted(d.sim.nodes)
    batches = _rollout(d, fails=lambda node: node in {nodes[2], nodes[3]})
    assert batches == [[nodes[0]], [nodes[1], nodes[2]], [nodes[3]]]
    state = d.status("scr")["compartmentStatuses"]["__default__"]["batchState"]
    assert state == {
        "currentBatch": 4,
        "consecutiveFailures": 2,
        "completedNodes": 2,
        "failedNodes": 2,
        "shouldStop": True,
        "lastBatchSize": 1,
        "lastBatchFailed": True,
    }
    stopped = [e for p in d.plans for e in p.actions if isinstance(e, EmitEvent)]
    assert [e.reason for e in stopped if e.reason == "RolloutStopped"] == ["RolloutStopped"]


def test_missing_policy_blocks_until_it_exists() -> None:
    d = _driver(2)
    d.sim.add_skyhook("scr", {**SEL, "deploymentPolicy": "later", "packages": {"pkg": package()}})
    d.step()
    status = d.status("scr")
    assert status["status"] == "blocked"
    not_found = [
        (c["type"], c["message"])
        for c in status["conditions"]
        if c["type"].endswith("DeploymentPolicyNotFound")
    ]
    message = 'DeploymentPolicy "later" not found'
    assert not_found == [
        ("DeploymentPolicyNotFound", message),
        (f"{keys.GROUP}/DeploymentPolicyNotFound", message),
    ]
    assert d.sim.created_pods == []
    d.sim.add_policy("later", _policy({"budget": {"count": 1}, "strategy": {"fixed": {}}}))
    _rollout(d)
    status = d.status("scr")
    assert status["status"] == "complete"
    assert not [c for c in status["conditions"] if c["type"].endswith("DeploymentPolicyNotFound")]


def test_reset_on_completion_when_asked() -> None:
    d = _driver(3)
    d.sim.add_policy(
        "p",
        _policy(
            {"budget": {"percent": 100}, "strategy": {"fixed": {}}},
            resetBatchStateOnCompletion=True,
        ),
    )
    d.sim.add_skyhook("scr", {**SEL, "deploymentPolicy": "p", "packages": {"pkg": package()}})
    _rollout(d)
    entry = d.status("scr")["compartmentStatuses"]["__default__"]
    assert entry["batchState"] == {"currentBatch": 1}
    assert (entry["matched"], entry["completed"], entry["progressPercent"]) == (3, 3, 100)


def test_legacy_skyhooks_keep_the_sliding_window() -> None:
    d = _driver(4)
    d.sim.add_skyhook(
        "scr", {**SEL, "interruptionBudget": {"count": 2}, "packages": {"pkg": package()}}
    )
    _rollout(d)
    entry = d.status("scr")["compartmentStatuses"]
    assert entry == {
        "__default__": {
            "matched": 4,
            "ceiling": 2,
            "inProgress": 0,
            "completed": 4,
            "progressPercent": 100,
        }
    }


def test_a_node_whose_retry_succeeds_is_not_a_failed_node() -> None:
    """A failureThreshold counts the nodes whose stage gave up, not those with an attempt
    that failed and was retried."""
    d = _driver(4)
    d.sim.add_policy(
        "p",
        _policy(
            {"budget": {"percent": 100}, "strategy": {"linear": {"failureThreshold": 1}}},
            resetBatchStateOnCompletion=False,  # the batch state is read after completion
        ),
    )
    d.sim.add_skyhook("scr", {**SEL, "deploymentPolicy": "p", "packages": {"pkg": package()}})
    first = sorted(d.sim.nodes)[0]
    failed_once: set[str] = set()
    for _ in range(100):
        d.step()
        for key in d.pending_pods():
            node = d.sim.pods[key]["spec"]["nodeName"]
            stamp = d.now.strftime("%Y-%m-%dT%H:%M:%SZ")
            if node == first and node not in failed_once:
                failed_once.add(node)
                d.sim.finish_pod(key, 1, at=stamp, failed_phase=True)
            else:
                d.sim.finish_pod(key, 0, at=stamp)
        d.now += timedelta(seconds=1)
    assert failed_once == {first}
    status = d.status("scr")
    assert status["status"] == "complete"
    state = status["compartmentStatuses"]["__default__"]["batchState"]
    assert state.get("failedNodes", 0) == 0
    assert state.get("consecutiveFailures", 0) == 0
    assert state["completedNodes"] == 4
    assert not state.get("shouldStop")
