"""How Skyhook status conditions are written: bare types beside the prefixed ones, transition
times that stay while a condition's status stays, the generation on every condition, and node
lists that turn into counts past ten nodes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from skyhook_planner.model import status as statuses
from skyhook_planner.sim.driver import Driver, package
from skyhook_schemas import keys

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LATER = NOW + timedelta(minutes=5)


def test_each_condition_written_twice_has_its_bare_type_first() -> None:
    found = statuses.merge_conditions(
        [],
        [
            statuses.condition(keys.CONDITION_NODES_IGNORED, False, "NodesIgnored", "none", NOW),
            statuses.condition(statuses.CONDITION_READY, True, "NodesConverged", "1/1", NOW),
        ],
        generation=3,
    )
    assert [c["type"] for c in found] == [
        "NodesIgnored",
        keys.CONDITION_NODES_IGNORED,
        "Ready",
        f"{keys.GROUP}/Ready",
    ]
    assert {c["observedGeneration"] for c in found} == {3}
    assert found[0] | {"type": ""} == found[1] | {"type": ""}


def test_a_condition_keeps_its_transition_time_while_its_status_stays() -> None:
    first = statuses.merge_conditions(
        [],
        [statuses.condition("Ready", False, "Progressing", "0/2 nodes complete", NOW)],
        generation=1,
    )
    moved = statuses.merge_conditions(
        first,
        [statuses.condition("Ready", False, "Progressing", "1/2 nodes complete", LATER)],
        generation=1,
    )
    ready = next(c for c in moved if c["type"] == "Ready")
    assert ready["message"] == "1/2 nodes complete"
    assert ready["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    flipped = statuses.merge_conditions(
        moved, [statuses.condition("Ready", True, "NodesConverged", "2/2", LATER)], generation=1
    )
    assert next(c for c in flipped if c["type"] == "Ready")["lastTransitionTime"] == (
        "2026-01-01T00:05:00Z"
    )
    assert statuses.merge_conditions(flipped, [], generation=1) == flipped


def test_the_transition_condition_takes_a_new_time_when_its_message_changes() -> None:
    kind = keys.CONDITION_TRANSITION
    first = statuses.merge_conditions(
        [],
        [statuses.condition(kind, False, "in_progress", "[] -> [in_progress]", NOW)],
        generation=1,
    )
    later = statuses.merge_conditions(
        first,
        [statuses.condition(kind, False, "erroring", "[in_progress] -> [erroring]", LATER)],
        generation=1,
    )
    assert later[0]["lastTransitionTime"] == "2026-01-01T00:05:00Z"


def test_more_than_ten_ignored_nodes_are_counted_not_named() -> None:
    def ignored_message(count: int) -> str:
        d = Driver(count)
        for node in d.sim.nodes.values():
            node["metadata"]["labels"][keys.IGNORE_LABEL] = "true"
        d.sim.add_skyhook("scr", {"packages": {"tools": package()}})
        d.step()
        conditions = d.status("scr")["conditions"]
        return next(c["message"] for c in conditions if c["type"] == "NodesIgnored")

    assert ignored_message(2) == "Node [node-0000, node-0001] has ignore label set. Skipping."
    assert ignored_message(11) == "11 nodes have ignore label set. Skipping."


def test_an_unreadable_node_state_is_named_until_it_is_fixed() -> None:
    d = Driver(7)
    for name in sorted(d.sim.nodes)[:6]:
        d.sim.nodes[name]["metadata"]["annotations"][keys.node_state_key("scr")] = "{not json"
    d.sim.add_skyhook("scr", {"packages": {"tools": package()}})
    d.step()
    found = [c for c in d.status("scr")["conditions"] if c["type"] == "NodeStateMalformed"]
    assert len(found) == 1
    assert (found[0]["status"], found[0]["reason"]) == ("True", "ParseError")
    assert found[0]["message"] == (
        "nodeState annotation cannot be parsed on 6 node(s): node-0000, node-0001, node-0002, "
        "node-0003, node-0004 and 1 more"
    )
    for name in sorted(d.sim.nodes)[:6]:
        d.sim.nodes[name]["metadata"]["annotations"][keys.node_state_key("scr")] = "{}"
    d.step()
    assert not [c for c in d.status("scr")["conditions"] if c["type"] == "NodeStateMalformed"]


def test_long_node_names_are_cut_in_the_malformed_message() -> None:
    assert statuses.malformed_message(["a-very-long-node-name", "b"]) == (
        "nodeState annotation cannot be parsed on 2 node(s): a-very-lon..., b"
    )
