"""Node order: status.nodePriority, status.nodeOrderOffset and the SKYHOOK_NODE_ORDER every stage
and interrupt pod carries; and batches that stick to the nodes they picked."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from skyhook_planner.model.snapshot import NodeView
from skyhook_planner.model.vocabulary import LabelSelector
from skyhook_planner.rules import ordering
from skyhook_planner.sim.cluster import make_node
from skyhook_planner.sim.driver import Driver, package
from skyhook_schemas import keys


def orders(d: Driver) -> dict[str, list[int]]:
    """Each node's SKYHOOK_NODE_ORDER, per pod created there, in creation order."""
    found: dict[str, list[int]] = defaultdict(list)
    for pod in d.sim.created_pods:
        containers = pod["spec"]["initContainers"]
        env = {e["name"]: e["value"] for e in containers[-1].get("env", [])}
        found[pod["spec"]["nodeName"]].append(int(env["SKYHOOK_NODE_ORDER"]))
    return dict(found)


def test_nodes_are_numbered_in_the_order_they_start_and_keep_their_number() -> None:
    d = Driver(3)
    spec: dict[str, Any] = {
        "packages": {"tools": package(configMap={"a.conf": "1"}, interrupt={"type": "reboot"})},
        "interruptionBudget": {"count": 1},
    }
    d.sim.add_skyhook("scr", spec)
    d.run()
    found = orders(d)
    assert sorted(found) == sorted(d.sim.nodes)
    # Every pod of a node (apply, config, the interrupt, post-interrupt) carries one number.
    assert all(len(set(values)) == 1 for values in found.values()), found
    assert sorted(values[0] for values in found.values()) == [0, 1, 2]
    status = d.status("scr")
    assert status.get("nodePriority", {}) == {}
    assert status["nodeOrderOffset"] == 3


