"""`plan(snapshot, settings) -> Plan`: one planning pass (the steps are described in
planner/__init__.py). Pure: the same snapshot always gives the same plan.
"""

from __future__ import annotations

import gc
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from skyhook_operator import nodestate, podbuilder, status
from skyhook_operator.nodestate import (
    APPLY,
    COMPLETE,
    CONFIG,
    ERRORING,
    IN_PROGRESS,
    INTERRUPT,
    POST_INTERRUPT,
    SKIPPED,
    UNINSTALL,
    UPGRADE,
    NodeChanges,
    NodeState,
    PackageEntry,
)
from skyhook_operator.planner import budget, gates, interrupts, learning, ordering, stages
from skyhook_operator.planner.model import (
    Action,
    AddFinalizer,
    ClusterSnapshot,
    ConfigMapView,
    CreatePod,
    DeleteConfigMap,
    DeletePod,
    EmitEvent,
    EvictPod,
    NodeCondition,
    NodeView,
    PatchNode,
    PatchSkyhookStatus,
    Plan,
    PlannerSettings,
    PodView,
    RemoveFinalizer,
    SetNodeConditions,
    SkyhookView,
    Taint,
    UpsertConfigMap,
)
from skyhook_operator.spec import Package, SkyhookSpec, Toleration
from skyhook_schemas import keys

UNSCHEDULABLE_TOLERATION = Toleration(keys.UNSCHEDULABLE_TAINT_KEY, "Exists", effect="NoSchedule")
GATE_POLL_S = 5.0  # re-check a drain or a blocking pod at least this often


def plan(snapshot: ClusterSnapshot, settings: PlannerSettings) -> Plan:
    # A pass allocates many short-lived objects next to a large snapshot; cyclic GC runs in
    # the middle of it would scan the whole snapshot again and again (3x slower at 1,000
    # nodes). The pass creates no reference cycles, so pausing the collector is safe.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _Pass(snapshot, settings).run()
    finally:
        if collecting:
            gc.enable()


@dataclass
class _NodeOut:
    """Everything one pass does to one node, assembled in a safe order at the end."""

    changes: NodeChanges = field(default_factory=NodeChanges)
    add_taints: list[Taint] = field(default_factory=list)
    remove_taints: list[Taint] = field(default_factory=list)
    unschedulable: bool | None = None
    metadata_for: list[SkyhookView] = field(default_factory=list)  # metadata CMs before pods
    actions: list[Action] = field(default_factory=list)  # after the node patch
    conditions: list[NodeCondition] = field(default_factory=list)
    drop_conditions: list[str] = field(default_factory=list)


