"""Planner speed and rollout efficiency on a large simulated cluster (no API server).

Prints: ms per `plan()` pass over N nodes x P packages (first pass, and mean/p95/max during
the rollout), an incremental pass (`replan` with the last pass's memory) after --changed nodes'
stage pods finished beside a full pass of the same snapshot, the time to build the snapshot
from API-shaped objects, and a simulated rollout's makespan against its lower bound. The simulation is event-driven with zero latency: every pod
runs for exactly --stage-seconds of virtual time, and the planner runs after every change, so
the ratio measures only how well the planner keeps budget slots busy (1.00 = never idles). The
same two passes half-way through a one-package rollout, with the finished pods kept, show what a
quiet pass costs the running operator.

    python benchmarks/planner.py [--nodes 1000] [--budget-percent 10] [--stage-seconds 10]
                                 [--changed 10] [--default-gc] [--passes-only]
"""

from __future__ import annotations

import argparse
import heapq
import math
import statistics
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from skyhook_operator.cli import tune_garbage_collector
from skyhook_planner.model.actions import CreatePod, Plan
from skyhook_planner.model.settings import PlannerSettings
from skyhook_planner.model.snapshot import ClusterSnapshot
from skyhook_planner.passes.memory import PassMemory
from skyhook_planner.passes.plan import plan, replan
from skyhook_planner.sim.cluster import SimCluster, make_node

IMAGE = "ghcr.io/nvidia/skyhook/agentless"


def spec(budget_percent: int) -> dict[str, object]:
    """Four packages: two independent roots, one depending on both, one with a reboot."""
    return {
        "nodeSelectors": {"matchLabels": {"pool": "gpu"}},
        "interruptionBudget": {"percent": budget_percent},
        "podNonInterruptLabels": {"matchLabels": {"critical": "yes"}},
        "packages": {
            "drivers": {"version": "1.0.0", "image": IMAGE, "configMap": {"a.sh": "x"}},
            "tuning": {"version": "2.1.0", "image": IMAGE},
            "toolkit": {
                "version": "1.3.0",
                "image": IMAGE,
                "dependsOn": {"drivers": "1.0.0", "tuning": "2.1.0"},
            },
            "kernel": {"version": "5.4.0", "image": IMAGE, "interrupt": {"type": "reboot"}},
        },
    }


# Stage pods each node needs on its critical path: kernel apply, config, interrupt,
# post-interrupt overlap with drivers/tuning (apply, config) then toolkit (apply, config),
# but the interrupt waits for every other pod on the node: apply+config (roots and kernel in
# parallel), interrupt, then post-interrupt alongside toolkit apply, then toolkit config.
CRITICAL_PATH_STAGES = 5


@dataclass
class Rollout:
    pass_ms: list[float] = field(default_factory=list)
    snapshot_ms: list[float] = field(default_factory=list)
    idle_ms: list[float] = field(default_factory=list)
    peak_busy: int = 0
    makespan_s: float = 0.0
    status: dict[str, object] = field(default_factory=dict)


