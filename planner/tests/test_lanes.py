"""The writer's schedule (model/lanes.py), driven by hand: what goes out first, what waits for
what, and what a failure drops. The operator's writer and the planner's test driver both send
in this order (operator/tests/wiring/test_writer.py pins it)."""

from skyhook_planner.model.actions import CreatePod, PatchNode
from skyhook_planner.model.lanes import Lane, LaneSchedule


def patch(node: str, mark: str = "x") -> PatchNode:
    return PatchNode(node, annotations={"mark": mark})


def pod(node: str) -> CreatePod:
    return CreatePod(
        {"metadata": {"name": f"p-{node}", "namespace": "s"}, "spec": {"nodeName": node}}
    )


def take_all(schedule: LaneSchedule) -> list[Lane]:
    taken = []
    while (lane := schedule.take()) is not None:
        taken.append(lane)
    return taken


def test_releases_and_hand_offs_go_first_then_starts_then_bookkeeping() -> None:
    schedule = LaneSchedule()
    schedule.queue({"book": [patch("book")]})
    schedule.queue(
        {"start": [patch("start")], "pods": [patch("pods"), pod("pods")], "free": [patch("free")]},
        starting=frozenset({"start"}),
        releasing=frozenset({"free"}),
    )
    taken = take_all(schedule)
    # The start waits for the release queued with it; the rest by urgency, oldest first.
    assert [lane.node for lane in taken] == ["pods", "free", "book"]
    assert schedule.done(taken[1], ok=True) == []
    assert [lane.node for lane in take_all(schedule)] == ["start"]


def test_a_nodes_lanes_go_out_one_at_a_time_in_the_order_queued() -> None:
    schedule = LaneSchedule()
    schedule.queue({"n1": [patch("n1", "first")]})
    schedule.queue({"n1": [patch("n1", "second")]})
    assert schedule.pending["n1"] == (patch("n1", "first"), patch("n1", "second"))
    (first,) = take_all(schedule)
    assert first.actions == (patch("n1", "first"),)
    schedule.done(first, ok=True)
    (second,) = take_all(schedule)
    assert second.actions == (patch("n1", "second"),)
    schedule.done(second, ok=True)
    assert not schedule.busy and "n1" not in schedule.pending


def test_a_failed_lane_drops_what_was_planned_on_top_of_it() -> None:
    schedule = LaneSchedule()
    schedule.queue({"n1": [patch("n1", "first")]})
    schedule.queue({"n1": [patch("n1", "second")]})
    listed = schedule.listed()
    assert set(listed) == {"n1"}
    (first,) = take_all(schedule)
    dropped = schedule.done(first, ok=False)
    assert [lane.actions for lane in dropped] == [(patch("n1", "second"),)]
    # A plan made from the listing that still showed the failed lane is dropped too...
    later = schedule.queue({"n1": [patch("n1", "third")]})
    assert later.dropped == later.lanes
    # ... until the next listing shows the node as it is.
    schedule.listed()
    again = schedule.queue({"n1": [patch("n1", "fourth")]})
    assert again.dropped == [] and take_all(schedule) == again.lanes


def test_a_start_is_dropped_when_a_release_it_waits_for_fails() -> None:
    schedule = LaneSchedule()
    schedule.queue({"free": [patch("free")]}, releasing=frozenset({"free"}))
    queued = schedule.queue({"start": [patch("start")]}, starting=frozenset({"start"}))
    (free,) = take_all(schedule)
    dropped = schedule.done(free, ok=False)
    assert dropped == queued.lanes
    assert not schedule.busy
    # A start queued after the failure waits for no release: none is outstanding.
    late = schedule.queue({"start": [patch("start")]}, starting=frozenset({"start"}))
    assert take_all(schedule) == late.lanes