class _Pass:
    def __init__(self, snapshot: ClusterSnapshot, settings: PlannerSettings) -> None:
        self.snap = snapshot
        self.settings = settings
        self.now = snapshot.now
        self.nodes = {n.name: n for n in snapshot.nodes}
        self.pods_on_node: dict[str, list[PodView]] = defaultdict(list)
        self.skyhook_pods: dict[str, list[PodView]] = defaultdict(list)
        for pod in snapshot.pods:
            if pod.node:
                self.pods_on_node[pod.node].append(pod)
            if keys.NAME_LABEL in pod.labels:
                self.skyhook_pods[pod.labels[keys.NAME_LABEL]].append(pod)
        self.configmaps = {
            c.name: c for c in snapshot.configmaps if c.namespace == settings.namespace
        }
        self.out: dict[str, _NodeOut] = defaultdict(_NodeOut)
        self.first: list[Action] = []  # finalizers, new package ConfigMaps
        self.last: list[Action] = []  # status, accepted config edits, deletions, events
        self.events: list[EmitEvent] = []
        self.gone: set[tuple[str, str]] = set()  # pods deleted by this pass
        self.terminating = {(p.namespace, p.name) for p in snapshot.pods if p.deleting}
        self._decoded: dict[tuple[str, str], podbuilder.PodPackage | None] = {}
        self.started: set[str] = set()  # nodes where this pass creates a pod
        self.complete: dict[tuple[str, str], bool] = {}
        self.requeue: float | None = None

    # --- small helpers ---------------------------------------------------------------------

    def wake_in(self, seconds: float) -> None:
        seconds = max(0.5, seconds)
        self.requeue = seconds if self.requeue is None else min(self.requeue, seconds)

    def delete_pod(self, pod: PodView, reason: str) -> None:
        if (pod.namespace, pod.name) not in self.gone and not pod.deleting:
            self.gone.add((pod.namespace, pod.name))
            self.out[pod.node].actions.append(DeletePod(pod.namespace, pod.name, reason))

    def pod_package(self, pod: PodView) -> podbuilder.PodPackage | None:
        key = (pod.namespace, pod.name)
        if key not in self._decoded:
            self._decoded[key] = podbuilder.decode_pod_package(pod)
        return self._decoded[key]

    def present(self, pod: PodView) -> bool:
        """Still there after this pass (finished pods kept for a retry backoff included)."""
        return (pod.namespace, pod.name) not in self.gone and not pod.deleting

    def name_taken(self, namespace: str, name: str) -> bool:
        """A pod of that name is on its way out: creating it again now would collide."""
        return (namespace, name) in self.gone or (namespace, name) in self.terminating

    def live(self, pod: PodView) -> bool:
        return (
            (pod.namespace, pod.name) not in self.gone
            and not pod.deleting
            and pod.phase not in gates.FINISHED_PHASES
        )

    def event(self, kind: str, name: str, reason: str, message: str) -> None:
        self.events.append(EmitEvent(kind, name, reason, message))

    # --- the pass ---------------------------------------------------------------------------

    def run(self) -> Plan:
        ordered = ordering.skyhook_order(self.snap.skyhooks)
        self._auto_taint(ordered)
        for scr in ordered:
            if scr.deleting:
                self._cleanup(scr)
            else:
                _Skyhook(self, scr).run()
        self._runtime_required(ordered)
        return Plan(tuple(self._assemble()), self.requeue)

    def _auto_taint(self, skyhooks: Sequence[SkyhookView]) -> None:
        taint = self.settings.runtime_required_taint
        for scr in skyhooks:
            spec = scr.spec
            if (
                scr.deleting
                or spec is None
                or not (spec.runtime_required and spec.auto_taint_new_nodes)
            ):
                continue
            for node in self.snap.nodes:
                new = not any(k.startswith(keys.PREFIX) for k in node.annotations)
                if (
                    new
                    and spec.node_selector.matches(node.labels)
                    and not any(t.same_as(taint) for t in node.taints)
                ):
                    out = self.out[node.name]
                    if taint not in out.add_taints:
                        out.add_taints.append(taint)
                        out.changes.annotations[keys.auto_taint_key(taint.key)] = "true"

    def _runtime_required(self, skyhooks: Sequence[SkyhookView]) -> None:
        """Drop the runtime-required taint where every runtimeRequired Skyhook is complete."""
        taint = self.settings.runtime_required_taint
        for node in self.snap.nodes:
            if not any(t.same_as(taint) for t in node.taints):
                continue
            wanting = [
                s
                for s in skyhooks
                if s.spec is not None
                and s.spec.runtime_required
                and s.spec.node_selector.matches(node.labels)
            ]
            live = [s for s in wanting if not s.deleting]
            if wanting and all(self.complete.get((s.name, node.name), False) for s in live):
                self.out[node.name].remove_taints.append(taint)

    def _cleanup(self, scr: SkyhookView) -> None:
        """A deleted Skyhook: remove its keys and conditions from nodes, uncordon what it
        cordoned, delete its pods and ConfigMaps, then let it go."""
        for node in self.snap.nodes:
            out = self.out[node.name]
            nodestate.removal_into(out.changes, node, scr.name)
            if node.annotations.get(keys.cordon_key(scr.name)) == "true":
                out.unschedulable = False
            types = {keys.not_ready_condition(scr.name), keys.erroring_condition(scr.name)}
            out.drop_conditions += [c.type for c in node.conditions if c.type in types]
        for pod in self.skyhook_pods.get(scr.name, ()):
            self.delete_pod(pod, f"Skyhook {scr.name} deleted")
        for cm in self.snap.configmaps:
            if (
                cm.labels.get(keys.NAME_LABEL) == scr.name
                or cm.labels.get(keys.NODE_META_LABEL) == scr.name
            ):
                self.last.append(DeleteConfigMap(cm.namespace, cm.name))
        if keys.FINALIZER in scr.finalizers:
            self.last.append(RemoveFinalizer(scr.name, keys.FINALIZER))

    def _assemble(self) -> list[Action]:
        actions = list(self.first)
        for name in sorted(self.out):
            out = self.out[name]
            node = self.nodes.get(name)
            if node is None:
                actions += out.actions
                continue
            if out.changes or out.add_taints or out.remove_taints or out.unschedulable is not None:
                unschedulable = (
                    out.unschedulable if out.unschedulable != node.unschedulable else None
                )
                actions.append(
                    PatchNode(
                        name,
                        annotations=dict(out.changes.annotations),
                        labels=dict(out.changes.labels),
                        add_taints=tuple(out.add_taints),
                        remove_taints=tuple(out.remove_taints),
                        unschedulable=unschedulable,
                    )
                )
            for scr in out.metadata_for:
                cm = self._metadata_configmap(scr, node, out.changes)
                if cm is not None:
                    actions.append(cm)
            actions += out.actions
            if out.conditions or out.drop_conditions:
                actions.append(
                    SetNodeConditions(name, tuple(out.conditions), tuple(out.drop_conditions))
                )
        return actions + self.last + self.events

    def _metadata_configmap(
        self, scr: SkyhookView, node: NodeView, changes: NodeChanges
    ) -> UpsertConfigMap | None:
        def applied(current: Mapping[str, str], delta: Mapping[str, str | None]) -> dict[str, str]:
            merged = {**current, **delta}
            return {k: v for k, v in merged.items() if v is not None}

        manifest = podbuilder.build_metadata_configmap(
            self.settings,
            scr,
            node,
            labels=applied(node.labels, changes.labels),
            annotations=applied(node.annotations, changes.annotations),
        )
        existing = self.configmaps.get(manifest["metadata"]["name"])
        if existing is not None and dict(existing.data) == manifest["data"]:
            return None
        return UpsertConfigMap(manifest)


