"""What a Skyhook needs before its nodes are looked at: our finalizer and version annotation
(`bookkeeping`), its spec, DeploymentPolicy and image artifacts and the pass's fixed facts about
it (`prepare` -> `Rollout`), or why it cannot run at all (`Unrunnable`, written by `unrunnable`).
"""

from __future__ import annotations

from dataclasses import dataclass

from skyhook_planner.model import status as statuses
from skyhook_planner.model import waiting
from skyhook_planner.model.actions import AddFinalizer, AnnotateSkyhook, PatchSkyhookStatus
from skyhook_planner.model.policy import Policy
from skyhook_planner.model.snapshot import NodeView, SkyhookView
from skyhook_planner.model.spec import SkyhookSpec, unreadable_secrets
from skyhook_planner.model.waiting import Reason
from skyhook_planner.passes.context import PassIndex
from skyhook_planner.passes.decision import Decision
from skyhook_planner.passes.work import Step
from skyhook_planner.rules import holds, ordering
from skyhook_schemas import keys
from skyhook_schemas.nodestate import BLOCKED, UNKNOWN


def bookkeeping(index: PassIndex, scr: SkyhookView) -> Decision:
    """Our finalizer, and the annotation naming the operator version that manages the Skyhook."""
    decided = Decision()
    if keys.FINALIZER not in scr.finalizers:
        decided.first.append(AddFinalizer(scr.name, keys.FINALIZER))
    version = index.settings.operator_version
    if scr.annotations.get(keys.SKYHOOK_VERSION_ANNOTATION) != version:
        decided.first.append(AnnotateSkyhook(scr.name, {keys.SKYHOOK_VERSION_ANNOTATION: version}))
    return decided


@dataclass(frozen=True)
class Unrunnable:
    """Why a Skyhook cannot run at all this pass; its status says so in `condition`."""

    condition: str
    reason: str
    message: str
    matched: tuple[NodeView, ...] = ()  # the nodes it selects, which all wait on it


@dataclass(frozen=True)
class Rollout:
    """One Skyhook's fixed facts for this pass."""

    spec: SkyhookSpec
    policy: Policy | None
    holds: holds.Holds
    paused: bool
    disabled: bool
    matched: tuple[NodeView, ...]  # selected nodes, in node order
    decided: Step  # the spec warning and hold conditions found while preparing
    selected: ordering.Selected  # `matched` with what it was decided from, for the next pass


def prepare(
    index: PassIndex, scr: SkyhookView, last: ordering.Selected | None = None
) -> Rollout | Unrunnable:
    """`last`: the selection the last pass kept for this Skyhook, if any."""
    spec = scr.spec
    if spec is None:
        return Unrunnable(
            statuses.CONDITION_SPEC_INVALID, "SpecInvalid", statuses.summarize(scr.spec_errors)
        )
    # What admission refuses, for a Skyhook stored while the webhook was off or before the
    # Secret left the allowed ones: its pods would read that Secret.
    readable = index.settings.package_secrets
    if readable is not None and (
        unreadable := unreadable_secrets(spec, readable, index.settings.namespace)
    ):
        return Unrunnable(
            statuses.CONDITION_SPEC_INVALID, "SpecInvalid", statuses.summarize(unreadable)
        )
    selected = ordering.selected_nodes(index.snap.nodes, index.nodes, spec.node_selector, last)
    matched = selected.matched
    refused = _finalizer_refused(index, scr)
    if refused:
        return Unrunnable(statuses.CONDITION_WRITE_REFUSED, "WriteRefused", refused, matched)
    policy: Policy | None = None
    if spec.deployment_policy:
        found = index.policies.get(spec.deployment_policy)
        if found is None:  # fail closed, as upstream does
            message = f'DeploymentPolicy "{spec.deployment_policy}" not found'
            return Unrunnable(
                statuses.CONDITION_POLICY_NOT_FOUND, "DeploymentPolicyNotFound", message, matched
            )
        if found.policy is None:
            prefix = f'DeploymentPolicy "{found.name}": '
            message = prefix + statuses.summarize(
                found.errors, statuses.MAX_CONDITION_MESSAGE - len(prefix)
            )
            return Unrunnable(
                statuses.CONDITION_POLICY_INVALID, "DeploymentPolicyInvalid", message, matched
            )
        policy = found.policy
    unavailable = _unavailable_artifacts(index, spec)
    if unavailable:
        return Unrunnable(
            statuses.CONDITION_IMAGE_COMPATIBILITY,
            "ImageCompatibilityUnavailable",
            unavailable,
            matched,
        )
    decided = spec_warnings(index, scr, spec)
    window, gate = spec.maintenance_window, spec.alert_gate
    if policy is not None:  # the Skyhook's own gates, else its policy's
        window = window or policy.maintenance_window
        gate = gate or policy.alert_gate
    found_holds = holds.evaluate(
        window,
        gate,
        index.alerts,
        index.now,
        alert_recheck_s=index.settings.alert_recheck_s,
        generation=scr.generation,
    )
    decided.changes.conditions += found_holds.conditions
    return Rollout(
        spec=spec,
        policy=policy,
        holds=found_holds,
        paused=scr.annotations.get(keys.PAUSE_ANNOTATION) == "true",
        disabled=scr.annotations.get(keys.DISABLE_ANNOTATION) == "true",
        matched=matched,
        decided=decided,
        selected=selected,
    )


