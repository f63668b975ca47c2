"""Drive the planner against the in-memory cluster: plan, apply, let pods finish, repeat. For
the planner's tests, the operator's metric tests and the planner benchmark."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from skyhook_planner.model.actions import Action, PatchSkyhookStatus, Plan
from skyhook_planner.model.lanes import Lane, LaneSchedule, Step, Wave, plan_order
from skyhook_planner.model.replay import NodeReplay, StatusReplay
from skyhook_planner.model.settings import PlannerSettings
from skyhook_planner.model.snapshot import ClusterSnapshot
from skyhook_planner.passes.plan import plan
from skyhook_planner.sim.cluster import SimCluster, make_node
from skyhook_schemas import keys
from skyhook_schemas.nodestate import decode_entries
from skyhook_schemas.podpackage import decode_pod_package

SETTINGS = PlannerSettings(retry_backoff_base_s=1.0, retry_backoff_max_s=4.0)
START = datetime(2026, 1, 1, tzinfo=UTC)


def package(version: str = "1.0.0", **extra: Any) -> dict[str, Any]:
    return {"version": version, "image": "ghcr.io/nvidia/skyhook/agentless", **extra}


def pod_stage(pod: Mapping[str, Any]) -> tuple[str, str, str]:
    """(node, package|version, stage) of a pod we created."""
    meta = pod["metadata"]
    package = decode_pod_package(meta["labels"], meta["annotations"])
    assert package is not None, f"{meta['name']} is not one of our pods"
    return pod["spec"]["nodeName"], package.key, package.stage


class Driver:
    def __init__(
        self,
        nodes: int = 3,
        labels: Mapping[str, str] | None = None,
        settings: PlannerSettings = SETTINGS,
    ) -> None:
        self.sim = SimCluster()
        self.settings = settings
        self.now = START
        for i in range(nodes):
            created = (START - timedelta(days=1, seconds=nodes - i)).strftime("%Y-%m-%dT%H:%M:%SZ")
            self.sim.add_node(make_node(f"node-{i:04d}", labels or {}, created))
        self.plans: list[Plan] = []
        self.planner: Callable[[ClusterSnapshot, PlannerSettings], Plan] = plan
        # Picks, after each pass, the nodes whose writes are still going out when the next
        # pass plans (as the operator's writer lets them); None: every write lands at once.
        self.lag: Callable[[Plan], set[str]] | None = None
        # Called while a pass's writes are out and the previous pass's late ones are not yet.
        self.mid_write: Callable[[Driver], None] | None = None
        self.schedule = LaneSchedule()  # the writer's (model/lanes.py)
        self._out: list[Lane] = []  # lanes sent and not landed yet: still going out
        # Each plan's statuses with the lanes they wait for not landed yet, oldest plan first.
        self._statuses: list[tuple[set[Lane], tuple[PatchSkyhookStatus, ...]]] = []
        self._replay = NodeReplay()
        self._status_replay = StatusReplay()

    def step(self) -> Plan:
        # As the operator's reconciler: the pass plans from the cluster with the writes still
        # going out replayed onto it.
        pending: dict[str, list[Mapping[str, Any]]] = {}
        for _, statuses in self._statuses:
            for status in statuses:
                pending.setdefault(status.name, []).append(status.patch)
        snapshot = self._status_replay.apply(self.sim.snapshot(self.now), pending)
        snapshot = self._replay.apply(snapshot, self.schedule.listed())
        result = self.planner(snapshot, self.settings)
        self.plans.append(result)
        # As the operator's writer, in the order `plan_order` and the schedule give.
        order = plan_order(result)
        if order.in_order:
            self._land_all()  # as the reconciler does: wait for the writes in flight first
        for step in order.in_order:  # as the writer's `apply`: nothing else in flight
            self.sim.apply(_actions(step))
        # The lanes of the nodes `lag` picks are still going out when the next pass plans.
        late = self.lag(result) if self.lag else set()
        queued = self.schedule.queue(order.lanes, result.starting, result.releasing)
        self._statuses.append((queued.reported, order.statuses))
        self.sim.apply(order.events)
        sent, self._out = self._out, []
        self._send(late)
        self._write_statuses()
        if self.mid_write is not None and sent:
            self.mid_write(self)
        for lane in sent:  # the previous pass's late lanes land while this one is written
            self._land(lane)
        self._send(late)  # and what they held back (starts behind releases) goes out
        return result

    def _send(self, late: set[str]) -> None:
        """Send every lane the schedule has ready: those of `late` nodes stay out, the others
        land at once (and may let more go)."""
        while (lane := self.schedule.take()) is not None:
            if lane.node in late:
                self._out.append(lane)
            else:
                self._land(lane)

    def _land(self, lane: Lane) -> None:
        self.sim.apply(lane.actions)
        self.schedule.done(lane, ok=True)
        for awaited, _ in self._statuses:
            awaited.discard(lane)
        self._write_statuses()

    def _write_statuses(self) -> None:
        """As the writer's status task: one plan's statuses after another, each once the
        lanes it waits for have landed."""
        while self._statuses and not self._statuses[0][0]:
            _, statuses = self._statuses.pop(0)
            self.sim.apply(statuses)

    def _land_all(self) -> None:
        sent, self._out = self._out, []
        for lane in sent:
            self._land(lane)
        self._send(late=set())

    def pending_pods(self) -> list[tuple[str, str]]:
        return [
            k
            for k, p in self.sim.pods.items()
            if "initContainerStatuses" not in p.get("status", {})
        ]

    def run(
        self,
        max_steps: int = 200,
        exit_code: Callable[[Mapping[str, Any]], int] = lambda pod: 0,
        finish: Callable[[list[tuple[str, str]]], list[tuple[str, str]]] = lambda pods: pods,
        on_step: Callable[[Driver], None] = lambda d: None,
        replan: bool = False,
    ) -> int:
        """Plan until nothing changes; after each pass `finish` picks which pending pods finish."""
        for count in range(max_steps):
            result = self.step()
            on_step(self)
            if replan:  # an operator restart right after the pass: plans again from the same state
                self.step()
                on_step(self)
            pending = self.pending_pods()
            quiet = not (result.actions or pending or self.schedule.busy)
            if quiet:
                if result.requeue_after is None:
                    return count
                self.now += timedelta(seconds=result.requeue_after)
                continue
            for key in finish(pending):
                code = exit_code(self.sim.pods[key])
                at = self.now.strftime("%Y-%m-%dT%H:%M:%SZ")
                self.sim.finish_pod(key, code, at=at, failed_phase=True)
            self.now += timedelta(seconds=1)
        raise AssertionError(f"no steady state after {max_steps} passes")

    # --- reading results --------------------------------------------------------------------

    def entries(self, scr: str, node: str) -> dict[str, tuple[str, str]]:
        raw = self.sim.nodes[node]["metadata"]["annotations"].get(keys.node_state_key(scr))
        return {k: (e.stage, e.state) for k, e in decode_entries(raw).items()}

    def node_status(self, scr: str, node: str) -> str | None:
        status = self.sim.nodes[node]["metadata"]["annotations"].get(keys.node_status_key(scr))
        return str(status) if status is not None else None

    def stages_run(self, node: str | None = None) -> list[tuple[str, str, str]]:
        runs = [
            pod_stage(p)
            for p in self.sim.created_pods
            if keys.HEALTH_CHECK_LABEL not in p["metadata"]["labels"]
        ]
        return [r for r in runs if node is None or r[0] == node]

    def status(self, scr: str) -> dict[str, Any]:
        return dict(self.sim.skyhooks[scr]["status"])


def _actions(step: Step) -> tuple[Action, ...]:
    """A step's actions: a wave's lanes (they land at once here) or one Skyhook-level action."""
    if isinstance(step, Wave):
        return tuple(action for lane in step.lanes.values() for action in lane)
    return (step,)