def _tolerated(node: NodeView, spec: SkyhookSpec, runtime_taint: Taint) -> bool:
    tolerations = [UNSCHEDULABLE_TOLERATION, *spec.additional_tolerations]
    if spec.runtime_required:
        tolerations.append(
            Toleration(runtime_taint.key, "Equal", runtime_taint.value, runtime_taint.effect)
        )
    return all(any(t.tolerates(taint) for t in tolerations) for taint in node.taints)


class _Skyhook:
    """One Skyhook's share of a pass."""

    def __init__(self, run: _Pass, scr: SkyhookView) -> None:
        self.p = run
        self.scr = scr
        self.name = scr.name
        self.settings = run.settings
        self.before: dict[str, NodeState] = {}
        self.state: dict[str, NodeState] = {}
        self.config_updates: dict[str, list[str]] = {
            k: list(v)
            for k, v in (scr.status.get("configUpdates") or {}).items()
            if isinstance(v, list)
        }
        self.stale_config: set[str] = set()  # packages whose ConfigMap must be rewritten first
        self.conditions: list[dict[str, Any]] = []
        self._expected: dict[tuple[str, str], dict[str, Any]] = {}

    def node_state(self, node: NodeView) -> NodeState:
        if node.name not in self.state:
            self.before[node.name] = self.state[node.name] = nodestate.read(node, self.name)
        return self.state[node.name]

    def entries(self, node: NodeView) -> dict[str, PackageEntry]:
        return dict(self.node_state(node).packages)

    def set_entries(self, node: NodeView, entries: Mapping[str, PackageEntry]) -> None:
        self.state[node.name] = replace(self.node_state(node), entries=dict(entries), error="")

    def pods(self) -> list[PodView]:
        return self.p.skyhook_pods.get(self.name, [])

    # --- the Skyhook's pass ---------------------------------------------------------------------

    def run(self) -> None:
        scr = self.scr
        if keys.FINALIZER not in scr.finalizers:
            self.p.first.append(AddFinalizer(scr.name, keys.FINALIZER))
        spec = scr.spec
        if spec is None:
            self._blocked(status.CONDITION_SPEC_INVALID, "SpecInvalid", "; ".join(scr.spec_errors))
            return
        if spec.deployment_policy:  # not supported yet: fail closed, as upstream does when missing
            message = f'DeploymentPolicy "{spec.deployment_policy}" not found'
            self._blocked(status.CONDITION_POLICY_NOT_FOUND, "DeploymentPolicyNotFound", message)
            return
        self.spec = spec
        self.paused = scr.annotations.get(keys.PAUSE_ANNOTATION) == "true" or spec.pause
        self.disabled = scr.annotations.get(keys.DISABLE_ANNOTATION) == "true"
        self.matched = sorted(
            (n for n in self.p.snap.nodes if spec.node_selector.matches(n.labels)),
            key=ordering.node_order_key,
        )
        matched_names = {n.name for n in self.matched}
        for pod in self.pods():
            self._learn(pod)
        self.boot_ids = self._track_reboots()
        self._validate_pods()
        self._configmaps()
        self._clear_config_updates_on_version_change()
        statuses = self._rollout()
        for node in self.p.snap.nodes:  # left the selector: give back a cordon we hold
            if node.name not in matched_names:
                self._release_unselected(node)
        self._save_nodes()
        self._status(statuses)

    def _blocked(self, condition: str, reason: str, message: str) -> None:
        """A Skyhook that cannot run at all: status blocked, with a condition saying why."""
        wanted = {
            "status": status.BLOCKED,
            "conditions": status.merge_conditions(
                list(self.scr.status.get("conditions") or []),
                [status.condition(condition, True, reason, message, self.p.now)],
            ),
        }
        patch = status.merge_patch({k: self.scr.status.get(k) for k in wanted}, wanted)
        if patch:
            self.p.last.append(PatchSkyhookStatus(self.name, patch))

    # --- learning -------------------------------------------------------------------------------

    def _learn(self, pod: PodView) -> None:
        pkg = self.p.pod_package(pod)
        node = self.p.nodes.get(pod.node)
        if pkg is None or pod.deleting:
            return
        if node is None or pkg.invalid:
            self.p.delete_pod(pod, "node gone" if node is None else "marked invalid")
            return
        entries = self.entries(node)
        entry = entries.get(f"{pkg.name}|{pkg.version}")
        if entry is None or entry.stage != pkg.stage or entry.state == COMPLETE:
            if (
                entry is not None
                and entry.stage == pkg.stage
                and pod.phase in gates.FINISHED_PHASES
            ):
                self.p.delete_pod(pod, "result already recorded")
            elif entry is None or entry.stage != pkg.stage:
                self.p.delete_pod(pod, "no matching package entry (stale pod)")
            else:
                self.p.delete_pod(pod, "result already recorded")
            return
        result = learning.outcome(pod)
        label = f"[{pkg.name}:{pkg.version}]"
        if result.result == learning.SUCCEEDED:
            self.set_entries(
                node, learning.record_success(entries, pkg, result.restarts, self.spec.packages)
            )
            self.p.delete_pod(pod, "stage complete")
            self.p.event(
                "Node",
                node.name,
                "Apply",
                f"Package {label} state complete on [skyhook:{self.name}]",
            )
        elif result.result == learning.FAILED:
            updated = learning.record_failure(entries, pkg, result.restarts)
            if entry.state != ERRORING:
                self.p.event(
                    "Node",
                    node.name,
                    "Apply",
                    f"Package {label} state erroring on [skyhook:{self.name}]",
                )
            if pod.phase == "Failed":  # the kubelet gave up: retry after a backoff
                key = f"{pkg.name}|{pkg.version}"
                wait = learning.backoff_s(
                    updated[key].restarts,
                    self.settings.retry_backoff_base_s,
                    self.settings.retry_backoff_max_s,
                )
                since = (
                    (self.p.now - result.finished_at).total_seconds()
                    if result.finished_at
                    else wait
                )
                if since >= wait:
                    updated[key] = replace(updated[key], restarts=updated[key].restarts + 1)
                    self.p.delete_pod(pod, "retrying failed stage")
                else:
                    self.p.wake_in(wait - since)
            self.set_entries(node, updated)

    def _track_reboots(self) -> dict[str, str]:
        """A new boot id completes the interrupt a node was waiting on (or, with
        REAPPLY_ON_REBOOT, starts the node over)."""
        recorded = self.scr.status.get("nodeBootIds") or {}
        boot_ids: dict[str, str] = {}
        for node in self.matched:
            before = recorded.get(node.name)
            if node.boot_id:
                boot_ids[node.name] = node.boot_id
            if not before or not node.boot_id or before == node.boot_id:
                continue
            entries = self.entries(node)
            waiting = {
                k: e for k, e in entries.items() if e.stage == INTERRUPT and e.state != COMPLETE
            }
            # Our own reboot interrupt never counts as "a reboot to reapply after": that would
            # reinstall, reboot again, and loop.
            if self.settings.reapply_on_reboot and not waiting:
                self.set_entries(node, {})
                self.p.event(
                    "Node",
                    node.name,
                    "Reboot",
                    f"detected reboot, resetting node for [{self.name}] to be reapplied",
                )
                continue
            if waiting:
                for key, entry in waiting.items():
                    entries[key] = replace(entry, state=COMPLETE)
                self.set_entries(node, entries)
                for pod in self.p.pods_on_node.get(node.name, ()):
                    if (
                        pod.labels.get(keys.NAME_LABEL) == self.name
                        and keys.INTERRUPT_LABEL in pod.labels
                    ):
                        self.p.delete_pod(pod, "reboot detected: interrupt done")
                self.p.event(
                    "Node",
                    node.name,
                    "Reboot",
                    f"detected reboot of [{node.name}] for [skyhook:{self.name}]",
                )
        return boot_ids

    def _validate_pods(self) -> None:
        """Delete running pods that no longer do what the spec asks (operator.md §6.3)."""
        for pod in self.pods():
            if not self.p.live(pod):
                continue
            pkg = self.p.pod_package(pod)
            node = self.p.nodes.get(pod.node)
            if pkg is None or node is None:
                continue
            entry = self.entries(node).get(f"{pkg.name}|{pkg.version}")
            if entry is None or entry.stage != pkg.stage:
                self.p.delete_pod(pod, "stale: the node records another stage")
                continue
            wanted = self.spec.packages.get(pkg.name)
            if (
                pkg.stage in {UNINSTALL, INTERRUPT}
                or wanted is None
                or wanted.version != pkg.version
            ):
                continue
            manifest = podbuilder.build_stage_pod(
                self.settings, self.scr, wanted, node.name, pkg.stage
            )
            if not podbuilder.matches(pod, manifest):
                self.p.delete_pod(pod, "the package spec changed")
                self._reset_entry(node, wanted.key)

    def _expected_pod(self, package: Package, stage: str) -> dict[str, Any]:
        """What a stage pod of `package` should contain; `matches` ignores the node, so one
        manifest per package and stage serves every node."""
        key = (package.key, stage)
        if key not in self._expected:
            self._expected[key] = podbuilder.build_stage_pod(
                self.settings, self.scr, package, "-", stage
            )
        return self._expected[key]

    def _reset_entry(self, node: NodeView, key: str) -> None:
        entries = self.entries(node)
        if key in entries:
            entries[key] = replace(entries[key], state=IN_PROGRESS)
            self.set_entries(node, entries)

    # --- config maps --------------------------------------------------------------------------

    def _configmaps(self) -> None:
        wanted_names = set()
        for package in self.spec.packages.values():
            if not package.config_map:
                continue
            name = keys.package_configmap_name(self.name, package.name, package.version)
            wanted_names.add(name)
            current = self.p.configmaps.get(name)
            if current is None:
                self.p.first.append(
                    UpsertConfigMap(
                        podbuilder.build_package_configmap(self.settings, self.scr, package)
                    )
                )
            elif dict(current.data) != dict(package.config_map):
                self._config_edit(package, current)
        for cm in self.p.snap.configmaps:
            if cm.labels.get(keys.NAME_LABEL) == self.name and cm.name not in wanted_names:
                self.p.last.append(DeleteConfigMap(cm.namespace, cm.name))
        matched = {keys.node_metadata_configmap_name(self.name, n.name) for n in self.matched}
        for cm in self.p.snap.configmaps:
            if cm.labels.get(keys.NODE_META_LABEL) == self.name and cm.name not in matched:
                self.p.last.append(DeleteConfigMap(cm.namespace, cm.name))

    def _config_edit(self, package: Package, current: ConfigMapView) -> None:
        """A configMap edit is accepted once no pod of the package is running: every node past
        its config stage goes back to config, and the ConfigMap is rewritten after the nodes."""
        self.stale_config.add(package.name)
        label = podbuilder.package_label(package.name, package.version)
        for pod in self.pods():
            if pod.labels.get(keys.PACKAGE_LABEL) != label or not self.p.live(pod):
                continue
            pkg = self.p.pod_package(pod)
            failing = learning.outcome(pod).result == learning.FAILED
            if failing and pkg is not None and pkg.stage in {CONFIG, INTERRUPT, POST_INTERRUPT}:
                self.p.delete_pod(pod, "superseded by a configMap edit")
            else:
                return  # wait for it: the edit must not change files under a running stage
        old = dict(current.data)
        changed = sorted(k for k, v in package.config_map.items() if old.get(k) != v)
        all_done = all(
            stages.is_complete(package, self.entries(n), self.config_updates) for n in self.matched
        )
        previous = [] if all_done else self.config_updates.get(package.name, [])
        self.config_updates[package.name] = sorted(set(previous) | set(changed))
        for node in self.matched:
            entries = self.entries(node)
            entry = entries.get(package.key)
            if entry is not None and entry.stage in {CONFIG, INTERRUPT, POST_INTERRUPT}:
                entries[package.key] = replace(entry, stage=CONFIG, state=IN_PROGRESS, restarts=0)
                self.set_entries(node, entries)
        self.p.last.append(
            UpsertConfigMap(podbuilder.build_package_configmap(self.settings, self.scr, package))
        )

    def _clear_config_updates_on_version_change(self) -> None:
        for name in list(self.config_updates):
            package = self.spec.packages.get(name)
            if package is None or any(
                e.name == name and e.version != package.version
                for n in self.matched
                for e in self.entries(n).values()
            ):
                del self.config_updates[name]

    # --- rollout -------------------------------------------------------------------------------

    def _ready_for_us(self, node: NodeView) -> bool:
        """Every Skyhook ahead of this one that targets the node is complete there."""
        for other in ordering.skyhook_order(self.p.snap.skyhooks):
            if other.name == self.name:
                return True
            spec = other.spec
            if (
                spec is None
                or other.deleting
                or other.annotations.get(keys.DISABLE_ANNOTATION) == "true"
            ):
                continue
            if spec.node_selector.matches(node.labels) and not self.p.complete.get(
                (other.name, node.name), True
            ):
                return False
        return True

    def _rollout(self) -> dict[str, str]:
        spec = self.spec
        work: dict[str, stages.NodeWork] = {}
        blocked: dict[str, bool] = {}
        occupied: list[NodeView] = []
        candidates: list[NodeView] = []
        ignored: list[str] = []
        untolerated: list[str] = []
        for node in self.matched:
            self._normalise(node)
            state = self.node_state(node)
            node_work = stages.node_work(spec.packages, state.packages, self.config_updates)
            work[node.name] = node_work
            done = node_work.complete and not state.error
            self.p.complete[(self.name, node.name)] = done
            if node.labels.get(keys.IGNORE_LABEL) == "true":
                ignored.append(node.name)
            if not _tolerated(node, spec, self.settings.runtime_required_taint):
                untolerated.append(node.name)
            blocked[node.name] = (
                bool(state.error) or node.name in ignored or node.name in untolerated
            )
            if done:
                continue
            has_pods = any(
                p.labels.get(keys.NAME_LABEL) == self.name and self.p.present(p)
                for p in self.p.pods_on_node.get(node.name, ())
            )
            if state.status in {status.IN_PROGRESS, status.ERRORING} or has_pods or state.cordoned:
                occupied.append(node)
            elif not blocked[node.name] and node.ready and self._ready_for_us(node):
                candidates.append(node)
        limit = budget.ceiling(spec.budget, len(self.matched))
        admitted: list[NodeView] = []
        if not (self.paused or self.disabled):
            admitted, _ = budget.admit(occupied, candidates, limit)
        running = {n.name for n in occupied} | {n.name for n in admitted}
        for node in admitted:
            state = self.node_state(node)
            if state.version is None:
                self.state[node.name] = replace(state, version=self.settings.operator_version)
        statuses: dict[str, str] = {}
        for node in self.matched:
            nw = work[node.name]
            can_work = node.name in running and not (
                self.paused or self.disabled or blocked[node.name]
            )
            if can_work and node.ready and not self.p.complete[(self.name, node.name)]:
                _NodeRun(self, node, nw).run()
                nw = stages.node_work(
                    spec.packages, self.node_state(node).packages, self.config_updates
                )
                self.p.complete[(self.name, node.name)] = nw.complete
            statuses[node.name] = self._finish_node(node, node.name in running, blocked[node.name])
        self._selection_conditions(ignored, untolerated)
        return statuses

    def _normalise(self, node: NodeView) -> None:
        """Re-key same-version entries spelled differently; drop finished uninstall markers of
        packages that are gone."""
        entries = self.entries(node)
        changed = False
        packages = self.spec.packages
        if all(
            e.name in packages and e.version == packages[e.name].version for e in entries.values()
        ):
            return
        for old, new in stages.node_work(
            self.spec.packages, entries, self.config_updates
        ).renames.items():
            entry = entries.pop(old)
            if new not in entries:
                package = self.spec.packages[entry.name]
                entries[new] = replace(entry, version=package.version)
            changed = True
        for key, entry in list(entries.items()):
            wanted = self.spec.packages.get(entry.name)
            if (
                entry.stage == UNINSTALL
                and entry.state == COMPLETE
                and (wanted is None or wanted.key != key)
            ):
                del entries[key]
                changed = True
        if changed:
            self.set_entries(node, entries)

    def _finish_node(self, node: NodeView, in_progress: bool, blocked: bool) -> str:
        state = self.node_state(node)
        complete = self.p.complete[(self.name, node.name)]
        erroring = any(e.state in {ERRORING, "unknown"} for e in state.packages.values())
        value = status.node_status(
            complete=complete,
            blocked=blocked,
            erroring=erroring,
            in_progress=in_progress,
            paused=self.paused,
            disabled=self.disabled,
        )
        out = self.p.out[node.name]
        if complete and state.cordoned:
            out.unschedulable = False
            state = replace(state, cordoned=False)
        if complete and state.status != status.COMPLETE and state.entries is not None:
            self.p.event("Node", node.name, "State", f"Skyhook [{self.name}] complete.")
        self.state[node.name] = replace(state, status=value)
        wanted = nodestate.conditions_for(self.name, complete, erroring)
        out.conditions += nodestate.stale_conditions(node, wanted)
        return value

    def _release_unselected(self, node: NodeView) -> None:
        state = self.node_state(node)
        has_pods = any(
            p.labels.get(keys.NAME_LABEL) == self.name and self.p.live(p)
            for p in self.p.pods_on_node.get(node.name, ())
        )
        if state.cordoned and not has_pods:
            self.p.out[node.name].unschedulable = False
            self.state[node.name] = replace(state, cordoned=False)

    def _selection_conditions(self, ignored: list[str], untolerated: list[str]) -> None:
        now = self.p.now
        self.conditions.append(
            status.condition(
                keys.CONDITION_NODES_IGNORED,
                bool(ignored),
                "NodesIgnored",
                f"Node [{', '.join(ignored)}] has ignore label set. Skipping."
                if ignored
                else "No nodes have ignore label set.",
                now,
            )
        )
        self.conditions.append(
            status.condition(
                keys.CONDITION_TAINT_NOT_TOLERABLE,
                bool(untolerated),
                "TaintNotTolerable",
                f"Node [{', '.join(untolerated)}] has taints that are not tolerable. Skipping."
                if untolerated
                else "All nodes have tolerable taints.",
                now,
            )
        )

    # --- saving ----------------------------------------------------------------------------

    def _save_nodes(self) -> None:
        for name, after in self.state.items():
            node = self.p.nodes[name]
            nodestate.diff_into(self.p.out[name].changes, node, self.name, self.before[name], after)

    def _status(self, statuses: dict[str, str]) -> None:
        scr = self.scr
        current = scr.status
        overall = status.skyhook_status(statuses, paused=self.paused, disabled=self.disabled)
        complete, in_progress = status.counts(statuses)
        matched = len(self.matched)
        conditions = list(self.conditions)
        old_status = current.get("status")
        if old_status != overall:
            conditions.append(
                status.condition(
                    keys.CONDITION_TRANSITION,
                    overall == status.COMPLETE,
                    overall,
                    f"Transitioned [{old_status or ''}] -> [{overall}]",
                    self.p.now,
                    generation=scr.generation,
                )
            )
            self.p.event(
                "Skyhook",
                self.name,
                "State",
                f"Skyhook transitioned [{old_status or ''}] -> [{overall}]",
            )
        node_state = {
            n.name: {k: e.to_json() for k, e in sorted(self.node_state(n).packages.items())}
            for n in self.matched
            if self.node_state(n).entries is not None
        }
        desired: dict[str, Any] = {
            "status": overall,
            "nodeState": node_state,
            "nodeStatus": dict(statuses),
            "nodeBootIds": self.boot_ids,
            "configUpdates": {k: v for k, v in self.config_updates.items() if v},
            "completeNodes": f"{complete}/{matched}",
            "nodesInProgress": in_progress,
            "packageList": status.package_list(self.spec.packages),
            "compartmentStatuses": {
                keys.DEFAULT_COMPARTMENT: {
                    "matched": matched,
                    "ceiling": budget.reported_ceiling(self.spec.budget, matched),
                    "inProgress": list(statuses.values()).count(status.IN_PROGRESS),
                    "completed": complete,
                    "progressPercent": complete * 100 // matched if matched else 0,
                }
            },
            "conditions": status.merge_conditions(
                list(current.get("conditions") or []), conditions
            ),
        }
        if overall == status.COMPLETE:
            desired["observedGeneration"] = scr.generation
        elif "observedGeneration" in current:
            desired["observedGeneration"] = current["observedGeneration"]
        keep = {k: current[k] for k in desired if k in current}
        patch = status.merge_patch(keep, desired)
        if patch:
            self.p.last.append(PatchSkyhookStatus(self.name, patch))


