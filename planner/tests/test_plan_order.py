"""How a whole plan goes out (model/lanes.py `plan_order` with the `LaneSchedule`), for any plan:
what goes in order and what is queued, which Skyhook-level writes wait for which node writes,
and what a plan's Skyhook status waits for. The operator's writer and the planner's test driver
both send plans this way."""

from __future__ import annotations

import random
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from skyhook_planner.model.actions import (
    Action,
    AddFinalizer,
    CreatePod,
    DeleteConfigMap,
    DeletePod,
    EmitEvent,
    PatchNode,
    PatchSkyhookStatus,
    Plan,
    RemoveFinalizer,
    lane_of,
    skyhook_wide,
)
from skyhook_planner.model.lanes import Lane, LaneSchedule, PlanOrder, Wave, plan_order

NODES = ("n0", "n1", "n2", "n3")


def pod(node: str, name: str) -> CreatePod:
    return CreatePod({"metadata": {"name": name, "namespace": "s"}, "spec": {"nodeName": node}})


def node_action(node: str, kind: int, mark: int) -> Action:
    """A node write: bookkeeping (a mark), or a hand-off (a pod created or deleted)."""
    if kind == 0:
        return PatchNode(node, annotations={"mark": str(mark)})
    if kind == 1:
        return pod(node, f"p{mark}")
    return DeletePod("s", f"p{mark}", node)


def skyhook_action(kind: int, mark: int) -> Action:
    """A write about the Skyhook: wide (finalizers, ConfigMaps), a status, or an Event (in
    the lane of the object it names, as `lane_of` says)."""
    return (
        AddFinalizer(f"s{mark}"),
        DeleteConfigMap("s", f"s-pkg-{mark}"),
        RemoveFinalizer(f"s{mark}"),
        PatchSkyhookStatus("s", {"status": {"nodesInProgress": mark}}),
        EmitEvent("Skyhook", "s", "Updated", f"went out {mark}"),
    )[kind]


WIDE = (0, 1, 2)  # the `skyhook_action` kinds that change a Skyhook as a whole


@st.composite
def plans(draw: st.DrawFn, quiet: bool = False) -> Plan:
    """Any plan: node writes and Skyhook-level writes interleaved, some nodes started, some
    released (with `quiet`, no Skyhook-wide action but statuses)."""
    levels = [kind for kind in range(5) if not (quiet and kind in WIDE)]
    entries = draw(
        st.lists(
            st.one_of(
                st.tuples(st.sampled_from(NODES), st.integers(0, 2)),
                st.sampled_from(levels),
            ),
            max_size=14,
        )
    )
    actions = [
        node_action(*entry, mark=i) if isinstance(entry, tuple) else skyhook_action(entry, i)
        for i, entry in enumerate(entries)
    ]
    starting = draw(st.frozensets(st.sampled_from(NODES)))
    releasing = draw(st.frozensets(st.sampled_from(NODES)))
    return Plan(tuple(actions), starting=starting, releasing=releasing)


def sent_actions(order: PlanOrder) -> list[Action]:
    in_order = [
        action
        for step in order.in_order
        for action in (
            [a for lane in step.lanes.values() for a in lane] if isinstance(step, Wave) else [step]
        )
    ]
    queued = [a for lane in order.lanes.values() for a in lane]
    return in_order + queued + list(order.statuses) + list(order.events)


def by_node(actions: Sequence[Action]) -> dict[str | None, list[Action]]:
    nodes: dict[str | None, list[Action]] = {}
    for action in actions:
        nodes.setdefault(lane_of(action), []).append(action)
    return nodes


@settings(max_examples=300, deadline=None)
@given(plans())
def test_every_action_goes_out_once_and_each_nodes_in_plan_order(plan: Plan) -> None:
    order = plan_order(plan)
    sent = sent_actions(order)
    assert sorted(map(repr, sent)) == sorted(map(repr, plan.actions))
    for node, actions in by_node(sent).items():
        if node is not None:
            assert actions == by_node(plan.actions)[node]
    # Everything from the last Skyhook-wide action on is queued, nothing before it is.
    assert not any(skyhook_wide(a) for lane in order.lanes.values() for a in lane)
    assert not any(skyhook_wide(a) for a in order.statuses + order.events)
    assert bool(order.in_order) == plan.needs_quiet


@settings(max_examples=300, deadline=None)
@given(plans())
def test_a_skyhook_level_write_waits_for_the_node_writes_planned_before_it(plan: Plan) -> None:
    """In order, an action of no lane (finalizer, ConfigMap, status) goes out after
    every node write planned before it and before every one planned after it; between two of
    them, the nodes the plan starts go out after the others."""
    order = plan_order(plan)
    step_of: list[tuple[int, Action]] = []  # (step index, action), in the order they go out
    for index, step in enumerate(order.in_order):
        if isinstance(step, Wave):
            assert step.lanes, "an empty wave"
            step_of += [(index, a) for lane in step.lanes.values() for a in lane]
        else:
            step_of.append((index, step))
    in_order = [action for _, action in step_of]
    assert sorted(map(repr, in_order)) == sorted(map(repr, plan.actions[: len(in_order)]))
    planned = list(plan.actions[: len(in_order)])
    steps = [next(i for i, a in step_of if a == action) for action in planned]
    for i, first in enumerate(planned):
        for j in range(i + 1, len(planned)):
            later = planned[j]
            node_first, node_later = lane_of(first), lane_of(later)
            if node_first is None or node_later is None:
                assert steps[i] < steps[j], (first, later)
            elif any(lane_of(a) is None for a in planned[i:j]):
                assert steps[i] < steps[j], (first, later)  # a barrier between them
            elif node_first == node_later:
                assert steps[i] == steps[j]  # one lane, in plan order
            elif (node_first in plan.starting) != (node_later in plan.starting):
                # The node the plan starts goes out after the other.
                starts_later = node_later in plan.starting
                assert (steps[i] < steps[j]) == starts_later, (first, later)


@settings(max_examples=150, deadline=None)
@given(st.lists(plans(quiet=True), max_size=3), plans(), st.randoms(use_true_random=False))
def test_a_status_waits_for_its_plans_hand_offs_and_releases_not_its_starts(
    earlier: list[Plan], plan: Plan, chance: random.Random
) -> None:
    """A plan's queued statuses wait for exactly its queued lanes that release a node or hand
    one it does not start off (pods created or deleted): they go out while its starts and bookkeeping are still
    queued, behind earlier plans or the budget gate, but never before a hand-off or release."""
    schedule = LaneSchedule()
    for before in earlier:
        schedule.queue(plan_order(before).lanes, before.starting, before.releasing)
    order = plan_order(plan)
    queued = schedule.queue(order.lanes, plan.starting, plan.releasing)
    handing_off = {
        lane
        for lane in queued.lanes
        if lane.node in plan.releasing
        or (
            lane.node not in plan.starting
            and any(isinstance(a, CreatePod | DeletePod) for a in lane.actions)
        )
    }
    assert queued.reported == handing_off
    # Send every lane in the schedule's order, finishing them in any order, except the plan's
    # starts and bookkeeping, held back for good: the statuses go out all the same.
    held = set(queued.lanes) - handing_off
    waiting = set(queued.reported)
    out: list[Lane] = []
    while True:
        while (lane := schedule.take()) is not None:
            out.append(lane)
        ready = [lane for lane in out if lane not in held]
        if not ready:
            break
        lane = ready[chance.randrange(len(ready))]
        out.remove(lane)
        assert schedule.done(lane, ok=True) == []
        waiting.discard(lane)
    assert not waiting, "a status waits for a hand-off held behind a start or bookkeeping"
