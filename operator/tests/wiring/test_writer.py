"""The writer's queue: what goes out first, what waits for what, what is dropped, and what the
next pass sees while writes are in flight. A stand-in client records requests and can hold
them back or fail them."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, cast

from skyhook_operator.kube.client import ApiError, AsyncKube
from skyhook_operator.kube.statuses import STATUS_BYTES_PER_SECOND
from skyhook_operator.kube.writer import Writer
from skyhook_operator.store import ClusterStore
from skyhook_planner.model.actions import (
    CreatePod,
    DeleteConfigMap,
    EmitEvent,
    EvictPod,
    PatchNode,
    PatchSkyhookStatus,
    Plan,
)
from skyhook_planner.model.lanes import LaneSchedule
from skyhook_planner.sim.driver import Driver

STATUS_KEY = "skyhook.nvidia.com/status_s"


class HeldClient:
    """Answers every request with a minimal object; requests about a held node wait."""

    node_path = staticmethod(AsyncKube.node_path)
    namespaced_path = staticmethod(AsyncKube.namespaced_path)
    skyhook_path = staticmethod(AsyncKube.skyhook_path)

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []  # (method, path) in the order they went out
        self.bodies: list[Any] = []  # the body of each request in `sent`
        self.asked: list[str] = []  # the path of every request, held or failed ones too
        self.held: dict[str, asyncio.Event] = {}
        self.waiting: set[str] = set()  # held nodes with a request waiting
        self.failing: set[str] = set()  # nodes whose requests the apiserver answers 500
        self.skyhook_status = ""  # a string the answers to Skyhook writes carry as their status

    def hold(self, node: str) -> asyncio.Event:
        self.held[node] = asyncio.Event()
        return self.held[node]

    async def request(self, method: str, path: str, body: Any = None, *_: Any, **__: Any) -> Any:
        self.asked.append(path)
        for node, gate in self.held.items():
            if f"/{node}" in path or (isinstance(body, dict) and _pod_node(body) == node):
                self.waiting.add(node)
                await asyncio.wait_for(gate.wait(), 10)
        if any(f"/{node}" in path for node in self.failing):
            raise ApiError(500, "etcd timeout", method, path)
        self.sent.append((method, path))
        self.bodies.append(body)
        name = path.rstrip("/").split("/")[-1]
        answer = {"metadata": {"name": name, "namespace": "skyhook", "resourceVersion": "7"}}
        if "/skyhooks/" in path and self.skyhook_status:
            answer["status"] = {"padding": self.skyhook_status}
        return answer

    def paths(self) -> list[str]:
        return [path for _, path in self.sent]

    def marks(self, node: str) -> list[str]:
        """The status annotation values written to `node`, in order."""
        return [
            body["metadata"]["annotations"][STATUS_KEY]
            for (_, path), body in zip(self.sent, self.bodies, strict=True)
            if path == f"/api/v1/nodes/{node}/status"
        ]


async def eventually(check: Callable[[], object], seconds: float, what: str) -> Any:
    """`check()` once it is truthy; AssertionError naming `what` after `seconds`."""
    stop = time.monotonic() + seconds
    while not (found := check()):
        if time.monotonic() > stop:
            raise AssertionError(f"not within {seconds} s: {what}")
        await asyncio.sleep(0.02)
    return found


async def stays_false(check: Callable[[], object], seconds: float) -> None:
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        assert not check()
        await asyncio.sleep(0.02)


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


def _pod_node(body: dict[str, Any]) -> str:
    return str((body.get("spec") or {}).get("nodeName") or "")


def _pod(node: str) -> CreatePod:
    return CreatePod(
        {
            "metadata": {"name": f"pod-{node}", "namespace": "skyhook", "labels": {}},
            "spec": {"nodeName": node},
        }
    )


def _mark(node: str, value: str = "in_progress") -> PatchNode:
    return PatchNode(node, annotations={STATUS_KEY: value})


def _writer(client: HeldClient, concurrency: int = 4) -> Writer:
    kube = cast(AsyncKube, client)
    return Writer(kube, ClusterStore(), lambda action: None, concurrency)


async def _closed(writer: Writer) -> None:
    assert await writer.close(5.0)


async def _blocked_writer(client: HeldClient) -> tuple[Writer, asyncio.Event]:
    """A writer with one worker, taken by a node whose writes wait until the gate is set:
    whatever is submitted meanwhile queues behind it, in the writer's own order."""
    gate = client.hold("blocker")
    writer = _writer(client, concurrency=1)
    writer.submit(Plan((_mark("blocker"),)))
    await eventually(lambda: "blocker" in client.waiting, 10, "the blocker going out")
    return writer, gate