class _NodeRun:
    """Advance one admitted node for one Skyhook: start the stages that may start now."""

    def __init__(self, sky: _Skyhook, node: NodeView, work: stages.NodeWork) -> None:
        self.sky = sky
        self.p = sky.p
        self.node = node
        self.work = work
        self.entries = sky.entries(node)
        self.pods = [p for p in self.p.pods_on_node.get(node.name, ()) if self.p.live(p)]
        self.ours = [
            p
            for p in self.p.pods_on_node.get(node.name, ())
            if p.labels.get(keys.NAME_LABEL) == sky.name and self.p.present(p)
        ]
        self.busy = {p.labels.get(keys.PACKAGE_LABEL) for p in self.ours}
        self.created = 0

    def run(self) -> None:
        sky = self.sky
        if self.work.uninstalls:
            for entry in self.work.uninstalls:
                stand_in = podbuilder.uninstall_stand_in(entry.name, entry.version, entry.image)
                self._start(stand_in, UNINSTALL)
        else:
            self._spec_work()
        sky.set_entries(self.node, self.entries)

    def _spec_work(self) -> None:
        sky = self.sky
        packages = sky.spec.packages
        due = {n: s for n, s in self.work.due.items() if n not in sky.stale_config}
        ready = ordering.runnable(
            packages,
            due,
            lambda dep: stages.is_complete(packages[dep], self.entries, sky.config_updates),
        )
        updates = sky.config_updates
        interrupting = [
            n
            for n in ready
            if due[n] in {APPLY, UPGRADE, CONFIG, INTERRUPT}
            and interrupts.has_interrupt(packages[n], updates.get(n, ()))
        ]
        gate = gates.check(self.node, self.pods, sky.spec.pod_non_interrupt_labels)
        if interrupting:
            self._cordon_and_drain(gate, packages[interrupting[0]])
        at_interrupt = [packages[n] for n in ready if due[n] == INTERRUPT]
        if at_interrupt:
            # The interrupt goes first: it needs the node to itself, and starting more work now
            # would only delay it (and a reboot would cut that work short).
            self._interrupt(at_interrupt, gate)
            return
        for name in ready:
            package, stage = packages[name], due[name]
            if name in interrupting and not gate.open:
                continue
            self._start(package, stage)

    def _cordon_and_drain(self, gate: gates.GateResult, package: Package) -> None:
        sky = self.sky
        state = sky.node_state(self.node)
        if not self.node.unschedulable and not state.cordoned:
            self.p.out[self.node.name].unschedulable = True
            sky.state[self.node.name] = replace(state, cordoned=True)
        if gate.to_evict:
            self.p.event(
                "Node",
                self.node.name,
                "Interrupt",
                f"draining node [{self.node.name}] package [{package.name}:{package.version}] from [skyhook:{sky.name}]",
            )
            for pod in gate.to_evict:
                self.p.out[self.node.name].actions.append(EvictPod(pod.namespace, pod.name))
        if not gate.open:
            self.p.wake_in(GATE_POLL_S)

    def _start(self, package: Package, stage: str) -> None:
        sky = self.sky
        if podbuilder.package_label(package.name, package.version) in self.busy:
            return  # its pod is still running; its result arrives through learning
        if sky.spec.serial and (self.ours or self.created):
            return
        entry = self.entries.get(package.key)
        restarts = (
            entry.restarts
            if entry is not None and entry.stage == stage and entry.state == ERRORING
            else 0
        )
        manifest = podbuilder.build_stage_pod(sky.settings, sky.scr, package, self.node.name, stage)
        if not self._create(manifest):
            return
        self.entries[package.key] = PackageEntry(
            package.name,
            package.version,
            package.image,
            stage,
            IN_PROGRESS,
            package.container_sha,
            restarts,
        )
        label = f"[{package.name}:{package.version}]"
        self.p.event(
            "Node",
            self.node.name,
            "Apply",
            f"Applying package {label} from [skyhook:{sky.name}] stage [{stage}]",
        )
        sky.conditions.append(
            status.condition(
                keys.CONDITION_APPLY_PACKAGE,
                True,
                "ApplyPackage",
                f"Applying package [{package.name}:{package.version}] to node [{self.node.name}]",
                self.p.now,
                generation=sky.scr.generation,
            )
        )

    def _create(self, manifest: dict[str, Any]) -> bool:
        meta = manifest["metadata"]
        if self.p.name_taken(meta["namespace"], meta["name"]):
            self.p.wake_in(1.0)
            return False
        out = self.p.out[self.node.name]
        if self.sky.scr not in out.metadata_for:
            out.metadata_for.append(self.sky.scr)
        out.actions.append(CreatePod(manifest))
        self.busy.add(manifest["metadata"]["labels"][keys.PACKAGE_LABEL])
        self.created += 1
        self.p.started.add(self.node.name)
        return True

    def _interrupt(self, due: list[Package], gate: gates.GateResult) -> None:
        """One interrupt pod for every package due for an interrupt, once nothing else of ours
        runs on the node and the node is drained."""
        sky = self.sky
        on_node = self.p.pods_on_node.get(self.node.name, ())
        if any(keys.NAME_LABEL in p.labels and self.p.present(p) for p in on_node):
            return
        if self.created or not gate.open:
            return
        merged = interrupts.merge(due, sky.config_updates)
        if merged is None:
            return
        manifest = podbuilder.build_interrupt_pod(
            sky.settings, sky.scr, merged.chosen, self.node.name, merged.interrupt
        )
        if not self._create(manifest):
            return
        for package in merged.covered:
            state = IN_PROGRESS if package.name == merged.chosen.name else SKIPPED
            base = self.entries.get(package.key) or PackageEntry(
                package.name, package.version, package.image
            )
            self.entries[package.key] = replace(base, stage=INTERRUPT, state=state, restarts=0)
        chosen = merged.chosen
        self.p.event(
            "Skyhook",
            sky.name,
            "Interrupt",
            f"Interrupting node [{self.node.name}] package [{chosen.name}:{chosen.version}] from [skyhook:{sky.name}]",
        )
