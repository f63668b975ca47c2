"""What the operator reports about the cluster, as plain data: metric families and samples.

`skyhook_families(snapshot)` gives upstream's gauges (same names, labels and meaning) for
every Skyhook in the snapshot; the exporter replaces all of its series with them after each
pass, so a deleted Skyhook, a removed package version or a compartment that no longer exists
simply has no series. `handoff_delays(snapshot, plan, created_at)` measures how long each
node waited between a stage pod finishing and the next stage pod of the same Skyhook being
created. `held_family(plan)` counts the nodes waiting on a maintenance window or an alert,
`waiting_family(plan)` every waiting node by the blocker that holds it.
All are pure: the exporter lives outside the core.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from skyhook_planner import podbuilder
from skyhook_planner.model import nodestate
from skyhook_planner.model.actions import CreatePod, Plan, lane_of
from skyhook_planner.model.snapshot import (
    ClusterSnapshot,
    NodeView,
    PodView,
    PolicyView,
    SkyhookView,
)
from skyhook_planner.rules import results
from skyhook_schemas import keys
from skyhook_schemas.nodestate import STAGES, STATES, STATUSES, UNKNOWN
from skyhook_schemas.status import CompartmentStatus

# A Skyhook without a deploymentPolicy rolls out as one fixed-strategy compartment.
LEGACY_POLICY = "legacy"
FIXED_STRATEGY = "fixed"

SKYHOOK = ("skyhook_name",)
PACKAGE = ("skyhook_name", "package_name", "package_version")
ROLLOUT = ("skyhook_name", "policy_name", "compartment_name", "strategy")


@dataclass(frozen=True)
class Sample:
    """One series: its label values, in the family's label order, and its value."""

    labels: tuple[str, ...]
    value: float


@dataclass(frozen=True)
class Family:
    """A gauge family: name, help text, label names and every series it has now."""

    name: str
    help: str
    labels: tuple[str, ...]
    samples: tuple[Sample, ...] = ()


@dataclass(frozen=True)
class Compartment:
    """The rollout label values of one compartment of a Skyhook."""

    policy: str
    name: str
    strategy: str


# (name, help, labels) of every family, in the order they are exposed.
_FAMILIES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "skyhook_status",
        "1 for the Skyhook's current status, 0 for every other status",
        (*SKYHOOK, "status"),
    ),
    ("skyhook_node_status_count", "Nodes of the Skyhook per node status", (*SKYHOOK, "status")),
    ("skyhook_node_target_count", "Nodes the Skyhook's nodeSelector matches", SKYHOOK),
    (
        "skyhook_admin_cordoned_nodes",
        "Nodes the Skyhook selects that someone else cordoned (no Skyhook's cordon marker): "
        "left cordoned after the rollout",
        SKYHOOK,
    ),
    (
        "skyhook_package_state_count",
        "Nodes per state of this package version",
        (*PACKAGE, "state"),
    ),
    (
        "skyhook_package_stage_count",
        "Nodes per stage of this package version",
        (*PACKAGE, "stage"),
    ),
    (
        "skyhook_package_restarts_count",
        "Restarts of this package version, summed over nodes",
        PACKAGE,
    ),
    ("skyhook_rollout_matched_nodes", "Nodes in this compartment", ROLLOUT),
    ("skyhook_rollout_ceiling", "Nodes this compartment may have in progress at once", ROLLOUT),
    ("skyhook_rollout_in_progress", "Nodes in progress in this compartment", ROLLOUT),
    ("skyhook_rollout_completed", "Nodes complete in this compartment", ROLLOUT),
    ("skyhook_rollout_progress_percent", "Percent of this compartment complete", ROLLOUT),
    ("skyhook_rollout_current_batch", "Current batch of the rollout (0 without batches)", ROLLOUT),
    (
        "skyhook_rollout_consecutive_failures",
        "Batches in a row that failed in this compartment",
        ROLLOUT,
    ),
    (
        "skyhook_rollout_should_stop",
        "1 when failures stopped this compartment's rollout, else 0",
        ROLLOUT,
    ),
)