def test_submit_returns_at_once_and_a_nodes_writes_are_in_flight_until_done() -> None:
    async def scenario() -> None:
        client = HeldClient()
        gate = client.hold("n1")
        writer = _writer(client)
        reports: list[bool] = []
        writer.on_written = reports.append
        result = writer.submit(Plan((_mark("n1"), _pod("n1"), _mark("n2"))))
        assert result.queued == 3
        await eventually(lambda: "/api/v1/nodes/n2/status" in client.paths(), 10, "n2 written")
        assert writer.pending_writes().keys() == {"n1"}, "n1's writes are held, n2's are done"
        assert writer.in_flight
        await eventually(lambda: reports == [False], 10, "n2's writes reported done")
        gate.set()
        await eventually(lambda: not writer.in_flight, 10, "n1 written")
        assert reports == [False, False]
        assert client.paths().index("/api/v1/nodes/n1/status") < client.paths().index(
            "/api/v1/namespaces/skyhook/pods"
        ), "a node's patch goes before its pod"
        await _closed(writer)

    run(scenario)


def test_a_node_the_plan_starts_waits_for_the_nodes_it_releases() -> None:
    async def scenario() -> None:
        client = HeldClient()
        gate = client.hold("done")
        writer = _writer(client)
        plan = Plan(
            (_mark("done", "complete"), _mark("next"), _pod("next")),
            starting=frozenset({"next"}),
            releasing=frozenset({"done"}),
        )
        writer.submit(plan)
        assert writer.pending_writes().keys() == {"done", "next"}
        await stays_false(lambda: any("next" in p for p in client.paths()), 0.5)
        gate.set()
        await eventually(lambda: not writer.in_flight, 10, "both written")
        paths = client.paths()
        assert paths.index("/api/v1/nodes/done/status") < paths.index("/api/v1/nodes/next/status")
        await _closed(writer)

    run(scenario)


def test_a_nodes_writes_are_pending_until_their_lane_is_written_or_has_failed() -> None:
    async def scenario() -> None:
        client = HeldClient()
        written, failing = client.hold("n1"), client.hold("n2")
        client.failing.add("n2")
        writer = _writer(client)
        first, second, pod, other = _mark("n1", "waiting"), _mark("n1"), _pod("n1"), _mark("n2")
        writer.submit(Plan((first, other)))
        writer.submit(Plan((second, pod)))
        # What the next snapshot replays: each node's writes in the order they were decided.
        assert writer.pending_writes() == {"n1": (first, second, pod), "n2": (other,)}
        failing.set()
        await eventually(lambda: "n2" not in writer.pending_writes(), 10, "n2 failed")
        assert writer.pending_writes() == {"n1": (first, second, pod)}
        written.set()
        await eventually(lambda: not writer.pending_writes(), 10, "n1 written")
        await _closed(writer)

    run(scenario)


def test_a_status_goes_out_after_its_plan_and_is_pending_until_then() -> None:
    async def scenario() -> None:
        client = HeldClient()
        gate = client.hold("n1")
        writer = _writer(client)
        status = PatchSkyhookStatus("s", {"status": "in_progress"})
        writer.submit(Plan((_mark("n1", "complete"), status), releasing=frozenset({"n1"})))
        assert writer.pending_statuses() == {"s": [{"status": "in_progress"}]}
        await stays_false(lambda: any("skyhooks" in p for p in client.paths()), 0.5)
        gate.set()
        await writer.drain()  # waits for the status too
        assert client.paths()[-1].endswith("/skyhooks/s/status")
        assert writer.pending_statuses() == {}
        await _closed(writer)

    run(scenario)


