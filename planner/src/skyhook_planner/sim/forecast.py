"""A rollout forecast: the planner run forward in simulated time over a copy of the cluster.

`forecast` repeats what the operator does, on a `SimCluster` built from the live objects:
plan, apply the plan, and when no pass has anything left to do, let simulated time jump to
the next stage pod's end (each stage takes its estimated duration, an interrupt that reboots
the node `reboot_s`). Pods that are not ours stay where they are unless a drain evicts them,
so a pod matching `podNonInterruptLabels` holds its node forever, as it would if it never
finished. The result says, for one Skyhook, which nodes start in which wave (the nodes whose
first stage pod starts at the same simulated moment), every stage each runs and when, the
nodes that never finish and why, and the total time.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from skyhook_planner.model.actions import CreatePod
from skyhook_planner.model.settings import PlannerSettings
from skyhook_planner.model.snapshot import NodeView, SkyhookView
from skyhook_planner.model.vocabulary import JsonDict
from skyhook_planner.model.waiting import BUDGET, Reason
from skyhook_planner.passes.plan import plan
from skyhook_planner.rules import budget, ordering
from skyhook_planner.sim.cluster import SimCluster
from skyhook_schemas import keys
from skyhook_schemas.nodestate import COMPLETE, ERRORING, IN_PROGRESS
from skyhook_schemas.podpackage import (
    NODE_RESTART,
    InterruptArgumentError,
    decode_interrupt_argument,
    decode_pod_package,
)

# The agent's interrupt type of a merged interrupt that reboots the node.
# Passes at one simulated moment before time moves on anyway (a plan that never settles).
_PASSES_PER_MOMENT = 50
# Timer-only passes (a retry backoff, nothing in flight) before the forecast gives up.
_IDLE_REQUEUES = 5
BUSY = {IN_PROGRESS, ERRORING}


@dataclass(frozen=True)
class Timing:
    """How long things take: observed per (package, stage), else `stage_s`."""

    stage_s: float = 30.0
    reboot_s: float = 120.0
    observed: Mapping[tuple[str, str], float] = field(default_factory=dict)

    def stage(self, package: str, stage: str) -> float:
        return self.observed.get((package, stage), self.stage_s)


@dataclass(frozen=True)
class StageRun:
    node: str
    package: str
    version: str
    stage: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class Wave:
    number: int
    start_s: float
    nodes: tuple[str, ...]
    runs: tuple[StageRun, ...]


@dataclass(frozen=True)
class Blocked:
    node: str
    reason: str  # the first of `reasons`, as the forecast reads it
    started_s: float | None = None  # its first stage began here (it holds a budget slot)
    reasons: tuple[Reason, ...] = ()  # every reason the last pass gave


@dataclass(frozen=True)
class Forecast:
    skyhook: str
    selected: tuple[str, ...]
    already_complete: tuple[str, ...]
    waves: tuple[Wave, ...]
    blocked: tuple[Blocked, ...]
    total_s: float
    ceiling: int

    def to_json(self) -> JsonDict:
        return {
            "skyhook": self.skyhook,
            "selectedNodes": list(self.selected),
            "alreadyComplete": list(self.already_complete),
            "ceiling": self.ceiling,
            "estimatedSeconds": round(self.total_s, 1),
            "waves": [
                {
                    "wave": w.number,
                    "startSeconds": round(w.start_s, 1),
                    "nodes": list(w.nodes),
                    "stages": [
                        {
                            "node": r.node,
                            "package": r.package,
                            "version": r.version,
                            "stage": r.stage,
                            "startSeconds": round(r.start_s, 1),
                            "endSeconds": round(r.end_s, 1),
                        }
                        for r in w.runs
                    ],
                }
                for w in self.waves
            ],
            "blocked": [
                {
                    "node": b.node,
                    "reason": b.reason,
                    "blockers": [r.blocker for r in b.reasons],
                    "startedSeconds": b.started_s,
                }
                for b in self.blocked
            ],
        }


def observed_durations(pods: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], float]:
    """Mean seconds per (package, stage) of our stage pods whose init containers all finished:
    from the first container's start to the last one's end."""
    samples: dict[tuple[str, str], list[float]] = {}
    for pod in pods:
        found = _pod_stage(pod)
        statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
        ended = [(s.get("state") or {}).get("terminated") for s in statuses]
        if found is None or not ended or not all(t and t.get("exitCode") == 0 for t in ended):
            continue
        try:
            begins = [_time(t.get("startedAt")) for t in ended if t]
            ends = [_time(t.get("finishedAt")) for t in ended if t]
        except ValueError:
            continue
        if None in begins or None in ends:
            continue
        begin = min(b for b in begins if b)
        end = max(e for e in ends if e)
        samples.setdefault((found[0], found[2]), []).append((end - begin).total_seconds())
    return {key: sum(values) / len(values) for key, values in samples.items()}


class _Pods:
    """Pods in flight in simulated time: when each ends, and the target Skyhook's stage runs."""

    def __init__(self, skyhook: str, timing: Timing, start: datetime) -> None:
        self.skyhook, self.timing, self.start = skyhook, timing, start
        self.ending: list[tuple[datetime, int, tuple[str, str]]] = []
        self.runs: dict[tuple[str, str], StageRun] = {}
        self.order = itertools.count()  # ties in end time: first created, first finished

    def offset(self, when: datetime) -> float:
        return (when - self.start).total_seconds()

    def expect(
        self, key: tuple[str, str], pod: Mapping[str, Any], begun: datetime, now: datetime
    ) -> None:
        found = _pod_stage(pod)
        package, version, stage = found or ("", "", "")
        seconds = self.timing.reboot_s if _reboots(pod) else self.timing.stage(package, stage)
        done = max(now, begun + timedelta(seconds=seconds))
        heapq.heappush(self.ending, (done, next(self.order), key))
        if found and pod["metadata"].get("labels", {}).get(keys.NAME_LABEL) == self.skyhook:
            node = pod["spec"].get("nodeName", "")
            start, end = self.offset(now), self.offset(done)
            self.runs[key] = StageRun(node, package, version, stage, start, end)

    def finish_next(self, cluster: SimCluster, now: datetime) -> datetime:
        """Jump to the next pod end; finish every pod that ends then."""
        now = max(now, self.ending[0][0])
        while self.ending and self.ending[0][0] <= now:
            _, _, key = heapq.heappop(self.ending)
            _finish(cluster, key, now)
        return now