# Rollout gauges and the compartmentStatuses field each one reports (a compartment or a
# batchState the status does not have reads as 0).
_ROLLOUT_FIELDS: tuple[tuple[str, Callable[[CompartmentStatus], float]], ...] = (
    ("skyhook_rollout_matched_nodes", lambda c: c.matched),
    ("skyhook_rollout_ceiling", lambda c: c.ceiling),
    ("skyhook_rollout_in_progress", lambda c: c.in_progress),
    ("skyhook_rollout_completed", lambda c: c.completed),
    ("skyhook_rollout_progress_percent", lambda c: c.progress_percent),
    (
        "skyhook_rollout_current_batch",
        lambda c: c.batch_state.current_batch if c.batch_state else 0,
    ),
    (
        "skyhook_rollout_consecutive_failures",
        lambda c: c.batch_state.consecutive_failures if c.batch_state else 0,
    ),
    (
        "skyhook_rollout_should_stop",
        lambda c: int(c.batch_state.should_stop) if c.batch_state else 0,
    ),
)


def compartments(
    scr: SkyhookView, policies: Mapping[str, PolicyView] | None = None
) -> tuple[Compartment, ...]:
    """The compartments whose rollout gauges `scr` reports: without a deploymentPolicy the one
    default compartment (policy `legacy`, strategy `fixed`); with one, each of the policy's
    compartments, `__default__` last, labelled with its strategy (`unknown` without one). A
    policy that is missing or invalid reports none."""
    if scr.spec is None:
        return ()
    if not scr.spec.deployment_policy:
        return (Compartment(LEGACY_POLICY, keys.DEFAULT_COMPARTMENT, FIXED_STRATEGY),)
    found = (policies or {}).get(scr.spec.deployment_policy)
    if found is None or found.policy is None:
        return ()
    return tuple(Compartment(found.name, c.name, c.kind) for c in found.policy.all)


def skyhook_families(snapshot: ClusterSnapshot) -> tuple[Family, ...]:
    """Every Skyhook's gauges. A Skyhook being deleted has none; one with an invalid spec only
    has `skyhook_status` (without a spec there is no node selection to count)."""
    series: dict[str, list[Sample]] = {name: [] for name, _, _ in _FAMILIES}
    policies = {p.name: p for p in snapshot.policies}
    for scr in sorted(snapshot.skyhooks, key=lambda s: s.name):
        if scr.deleting:
            continue
        for name, samples in _skyhook_samples(scr, snapshot.nodes, policies):
            series[name] += samples
    return tuple(
        Family(name, text, labels, tuple(series[name])) for name, text, labels in _FAMILIES
    )


def _skyhook_samples(
    scr: SkyhookView, nodes: Iterable[NodeView], policies: Mapping[str, PolicyView]
) -> Iterable[tuple[str, list[Sample]]]:
    name = scr.name
    current = scr.status.status or UNKNOWN
    yield "skyhook_status", [Sample((name, s), 1 if s == current else 0) for s in STATUSES]
    spec = scr.spec
    if spec is None:
        return
    matched = [n for n in nodes if spec.node_selector.matches(n.labels)]
    states = [nodestate.read(n, name) for n in matched]
    node_statuses = Counter(s.status if s.status in STATUSES else UNKNOWN for s in states)
    yield (
        "skyhook_node_status_count",
        [Sample((name, s), node_statuses[s]) for s in STATUSES],
    )
    yield "skyhook_node_target_count", [Sample((name,), len(matched))]
    admin = sum(1 for n in matched if n.unschedulable and not nodestate.cordoned_by(n.annotations))
    yield "skyhook_admin_cordoned_nodes", [Sample((name,), admin)]
    by_state: list[Sample] = []
    by_stage: list[Sample] = []
    restarts: list[Sample] = []
    for package in sorted(spec.packages.values(), key=lambda p: p.name):
        entries = [s.packages[package.key] for s in states if package.key in s.packages]
        labels = (name, package.name, package.version)
        # Counted per state and per stage separately, so every node is counted once in each.
        state_counts = Counter(e.state if e.state in STATES else UNKNOWN for e in entries)
        stage_counts = Counter(e.stage for e in entries)
        by_state += [Sample((*labels, s), state_counts[s]) for s in STATES]
        by_stage += [Sample((*labels, s), stage_counts[s]) for s in STAGES]
        restarts.append(Sample(labels, sum(e.restarts for e in entries)))
    yield "skyhook_package_state_count", by_state
    yield "skyhook_package_stage_count", by_stage
    yield "skyhook_package_restarts_count", restarts
    reported = scr.status.compartment_statuses
    for metric, read in _ROLLOUT_FIELDS:
        rollout = []
        for compartment in compartments(scr, policies):
            found = reported.get(compartment.name) or CompartmentStatus()
            rollout.append(
                Sample(
                    (name, compartment.policy, compartment.name, compartment.strategy),
                    read(found),
                )
            )
        yield metric, rollout


