"""One Skyhook's share of a pass: select nodes, admit them under the budget, advance them, and
write back node state and the Skyhook's status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from skyhook_operator import nodestate, status
from skyhook_operator.nodestate import (
    COMPLETE,
    ERRORING,
    IN_PROGRESS,
    SKIPPED,
    UNINSTALL,
    NodeState,
    PackageEntry,
)
from skyhook_operator.planner import (
    budget,
    configmaps,
    observe,
    ordering,
    stages,
)
from skyhook_operator.planner.model import (
    AddFinalizer,
    NodeView,
    PatchSkyhookStatus,
    PodView,
    SkyhookView,
    Taint,
)
from skyhook_operator.planner.noderun import NodeRun
from skyhook_operator.spec import SkyhookSpec, Toleration
from skyhook_schemas import keys

if TYPE_CHECKING:
    from skyhook_operator.planner.plan import Pass


UNSCHEDULABLE_TOLERATION = Toleration(keys.UNSCHEDULABLE_TAINT_KEY, "Exists", effect="NoSchedule")


def _tolerated(node: NodeView, spec: SkyhookSpec, runtime_taint: Taint) -> bool:
    tolerations = [UNSCHEDULABLE_TOLERATION, *spec.additional_tolerations]
    if spec.runtime_required:
        tolerations.append(
            Toleration(runtime_taint.key, "Equal", runtime_taint.value, runtime_taint.effect)
        )
    return all(any(t.tolerates(taint) for t in tolerations) for taint in node.taints)


class SkyhookPass:
    """One Skyhook's share of a pass."""

    def __init__(self, run: Pass, scr: SkyhookView) -> None:
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
        self.expected_pods: dict[tuple[str, str], dict[str, Any]] = {}  # see observe.py

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
            observe.learn(self, pod)
        self.boot_ids = observe.track_reboots(self)
        observe.validate_pods(self)
        configmaps.reconcile(self)
        configmaps.clear_on_version_change(self)
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
            # Nodes left half-way (a pause, an external status edit) finish before fresh ones
            # start; the sort is stable, so node order decides otherwise.
            candidates.sort(key=lambda n: not self._started(n))
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
                NodeRun(self, node, nw).run()
                nw = stages.node_work(
                    spec.packages, self.node_state(node).packages, self.config_updates
                )
                self.p.complete[(self.name, node.name)] = nw.complete
            statuses[node.name] = self._finish_node(node, node.name in running, blocked[node.name])
        self._selection_conditions(ignored, untolerated)
        return statuses

    def _started(self, node: NodeView) -> bool:
        return any(
            e.state in {IN_PROGRESS, ERRORING, SKIPPED}
            for e in self.node_state(node).packages.values()
        )

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