def test_a_status_waits_for_its_hand_offs_and_not_for_its_starts_or_bookkeeping() -> None:
    async def scenario() -> None:
        client = HeldClient()
        held = [client.hold("started"), client.hold("w1")]
        writer = _writer(client)
        status = PatchSkyhookStatus("s", {"status": "in_progress"})
        plan = Plan(
            (
                _mark("handoff"),
                _pod("handoff"),
                _mark("started"),
                _pod("started"),
                _mark("w1", "waiting"),
                status,
            ),
            starting=frozenset({"started"}),
        )
        writer.submit(plan)
        status_path = "/apis/skyhook.nvidia.com/v1alpha1/skyhooks/s/status"
        await eventually(
            lambda: status_path in client.paths(),
            3,  # well before the held writes give up (10 s)
            "the status written while the start and the waiting mark are held back",
        )
        assert {"started", "w1"} <= client.waiting
        paths = client.paths()
        assert paths.index("/api/v1/namespaces/skyhook/pods") < paths.index(status_path), (
            "after the hand-off's pod"
        )
        for gate in held:
            gate.set()
        await _closed(writer)

    run(scenario)


def test_hand_offs_go_out_before_bookkeeping_queued_ahead_of_them() -> None:
    async def scenario() -> None:
        client = HeldClient()
        writer, gate = await _blocked_writer(client)
        waiting = tuple(_mark(f"w{i}", "waiting") for i in range(5))
        writer.submit(Plan((*waiting, _mark("handoff"), _pod("handoff"))))
        gate.set()
        await eventually(lambda: not writer.in_flight, 10, "everything written")
        after_blocker = client.paths()[1:]
        assert after_blocker[:2] == [
            "/api/v1/nodes/handoff/status",
            "/api/v1/namespaces/skyhook/pods",
        ], after_blocker
        await _closed(writer)

    run(scenario)


def test_a_nodes_lanes_go_out_in_submission_order_and_other_nodes_pass_them() -> None:
    async def scenario() -> None:
        client = HeldClient()
        gate = client.hold("n1")
        writer = _writer(client, concurrency=2)
        writer.submit(Plan((_mark("n1", "waiting"),)))
        await eventually(lambda: "n1" in client.waiting, 10, "n1's first lane going out")
        # More urgent than n1's first lane (a hand-off), yet planned on top of it.
        writer.submit(Plan((_mark("n1"), _pod("n1"))))
        writer.submit(Plan((_mark("n3"), _pod("n3"))))
        await eventually(lambda: client.marks("n3"), 10, "n3 written while n1 is held")
        assert client.asked.count("/api/v1/nodes/n1/status") == 1, "n1's second lane waits"
        gate.set()
        await eventually(lambda: not writer.in_flight, 10, "everything written")
        assert client.marks("n1") == ["waiting", "in_progress"]
        await _closed(writer)

    run(scenario)


def test_a_node_goes_out_as_urgently_as_the_most_urgent_of_its_lanes() -> None:
    async def scenario() -> None:
        client = HeldClient()
        writer, gate = await _blocked_writer(client)
        writer.submit(Plan(tuple(_mark(f"w{i}", "waiting") for i in range(5))))
        writer.submit(Plan((_mark("x", "waiting"),)))  # bookkeeping, behind the others
        writer.submit(Plan((_mark("x"), _pod("x"))))  # a hand-off behind x's bookkeeping
        gate.set()
        await eventually(lambda: not writer.in_flight, 10, "everything written")
        assert client.paths()[1:4] == [
            "/api/v1/nodes/x/status",
            "/api/v1/nodes/x/status",
            "/api/v1/namespaces/skyhook/pods",
        ], client.paths()
        assert client.marks("x") == ["waiting", "in_progress"]
        await _closed(writer)

    run(scenario)


