"""One Skyhook's share of a pass: learn from its pods, select nodes, admit them under the
budget, advance them, and return the node state and status it decided as one `Decision`.

The steps (learn.py, configmaps.py, noderun.py) read a `SkyhookContext` and return their
decisions; `SkyhookPass` merges each one before the next step runs, so every step sees what
the earlier ones decided.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from skyhook_planner.model import nodestate
from skyhook_planner.model import status as statuses
from skyhook_planner.model.actions import (
    AddFinalizer,
    AnnotateSkyhook,
    EmitEvent,
    Held,
    PatchSkyhookStatus,
)
from skyhook_planner.model.nodestate import NodeState
from skyhook_planner.model.policy import BatchState, Compartment, Policy
from skyhook_planner.model.snapshot import NodeView, SkyhookView
from skyhook_planner.model.spec import Budget, SkyhookSpec
from skyhook_planner.model.vocabulary import Taint, Toleration
from skyhook_planner.passes import configmaps, learn
from skyhook_planner.passes.advance import advance
from skyhook_planner.passes.context import PassIndex, SkyhookContext
from skyhook_planner.passes.decision import Decision
from skyhook_planner.rules import batches, budget, holds, ordering, stages
from skyhook_schemas import keys
from skyhook_schemas.nodestate import (
    BLOCKED,
    COMPLETE,
    ERRORING,
    IN_PROGRESS,
    SKIPPED,
    UNINSTALL,
    UNKNOWN,
)

UNSCHEDULABLE_TOLERATION = Toleration(keys.UNSCHEDULABLE_TAINT_KEY, "Exists", effect="NoSchedule")


def decide(index: PassIndex, scr: SkyhookView, earlier: Decision) -> Decision:
    """What the pass does for `scr`, given what the Skyhooks before it decided."""
    return SkyhookPass(index, scr, earlier).run().released()


def _holds_slot(state: NodeState) -> bool:
    return state.status in {IN_PROGRESS, ERRORING} or state.cordoned


def tolerated(node: NodeView, spec: SkyhookSpec, runtime_taint: Taint) -> bool:
    tolerations = [UNSCHEDULABLE_TOLERATION, *spec.additional_tolerations]
    if spec.runtime_required:
        tolerations.append(
            Toleration(runtime_taint.key, "Equal", runtime_taint.value, runtime_taint.effect)
        )
    return all(any(t.tolerates(taint) for t in tolerations) for taint in node.taints)


class SkyhookPass:
    """One Skyhook's share of a pass. `decided` accumulates its steps' decisions."""

    def __init__(self, index: PassIndex, scr: SkyhookView, earlier: Decision) -> None:
        self.index = index
        self.scr = scr
        self.name = scr.name
        self.settings = index.settings
        self.earlier = earlier
        updates = scr.status.get("configUpdates") or {}
        self.decided = Decision(
            config_updates={k: list(v) for k, v in updates.items() if isinstance(v, list)}
        )

    def _take(self, decision: Decision) -> None:
        self.decided.merge(decision)

    def run(self) -> Decision:
        scr = self.scr
        if keys.FINALIZER not in scr.finalizers:
            self.decided.first.append(AddFinalizer(scr.name, keys.FINALIZER))
        version = self.settings.operator_version
        if scr.annotations.get(keys.SKYHOOK_VERSION_ANNOTATION) != version:
            self.decided.first.append(
                AnnotateSkyhook(scr.name, {keys.SKYHOOK_VERSION_ANNOTATION: version})
            )
        spec = scr.spec
        if spec is None:
            message = statuses.summarize(scr.spec_errors)
            self._blocked(statuses.CONDITION_SPEC_INVALID, "SpecInvalid", message)
            return self.decided
        self.policy: Policy | None = None
        if spec.deployment_policy:
            found = self.index.policies.get(spec.deployment_policy)
            if found is None:  # fail closed, as upstream does
                message = f'DeploymentPolicy "{spec.deployment_policy}" not found'
                self._blocked(
                    statuses.CONDITION_POLICY_NOT_FOUND, "DeploymentPolicyNotFound", message
                )
                return self.decided
            if found.policy is None:
                prefix = f'DeploymentPolicy "{found.name}": '
                message = prefix + statuses.summarize(
                    found.errors, statuses.MAX_CONDITION_MESSAGE - len(prefix)
                )
                self._blocked(statuses.CONDITION_POLICY_INVALID, "DeploymentPolicyInvalid", message)
                return self.decided
            self.policy = found.policy
        unavailable = self._unavailable_artifacts(spec)
        if unavailable:
            self._blocked(
                statuses.CONDITION_IMAGE_COMPATIBILITY, "ImageCompatibilityUnavailable", unavailable
            )
            return self.decided
        self.spec = spec
        self._spec_warnings(spec)
        self.holds = self._holds(spec)
        self.paused = scr.annotations.get(keys.PAUSE_ANNOTATION) == "true" or spec.pause
        self.disabled = scr.annotations.get(keys.DISABLE_ANNOTATION) == "true"
        self.matched = sorted(
            (n for n in self.index.snap.nodes if spec.node_selector.matches(n.labels)),
            key=ordering.node_order_key,
        )
        ctx = self.ctx = SkyhookContext(
            self.index,
            scr,
            spec=spec,
            matched=self.matched,
            earlier=self.earlier,
            so_far=self.decided,
            holds=self.holds,
        )
        for pod in ctx.pods():
            self._take(learn.from_pod(ctx, pod))
        self.boot_ids, rebooted = learn.track_reboots(ctx)
        self._take(rebooted)
        self._take(learn.validate_pods(ctx))
        self._take(configmaps.reconcile(ctx))
        self._take(configmaps.clear_on_version_change(ctx))
        node_statuses = self._rollout()
        matched_names = {n.name for n in self.matched}
        for node in self.index.snap.nodes:  # left the selector: give back a cordon we hold
            if node.name not in matched_names:
                self._release_unselected(node)
        self._save_nodes()
        self._status(node_statuses)
        return self.decided

    def _blocked(self, condition: str, reason: str, message: str) -> None:
        """A Skyhook that cannot run at all: status blocked, with a condition saying why and a
        Warning Event when that reason is new."""
        previous = next(
            (c for c in self.scr.status.get("conditions") or () if c.get("type") == condition),
            None,
        )
        if (
            previous is None
            or previous.get("status") != "True"
            or previous.get("message") != message
        ):
            self.decided.events.append(
                EmitEvent("Skyhook", self.name, reason, message, type="Warning")
            )
        wanted = {
            "status": BLOCKED,
            "conditions": statuses.merge_conditions(
                list(self.scr.status.get("conditions") or []),
                [
                    statuses.condition(condition, True, reason, message, self.index.now),
                    *statuses.kstatus_conditions(
                        BLOCKED, self.index.now, generation=self.scr.generation, message=message
                    ),
                ],
            ),
        }
        patch = statuses.merge_patch({k: self.scr.status.get(k) for k in wanted}, wanted)
        if patch:
            self.decided.last.append(PatchSkyhookStatus(self.name, patch))

    def _unavailable_artifacts(self, spec: SkyhookSpec) -> str:
        """Why some package's image compatibility artifact cannot be used ("" when all can):
        no node gets a guessed image, so the Skyhook waits until every artifact is readable."""
        problems = []
        for name, package in sorted(spec.packages.items()):
            source = package.image_compatibility
            if source is None or source.inline is not None:
                continue
            found = self.index.snap.image_artifacts.get(source.source)
            if found is None:
                problems.append(f"package {name}: {source.source} not fetched yet")
            elif isinstance(found, str):
                problems.append(f"package {name}: {found}")
        return "; ".join(problems)

    def _spec_warnings(self, spec: SkyhookSpec) -> None:
        """Spellings upstream runs that we read differently are reported in a condition, and in
        a Warning Event when they change."""
        previous = next(
            (
                c
                for c in self.scr.status.get("conditions") or ()
                if c.get("type") == statuses.CONDITION_SPEC_WARNING
            ),
            None,
        )
        message = "; ".join(spec.warnings)
        if not message and (previous is None or previous.get("status") == "False"):
            return
        if message and (previous is None or previous.get("message") != message):
            self.decided.events.append(
                EmitEvent("Skyhook", self.name, "SpecWarning", message, type="Warning")
            )
        self.decided.conditions.append(
            statuses.condition(
                statuses.CONDITION_SPEC_WARNING,
                bool(message),
                "SpecWarning" if message else "NoSpecWarning",
                message or "The spec is read as written.",
                self.index.now,
                generation=self.scr.generation,
            )
        )

    def _holds(self, spec: SkyhookSpec) -> holds.Holds:
        """A closed maintenance window or firing alert (the Skyhook's own gates, else its
        policy's), with a status condition per gate."""
        window, gate = spec.maintenance_window, spec.alert_gate
        if self.policy is not None:
            window = window or self.policy.maintenance_window
            gate = gate or self.policy.alert_gate
        found = holds.evaluate(
            window,
            gate,
            self.index.alerts,
            self.index.now,
            alert_recheck_s=self.settings.alert_recheck_s,
            generation=self.scr.generation,
        )
        self.decided.conditions += found.conditions
        return found

    # --- rollout -------------------------------------------------------------------------------

    def _set_state(self, node: NodeView, state: NodeState) -> None:
        self.decided.states[node.name] = state

    def _complete(self, node: NodeView) -> bool:
        return self.decided.complete.get((self.name, node.name), False)

    def _ready_for_us(self, node: NodeView) -> bool:
        """Every Skyhook ahead of this one that targets the node is complete there."""
        for other in ordering.skyhook_order(self.index.snap.skyhooks):
            if other.name == self.name:
                return True
            spec = other.spec
            if (
                spec is None
                or other.deleting
                or other.annotations.get(keys.DISABLE_ANNOTATION) == "true"
            ):
                continue
            if spec.node_selector.matches(node.labels) and not self.ctx.complete(
                other.name, node.name, default=True
            ):
                return False
        return True

    def _rollout(self) -> dict[str, str]:
        spec, ctx = self.spec, self.ctx
        work: dict[str, stages.NodeWork] = {}
        blocked: dict[str, bool] = {}
        failed: set[str] = set()
        occupied: list[NodeView] = []
        candidates: list[NodeView] = []
        ignored: list[str] = []
        untolerated: list[str] = []
        unmatched: list[str] = []
        for node in self.matched:
            self._normalise(node)
            if self._record_selection(node):
                unmatched.append(node.name)
            state = ctx.state(node)
            node_work = stages.node_work(
                ctx.node_packages(node).packages,
                state.packages,
                ctx.config_updates,
                ctx.reselected(node),
            )
            work[node.name] = node_work
            done = node_work.complete and not state.error
            self.decided.complete[(self.name, node.name)] = done
            if node.labels.get(keys.IGNORE_LABEL) == "true":
                ignored.append(node.name)
            if not tolerated(node, spec, self.settings.runtime_required_taint):
                untolerated.append(node.name)
            blocked[node.name] = (
                bool(state.error)
                or node.name in ignored
                or node.name in untolerated
                or node.name in unmatched
            )
            busy = node.name in self.index.busy
            holding = node.name in self.index.holding  # being started or released
            if done and not holding:
                continue
            if any(
                e.state == ERRORING or (e.state == IN_PROGRESS and e.restarts)
                for e in state.packages.values()
            ):
                failed.add(node.name)
            has_pods = bool(ctx.ours_on(node.name))
            in_progress = state.status in {IN_PROGRESS, ERRORING} or state.cordoned
            if in_progress or has_pods or holding:
                occupied.append(node)
            elif not busy and not blocked[node.name] and node.ready and self._ready_for_us(node):
                candidates.append(node)
        admitted = self._admit(occupied, candidates, failed)
        running = {n.name for n in occupied} | {n.name for n in admitted}
        for node in admitted:
            state = ctx.state(node)
            if state.version is None:
                self._set_state(node, replace(state, version=self.settings.operator_version))
        node_statuses: dict[str, str] = {}
        for node in self.matched:
            can_work = node.name in running and not (
                self.paused or self.disabled or blocked[node.name] or node.name in self.index.busy
            )
            if can_work and node.ready and not self._complete(node):
                # Advancing only ever starts stages, so the node stays incomplete.
                self._take(advance(ctx, node, work[node.name]))
            node_statuses[node.name] = self._finish_node(
                node, node.name in running, blocked[node.name]
            )
        self._selection_conditions(ignored, untolerated)
        self._unmatched_condition(unmatched)
        return node_statuses

    def _admit(
        self, occupied: list[NodeView], candidates: list[NodeView], failed: set[str]
    ) -> list[NodeView]:
        """The candidates that start now: the policy's batches, or as many as the budget
        leaves room for; none while paused, disabled or held."""
        # Nodes left half-way (a pause, an external status edit) finish before fresh ones
        # start; the sort is stable, so node order decides otherwise.
        candidates = self._not_held(sorted(candidates, key=lambda n: not self._started(n)))
        if self.policy is not None:
            return self._admit_by_compartment(self.policy, occupied, candidates, failed)
        if self.paused or self.disabled:
            return []
        limit = budget.ceiling(self.spec.budget, len(self.matched))
        admitted, _ = budget.admit(occupied, candidates, limit)
        return admitted

    def _not_held(self, candidates: list[NodeView]) -> list[NodeView]:
        """The candidates that may be admitted: none while a closed window holds every stage
        (those are reported as held)."""
        hold = self.holds.stages
        if hold is None or not candidates:
            return candidates
        self.decided.held += [
            Held(self.name, n.name, hold.reason, hold.message) for n in candidates
        ]
        self.decided.wake_in(hold.recheck_s)
        return []

    def _admit_by_compartment(
        self,
        rollout: Policy,
        occupied: list[NodeView],
        candidates: list[NodeView],
        failed: set[str],
    ) -> list[NodeView]:
        """Each compartment evaluates its finished batch and starts the next (rules/batches.py)."""
        previous = self.scr.status.get("compartmentStatuses") or {}
        busy = {n.name for n in occupied}
        admitted: list[NodeView] = []
        self.compartments: dict[str, tuple[Compartment, list[str], BatchState | None]] = {}
        groups = batches.assign(rollout, self.matched, ordering.node_order_key)
        for compartment in rollout.all:
            members = {n.name for n in groups[compartment.name]}
            before = None
            if compartment.strategy is not None:
                before = BatchState.from_json(
                    (previous.get(compartment.name) or {}).get("batchState")
                )
            found = batches.Found(
                complete=sum(self._complete(n) for n in groups[compartment.name]),
                failed=len(members & failed),
                active=len((members & busy) - failed),
                occupied=len(members & busy),
            )
            after, room = batches.next_batch(
                compartment,
                before,
                len(members),
                found,
                may_evaluate=self.scr.status.get("status") != COMPLETE,
                may_start=not (self.paused or self.disabled),
            )
            admitted += [n for n in candidates if n.name in members][:room]
            if after is not None and after.should_stop and not (before and before.should_stop):
                self.decided.events.append(
                    EmitEvent(
                        "Skyhook",
                        self.name,
                        "RolloutStopped",
                        f'Compartment "{compartment.name}" stopped after '
                        f"{after.consecutive_failures} failed batches in a row.",
                        type="Warning",
                    )
                )
            self.compartments[compartment.name] = (
                compartment,
                [n.name for n in groups[compartment.name]],
                after,
            )
        return admitted

    def _started(self, node: NodeView) -> bool:
        return any(
            e.state in {IN_PROGRESS, ERRORING, SKIPPED}
            for e in self.ctx.state(node).packages.values()
        )

    def _normalise(self, node: NodeView) -> None:
        """Re-key same-version entries spelled differently; drop finished uninstall markers of
        packages that are gone."""
        packages = self.spec.packages
        if all(
            e.name in packages and e.version == packages[e.name].version
            for e in self.ctx.state(node).packages.values()
        ):
            return
        entries = self.ctx.entries(node)
        changed = False
        renames = stages.node_work(packages, entries, self.ctx.config_updates).renames
        for old, new in renames.items():
            entry = entries.pop(old)
            if new not in entries:
                entries[new] = replace(entry, version=packages[entry.name].version)
            changed = True
        for key, entry in list(entries.items()):
            wanted = packages.get(entry.name)
            if (
                entry.stage == UNINSTALL
                and entry.state == COMPLETE
                and (wanted is None or wanted.key != key)
            ):
                del entries[key]
                changed = True
        if changed:
            self._set_state(node, replace(self.ctx.state(node), entries=entries, error=""))

    def _record_selection(self, node: NodeView) -> bool:
        """Note on the node why no candidate image matches (True: skip the node), and drop
        such notes once one does. What ran is recorded when a stage starts (noderun)."""
        state = self.ctx.state(node)
        selection = self.ctx.node_packages(node)
        images = {k: dict(v) for k, v in (state.images or {}).items()}
        for name in self.spec.packages:
            record = images.get(name, {})
            if name in selection.unmatched:
                images[name] = {**record, "unmatched": selection.unmatched[name]}
            elif "unmatched" in record:
                record.pop("unmatched")
                if record:
                    images[name] = record
                else:
                    del images[name]
        if images != (state.images or {}):
            self._set_state(node, replace(state, images=images))
        return bool(selection.unmatched)

    def _unmatched_condition(self, unmatched: list[str]) -> None:
        if not unmatched and not any(p.image_compatibility for p in self.spec.packages.values()):
            return
        self.decided.conditions.append(
            statuses.condition(
                statuses.CONDITION_NO_COMPATIBLE_IMAGE,
                bool(unmatched),
                "NoCompatibleImage",
                f"Node [{', '.join(unmatched)}] matches no candidate of an image compatibility "
                "artifact (reason in its skyhook.nvidia.com/imageSelection_ annotation). Skipping."
                if unmatched
                else "Every node matches a candidate image.",
                self.index.now,
            )
        )

    def _finish_node(self, node: NodeView, in_progress: bool, blocked: bool) -> str:
        state = self.ctx.state(node)
        complete = self._complete(node)
        erroring = any(e.state in {ERRORING, UNKNOWN} for e in state.packages.values())
        value = statuses.node_status(
            complete=complete,
            blocked=blocked,
            erroring=erroring,
            in_progress=in_progress,
            paused=self.paused,
            disabled=self.disabled,
        )
        if complete and state.cordoned:
            self.decided.node(node.name).unschedulable = False
            state = replace(state, cordoned=False)
        if complete and state.status != COMPLETE and state.entries is not None:
            self.decided.event("Node", node.name, "State", f"Skyhook [{self.name}] complete.")
        # Most nodes are as their annotations and status label say: nothing to save for them.
        if not (
            state is self.ctx.before(node)
            and state.status == value
            and node.labels.get(keys.node_status_key(self.name)) == value
        ):
            self._set_state(node, replace(state, status=value))
        wanted = nodestate.conditions_for(self.name, complete, erroring)
        stale = nodestate.stale_conditions(node, wanted)
        if stale:
            self.decided.node(node.name).conditions += stale
        return value

    def _release_unselected(self, node: NodeView) -> None:
        state = self.ctx.state(node)
        has_pods = any(
            p.labels.get(keys.NAME_LABEL) == self.name
            and self.index.is_ours(p)
            and self.ctx.live(p)
            for p in self.index.pods_on_node.get(node.name, ())
        )
        if state.cordoned and not has_pods:
            self.decided.node(node.name).unschedulable = False
            self._set_state(node, replace(state, cordoned=False))

    def _selection_conditions(self, ignored: list[str], untolerated: list[str]) -> None:
        now = self.index.now
        self.decided.conditions.append(
            statuses.condition(
                keys.CONDITION_NODES_IGNORED,
                bool(ignored),
                "NodesIgnored",
                f"Node [{', '.join(ignored)}] has ignore label set. Skipping."
                if ignored
                else "No nodes have ignore label set.",
                now,
            )
        )
        self.decided.conditions.append(
            statuses.condition(
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
        """Node states become annotation and label changes; a node whose status turns
        in_progress from anything else is one this pass starts, one that stops holding a
        budget slot one it releases."""
        for name, after in self.decided.states.items():
            node = self.index.nodes[name]
            before = self.ctx.before(node)
            self.decided.node(name).changes.merge(nodestate.diff(node, self.name, before, after))
            if after.status == IN_PROGRESS and before.status != IN_PROGRESS:
                self.decided.starting.add(name)
            if _holds_slot(before) and not _holds_slot(after):
                self.decided.releasing.add(name)

    def _status(self, node_statuses: dict[str, str]) -> None:
        scr = self.scr
        current = scr.status
        overall = statuses.skyhook_status(node_statuses, paused=self.paused, disabled=self.disabled)
        complete, in_progress = statuses.counts(node_statuses)
        matched = len(self.matched)
        conditions = list(self.decided.conditions)
        # A gate removed from the spec takes its condition with it.
        dropped = set(holds.HOLD_CONDITIONS) - {c["type"] for c in self.holds.conditions}
        old_status = current.get("status")
        if old_status != overall:
            conditions.append(
                statuses.condition(
                    keys.CONDITION_TRANSITION,
                    overall == COMPLETE,
                    overall,
                    f"Transitioned [{old_status or ''}] -> [{overall}]",
                    self.index.now,
                    generation=scr.generation,
                )
            )
            self.decided.event(
                "Skyhook",
                self.name,
                "State",
                f"Skyhook transitioned [{old_status or ''}] -> [{overall}]",
            )
        conditions += statuses.kstatus_conditions(
            overall,
            self.index.now,
            generation=scr.generation,
            message=statuses.erroring_message(node_statuses),
        )
        node_state = {
            n.name: {k: e.to_json() for k, e in sorted(self.ctx.state(n).packages.items())}
            for n in self.matched
            if self.ctx.state(n).entries is not None
        }
        config_updates = self.decided.config_updates or {}
        desired: dict[str, Any] = {
            "status": overall,
            "nodeState": node_state,
            "nodeStatus": dict(node_statuses),
            "nodeBootIds": self.boot_ids,
            "configUpdates": {k: v for k, v in config_updates.items() if v},
            "completeNodes": f"{complete}/{matched}",
            "nodesInProgress": in_progress,
            "packageList": statuses.package_list(self.spec.packages),
            "compartmentStatuses": self._compartment_statuses(node_statuses, overall),
            "conditions": statuses.merge_conditions(
                [
                    c
                    for c in current.get("conditions") or []
                    if c.get("type") not in statuses.POLICY_BLOCKED_CONDITIONS
                    and c.get("type") not in dropped
                ],
                conditions,
            ),
        }
        if overall == COMPLETE:
            desired["observedGeneration"] = scr.generation
        elif "observedGeneration" in current:
            desired["observedGeneration"] = current["observedGeneration"]
        keep = {k: current[k] for k in desired if k in current}
        patch = statuses.merge_patch(keep, desired)
        if patch:
            self.decided.last.append(PatchSkyhookStatus(self.name, patch))

    def _compartment_statuses(
        self, node_statuses: dict[str, str], overall: str
    ) -> dict[str, dict[str, Any]]:
        """status.compartmentStatuses: per compartment its nodes and batch state; a legacy
        Skyhook reports all its nodes in `__default__`."""
        groups: dict[str, tuple[Budget, list[str], BatchState | None, bool]]
        if self.policy is None:
            groups = {
                keys.DEFAULT_COMPARTMENT: (self.spec.budget, list(node_statuses), None, False)
            }
        else:
            old_status = self.scr.status.get("status")
            old_packages = self.scr.status.get("packageList")
            # Reset on completion, or once when the package versions change.
            reset = batches.reset_enabled(self.spec.reset_batch_state, self.policy) and (
                (overall == COMPLETE and old_status != COMPLETE)
                or old_packages not in (None, statuses.package_list(self.spec.packages))
            )
            groups = {
                name: (compartment.budget, members, state, reset)
                for name, (compartment, members, state) in self.compartments.items()
            }
        result: dict[str, dict[str, Any]] = {}
        for name, (budget_of, members, state, reset) in groups.items():
            matched = len(members)
            complete = sum(node_statuses[n] == COMPLETE for n in members)
            entry: dict[str, Any] = {
                "matched": matched,
                "ceiling": budget.reported_ceiling(budget_of, matched),
                "inProgress": sum(node_statuses[n] == IN_PROGRESS for n in members),
                "completed": complete,
                "progressPercent": complete * 100 // matched if matched else 0,
            }
            if state is not None:
                entry["batchState"] = (BatchState() if reset else state).to_json()
            result[name] = entry
        return result
