"""Reboot deadlines: a node whose boot id never changes after its reboot interrupt, or that stays
NotReady after rebooting, is marked erroring once `rebootDeadline` has passed, so the rollout
follows its failure handling (a DeploymentPolicy's batchThreshold and failureThreshold; without
one, the budget: an erroring node keeps its slot) instead of waiting for it for ever
(docs/fleet-safety.md). Pure: decided from the node, its entries, the interrupt pod's creation
time, the boot id the Skyhook recorded and the pass's clock.

The deadline is opt-in: `spec.rebootDeadline` on a Skyhook, or on its DeploymentPolicy for
every Skyhook using it that does not set its own.

- Boot id unchanged: a reboot interrupt is in progress (its entry at `interrupt`, not
  complete), its pod of ours is on the node, and the node's boot id is the one recorded before
  it; overdue `rebootDeadline` after the pod was created. The entry turns erroring; the pod is
  left alone (no second reboot is started), and a reboot that comes late still completes it.
- NotReady after the reboot: the interrupt is complete, `post-interrupt` is still to run, and
  the node has been NotReady (its Ready condition's last transition) for `rebootDeadline`. The
  package's entry turns `post-interrupt` erroring, which runs once the node is Ready again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from skyhook_planner.model.policy import Policy
from skyhook_planner.model.snapshot import NodeView
from skyhook_planner.model.spec import SkyhookSpec
from skyhook_planner.model.times import describe, stamp
from skyhook_planner.model.waiting import REBOOT_DEADLINE, Reason
from skyhook_schemas import keys
from skyhook_schemas.nodestate import (
    COMPLETE,
    ERRORING,
    INTERRUPT,
    POST_INTERRUPT,
    PackageEntry,
)

EXCEEDED = "RebootDeadlineExceeded"  # Event reason, condition reason, held-nodes reason
CONDITION_DEADLINE = f"{keys.GROUP}/{EXCEEDED}"
NOT_REBOOTED = "boot id unchanged"
NOT_READY = "NotReady after its reboot"


def deadline_s(spec: SkyhookSpec, policy: Policy | None) -> float | None:
    """The Skyhook's own rebootDeadline, else its policy's; None when none is set (or 0)."""
    seconds = spec.reboot_deadline_s
    if seconds is None and policy is not None:
        seconds = policy.reboot_deadline_s
    return seconds or None


@dataclass(frozen=True)
class Verdict:
    """One node's reboot against the deadline: `why` (NOT_REBOOTED or NOT_READY), since when
    it waits, and when the deadline passes."""

    why: str
    since: datetime
    due: datetime

    def overdue(self, now: datetime) -> bool:
        return now >= self.due

    def message(self, seconds: float) -> str:
        what = (
            "its boot id did not change"
            if self.why == NOT_REBOOTED
            else "it stayed NotReady after rebooting"
        )
        return (
            f"reboot deadline: {what} within rebootDeadline {describe(seconds)} "
            f"(since {stamp(self.since)})"
        )

    def reason(self, seconds: float) -> Reason:
        return Reason(REBOOT_DEADLINE, self.message(seconds), hold=EXCEEDED)


def watch(
    node: NodeView,
    entries: Mapping[str, PackageEntry],
    *,
    rebooting: Mapping[str, bool],
    interrupt_pod_created: datetime | None,
    recorded_boot_id: str | None,
    seconds: float,
) -> Verdict | None:
    """The node's reboot under the deadline, None when none is under way. `rebooting` says,
    per entry key, whether that package's interrupt is a reboot."""
    deadline = timedelta(seconds=seconds)
    at_interrupt = [k for k, e in entries.items() if e.stage == INTERRUPT and e.state != COMPLETE]
    if any(rebooting.get(k) for k in at_interrupt):
        if (
            interrupt_pod_created is not None
            and recorded_boot_id
            and node.boot_id == recorded_boot_id
        ):
            return Verdict(NOT_REBOOTED, interrupt_pod_created, interrupt_pod_created + deadline)
        return None
    after = [
        k
        for k, e in entries.items()
        if rebooting.get(k)
        and (
            (e.stage == INTERRUPT and e.state == COMPLETE)
            or (e.stage == POST_INTERRUPT and e.state != COMPLETE)
        )
    ]
    if after and not node.ready and node.ready_since is not None:
        return Verdict(NOT_READY, node.ready_since, node.ready_since + deadline)
    return None


def mark(entries: Mapping[str, PackageEntry], verdict: Verdict) -> dict[str, PackageEntry] | None:
    """The entries with the overdue reboot marked erroring; None when they are already."""
    changed = dict(entries)
    for key, entry in entries.items():
        # No restarts: the node stops here; no retry ends a missed deadline (rules/results.py).
        if verdict.why == NOT_REBOOTED and entry.stage == INTERRUPT and entry.state != COMPLETE:
            changed[key] = replace(entry, state=ERRORING, restarts=0)
        elif verdict.why == NOT_READY and (
            (entry.stage == INTERRUPT and entry.state == COMPLETE)
            or (entry.stage == POST_INTERRUPT and entry.state not in {COMPLETE, ERRORING})
        ):
            changed[key] = replace(entry, stage=POST_INTERRUPT, state=ERRORING, restarts=0)
    return None if changed == dict(entries) else changed