def _finalizer_refused(index: PassIndex, scr: SkyhookView) -> str:
    """Why our finalizer cannot be added ("" unless the apiserver refused it for this spec):
    no node is touched without it, or deleting the Skyhook would leave them as they are."""
    if keys.FINALIZER in scr.finalizers:
        return ""
    refusal = next(
        (
            r
            for r in index.snap.refusals
            if (r.skyhook, r.kind, r.generation) == (scr.name, keys.KIND, scr.generation)
        ),
        None,
    )
    if refusal is None:
        return ""
    return (
        "the apiserver refused the operator's finalizer, so no node is touched until the "
        f"spec changes: {refusal.message}"
    )


def _unavailable_artifacts(index: PassIndex, spec: SkyhookSpec) -> str:
    """Why some package's image compatibility artifact cannot be used ("" when all can): no
    node gets a guessed image, so the Skyhook waits until every artifact is readable."""
    problems = []
    for name, package in sorted(spec.packages.items()):
        source = package.image_compatibility
        if source is None or source.inline is not None:
            continue
        found = index.snap.image_artifacts.get(source.source)
        if found is None:
            problems.append(f"package {name}: {source.source} not fetched yet")
        elif isinstance(found, str):
            problems.append(f"package {name}: {found}")
    return "; ".join(problems)


# How `kubectl skyhook plan` names what holds the nodes of a Skyhook that cannot run.
_WAITING_LABELS = {
    statuses.CONDITION_SPEC_INVALID: "spec",
    statuses.CONDITION_IMAGE_COMPATIBILITY: "image",
    statuses.CONDITION_WRITE_REFUSED: "refused",
}


def unrunnable(index: PassIndex, scr: SkyhookView, why: Unrunnable) -> Decision:
    """A Skyhook that cannot run at all: status blocked, with a condition saying why and a
    Warning Event when that reason is new; every node it selects waits on it."""
    decided = Decision()
    previous = scr.status.condition(why.condition)
    if (
        previous is None
        or previous.get("status") != "True"
        or previous.get("message") != why.message
    ):
        decided.event(
            keys.KIND, scr.name, why.reason, why.message, type="Warning", action="BlockRollout"
        )
    status_key = keys.node_status_key(scr.name)
    wanted = {
        "status": BLOCKED,
        "conditions": statuses.merge_conditions(
            list(scr.status.conditions),
            [
                statuses.condition(why.condition, True, why.reason, why.message, index.now),
                *statuses.kstatus_conditions(
                    BLOCKED,
                    index.now,
                    generation=scr.generation,
                    message=why.message,
                    node_statuses=None  # an undecodable spec selects no node we could name
                    if why.condition == statuses.CONDITION_SPEC_INVALID
                    else statuses.NodeStatuses.of(
                        {  # the node's own record first: the status may list only some
                            node.name: node.labels.get(status_key)
                            or scr.status.node_status.get(node.name, UNKNOWN)
                            for node in why.matched
                        }
                    ),
                ),
            ],
            generation=scr.generation,
        ),
    }
    stored = scr.status.to_json()
    patch = statuses.merge_patch({k: stored.get(k) for k in wanted}, wanted)
    if patch:
        decided.last.append(PatchSkyhookStatus(scr.name, patch))
    label = _WAITING_LABELS.get(why.condition, "policy")
    reason = Reason(waiting.SKYHOOK, f"{label}: {why.message}")
    for node in why.matched:
        decided.wait(scr.name, node.name, (reason,))
    return decided


def spec_warnings(index: PassIndex, scr: SkyhookView, spec: SkyhookSpec) -> Step:
    """Spellings upstream runs that we read differently are reported in a condition, and in a
    Warning Event when they change."""
    decided = Step()
    previous = scr.status.condition(statuses.CONDITION_SPEC_WARNING)
    message = "; ".join(spec.warnings)
    if not message and (previous is None or previous.get("status") == "False"):
        return decided
    if message and (previous is None or previous.get("message") != message):
        decided.event(
            keys.KIND, scr.name, "SpecWarning", message, type="Warning", action="WarnSpec"
        )
    decided.changes.conditions.append(
        statuses.condition(
            statuses.CONDITION_SPEC_WARNING,
            bool(message),
            "SpecWarning" if message else "NoSpecWarning",
            message or "The spec is read as written.",
            index.now,
            generation=scr.generation,
        )
    )
    return decided
