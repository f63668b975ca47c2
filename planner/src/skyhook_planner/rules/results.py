"""What a stage pod's result means for its package entry, as pure functions (the `learn` step
applies them).

`outcome(pod)` reads the init container statuses: the first failed container decides, otherwise
the last one does. `record_success`/`record_failure` fold a finished pod into a node's entries;
`backoff_s` is how long a failed stage waits before it runs again; `failed_for_good` tells a
failure that stops the node from an attempt that will be retried.

An erroring entry's restarts say which it is. A failed attempt records how many attempts have
failed (at least one), so while that is within the stage's allowance the next attempt is still
to come, and the node reads in progress. A stop no retry ends (a drain past its timeout, a
reboot past its deadline, an interrupt past its stageTimeout) records none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from skyhook_planner.model.snapshot import PodView
from skyhook_planner.model.spec import Package
from skyhook_schemas.nodestate import (
    COMPLETE,
    ERRORING,
    IN_PROGRESS,
    INTERRUPT,
    UNINSTALL,
    UNINSTALL_INTERRUPT,
    UNKNOWN,
    UPGRADE,
    PackageEntry,
)
from skyhook_schemas.podpackage import PodPackage

SUCCEEDED, FAILED, RUNNING, WAITING = "succeeded", "failed", "running", "waiting"
CRASH_LOOP = "CrashLoopBackOff"
# The pod's reason when the kubelet stopped it at its activeDeadlineSeconds (stageTimeout).
DEADLINE_EXCEEDED = "DeadlineExceeded"
# A container's end its node reported without knowing how it ended (the node rebooted or lost
# it): the step did not fail, the node did.
_LOST = frozenset({"Unknown", "ContainerStatusUnknown"})


@dataclass(frozen=True)
class Outcome:
    result: str  # SUCCEEDED, FAILED, RUNNING or WAITING
    restarts: int = 0
    finished_at: datetime | None = None
    container: str = ""  # the container that decided (the failed one): the logs to read


def outcome(pod: PodView) -> Outcome:
    statuses = pod.init_statuses
    for status in statuses:
        failed = (status.state == "terminated" and status.exit_code not in (0, None)) or (
            status.state == "waiting" and status.reason == CRASH_LOOP
        )
        if failed:
            return Outcome(FAILED, status.restart_count, status.finished_at, status.name)
    if not statuses:
        return Outcome(FAILED if pod.phase == "Failed" else WAITING)
    if len(statuses) < len(pod.init_containers):
        return Outcome(WAITING)
    last = statuses[-1]
    if last.state == "terminated" and last.exit_code == 0:
        return Outcome(SUCCEEDED, last.restart_count, last.finished_at, last.name)
    if pod.phase == "Failed":
        return Outcome(FAILED, last.restart_count, last.finished_at, last.name)
    return Outcome(RUNNING if last.state == "running" else WAITING, last.restart_count)


def spent_an_attempt(pod: PodView) -> bool:
    """Did a failed stage pod use up one of the stage's attempts? Yes when a step failed (a
    container ended with a non-zero exit) or the pod outlived its stageTimeout; no when the
    cluster ended it (condition DisruptionTarget: an eviction, a preemption, its node's
    shutdown), its node lost it (a reboot, a container status the node could not report) or
    the kubelet refused it before anything ran: then the same attempt runs again."""
    if pod.disrupted:
        return False
    if pod.reason == DEADLINE_EXCEEDED:
        return True
    return any(
        s.state == "terminated" and s.exit_code not in (0, None) and s.reason not in _LOST
        for s in pod.init_statuses
    )


def record_success(
    entries: Mapping[str, PackageEntry],
    pod: PodPackage,
    restarts: int,
    spec_packages: Mapping[str, Package],
) -> dict[str, PackageEntry]:
    """Entries after the stage `pod` ran completed successfully."""
    result = dict(entries)
    key = pod.key
    current = result.get(key) or PackageEntry(
        pod.name, pod.version, pod.image, pod.stage, "", pod.container_sha
    )
    if pod.stage == INTERRUPT:
        # One merged interrupt covers every package waiting at the interrupt stage.
        for other_key, entry in list(result.items()):
            if entry.stage == INTERRUPT and entry.state != COMPLETE:
                result[other_key] = replace(entry, state=COMPLETE, restarts=0)
        result[key] = replace(current, stage=INTERRUPT, state=COMPLETE, restarts=restarts)
    elif pod.stage == UPGRADE:
        for other_key, entry in list(result.items()):
            if entry.name == pod.name and other_key != key:
                del result[other_key]
        result[key] = replace(current, stage=UPGRADE, state=COMPLETE, restarts=restarts)
    elif pod.stage == UNINSTALL:
        wanted = spec_packages.get(pod.name)
        if wanted is not None and wanted.key == key and wanted.interrupt is not None:
            # The package's interrupt completes the uninstall (a reboot unloads a driver).
            result[key] = replace(current, stage=UNINSTALL_INTERRUPT, state=IN_PROGRESS, restarts=0)
        else:
            result.pop(key, None)  # uninstalled: no entry
    elif pod.stage == UNINSTALL_INTERRUPT:
        # One merged interrupt covers every package waiting at the uninstall-interrupt stage.
        for other_key, entry in list(result.items()):
            if entry.stage == UNINSTALL_INTERRUPT:
                del result[other_key]
    else:
        result[key] = replace(current, stage=pod.stage, state=COMPLETE, restarts=restarts)
    return result


def record_failure(
    entries: Mapping[str, PackageEntry], pod: PodPackage, restarts: int
) -> dict[str, PackageEntry]:
    result = dict(entries)
    key = pod.key
    current = result.get(key) or PackageEntry(
        pod.name, pod.version, pod.image, pod.stage, "", pod.container_sha
    )
    result[key] = replace(
        current, stage=pod.stage, state=ERRORING, restarts=max(current.restarts, restarts)
    )
    return result


def failed_for_good(entry: PackageEntry, allowance: int | None) -> bool:
    """Does `entry` stop its node: the node reads erroring, its Erroring condition turns True
    and a DeploymentPolicy counts it as failed? `allowance`: the failed attempts its stage may
    retry (None: unbounded, a reboot's). Unknown (unreadable) stops it too."""
    if entry.state == UNKNOWN:
        return True
    if entry.state != ERRORING:
        return False
    return entry.restarts == 0 or (allowance is not None and entry.restarts > allowance)


def restart_limit_spent(entry: PackageEntry, stage: str, retries: int) -> bool:
    """Has a non-reboot interrupt given up? Once its container failed `retries` + 1 times the
    entry records those failed runs, more than `retries` (while the container still restarts
    it records its restart count, below `retries`); no interrupt pod starts for it again
    until a rerun, a reset or a config edit."""
    return entry.stage == stage and entry.state == ERRORING and entry.restarts > retries


def backoff_s(restarts: int, base: float, cap: float) -> float:
    """Wait before retrying a failed pod: base * 2**restarts, capped."""
    return float(min(cap, base * (2 ** min(restarts, 20))))
