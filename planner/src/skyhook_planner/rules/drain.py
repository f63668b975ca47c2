"""May a node be interrupted now: is it drained, and if not, what holds it?

A node is drained when it is cordoned, no pod matching the Skyhook's `podNonInterruptLabels`
is still alive on it, and every other pod is either one a drain leaves in place or gone.
Those protected pods come first: while one is alive nothing is removed, so the node's
workloads are not displaced for an interrupt that still has to wait; once they are all gone
the rest is removed. The protected check fails closed: a matching pod in any phase but
Succeeded/Failed (Unknown included) holds the node.

Every other pod is decided by `decide`, in this order (spec.drainConfig's knobs in brackets):
not Running or Pending: left; one of our stage pods: left; tolerates the cordon taint: left
(it would come back); owned by a DaemonSet [ignoreDaemonSets]: left; in kube-system: left; a
mirror pod: left; already terminating: waited for; owned by no controller [force: false]:
blocks; with an emptyDir volume [deleteEmptyDirData: false]: blocks; otherwise deleted
[disableEviction] or evicted. A pod whose eviction a PodDisruptionBudget refused blocks too,
as does one whose removal the apiserver refused for any other reason (a 403 from RBAC or a
policy engine, a 500), with the apiserver's answer; each is asked again (the operator spaces
those asks).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from skyhook_planner.model.snapshot import EvictionRefusal, NodeView, PodView
from skyhook_planner.model.spec import DrainConfig
from skyhook_planner.model.times import exact_stamp, parse_stamp
from skyhook_planner.model.vocabulary import FINISHED_PHASES, LabelSelector
from skyhook_schemas import keys

# How a pod is handled, as `decide` says.
LEAVE, WAIT, BLOCK, EVICT, DELETE = "leave", "wait", "block", "evict", "delete"

# Why a drain cannot go on: the DrainBlocked condition's reasons, each blocked pod's reason in
# the drainBlocked annotation, and the held-nodes metric's reason words.
PDB = "PodDisruptionBudget"
EVICTION_FAILED = "EvictionFailed"
DELETE_FAILED = "DeleteFailed"
UNMANAGED = "UnmanagedPod"
EMPTY_DIR = "EmptyDirData"
MULTIPLE = "MultipleCauses"
NON_INTERRUPT = "NonInterruptPodsRunning"  # the Blocked condition's reason
TIMED_OUT = "DrainTimeout"


@dataclass(frozen=True)
class BlockedPod:
    """A pod the drain cannot remove now: `reason` is PDB, EVICTION_FAILED, DELETE_FAILED,
    UNMANAGED or EMPTY_DIR, `detail` the apiserver's answer to a refused removal."""

    namespace: str
    name: str
    reason: str
    detail: str = ""

    def to_api(self) -> dict[str, str]:
        body = {"namespace": self.namespace, "name": self.name, "reason": self.reason}
        if self.detail:
            body["detail"] = self.detail
        return body


@dataclass(frozen=True)
class Drain:
    cordoned: bool
    protected: tuple[PodView, ...] = ()  # podNonInterruptLabels pods: wait for them to finish
    to_remove: tuple[PodView, ...] = ()  # to evict (or delete) now; none while any is protected
    leaving: tuple[PodView, ...] = ()  # terminating: wait until they are gone
    blocked: tuple[BlockedPod, ...] = ()  # what the drain cannot remove (none while protected)
    removal: str = EVICT  # how `to_remove` go, as `decide` said: EVICT, or DELETE

    @property
    def open(self) -> bool:
        return self.cordoned and not (
            self.protected or self.to_remove or self.leaving or self.blocked
        )

    @property
    def blocked_reason(self) -> str:
        """The DrainBlocked reason for this node, "" when nothing blocks."""
        reasons = {b.reason for b in self.blocked}
        if not reasons:
            return ""
        return reasons.pop() if len(reasons) == 1 else MULTIPLE


def is_skyhook_pod(pod: PodView, namespace: str) -> bool:
    """One of our stage or interrupt pods: labelled by us in our namespace (a copy of the
    labels elsewhere makes an ordinary pod)."""
    return keys.NAME_LABEL in pod.labels and pod.namespace == namespace


def decide(pod: PodView, config: DrainConfig, namespace: str) -> tuple[str, str]:
    """What the drain does with `pod`, and for BLOCK why (UNMANAGED or EMPTY_DIR)."""
    if pod.phase not in {"Running", "Pending"} or is_skyhook_pod(pod, namespace):
        return LEAVE, ""
    if pod.tolerates_unschedulable:
        return LEAVE, ""
    if config.ignore_daemon_sets and pod.controller_kind == "DaemonSet":
        return LEAVE, ""
    if pod.namespace == "kube-system" or pod.mirror:
        return LEAVE, ""
    if pod.deleting:  # below the exemptions: a DaemonSet pod on its way out holds nothing
        return WAIT, ""
    if not pod.controller_kind and not config.force:
        return BLOCK, UNMANAGED
    if pod.empty_dir and not config.delete_empty_dir_data:
        return BLOCK, EMPTY_DIR
    return (DELETE if config.disable_eviction else EVICT), ""