def test_a_failed_lane_drops_what_its_node_has_queued_and_what_was_planned_on_it() -> None:
    async def scenario() -> None:
        client = HeldClient()
        gate = client.hold("n1")
        client.failing.add("n1")
        writer = _writer(client)
        reports: list[bool] = []
        writer.on_written = reports.append
        writer.submit(Plan((_mark("n1", "waiting"),)))
        status = PatchSkyhookStatus("s", {"completeNodes": "0/1"})
        writer.submit(Plan((_mark("n1"), _pod("n1"), status)))
        assert writer.pending_writes().keys() == {"n1"}  # what the next pass plans from
        gate.set()
        await eventually(lambda: reports, 10, "n1's failure reported")
        assert reports == [True]
        # The dropped lane counts as done: its plan's status goes out.
        await asyncio.wait_for(writer.drain(), 5)
        assert not any(path.endswith("/pods") for path in client.asked), "the pod is not sent"
        assert client.asked.count("/api/v1/nodes/n1/status") == 1

        # Planned from the listing above, which still showed the failed write: dropped.
        assert writer.submit(Plan((_mark("n1", "complete"),))).queued == 0
        assert reports == [True, True]
        assert not writer.in_flight
        assert writer.pending_writes() == {}
        # Planned from a listing taken after the failure: goes out.
        client.failing.clear()
        assert writer.submit(Plan((_mark("n1", "complete"),))).queued == 1
        await asyncio.wait_for(writer.drain(), 5)
        assert client.marks("n1") == ["complete"]
        assert reports == [True, True, False]
        await _closed(writer)

    run(scenario)


def test_a_start_waits_for_the_releases_of_earlier_plans_and_holds_its_node_back() -> None:
    async def scenario() -> None:
        client = HeldClient()
        gate = client.hold("done")
        writer = _writer(client)
        writer.submit(Plan((_mark("done", "complete"),), releasing=frozenset({"done"})))
        start = (_mark("next"), _pod("next"))
        writer.submit(Plan(start, starting=frozenset({"next"})))
        later = _mark("next", "complete")
        writer.submit(Plan((later, _mark("other"))))
        await eventually(lambda: client.marks("other"), 10, "a node that does not start")
        listed = writer.pending_writes()["next"]
        assert listed == (*start, later) and all(
            a is b for a, b in zip(listed, (*start, later), strict=True)
        ), "a start waiting for its gate is listed, and so is what its node queued after it"
        await stays_false(lambda: any("next" in p for p in client.asked), 0.5)
        gate.set()
        await eventually(lambda: not writer.in_flight, 10, "everything written")
        paths = client.paths()
        assert paths.index("/api/v1/nodes/done/status") < paths.index("/api/v1/nodes/next/status")
        assert client.marks("next") == ["in_progress", "complete"]
        await _closed(writer)

    run(scenario)


def test_written_starts_are_freed_without_waiting_for_the_cycle_collector() -> None:
    """The operator runs the oldest collector generation rarely: what a gate held must not
    be left in a reference cycle, or every start's pod manifest stays in memory for long."""

    async def scenario() -> None:
        client = HeldClient()
        gate = client.hold("done")
        writer = _writer(client)
        writer.submit(Plan((_mark("done", "complete"),), releasing=frozenset({"done"})))
        pod = _pod("next")
        freed = weakref.ref(pod)
        writer.submit(Plan((_mark("next"), pod), starting=frozenset({"next"})))
        del pod
        gate.set()
        await eventually(lambda: not writer.in_flight, 10, "everything written")
        await _closed(writer)
        assert freed() is None, "the start's actions are still referenced once written"

    gc.disable()
    try:
        run(scenario)
    finally:
        gc.enable()


def test_a_start_is_dropped_when_a_release_before_it_failed() -> None:
    async def scenario() -> None:
        client = HeldClient()
        gate = client.hold("done")
        client.failing.add("done")
        writer = _writer(client)
        reports: list[bool] = []
        writer.on_written = reports.append
        writer.submit(Plan((_mark("done", "complete"),), releasing=frozenset({"done"})))
        writer.submit(Plan((_mark("next"), _pod("next")), starting=frozenset({"next"})))
        gate.set()
        await asyncio.wait_for(writer.drain(), 5)
        assert not any("next" in p or p.endswith("/pods") for p in client.asked)
        assert True in reports
        assert writer.pending_writes() == {}
        await _closed(writer)

    run(scenario)