def forecast(
    cluster: SimCluster,
    skyhook: str,
    *,
    settings: PlannerSettings,
    timing: Timing,
    start: datetime,
    horizon_s: float = 7 * 24 * 3600.0,
) -> Forecast:
    """Run `cluster` forward from `start` until nothing is left to do (or `horizon_s`); the
    cluster is changed in place (pass a copy)."""
    first = cluster.snapshot(start)
    scr = next((s for s in first.skyhooks if s.name == skyhook), None)
    if scr is None:
        raise KeyError(skyhook)
    selected = _selected(scr, first.nodes)
    complete_before = {n for n in selected if _status(cluster, skyhook, n) == COMPLETE}
    pods = _Pods(skyhook, timing, start)
    for key, pod in sorted(cluster.pods.items()):  # stage pods already running
        if _pod_stage(pod) is not None and _unfinished(pod):
            pods.expect(key, pod, _time(pod["metadata"].get("creationTimestamp")) or start, start)

    now, passes, idle = start, 0, 0
    waiting: dict[str, tuple[Reason, ...]] = {}
    while pods.offset(now) <= horizon_s:
        result = plan(cluster.snapshot(now), settings)
        waiting = {node: why for (scr, node), why in result.waiting.items() if scr == skyhook}
        cluster.apply(result.actions)
        for action in result.actions:
            if isinstance(action, CreatePod):
                pods.expect((action.namespace, action.name), action.manifest, now, now)
        passes += 1
        if result.actions and passes < _PASSES_PER_MOMENT:
            continue  # our own writes wake the next pass at once
        passes = 0
        if pods.ending:
            idle = 0
            now = pods.finish_next(cluster, now)
        elif result.requeue_after is not None and idle < _IDLE_REQUEUES:
            idle += 1
            now += timedelta(seconds=result.requeue_after)
        else:
            break
    return _result(
        cluster,
        scr=scr,
        selected=selected,
        complete_before=complete_before,
        runs=pods.runs,
        waiting=waiting,
        now=now,
    )