def handoff_delays(
    snapshot: ClusterSnapshot, plan: Plan, created_at: datetime
) -> tuple[float, ...]:
    """Seconds from a stage pod's finish to the creation of the next pod of the same Skyhook
    on the same node, one per pod the plan creates after such a finish.

    A pass learns a finished pod, deletes it and creates the next one, so the finished pod is
    still in the snapshot. Each finished pod counts once: for the next stage of its own
    package if the plan creates one, else for the next pod of its Skyhook on the node (the
    next package). `created_at` is when the plan's creations were written."""
    # Only a pod on a node the plan creates a pod on can be followed by a creation.
    creating = {lane_of(action) for action in plan.actions if isinstance(action, CreatePod)}
    finished: dict[tuple[str, str], list[tuple[datetime, str]]] = {}
    for pod in snapshot.pods:
        if pod.node not in creating:
            continue
        package = podbuilder.decode_pod_package(pod)
        outcome = results.outcome(pod)
        if package is None or outcome.result != results.SUCCEEDED or not outcome.finished_at:
            continue
        finished.setdefault((pod.node, package.skyhook), []).append(
            (outcome.finished_at, package.name)
        )
    creations = [
        (pod.node, package)
        for action in plan.actions
        if isinstance(action, CreatePod)
        for pod in (PodView.from_api(action.manifest),)
        for package in (podbuilder.decode_pod_package(pod),)
        if package is not None
    ]
    delays = []
    for same_package in (True, False):
        unmatched = []
        for node, package in creations:
            waiting = finished.get((node, package.skyhook)) or []
            match = [f for f in waiting if f[1] == package.name or not same_package]
            if not match:
                unmatched.append((node, package))
                continue
            finish = max(match)
            waiting.remove(finish)
            delays.append(max(0.0, (created_at - finish[0]).total_seconds()))
        creations = unmatched
    return tuple(delays)


HELD_NODES = "skyhook_held_nodes"


def held(plan: Plan) -> Counter[tuple[str, str]]:
    """Nodes waiting on a hold, per (Skyhook, the hold's reason)."""
    return Counter((h.skyhook, h.reason) for h in plan.held)


WAITING_NODES = "skyhook_waiting_nodes"


def waiting_family(plan: Plan) -> Family:
    """Our gauge of the nodes that may not start work now, each counted once under the first
    blocker that holds it (the words of model/waiting.py, as `kubectl skyhook plan` shows)."""
    found = Counter(
        (skyhook, reasons[0].blocker) for (skyhook, _), reasons in plan.waiting.items() if reasons
    )
    return Family(
        WAITING_NODES,
        "Nodes of the Skyhook that may not start work now, by the blocker holding them back "
        "(budget, shared-budget, topology, ordering, hold, ...)",
        (*SKYHOOK, "blocker"),
        tuple(Sample(key, count) for key, count in sorted(found.items())),
    )


def held_family(plan: Plan) -> Family:
    """Our gauge of nodes whose next step waits on a hold, a soak, a health gate, or a drain
    that cannot go on by itself."""
    return Family(
        HELD_NODES,
        "Nodes of the Skyhook whose next step waits, by reason (MaintenanceWindowClosed, "
        "AlertsFiring, AlertQueryFailed, AlertsNotRead, Soaking, RebootDeadlineExceeded, "
        "HealthGateWaiting, HealthGateFailed, NonInterruptPodsRunning, PodDisruptionBudget, "
        "EvictionFailed, DeleteFailed, UnmanagedPod, EmptyDirData, MultipleCauses, DrainTimeout)",
        (*SKYHOOK, "reason"),
        tuple(Sample(key, count) for key, count in sorted(held(plan).items())),
    )
