"""Which nodes a plan starts (`Plan.starting`): the writer holds their writes until every node
the plan releases is written, so a watcher never sees more nodes in progress than the budget."""

from __future__ import annotations

from datetime import timedelta

from skyhook_planner.model.actions import PatchNode
from skyhook_planner.sim.driver import Driver, package
from skyhook_schemas import keys

LABELS = {"role": "gpu"}
SPEC = {
    "nodeSelectors": {"matchLabels": LABELS},
    "interruptionBudget": {"count": 2},
    "packages": {"tuning": package()},
}
STATUS = keys.node_status_key("scr")


def status_patches(plan_actions: tuple[object, ...]) -> dict[str, str | None]:
    return {
        a.name: a.annotations[STATUS]
        for a in plan_actions
        if isinstance(a, PatchNode) and STATUS in a.annotations
    }


def test_only_transitions_into_progress_count() -> None:
    d = Driver(3, LABELS)
    d.sim.add_skyhook("scr", SPEC)
    first = d.step()
    assert first.starting == {"node-0000", "node-0001"}
    again = d.step()  # still in progress: not started a second time
    assert again.starting == frozenset()
    for key in d.pending_pods():
        d.sim.finish_pod(key, 0)
    releasing = d.step()  # apply done: config starts, the nodes stay in progress
    assert releasing.starting == frozenset()
    d.run()
    admitting = next(p for p in d.plans if "node-0002" in p.starting)
    assert admitting.starting == {"node-0002"}
    patches = status_patches(admitting.actions)
    assert patches["node-0002"] == "in_progress"
    assert {patches.get("node-0000"), patches.get("node-0001")} <= {"complete", None}


def test_other_status_changes_do_not_count() -> None:
    d = Driver(2, LABELS)
    d.sim.add_skyhook("scr", SPEC, annotations={keys.PAUSE_ANNOTATION: "true"})
    paused = d.step()
    assert set(status_patches(paused.actions).values()) == {"paused"}
    assert paused.starting == frozenset()


def test_a_start_planned_while_a_release_is_still_queued_lands_after_it() -> None:
    """A node released in one pass and another started in the next: the start is planned from
    the snapshot with the release replayed (the slot is free), and goes out behind it."""
    d = Driver(2)
    released_node, late_node = "node-0000", "node-0001"
    d.sim.nodes[released_node]["metadata"]["labels"].update(LABELS)
    d.sim.add_skyhook("scr", {**SPEC, "interruptionBudget": {"count": 1}})
    d.lag = lambda plan: {released_node}  # its writes are always still going out

    def in_budget(driver: Driver) -> None:
        in_progress = [n for n in driver.sim.nodes if driver.node_status("scr", n) == "in_progress"]
        assert len(in_progress) <= 1, f"a watcher sees {in_progress} in progress, budget 1"

    d.mid_write = in_budget
    release_seen = False
    for _ in range(30):
        plan = d.step()
        if release_seen:
            break
        if released_node in plan.releasing:
            release_seen = True  # its release is queued: now the other node joins the selection
            d.sim.nodes[late_node]["metadata"]["labels"].update(LABELS)
        for key in d.pending_pods():
            d.sim.finish_pod(key, 0)
        d.now += timedelta(seconds=1)
    assert release_seen
    assert plan.starting == {late_node}, "planned while the release was still queued"
    d.run()
    assert d.node_status("scr", late_node) == "complete"
