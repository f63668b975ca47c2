"""One Skyhook's share of a pass, as steps that each return what they decided. `decide` runs
them in order and merges each `Decision` before the next step runs, so every step reads what
the earlier ones decided (through the `SkyhookContext`):

1. `prepare.bookkeeping` and `prepare.prepare`: the finalizer, the version annotation, and what
   the Skyhook needs to run at all; one that cannot run is `prepare.unrunnable`.
2. learn from its pods (learn.py), keep package ConfigMaps current (configmaps.py).
3. `select.tidy` each selected node's entries; `select.select` each node's work and blockers.
4. `admit.compartments` (with a DeploymentPolicy), `health.check` the health gate, then
   `admit.admit` the candidates.
5. `advance` (advance.py) each admitted node that may work; `report.finish` each node's status.
6. `report.save` node states as annotation changes; `report.status` the Skyhook's status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from skyhook_planner.model.snapshot import SkyhookView
from skyhook_planner.passes import (
    admit,
    configmaps,
    health,
    learn,
    prepare,
    report,
    select,
    uninstall,
)
from skyhook_planner.passes.advance import advance
from skyhook_planner.passes.context import PassIndex, SkyhookContext
from skyhook_planner.passes.decision import Decision, NodeOut, SkyhookWork
from skyhook_planner.passes.earlier import Earlier
from skyhook_planner.passes.memory import (
    NodeInputs,
    NodeVerdict,
    SkyhookInputs,
    SkyhookMemory,
)
from skyhook_planner.rules import blockers, deadlines, ordering
from skyhook_planner.rules import health as health_rules
from skyhook_schemas import keys


@dataclass(frozen=True)
class Share:
    """What one Skyhook's share of the pass returns: its output for the plan, the nodes it
    runs (None when it could not run), which the Skyhooks after it read (passes/earlier.py),
    and what it keeps for the next pass (None: nothing)."""

    decided: Decision
    running: frozenset[str] | None = None
    memory: SkyhookMemory | None = None


def decide(
    index: PassIndex, scr: SkyhookView, earlier: Earlier, memory: SkyhookMemory | None = None
) -> Share:
    """What the pass does for `scr`, given what the Skyhooks before it decided and what the last
    pass kept (`memory`: quiet nodes whose inputs are unchanged are not looked at again)."""
    decided = Decision(
        work=SkyhookWork(config_updates={k: list(v) for k, v in scr.status.config_updates.items()})
    )
    decided.merge(prepare.bookkeeping(index, scr))
    prepared = prepare.prepare(index, scr, memory.selected if memory is not None else None)
    if isinstance(prepared, prepare.Unrunnable):
        return Share(decided.merge(prepare.unrunnable(index, scr, prepared)).released())
    decided.merge(prepared.decided)
    if scr.deleting:  # only here while its uninstall-enabled packages remain (plan.py)
        prepared = uninstall.for_deletion(prepared)
    return _ShareRun(
        index, scr, rollout=prepared, earlier=earlier, decided=decided, memory=memory
    ).run()


class _ShareRun:
    """One runnable Skyhook's share of the pass. `decided` is its working decision, which the
    steps read back through the context; `run` returns it."""

    def __init__(
        self,
        index: PassIndex,
        scr: SkyhookView,
        *,
        rollout: prepare.Rollout,
        earlier: Earlier,
        decided: Decision,
        memory: SkyhookMemory | None,
    ) -> None:
        self.rollout = rollout
        self.decided = decided
        self.closed_gates = blockers.closed_gates(
            _ahead(index, scr),
            index.snap.nodes,
            lambda other, node: earlier.is_complete(other, node) or False,
        )
        self.inputs = _skyhook_inputs(index, scr, rollout, self.closed_gates)
        self.node_inputs = _node_inputs(index, scr, rollout, earlier)
        self.kept = memory.kept(self.inputs, self.node_inputs) if memory is not None else {}
        self.ctx = SkyhookContext(
            index,
            scr,
            spec=rollout.spec,
            matched=rollout.matched,
            earlier=earlier,
            so_far=decided,
            holds=rollout.holds,
            known={name: v.state for name, v in self.kept.items()},
        )
        self.noisy: set[str] = set()  # nodes it decided something for: not kept for the next pass

    def take(self, step: Decision | None, node: str | None = None) -> None:
        """Merge a step's decision, noting the nodes it decided something for."""
        if step is not None:
            self.noisy.update(_touched(self.ctx, step, node))
            self.decided.merge(step)

    def run(self) -> Share:
        ctx, decided = self.ctx, self.decided
        boot_ids = self.learn_from_pods()
        selection = self.select_nodes()
        groups = (
            admit.compartments(ctx, self.rollout, selection)
            if self.rollout.policy is not None
            else None
        )
        if groups is not None:
            decided.merge(groups.decided)
        gate = health.check(ctx, self.rollout, selection)
        decided.merge(gate.decided)
        admission = admit.admit(ctx, self.rollout, selection, groups, gate.halt)
        decided.merge(admission.decided)
        node_statuses, reused = self.advance_nodes(selection, admission)
        decided.merge(report.selection_conditions(ctx, self.rollout, selection))
        decided.merge(report.admin_cordons(ctx, self.rollout))
        decided.merge(_release_unselected(ctx, self.rollout))
        decided.merge(report.save(ctx, decided.work.states))
        decided.merge(uninstall.report(ctx, self.rollout))
        blocked_already = any(c["type"] == keys.CONDITION_BLOCKED for c in decided.work.conditions)
        decided.merge(
            report.drain_conditions(ctx, self.rollout, decided.work.drains, blocked_already)
        )
        node_state = _mirror(ctx, self.rollout, reused)
        selected = {n.name for n in self.rollout.matched}
        node_priority, node_order_offset = ordering.retire(
            {**ctx.scr.status.node_priority, **decided.work.picked},
            ctx.scr.status.node_order_offset,
            lambda node: node not in selected or decided.complete.get((ctx.name, node), False),
        )
        decided.merge(
            report.status(
                ctx,
                self.rollout,
                node_statuses,
                node_state=node_state,
                boot_ids=boot_ids,
                gated=bool(self.closed_gates),
                node_order=(node_priority, node_order_offset),
                groups=groups,
                conditions=decided.work.conditions,
                config_updates=decided.work.config_updates or {},
                batch_starts=admission.batch_starts,
                health_waiting=gate.waiting,
                deferred=admission.deferred,
            )
        )
        # Whatever the pass writes for a node makes it noisy, whichever step decided it; and a
        # pending configMap edit holds work back on every node, so nothing is kept from it.
        self.noisy |= _written(decided)
        config_settled = not decided.work.stale_config and (
            decided.work.config_updates == self.inputs.config_updates
        )
        quiet = (
            [n for n in self.rollout.matched if n.name not in self.noisy] if config_settled else []
        )
        verdicts = {
            n.name: reused.get(n.name)
            or NodeVerdict(
                state=ctx.state(n),
                selected=selection.nodes[n.name],
                running=n.name in admission.running,
                node_status=node_statuses[n.name],
                mirror=node_state.get(n.name),
            )
            for n in quiet
        }
        node_inputs = {n.name: self.node_inputs[n.name] for n in quiet}
        memory = SkyhookMemory(self.inputs, self.rollout.selected, node_inputs, verdicts)
        return Share(decided.released(), admission.running, memory)

    def learn_from_pods(self) -> dict[str, str]:
        """Learn from pods and reboots; returns the boot ids to record."""
        ctx = self.ctx
        for pod in ctx.pods():
            if pod.node not in self.kept:
                self.take(learn.from_pod(ctx, pod), pod.node)
        boot_ids, rebooted = learn.track_reboots(ctx)
        self.take(rebooted)
        deadline = deadlines.deadline_s(self.rollout.spec, self.rollout.policy)
        self.take(learn.reboot_deadlines(ctx, deadline))
        if self.rollout.paused:
            self.take(learn.stop_for_pause(ctx))
        self.take(learn.validate_pods(ctx, skip=self.kept))
        self.take(learn.expire_finished(ctx))
        return boot_ids

    def select_nodes(self) -> select.Selection:
        """Keep package ConfigMaps current, tidy each node's entries, select."""
        ctx, decided = self.ctx, self.decided
        decided.merge(configmaps.reconcile(ctx))
        decided.merge(configmaps.clear_on_version_change(ctx))
        if decided.work.stale_config or decided.work.config_updates != self.inputs.config_updates:
            self.kept = {}  # a config edit may send any node back: select every node again
        self.kept = {n: v for n, v in self.kept.items() if n not in decided.work.states}
        for node in self.rollout.matched:
            tidied = None if node.name in self.kept else select.tidy(ctx, node)
            if tidied is not None:
                decided.work.states[node.name] = tidied
                self.noisy.add(node.name)
        selection = select.select(ctx, self.rollout, self.kept, self.closed_gates)
        decided.merge(selection.decided)
        return selection

    def advance_nodes(
        self, selection: select.Selection, admission: admit.Admission
    ) -> tuple[dict[str, str], dict[str, NodeVerdict]]:
        """Advance each running node and report its status; returns the node statuses and the
        kept verdicts that held for the whole share."""
        ctx, rollout = self.ctx, self.rollout
        node_statuses: dict[str, str] = {}
        reused: dict[str, NodeVerdict] = {}
        switched_off = blockers.SwitchedOff(rollout.paused, rollout.disabled)
        for node in rollout.matched:
            running = node.name in admission.running
            verdict = self.kept.get(node.name)
            if verdict is not None and verdict.running == running:
                node_statuses[node.name] = reused.setdefault(node.name, verdict).node_status
                continue
            blocked = selection.blocked(node.name)
            complete = self.decided.complete[(ctx.name, node.name)]
            off = switched_off.check(node)
            gate = min(self.closed_gates, default=None)
            if running and gate is not None and not complete:
                # A gate ahead closed again (a new node, a new version): what runs finishes,
                # nothing new starts.
                self.decided.wait(ctx.name, node.name, (blockers.gate_reason(gate),))
                self.noisy.add(node.name)
            elif running and not (off or blocked):
                if node.ready and not complete:
                    # Advancing only ever starts stages, so the node stays incomplete.
                    self.take(advance(ctx, node, selection.work[node.name]), node.name)
            elif running and off and not complete:
                self.decided.wait(ctx.name, node.name, (off,))
                self.noisy.add(node.name)
            node_statuses[node.name], finished = report.finish(
                ctx, rollout, node, running=running, blocked=blocked
            )
            self.take(finished, node.name)
        return node_statuses, reused