def _result(
    cluster: SimCluster,
    *,
    scr: SkyhookView,
    selected: list[str],
    complete_before: set[str],
    runs: Mapping[tuple[str, str], StageRun],
    waiting: Mapping[str, tuple[Reason, ...]],
    now: datetime,
) -> Forecast:
    skyhook = scr.name
    final = cluster.snapshot(now)
    scr = next((s for s in final.skyhooks if s.name == skyhook), scr)
    finished = {n for n in selected if _status(cluster, skyhook, n) == COMPLETE}
    by_node: dict[str, list[StageRun]] = {}
    for run in sorted(runs.values(), key=lambda r: (r.start_s, r.end_s, r.node)):
        by_node.setdefault(run.node, []).append(run)
    stuck = [n for n in selected if n not in finished]
    waves = _waves({n: r for n, r in by_node.items() if n in finished})
    ends = [r.end_s for w in waves for r in w.runs]
    return Forecast(
        skyhook=skyhook,
        selected=tuple(selected),
        already_complete=tuple(n for n in selected if n in complete_before),
        waves=waves,
        blocked=tuple(
            Blocked(
                n,
                _why(waiting.get(n, ()), _status(cluster, skyhook, n)),
                by_node[n][0].start_s if n in by_node else None,
                waiting.get(n, ()),
            )
            for n in stuck
        ),
        total_s=max(ends, default=0.0),
        ceiling=budget.ceiling(scr.spec.budget, len(selected)) if scr.spec else 0,
    )


def _waves(by_node: Mapping[str, list[StageRun]]) -> tuple[Wave, ...]:
    starts: dict[float, list[str]] = {}
    for node, node_runs in by_node.items():
        starts.setdefault(node_runs[0].start_s, []).append(node)
    waves = []
    for number, moment in enumerate(sorted(starts), 1):
        nodes = sorted(starts[moment])
        runs = sorted(
            (r for n in nodes for r in by_node[n]), key=lambda r: (r.node, r.start_s, r.end_s)
        )
        waves.append(Wave(number, moment, tuple(nodes), tuple(runs)))
    return tuple(waves)


def _selected(scr: SkyhookView, nodes: Iterable[NodeView]) -> list[str]:
    if scr.spec is None:
        return []
    spec = scr.spec
    matched = [n for n in nodes if spec.node_selector.matches(n.labels)]
    return [n.name for n in sorted(matched, key=ordering.node_order_key)]


def _status(cluster: SimCluster, skyhook: str, node: str) -> str:
    annotations = cluster.nodes[node]["metadata"].get("annotations") or {}
    return str(annotations.get(keys.node_status_key(skyhook), ""))


def _why(reasons: tuple[Reason, ...], status: str) -> str:
    """Why a node never finishes in the forecast: the first reason the last pass gave for it
    (a budget whose slots are held at the end is held for good), else the work it was still
    doing."""
    if reasons:
        first = reasons[0]
        if first.blocker == BUDGET:
            return f"budget: every slot held by nodes that never finish ({', '.join(first.nodes)})"
        return first.message
    if status in BUSY:
        return f"still {status} when the forecast ended"
    return "never admitted"


def _finish(cluster: SimCluster, key: tuple[str, str], now: datetime) -> None:
    pod = cluster.pods.get(key)
    if pod is None:  # deleted meanwhile (a spec change, an eviction)
        return
    if _reboots(pod):
        node = pod["spec"]["nodeName"]
        cluster.reboot(node, f"forecast-{node}-{now.timestamp():.0f}")
    else:
        cluster.finish_pod(key, at=now.strftime("%Y-%m-%dT%H:%M:%SZ"))


def _pod_stage(pod: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """(package, version, stage) of one of our stage or interrupt pods."""
    meta = pod.get("metadata") or {}
    package = decode_pod_package(meta.get("labels") or {}, meta.get("annotations") or {})
    return (package.name, package.version, package.stage) if package else None


def _reboots(pod: Mapping[str, Any]) -> bool:
    """An interrupt pod whose merged interrupt restarts the node (its 4th agent argument)."""
    if keys.INTERRUPT_LABEL not in ((pod.get("metadata") or {}).get("labels") or {}):
        return False
    for container in (pod.get("spec") or {}).get("initContainers") or ():
        args = container.get("args") or []
        try:
            argument = decode_interrupt_argument(args[3])
        except (IndexError, TypeError, InterruptArgumentError):
            continue
        if argument["type"] == NODE_RESTART:
            return True
    return False


def _unfinished(pod: Mapping[str, Any]) -> bool:
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    return not statuses or not all((s.get("state") or {}).get("terminated") for s in statuses)


def _time(text: str | None) -> datetime | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None