def test_a_skyhook_wide_plan_sends_its_barrier_after_the_lanes_before_it() -> None:
    """`apply`: the lanes planned before a Skyhook-wide action are written before it, the node
    the plan starts after the others; the lanes after it are queued."""

    async def scenario() -> None:
        client = HeldClient()
        gate = client.hold("done")
        writer = _writer(client)
        plan = Plan(
            (
                _mark("next"),
                _mark("done", "complete"),
                DeleteConfigMap("skyhook", "old"),
                _mark("n3"),
            ),
            starting=frozenset({"next"}),
            releasing=frozenset({"done"}),
        )
        applying = asyncio.create_task(writer.apply(plan))
        await eventually(lambda: "done" in client.waiting, 10, "the release going out")
        await stays_false(client.paths, 0.3)  # the start waits for the release
        gate.set()
        result = await asyncio.wait_for(applying, 5)
        assert result.ok and result.queued == 1
        await asyncio.wait_for(writer.drain(), 5)
        assert client.paths() == [
            "/api/v1/nodes/done/status",
            "/api/v1/nodes/next/status",
            "/api/v1/namespaces/skyhook/configmaps/old",
            "/api/v1/nodes/n3/status",
        ]
        await _closed(writer)

    run(scenario)


def test_a_skyhook_wide_plan_stops_at_its_first_failed_write() -> None:
    """`apply`: after a failed lane nothing later in order goes out (not the plan's starts, not
    its barrier) and nothing is queued; the next pass re-plans from what landed."""

    async def scenario() -> None:
        client = HeldClient()
        client.failing.add("done")
        writer = _writer(client)
        plan = Plan(
            (
                _mark("next"),
                _mark("done", "complete"),
                DeleteConfigMap("skyhook", "old"),
                _mark("n3"),
            ),
            starting=frozenset({"next"}),
            releasing=frozenset({"done"}),
        )
        result = await asyncio.wait_for(writer.apply(plan), 5)
        assert not result.ok and result.queued == 0
        assert client.asked == ["/api/v1/nodes/done/status"]
        assert not writer.in_flight and writer.queue_depth == 0
        await _closed(writer)

    run(scenario)


def test_pending_writes_are_the_submitted_actions_until_their_lane_is_done() -> None:
    async def scenario() -> None:
        client = HeldClient()
        first_gate, second_gate = client.hold("n1"), client.hold("n2")
        writer = _writer(client)
        first, pod, other = _mark("n1"), _pod("n1"), _mark("n2")
        writer.submit(Plan((first, pod, other)))

        def same(listed: tuple[object, ...], wanted: tuple[object, ...]) -> bool:
            return len(listed) == len(wanted) and all(
                a is b for a, b in zip(listed, wanted, strict=True)
            )

        listed = writer.pending_writes()
        assert same(listed["n1"], (first, pod)) and same(listed["n2"], (other,))
        again = writer.pending_writes()
        assert same(again["n1"], listed["n1"]) and same(again["n2"], listed["n2"])
        second_gate.set()
        await eventually(lambda: "n2" not in writer.pending_writes(), 10, "n2 written")
        assert same(writer.pending_writes()["n1"], listed["n1"]), "n1 did not change"
        first_gate.set()
        await eventually(lambda: not writer.pending_writes(), 10, "n1 written")
        await _closed(writer)

    run(scenario)


def test_statuses_of_passes_close_together_are_one_write() -> None:
    async def scenario() -> None:
        client = HeldClient()
        gate = client.hold("n1")
        writer = _writer(client)
        writer.submit(Plan((_mark("n1"), PatchSkyhookStatus("s", {"nodesInProgress": 1}))))
        writer.submit(Plan((PatchSkyhookStatus("s", {"completeNodes": "1/2"}),)))
        assert writer.pending_statuses() == {
            "s": [{"nodesInProgress": 1}, {"completeNodes": "1/2"}]
        }
        gate.set()
        await writer.drain()
        assert [p for p in client.paths() if "skyhooks" in p] == [
            "/apis/skyhook.nvidia.com/v1alpha1/skyhooks/s/status"
        ]
        await _closed(writer)

    run(scenario)


def test_a_change_of_phase_is_not_held_back_by_the_status_interval() -> None:
    async def scenario() -> None:
        client = HeldClient()
        writer = _writer(client)

        def status_writes() -> int:
            return sum("skyhooks" in p for p in client.paths())

        writer.submit(Plan((PatchSkyhookStatus("s", {"completeNodes": "1/2"}),)))
        await writer.drain()
        writer.submit(Plan((PatchSkyhookStatus("s", {"status": "in_progress"}),)))
        await eventually(lambda: status_writes() == 2, 0.5, "the phase change written at once")
        writer.submit(Plan((PatchSkyhookStatus("s", {"completeNodes": "2/2"}),)))
        await stays_false(lambda: status_writes() == 3, 0.5)  # progress waits out the interval
        await writer.drain()
        assert status_writes() == 3
        await _closed(writer)

    run(scenario)