def _release_unselected(ctx: SkyhookContext, rollout: prepare.Rollout) -> Decision:
    """Nodes that left the selector get back a cordon we hold."""
    decided = Decision()
    matched = {n.name for n in rollout.matched}
    for node in ctx.index.snap.nodes:
        if node.name not in matched:
            released = report.release_unselected(ctx, node)
            if released is not None:
                decided.merge(released)
    return decided


def _mirror(
    ctx: SkyhookContext, rollout: prepare.Rollout, reused: Mapping[str, NodeVerdict]
) -> dict[str, Mapping[str, Any]]:
    """The status's nodeState: each node's entries, taken over from its verdict when kept."""
    node_state: dict[str, Mapping[str, Any]] = {}
    for node in rollout.matched:
        verdict = reused.get(node.name)
        entries = verdict.mirror if verdict is not None else report.mirrored(ctx.state(node))
        if entries is not None:
            node_state[node.name] = entries
    return node_state


def _skyhook_inputs(
    index: PassIndex, scr: SkyhookView, rollout: prepare.Rollout, closed_gates: frozenset[str]
) -> SkyhookInputs:
    sources = {
        p.image_compatibility.source
        for p in rollout.spec.packages.values()
        if p.image_compatibility is not None
    }
    return SkyhookInputs(
        uid=scr.uid,
        generation=scr.generation,
        spec=rollout.spec,
        paused=rollout.paused,
        disabled=rollout.disabled,
        holds=rollout.holds,
        config_updates={k: list(v) for k, v in scr.status.config_updates.items()},
        artifacts={s: index.snap.image_artifacts.get(s) for s in sorted(sources)},
        settings=index.settings,
        ahead=tuple(
            (s.name, s.spec.node_selector if s.spec else None, s.spec.sequencing if s.spec else "")
            for s in _ahead(index, scr)
        ),
        closed_gates=closed_gates,
        health_gate=health_rules.gate_of(rollout.spec, rollout.policy),
    )