def check(
    node: NodeView,
    pods: Iterable[PodView],
    non_interrupt: LabelSelector,
    namespace: str,
    *,
    config: DrainConfig | None = None,
    refusals: Mapping[tuple[str, str], EvictionRefusal] | None = None,
) -> Drain:
    """The node's drain gate; `namespace` is ours, whose labelled pods are never drained;
    `refusals` the removals the apiserver refused, which block until one is accepted."""
    pods = tuple(pods)
    protected = protected_pods(pods, non_interrupt, namespace)
    if protected:  # the protected pods go first: removing others now displaces for nothing
        return Drain(node.unschedulable, protected)
    to_remove: list[PodView] = []
    leaving: list[PodView] = []
    blocked: list[BlockedPod] = []
    removal = EVICT
    config = config or DrainConfig()
    for pod in pods:
        if not non_interrupt.empty and non_interrupt.matches(pod.labels):
            continue  # a protected pod that has finished: nothing to drain
        what, why = decide(pod, config, namespace)
        if what == WAIT:
            leaving.append(pod)
        elif what == BLOCK:
            blocked.append(BlockedPod(pod.namespace, pod.name, why))
        elif what in {EVICT, DELETE}:
            to_remove.append(pod)
            removal = what
            refusal = (refusals or {}).get((pod.namespace, pod.name))
            if refusal is not None and (because := refused_reason(refusal, what)):
                blocked.append(BlockedPod(pod.namespace, pod.name, because, refusal.detail))
    return Drain(node.unschedulable, (), tuple(to_remove), tuple(leaving), tuple(blocked), removal)


def refused_reason(refusal: EvictionRefusal, removal: str) -> str:
    """Why `refusal` blocks a pod the drain removes by `removal` (EVICT or DELETE); "" when
    it no longer does: it was refused the other way (drainConfig.disableEviction changed)."""
    if refusal.delete != (removal == DELETE):
        return ""
    if refusal.by_budget:
        return PDB
    return DELETE_FAILED if refusal.delete else EVICTION_FAILED


def blocked_annotation(blocked: Iterable[BlockedPod]) -> str:
    """The drainBlocked_<skyhook> annotation's value: a JSON list of the blocked pods."""
    return json.dumps([b.to_api() for b in blocked], separators=(",", ":"))


def listed_pods(annotation: str | None) -> frozenset[tuple[str, str]]:
    """The (namespace, name) of each pod a drainBlocked annotation lists; none when it is
    absent or unreadable."""
    try:
        listed = json.loads(annotation or "[]")
        return frozenset((str(b["namespace"]), str(b["name"])) for b in listed)
    except (ValueError, TypeError, KeyError):
        return frozenset()


def started_at(node: NodeView, skyhook: str) -> datetime | None:
    """When the drain for `skyhook` began on `node` (its drainStart annotation), or None."""
    # Unreadable: the drain starts its clock again.
    return parse_stamp(node.annotations.get(keys.drain_start_key(skyhook)))


def timed_out(started: datetime | None, config: DrainConfig, now: datetime) -> bool:
    return (
        started is not None
        and config.timeout_s is not None
        and now >= started + timedelta(seconds=config.timeout_s)
    )


def protected_pods(
    pods: Iterable[PodView], non_interrupt: LabelSelector, namespace: str
) -> tuple[PodView, ...]:
    """The pods matching `podNonInterruptLabels` that still hold a node's interrupt."""
    if non_interrupt.empty:
        return ()
    return tuple(
        p
        for p in pods
        if p.phase not in FINISHED_PHASES
        and not is_skyhook_pod(p, namespace)
        and non_interrupt.matches(p.labels)
    )


@dataclass(frozen=True)
class Deferral:
    """Nodes passed over this pass because protected pods still run on them (`held`, each with
    its pods), since when (status.interruptDeferred), and when the first wait runs out."""

    held: Mapping[str, tuple[PodView, ...]]
    since: Mapping[str, str]
    recheck_s: float | None = None


def defer(
    waiting: Mapping[str, tuple[PodView, ...]],
    others_left: bool,
    recorded: Mapping[str, str],
    wait_s: float | None,
    now: datetime,
) -> Deferral:
    """Which of the candidates whose interrupt waits on protected pods (`waiting`) to pass
    over: all of them while another node is left to do (`others_left`), each for at most
    `wait_s` since it was first passed over (`recorded`). A node past its wait, or with no one
    left to go first, is admitted: cordoned, no new protected pod lands on it, and the drain
    waits for those that run, so a node whose protected pods keep arriving is not starved."""
    if not others_left or wait_s == 0:
        return Deferral({}, {})
    held: dict[str, tuple[PodView, ...]] = {}
    since: dict[str, str] = {}
    recheck: float | None = None
    for node, pods in waiting.items():
        first = parse_stamp(recorded.get(node)) or now
        left = None if wait_s is None else wait_s - (now - first).total_seconds()
        if left is not None and left <= 0:
            continue
        held[node] = pods
        since[node] = recorded.get(node) or exact_stamp(now)
        if left is not None:
            recheck = left if recheck is None else min(recheck, left)
    return Deferral(held, since, recheck)