def simulate(nodes: int, budget_percent: int, stage_seconds: float) -> Rollout:
    sim = SimCluster()
    for i in range(nodes):
        sim.add_node(make_node(f"node-{i:05d}", {"pool": "gpu"}))
    sim.add_skyhook("fleet", spec(budget_percent))
    settings = PlannerSettings()
    start = now = datetime(2026, 1, 1, tzinfo=UTC)
    finishing: list[tuple[datetime, int, tuple[str, str]]] = []  # (when, seq, pod key)
    seq = 0
    out = Rollout()
    while True:
        t0 = time.perf_counter()
        snapshot = sim.snapshot(now)
        t1 = time.perf_counter()
        result = plan(snapshot, settings)
        out.snapshot_ms.append((t1 - t0) * 1000)
        out.pass_ms.append((time.perf_counter() - t1) * 1000)
        sim.apply(result.actions)
        for action in result.actions:
            if isinstance(action, CreatePod):
                seq += 1
                done_at = now + timedelta(seconds=stage_seconds)
                heapq.heappush(finishing, (done_at, seq, (action.namespace, action.name)))
        busy = len({p["spec"]["nodeName"] for p in sim.pods.values()})
        out.peak_busy = max(out.peak_busy, busy)
        if result.actions:
            continue  # our own writes trigger the next pass at once
        if not finishing:
            break
        now = finishing[0][0]
        while finishing and finishing[0][0] == now:
            _, _, key = heapq.heappop(finishing)
            if key in sim.pods:
                sim.finish_pod(key, at=now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    out.makespan_s = (now - start).total_seconds()
    out.status = sim.skyhooks["fleet"]["status"]
    snapshot = sim.snapshot(now)
    for _ in range(
        5
    ):  # a quiet pass on a finished fleet: the cost of an event that changes nothing
        t0 = time.perf_counter()
        plan(snapshot, settings)
        out.idle_ms.append((time.perf_counter() - t0) * 1000)
    return out


def _timed_passes(
    snapshot: ClusterSnapshot,
    settings: PlannerSettings,
    memory: PassMemory | None,
    partial: list[float],
    full: list[float],
) -> tuple[Plan, PassMemory]:
    """One incremental pass then one full pass of `snapshot`, their ms appended to `partial`
    and `full`; exits unless they plan the same. The incremental pass goes first, as in the
    operator: right after a full pass, it would also pay for collecting its garbage."""
    t0 = time.perf_counter()
    result, memory = replan(snapshot, settings, memory)
    t1 = time.perf_counter()
    expected = plan(snapshot, settings)
    t2 = time.perf_counter()
    if result != expected:
        raise SystemExit("the incremental pass planned something else than the full pass")
    partial.append((t1 - t0) * 1000)
    full.append((t2 - t1) * 1000)
    return result, memory


def incremental(nodes: int, budget_percent: int, changed: int) -> tuple[float, float]:
    """Median ms of a full pass and of an incremental pass, each after `changed` nodes' stage
    pods finished, mid-rollout (five rounds), on snapshots that keep unchanged views."""
    sim = SimCluster()
    for i in range(nodes):
        sim.add_node(make_node(f"node-{i:05d}", {"pool": "gpu"}))
    sim.add_skyhook("fleet", spec(budget_percent))
    settings = PlannerSettings()
    now = datetime(2026, 1, 1, tzinfo=UTC)
    at = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    memory = None
    for _ in range(7):  # start the first stages, then one quiet pass to fill the memory
        result, memory = replan(sim.snapshot(now), settings, memory)
        sim.apply(result.actions)
    full, partial = [], []
    for _ in range(5):
        for key in list(sim.pods)[:changed]:
            sim.finish_pod(key, at=at)
        result, memory = _timed_passes(sim.snapshot(now), settings, memory, partial, full)
        sim.apply(result.actions)
        _, memory = replan(sim.snapshot(now), settings, memory)
    return statistics.median(full), statistics.median(partial)


def half_way(nodes: int, budget_percent: int, changed: int) -> tuple[float, float, int]:
    """Median ms of an incremental and a full pass after `changed` nodes' stage pods finished,
    half-way through a one-package rollout (as the operator's rollout benchmark runs it), when
    half the nodes are complete and their finished pods are kept for their logs; and the pods
    the snapshot holds then."""
    sim = SimCluster()
    for i in range(nodes):
        sim.add_node(make_node(f"node-{i:05d}", {"pool": "gpu"}))
    sim.add_skyhook(
        "fleet",
        {
            "nodeSelectors": {"matchLabels": {"pool": "gpu"}},
            "interruptionBudget": {"percent": budget_percent},
            "packages": {"tools": {"version": "1.0.0", "image": IMAGE, "configMap": {"a": "b"}}},
        },
    )
    settings = PlannerSettings()
    now = datetime(2026, 1, 1, tzinfo=UTC)
    memory = None

    def running() -> list[tuple[str, str]]:
        return [k for k, p in sim.pods.items() if p["status"].get("phase") == "Pending"]

    def complete() -> int:
        found = sim.skyhooks["fleet"].get("status", {}).get("nodeStatus", {})
        return sum(status == "complete" for status in found.values())

    while complete() < nodes // 2:
        result, memory = replan(sim.snapshot(now), settings, memory)
        sim.apply(result.actions)
        if not result.actions:  # quiet: the running stages finish 2 s later
            now += timedelta(seconds=2)
            for key in running():
                sim.finish_pod(key, at=now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    full, partial = [], []
    for _ in range(5):
        for key in running()[:changed]:
            sim.finish_pod(key, at=now.strftime("%Y-%m-%dT%H:%M:%SZ"))
        result, memory = _timed_passes(sim.snapshot(now), settings, memory, partial, full)
        sim.apply(result.actions)
        for _ in range(3):  # the passes its writes wake
            result, memory = replan(sim.snapshot(now), settings, memory)
            sim.apply(result.actions)
    return statistics.median(partial), statistics.median(full), len(sim.pods)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--budget-percent", type=int, default=10)
    parser.add_argument("--stage-seconds", type=float, default=10.0)
    parser.add_argument("--changed", type=int, default=10, help="nodes changed before a pass")
    parser.add_argument(
        "--default-gc",
        action="store_true",
        help="keep Python's default collector thresholds instead of the operator's",
    )
    parser.add_argument(
        "--passes-only",
        action="store_true",
        help="only the two single passes, not the simulated rollout (minutes at 5,000 nodes)",
    )
    args = parser.parse_args()
    if not args.default_gc:
        tune_garbage_collector()  # plan() runs under the operator's collector settings
    print(f"nodes={args.nodes} budget={args.budget_percent}%")
    full_ms, incremental_ms = incremental(args.nodes, args.budget_percent, args.changed)
    print(
        f"four packages, first stages running, after {args.changed} nodes' stage pods "
        f"finished: incremental (replan) {incremental_ms:.1f} ms, full (plan) {full_ms:.1f} ms"
    )
    partial_ms, full_ms, pods = half_way(args.nodes, args.budget_percent, args.changed)
    print(
        f"one package, half-way ({pods} pods, finished ones kept for their logs), after "
        f"{args.changed} nodes' stage pods finished: incremental (replan) {partial_ms:.1f} ms, "
        f"full (plan) {full_ms:.1f} ms"
    )
    if not args.passes_only:
        rollout(args.nodes, args.budget_percent, args.stage_seconds)


def rollout(nodes: int, budget_percent: int, stage_seconds: float) -> None:
    """The simulated rollout of four packages, a pass after every change."""
    slots = max(1, int(nodes * (budget_percent / 100.0)))
    run = simulate(nodes, budget_percent, stage_seconds)
    lower = math.ceil(nodes / slots) * CRITICAL_PATH_STAGES * stage_seconds
    first, rest = run.pass_ms[0], run.pass_ms[1:]
    status = run.status
    print(
        f"four packages, budget ceiling {slots}: status={status['status']} "
        f"completeNodes={status['completeNodes']}"
    )
    print(f"passes={len(run.pass_ms)}; plan() first pass: {first:.1f} ms")
    print(
        f"plan() per pass during rollout: mean {statistics.mean(rest):.1f} ms, "
        f"p95 {statistics.quantiles(rest, n=20)[18]:.1f} ms, max {max(rest):.1f} ms"
    )
    print(
        f"plan() quiet pass on the finished fleet: median {statistics.median(run.idle_ms):.1f} ms"
    )
    print(f"snapshot from API objects: mean {statistics.mean(run.snapshot_ms):.1f} ms per pass")
    print(f"peak nodes with pods: {run.peak_busy} (budget {slots})")
    print(
        f"simulated rollout: {run.makespan_s:.0f} s virtual, lower bound {lower:.0f} s, "
        f"ratio {run.makespan_s / lower:.3f}"
    )
    if status["status"] != "complete" or run.peak_busy > slots:
        raise SystemExit("rollout did not complete within its budget")


if __name__ == "__main__":
    main()
