"""What happened since the last pass, for one Skyhook: finished pods (learned into node
entries), reboots (boot id changes) and running pods that no longer match the spec.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from skyhook_operator import podbuilder
from skyhook_operator.nodestate import (
    COMPLETE,
    ERRORING,
    IN_PROGRESS,
    INTERRUPT,
    UNINSTALL,
)
from skyhook_operator.planner import gates, learning
from skyhook_operator.planner.model import (
    NodeView,
    PodView,
)
from skyhook_operator.spec import Package
from skyhook_schemas import keys

if TYPE_CHECKING:
    from skyhook_operator.planner.skyhook import SkyhookPass


def learn(sky: SkyhookPass, pod: PodView) -> None:
    pkg = sky.p.pod_package(pod)
    node = sky.p.nodes.get(pod.node)
    if pkg is None or pod.deleting:
        return
    if node is None or pkg.invalid:
        sky.p.delete_pod(pod, "node gone" if node is None else "marked invalid")
        return
    entries = sky.entries(node)
    entry = entries.get(f"{pkg.name}|{pkg.version}")
    if entry is None or entry.stage != pkg.stage or entry.state == COMPLETE:
        if entry is not None and entry.stage == pkg.stage and pod.phase in gates.FINISHED_PHASES:
            sky.p.delete_pod(pod, "result already recorded")
        elif entry is None or entry.stage != pkg.stage:
            sky.p.delete_pod(pod, "no matching package entry (stale pod)")
        else:
            sky.p.delete_pod(pod, "result already recorded")
        return
    result = learning.outcome(pod)
    label = f"[{pkg.name}:{pkg.version}]"
    if result.result == learning.SUCCEEDED:
        sky.set_entries(
            node, learning.record_success(entries, pkg, result.restarts, sky.spec.packages)
        )
        sky.p.delete_pod(pod, "stage complete")
        sky.p.event(
            "Node",
            node.name,
            "Apply",
            f"Package {label} state complete on [skyhook:{sky.name}]",
        )
    elif result.result == learning.FAILED:
        updated = learning.record_failure(entries, pkg, result.restarts)
        if entry.state != ERRORING:
            sky.p.event(
                "Node",
                node.name,
                "Apply",
                f"Package {label} state erroring on [skyhook:{sky.name}]",
            )
        if pod.phase == "Failed":  # the kubelet gave up: retry after a backoff
            key = f"{pkg.name}|{pkg.version}"
            wait = learning.backoff_s(
                updated[key].restarts,
                sky.settings.retry_backoff_base_s,
                sky.settings.retry_backoff_max_s,
            )
            since = (sky.p.now - result.finished_at).total_seconds() if result.finished_at else wait
            if since >= wait:
                updated[key] = replace(updated[key], restarts=updated[key].restarts + 1)
                sky.p.delete_pod(pod, "retrying failed stage")
            else:
                sky.p.wake_in(wait - since)
        sky.set_entries(node, updated)


def track_reboots(sky: SkyhookPass) -> dict[str, str]:
    """A new boot id completes the interrupt a node was waiting on (or, with
    REAPPLY_ON_REBOOT, starts the node over)."""
    recorded = sky.scr.status.get("nodeBootIds") or {}
    boot_ids: dict[str, str] = {}
    for node in sky.matched:
        before = recorded.get(node.name)
        if node.boot_id:
            boot_ids[node.name] = node.boot_id
        if not before or not node.boot_id or before == node.boot_id:
            continue
        entries = sky.entries(node)
        waiting = {k: e for k, e in entries.items() if e.stage == INTERRUPT and e.state != COMPLETE}
        # Our own reboot interrupt never counts as "a reboot to reapply after": that would
        # reinstall, reboot again, and loop.
        if sky.settings.reapply_on_reboot and not waiting:
            sky.set_entries(node, {})
            sky.p.event(
                "Node",
                node.name,
                "Reboot",
                f"detected reboot, resetting node for [{sky.name}] to be reapplied",
            )
            continue
        if waiting:
            for key, entry in waiting.items():
                entries[key] = replace(entry, state=COMPLETE)
            sky.set_entries(node, entries)
            for pod in sky.p.pods_on_node.get(node.name, ()):
                if (
                    pod.labels.get(keys.NAME_LABEL) == sky.name
                    and keys.INTERRUPT_LABEL in pod.labels
                ):
                    sky.p.delete_pod(pod, "reboot detected: interrupt done")
            sky.p.event(
                "Node",
                node.name,
                "Reboot",
                f"detected reboot of [{node.name}] for [skyhook:{sky.name}]",
            )
    return boot_ids


def validate_pods(sky: SkyhookPass) -> None:
    """Delete running pods that no longer do what the spec asks (operator.md §6.3)."""
    for pod in sky.pods():
        if not sky.p.live(pod):
            continue
        pkg = sky.p.pod_package(pod)
        node = sky.p.nodes.get(pod.node)
        if pkg is None or node is None:
            continue
        entry = sky.entries(node).get(f"{pkg.name}|{pkg.version}")
        if entry is None or entry.stage != pkg.stage:
            sky.p.delete_pod(pod, "stale: the node records another stage")
            continue
        wanted = sky.spec.packages.get(pkg.name)
        if pkg.stage in {UNINSTALL, INTERRUPT} or wanted is None or wanted.version != pkg.version:
            continue
        manifest = podbuilder.build_stage_pod(sky.settings, sky.scr, wanted, node.name, pkg.stage)
        if not podbuilder.matches(pod, manifest):
            sky.p.delete_pod(pod, "the package spec changed")
            _reset_entry(sky, node, wanted.key)


def expected_pod(sky: SkyhookPass, package: Package, stage: str) -> dict[str, Any]:
    """What a stage pod of `package` should contain; `matches` ignores the node, so one
    manifest per package and stage serves every node."""
    key = (package.key, stage)
    if key not in sky.expected_pods:
        sky.expected_pods[key] = podbuilder.build_stage_pod(
            sky.settings, sky.scr, package, "-", stage
        )
    return sky.expected_pods[key]


def _reset_entry(sky: SkyhookPass, node: NodeView, key: str) -> None:
    entries = sky.entries(node)
    if key in entries:
        entries[key] = replace(entries[key], state=IN_PROGRESS)
        sky.set_entries(node, entries)