def test_a_number_is_never_handed_out_twice_when_nodes_finish_out_of_order() -> None:
    d = Driver(6)
    d.sim.add_skyhook(
        "scr",
        {
            "packages": {"tools": package(configMap={"a.conf": "1"})},
            "interruptionBudget": {"count": 3},
        },
    )

    def last_picked_first(pods: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """Only the pods of the most recently picked node finish: nodes finish in reverse."""
        on_node = {key: d.sim.pods[key]["spec"]["nodeName"] for key in pods}
        latest = max(on_node.values(), default="")
        return [key for key, node in on_node.items() if node == latest]

    d.run(finish=last_picked_first, max_steps=400)
    found = orders(d)
    assert all(len(set(values)) == 1 for values in found.values()), found
    numbers = sorted(values[0] for values in found.values())
    assert numbers == list(range(6))


def test_a_later_rollout_numbers_on_from_the_offset() -> None:
    d = Driver(2)
    d.sim.add_skyhook("scr", {"packages": {"tools": package()}, "interruptionBudget": {"count": 1}})
    d.run()
    first = len(d.sim.created_pods)
    d.sim.skyhooks["scr"]["spec"]["packages"]["tools"]["version"] = "1.1.0"
    d.sim.skyhooks["scr"]["metadata"]["generation"] += 1
    d.run()
    later = {
        int(e["value"])
        for pod in d.sim.created_pods[first:]
        for e in pod["spec"]["initContainers"][-1]["env"]
        if e["name"] == "SKYHOOK_NODE_ORDER"
    }
    assert later == {2, 3}
    assert d.status("scr")["nodeOrderOffset"] == 4


def test_a_node_between_packages_keeps_its_place_in_the_batch() -> None:
    """Budget 1: the second package starts on the first node before any other node starts."""
    d = Driver(2)
    packages = {"base": package(), "extra": package(dependsOn={"base": "1.0.0"})}
    d.sim.add_skyhook("scr", {"packages": packages, "interruptionBudget": {"count": 1}})
    d.run()
    started = [
        (p["spec"]["nodeName"], p["metadata"]["labels"][keys.PACKAGE_LABEL])
        for p in d.sim.created_pods
    ]
    first_node = started[0][0]
    first_done = max(i for i, (node, _) in enumerate(started) if node == first_node)
    assert all(node == first_node for node, _ in started[: first_done + 1]), started


def test_retiring_only_from_the_front_keeps_every_number() -> None:
    priority = {
        "a": "2026-01-01T00:00:00Z",
        "b": "2026-01-01T00:00:01Z",
        "c": "2026-01-01T00:00:01Z",
    }
    before = ordering.node_orders(priority, 5)
    assert before == {"a": 5, "b": 6, "c": 7}
    # b is done but a is not: nothing retires yet, so nobody's number moves.
    assert ordering.retire(priority, 5, lambda node: node == "b") == (priority, 5)
    remaining, offset = ordering.retire(priority, 5, lambda node: node in {"a", "b"})
    assert (remaining, offset) == ({"c": "2026-01-01T00:00:01Z"}, 7)
    assert ordering.node_orders(remaining, offset) == {"c": 7}


# --- the selected nodes' order, kept between passes -------------------------------------------


def _views(*specs: tuple[str, str, str]) -> tuple[NodeView, ...]:
    """(name, pool label, creation time) each."""
    return tuple(
        NodeView.from_api(make_node(name, {"pool": pool}, created=f"2026-01-0{day}T00:00:00Z"))
        for name, pool, day in specs
    )


def _select(nodes: tuple[NodeView, ...], last: ordering.Selected | None) -> ordering.Selected:
    return ordering.selected_nodes(nodes, {n.name: n for n in nodes}, GPU, last)


GPU = LabelSelector(match_labels={"pool": "gpu"})


def test_the_kept_order_is_the_order_a_fresh_sort_gives() -> None:
    nodes = _views(("c", "gpu", "1"), ("a", "gpu", "2"), ("b", "cpu", "1"), ("d", "gpu", "1"))
    first = _select(nodes, None)
    assert [n.name for n in first.matched] == ["c", "d", "a"]  # oldest first, ties by name
    assert _select(nodes, first) is first  # nothing changed: taken over whole

    # The same nodes decoded again (a heartbeat): the order is kept, with the current views.
    again = _views(("c", "gpu", "1"), ("a", "gpu", "2"), ("b", "cpu", "1"), ("d", "gpu", "1"))
    kept = _select(again, first)
    assert [n.name for n in kept.matched] == ["c", "d", "a"]
    assert all(n is again[[m.name for m in again].index(n.name)] for n in kept.matched)

    changes = {
        "a label change selects a node": (
            ("c", "gpu", "1"),
            ("a", "gpu", "2"),
            ("b", "gpu", "1"),
            ("d", "gpu", "1"),
        ),
        "a label change drops a node": (
            ("c", "cpu", "1"),
            ("a", "gpu", "2"),
            ("b", "cpu", "1"),
            ("d", "gpu", "1"),
        ),
        "one node went and another came": (
            ("c", "gpu", "1"),
            ("a", "gpu", "2"),
            ("b", "cpu", "1"),
            ("e", "gpu", "1"),
        ),
        "a node was recreated later": (
            ("c", "gpu", "3"),
            ("a", "gpu", "2"),
            ("b", "cpu", "1"),
            ("d", "gpu", "1"),
        ),
        "a node came": (
            ("c", "gpu", "1"),
            ("a", "gpu", "2"),
            ("b", "cpu", "1"),
            ("d", "gpu", "1"),
            ("e", "gpu", "1"),
        ),
    }
    for why, specs in changes.items():
        changed = _views(*specs)
        assert _select(changed, first).matched == _select(changed, None).matched, why

    # A label of ours written to a selected node leaves it selected: the order is kept.
    labelled = NodeView.from_api(
        make_node("a", {"pool": "gpu", "status": "waiting"}, created="2026-01-02T00:00:00Z")
    )
    relabelled = tuple(labelled if n.name == "a" else n for n in nodes)
    kept = _select(relabelled, first)
    assert kept.matched == _select(relabelled, None).matched
    assert labelled in kept.matched