def test_a_large_skyhooks_progress_is_written_less_often() -> None:
    async def scenario() -> None:
        client = HeldClient()
        client.skyhook_status = "x" * (3 * STATUS_BYTES_PER_SECOND)  # written every 3 s
        writer = _writer(client)

        def status_writes() -> int:
            return sum("skyhooks" in p for p in client.paths())

        writer.submit(Plan((PatchSkyhookStatus("s", {"completeNodes": "1/2"}),)))
        await eventually(lambda: status_writes() == 1, 0.5, "the first status written")
        writer.submit(Plan((PatchSkyhookStatus("s", {"completeNodes": "2/3"}),)))
        await stays_false(lambda: status_writes() == 2, 2.0)  # past the 1 s of a small one
        await eventually(lambda: status_writes() == 2, 2.0, "the progress written by 3 s")
        await _closed(writer)

    run(scenario)


def test_close_gives_up_on_writes_the_apiserver_never_answers() -> None:
    async def scenario() -> None:
        client = HeldClient()
        client.hold("n1")  # never answered
        writer = _writer(client)
        writer.submit(Plan((_mark("n1"),)))
        await eventually(lambda: "n1" in client.waiting, 10, "n1 going out")
        started = time.monotonic()
        assert not await writer.close(0.3)
        assert time.monotonic() - started < 2

    run(scenario)


def test_the_writer_sends_in_the_schedule_the_planners_driver_checks() -> None:
    """The planner's budget and incremental property tests drive `sim.driver.Driver`: they
    check what the writer sends only while both take their order from one `LaneSchedule`."""
    writer = _writer(HeldClient())
    assert type(writer._schedule) is LaneSchedule
    assert type(Driver().schedule) is LaneSchedule


def test_the_queue_depth_counts_what_is_not_sent_yet_statuses_included() -> None:
    async def scenario() -> None:
        client = HeldClient()
        gate = client.hold("n2")
        writer = _writer(client)
        status = PatchSkyhookStatus("s", {"status": "in_progress"})
        writer.submit(Plan((_mark("n1"), status)))  # its status goes once n1 is written
        writer.submit(Plan((_mark("n2"), _pod("n2"))))  # held: both actions stay queued
        await eventually(
            lambda: "/apis/skyhook.nvidia.com/v1alpha1/skyhooks/s/status" in client.paths(),
            10,
            "the first plan's status written",
        )
        assert writer.queue_depth == 1, "n2's pod, not attempted yet (its patch is going out)"
        gate.set()
        await eventually(lambda: writer.queue_depth == 0, 10, "everything sent")
        await _closed(writer)

    run(scenario)


def test_a_lane_that_only_hands_pods_to_the_evictor_wakes_no_pass() -> None:
    """Pods handed to the evictor and Events change nothing a pass reads (the evictor wakes
    the reconciler itself once a pod is gone or refused): a drain that waits is not planned
    again at once after every pass, pass after pass."""

    async def scenario() -> None:
        client = HeldClient()
        handed: list[EvictPod] = []
        writer = Writer(cast(AsyncKube, client), ClusterStore(), handed.append, 4)
        reports: list[bool] = []
        writer.on_written = reports.append
        evict = EvictPod("default", "web", "n1")
        said = EmitEvent("Node", "n1", "Drain", "draining node [n1]")
        writer.submit(Plan((evict, said)))
        await eventually(lambda: handed, 5, "the pod handed to the evictor")
        await asyncio.wait_for(writer.drain(), 5)
        await stays_false(lambda: reports, 0.3)

        # A node write reports, also when a quiet lane of its node went out after it.
        gate = client.hold("n1")
        writer.submit(Plan((_mark("n1"),)))
        writer.submit(Plan((evict,)))
        gate.set()
        await eventually(lambda: reports, 5, "the node write reported")
        await asyncio.wait_for(writer.drain(), 5)
        assert reports == [False]
        assert len(handed) == 2
        await _closed(writer)

    run(scenario)