def _node_inputs(
    index: PassIndex, scr: SkyhookView, rollout: prepare.Rollout, earlier: Earlier
) -> dict[str, NodeInputs]:
    ahead = [earlier.complete.get(s.name, {}) for s in _ahead(index, scr)]
    recorded = scr.status.node_boot_ids
    pods_on_node = index.pods_on_node
    return {
        node.name: NodeInputs(
            node,
            pods_on_node.get(node.name, ()),
            tuple(complete.get(node.name) for complete in ahead) if ahead else (),
            recorded.get(node.name),
        )
        for node in rollout.matched
    }


def _ahead(index: PassIndex, scr: SkyhookView) -> tuple[SkyhookView, ...]:
    """The Skyhooks a node must finish before this one (rules/blockers.py)."""
    ordered = ordering.skyhook_order(index.snap.skyhooks)
    return blockers.EarlierSkyhooks.of(ordered, scr.name, lambda other, node: True).ahead


def _written(decision: Decision) -> set[str]:
    """The nodes `decision` writes to, evicts or deletes pods on, or reports an Event for."""
    found = {n for n, out in decision.nodes.items() if out != NodeOut()}
    found |= {e.name for e in decision.events if e.kind == "Node"}
    return found | decision.starting | decision.releasing


def _touched(ctx: SkyhookContext, decision: Decision, node: str | None = None) -> set[str]:
    """The nodes `decision` does something to; all of `node`'s share when it decides anything
    beyond restating the node's state (a timer, an event, a wait)."""
    found = _written(decision)
    found |= {n for n, s in decision.work.states.items() if s != ctx.state(ctx.index.nodes[n])}
    found |= {n for _, n in decision.waiting}
    if node is not None and (found or decision.requeue_after is not None or decision.events):
        found.add(node)
    return found
