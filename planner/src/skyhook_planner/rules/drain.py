"""May a node be interrupted now: is it drained?

A node is drained when it is cordoned, no pod matching the Skyhook's
`podNonInterruptLabels` is still alive on it, and every other evictable pod is gone. Those
protected pods come first: while one is alive nothing is evicted, so the node's workloads are not
displaced for an interrupt that still has to wait; once they are all gone the rest is evicted.
The check fails closed: a matching pod in any phase but Succeeded/Failed (Unknown included)
blocks, and a pod on its way out still counts until it has gone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from skyhook_planner.model.snapshot import NodeView, PodView
from skyhook_planner.model.vocabulary import FINISHED_PHASES, LabelSelector
from skyhook_schemas import keys


@dataclass(frozen=True)
class Drain:
    cordoned: bool
    blocking: tuple[PodView, ...] = ()  # podNonInterruptLabels pods: wait for them to finish
    to_evict: tuple[PodView, ...] = ()  # evictable pods to evict now (none while any blocks)
    terminating: tuple[PodView, ...] = ()  # evicted pods not gone yet

    @property
    def open(self) -> bool:
        return self.cordoned and not (self.blocking or self.to_evict or self.terminating)


def is_skyhook_pod(pod: PodView, namespace: str) -> bool:
    """One of our stage or interrupt pods: labelled by us in our namespace (a copy of the
    labels elsewhere makes an ordinary pod)."""
    return keys.NAME_LABEL in pod.labels and pod.namespace == namespace


def _evictable(pod: PodView) -> bool:
    """Pods a drain moves away: not DaemonSet pods (any owner), not kube-system, and not
    tolerating the cordon taint (they would just come back)."""
    return not (
        pod.tolerates_unschedulable
        or pod.namespace == "kube-system"
        or "DaemonSet" in pod.owner_kinds
    )


def check(
    node: NodeView, pods: Iterable[PodView], non_interrupt: LabelSelector, namespace: str
) -> Drain:
    """The node's drain gate; `namespace` is ours, whose labelled pods are never drained.
    Evictable pods are only `to_evict` once no protected pod is left to wait for."""
    blocking: list[PodView] = []
    to_evict: list[PodView] = []
    terminating: list[PodView] = []
    for pod in pods:
        if pod.phase in FINISHED_PHASES or is_skyhook_pod(pod, namespace):
            continue
        if not non_interrupt.empty and non_interrupt.matches(pod.labels):
            blocking.append(pod)
        elif _evictable(pod):
            (terminating if pod.deleting else to_evict).append(pod)
    if blocking:
        to_evict = []  # the protected pods go first; evicting now would displace for nothing
    return Drain(node.unschedulable, tuple(blocking), tuple(to_evict), tuple(terminating))
