"""One Skyhook's share of a pass, as steps that each return what they decided (a `Step`:
output for the plan and changes to the Skyhook's working state, passes/work.py). `decide` runs
them in order; the share folds each step into its output and its `SkyhookWork` before the
next step runs, and hands that work to the next step as an argument, so every step reads what
the earlier ones decided there, and what the Skyhooks before it decided in its
`SkyhookContext` (`Earlier`, passes/earlier.py):

1. `prepare.bookkeeping` and `prepare.prepare`: the finalizer, the version annotation, and what
   the Skyhook needs to run at all; one that cannot run is `prepare.unrunnable`.
2. learn from its pods (learn.py), keep package ConfigMaps current (configmaps.py).
3. `select.tidy` each selected node's entries; `select.select` each node's work and blockers.
4. `admit.compartments` (with a DeploymentPolicy), `health.check` the health gate, then
   `admit.admit` the candidates.
5. `advance` (advance.py) each admitted node that may work; `report.finish` each node's status.
6. `report.save` node states as annotation changes; `report.status` the Skyhook's status.

It returns a `Share`: its output for the plan, the nodes it runs, and its memory for the next
pass; the working state stays behind.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import compress, repeat
from typing import Any

from skyhook_planner.model import status_size
from skyhook_planner.model.nodestate import NodeState
from skyhook_planner.model.snapshot import NodeView, SkyhookView
from skyhook_planner.model.status import NodeStatuses
from skyhook_planner.passes import (
    admit,
    configmaps,
    health,
    learn,
    prepare,
    report,
    select,
    tally,
    uninstall,
)
from skyhook_planner.passes.advance import advance
from skyhook_planner.passes.context import PassIndex, SkyhookContext
from skyhook_planner.passes.decision import Decision, NodeOut
from skyhook_planner.passes.earlier import Earlier
from skyhook_planner.passes.memory import (
    NodeInputs,
    NodeVerdict,
    ShareTotals,
    SkyhookInputs,
    SkyhookMemory,
)
from skyhook_planner.passes.work import SkyhookWork, Step, WorkChanges
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
    decided = prepare.bookkeeping(index, scr)
    prepared = prepare.prepare(index, scr, memory.selected if memory is not None else None)
    if isinstance(prepared, prepare.Unrunnable):
        return Share(decided.merge(prepare.unrunnable(index, scr, prepared)))
    if scr.deleting:  # only here while its uninstall-enabled packages remain (plan.py)
        prepared = uninstall.for_deletion(prepared)
    return _ShareRun(
        index, scr, rollout=prepared, earlier=earlier, decided=decided, memory=memory
    ).run()


class _ShareRun:
    """One runnable Skyhook's share of the pass. It owns the share's output (`decided`) and
    its working state (`work`), hands the work to each step and folds each step's `Step` into
    both (`fold`, `take`) before the next step runs; `run` returns the output."""

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
        remembered = memory if memory is not None and memory.inputs == self.inputs else None
        self.ahead = tuple(earlier.complete.get(s.name, {}) for s in _ahead(index, scr))
        self.node_inputs, self.kept, self.unkept = _node_inputs(
            index, scr, rollout, self.ahead, remembered
        )
        # What the last pass found over the same nodes: the share starts from it and looks
        # only at the nodes not kept (`unkept`, in node order) while some are kept.
        last = remembered.totals if remembered is not None else None
        self.last_totals = (
            last
            if last is not None and self.kept and last.names == rollout.selected.names
            else None
        )
        self.last_tally = memory.tally if memory is not None else None
        self.ctx = SkyhookContext(
            index,
            scr,
            spec=rollout.spec,
            matched=rollout.matched,
            earlier=earlier,
            holds=rollout.holds,
            known=self.kept,
        )
        self.work = SkyhookWork(
            self.ctx, {k: list(v) for k, v in scr.status.config_updates.items()}
        )
        self.fold(rollout.decided)
        self.noisy: set[str] = set()  # nodes it decided something for: not kept for the next pass
        # Per node, when its first finished pod kept for its logs goes (learn.expire_finished)
        self.pods_go_at: dict[str, datetime | None] = {}

    def fold(self, step: Step) -> None:
        """Merge a step's output into the share's and its changes into the working state."""
        self.decided.merge(step.out)
        self.work.take(step)

    def take(self, step: Step | None, node: str | None = None) -> None:
        """`fold` a step, noting the nodes it decided something for."""
        if step is not None:
            self.noisy.update(_touched(self.work, step, node))
            self.fold(step)

    def run(self) -> Share:
        ctx, work, decided = self.ctx, self.work, self.decided
        boot_ids = self.learn_from_pods()
        selection = self.select_nodes()
        groups = (
            admit.compartments(ctx, self.rollout, selection)
            if self.rollout.policy is not None
            else None
        )
        if groups is not None:
            self.fold(groups.decided)
        gate = health.check(ctx, work, self.rollout, selection)
        self.fold(gate.decided)
        admission = admit.admit(ctx, work, self.rollout, selection, groups=groups, halt=gate.halt)
        self.fold(admission.decided)
        node_statuses, reused, looked_at = self.advance_nodes(selection, admission)
        decided.looked_at += len(looked_at)
        counted = self.count(set(looked_at))
        self.fold(report.selection_conditions(ctx, self.rollout, selection))
        if counted.admin_cordoned:
            self.fold(report.admin_cordons(ctx, self.rollout))
        self.fold(_release_unselected(ctx, work, self.rollout))
        self.fold(report.save(ctx, work.states))
        self.fold(uninstall.report(ctx, work, self.rollout, cycling=bool(counted.uninstalling)))
        blocked_already = any(c["type"] == keys.CONDITION_BLOCKED for c in work.conditions)
        self.fold(report.drain_conditions(ctx, self.rollout, work.drains, blocked_already))
        node_state = _mirror(work, self.rollout.matched, self.last_totals, reused, looked_at)
        lists = status_size.fit(
            node_statuses.by_node,
            node_state,
            boot_ids,
            limit=ctx.settings.status_node_lists_bytes,
            every_boot_id=ctx.settings.reapply_on_reboot,
            known=_list_sizes(self.last_totals, reused, looked_at),
        )
        selected = selection.nodes
        node_priority, node_order_offset = ordering.retire(
            {**ctx.scr.status.node_priority, **work.picked},
            ctx.scr.status.node_order_offset,
            lambda node: node not in selected or selected[node].done,
        )
        self.fold(
            report.status(
                ctx,
                self.rollout,
                node_statuses,
                lists=lists,
                gated=bool(self.closed_gates),
                node_order=(node_priority, node_order_offset),
                groups=groups,
                conditions=work.conditions,
                config_updates=work.config_updates,
                batch_starts=admission.batch_starts,
                health_waiting=gate.waiting,
                deferred=admission.deferred,
            )
        )
        # Whatever the pass writes for a node makes it noisy, whichever step decided it; and a
        # pending configMap edit holds work back on every node, so nothing is kept from it.
        self.noisy |= _written(decided)
        config_settled = not work.stale_config and (
            work.config_updates == self.inputs.config_updates
        )
        verdicts: dict[str, NodeVerdict] = {}
        if config_settled:
            # The reused verdicts carry over as they are (a copy, not a walk over the nodes);
            # the nodes looked at again get a new one unless they are noisy.
            verdicts = dict(reused)
            for name in self.noisy & verdicts.keys():
                del verdicts[name]
            nodes = ctx.index.nodes
            for name in set(looked_at) - self.noisy:
                verdicts[name] = NodeVerdict(
                    state=work.state(nodes[name]),
                    selected=selection.nodes[name],
                    running=name in admission.running,
                    node_status=node_statuses.by_node[name],
                    mirror=node_state.get(name),
                    list_bytes=lists.sizes[name],
                    pods_go_at=self.pods_go_at.get(name),
                )
        memory = SkyhookMemory(
            self.inputs,
            self.rollout.selected,
            self.node_inputs,
            verdicts,
            counted,
            selection.totals(admission.running, node_statuses, node_state, lists.sizes, boot_ids),
            self.ahead,
            self.ctx.scr.status.node_boot_ids,
        )
        return Share(decided, admission.running, memory)

    def count(self, fresh: set[str]) -> tally.Tally:
        """The tally over the selected nodes (passes/tally.py): the last pass's, with the nodes
        whose verdict was not reused (`fresh`) and those whose state changed recounted. Asked
        once the nodes are advanced: no later step changes a selected node's state."""
        work = self.work
        return tally.tally(
            self.last_tally,
            self.rollout.matched,
            fresh | work.states.keys(),
            nodes=self.ctx.index.nodes,
            state=work.state,
            admin_cordoned=self.ctx.admin_cordoned,
            touched=frozenset(self.ctx.earlier.cordons),
        )

    def learn_from_pods(self) -> dict[str, str]:
        """Learn from pods and reboots; returns the boot ids to record."""
        ctx, work = self.ctx, self.work
        for pod in ctx.pods(skip=self.kept):
            self.take(learn.from_pod(ctx, work, pod), pod.node)
        last = self.last_totals
        if last is not None:
            boot_ids, rebooted = learn.track_reboots(ctx, work, self.unkept, last.boot_ids)
        else:
            boot_ids, rebooted = learn.track_reboots(ctx, work, self.rollout.matched)
        self.take(rebooted)
        deadline = deadlines.deadline_s(self.rollout.spec, self.rollout.policy)
        self.take(learn.reboot_deadlines(ctx, work, deadline))
        if self.rollout.paused:
            self.take(learn.stop_for_pause(ctx, work))
        self.take(learn.validate_pods(ctx, work, skip=self.kept))
        known = dict(zip(self.kept, map(_PODS_GO_AT, self.kept.values()), strict=True))
        expiring, self.pods_go_at = learn.expire_finished(ctx, work, known)
        self.take(expiring)
        return boot_ids

    def select_nodes(self) -> select.Selection:
        """Keep package ConfigMaps current, tidy each node's entries, select."""
        ctx, work = self.ctx, self.work
        self.fold(configmaps.reconcile(ctx, work))
        self.fold(configmaps.clear_on_version_change(ctx, work))
        if work.stale_config or work.config_updates != self.inputs.config_updates:
            self.kept = {}  # a config edit may send any node back: select every node again
        changed = self.kept.keys() & work.states.keys()  # a step so far changed their state
        if changed:
            self.kept = {n: v for n, v in self.kept.items() if n not in changed}
            self.unkept = [n for n in self.rollout.matched if n.name not in self.kept]
        if not self.kept:
            self.last_totals, self.unkept = None, list(self.rollout.matched)
        tidied: dict[str, NodeState] = {}
        for node in self.unkept:
            found = select.tidy(ctx, work, node)
            if found is not None:
                tidied[node.name] = found
                self.noisy.add(node.name)
        self.fold(Step(changes=WorkChanges(states=tidied)))
        selection = select.select(
            ctx,
            work,
            self.rollout,
            self.kept,
            self.closed_gates,
            last=self.last_totals,
            again=self.unkept,
        )
        self.fold(selection.decided)
        return selection

    def advance_nodes(
        self, selection: select.Selection, admission: admit.Admission
    ) -> tuple[NodeStatuses, dict[str, NodeVerdict], list[str]]:
        """Advance each running node and report its status; returns the node statuses, the
        kept verdicts that held for the whole share and the nodes looked at again, in node
        order. A kept verdict holds while its node's admission is what it was decided with;
        when `select` started from the last pass's selection, so does this, and only the
        other nodes are looked at."""
        last = self.last_totals
        if last is None:
            found: dict[str, str] = {}
            reused: dict[str, NodeVerdict] = {}
            looked_at: list[str] = []
            for node in self.rollout.matched:
                verdict = self.kept.get(node.name)
                if verdict is not None and verdict.running == (node.name in admission.running):
                    found[node.name] = reused.setdefault(node.name, verdict).node_status
                else:
                    found[node.name] = self.advance_node(node, selection, admission)
                    looked_at.append(node.name)
            return NodeStatuses.of(found), reused, looked_at
        reused = dict(self.kept)
        # A kept verdict was decided with its node admitted as the last pass admitted it.
        readmitted = (admission.running ^ last.running) & reused.keys()
        for name in readmitted:
            del reused[name]
        by_node = dict(last.node_statuses.by_node)
        nodes = self.ctx.index.nodes
        again = {*readmitted, *(n.name for n in self.unkept)}
        looked_at = sorted(again, key=selection.order.__getitem__)
        for name in looked_at:
            by_node[name] = self.advance_node(nodes[name], selection, admission)
        return last.node_statuses.updated(by_node, looked_at), reused, looked_at

    def advance_node(
        self, node: NodeView, selection: select.Selection, admission: admit.Admission
    ) -> str:
        """Advance `node` if it runs and may work; returns its status."""
        ctx, rollout = self.ctx, self.rollout
        running = node.name in admission.running
        blocked = selection.blocked(node.name)
        complete = selection.nodes[node.name].done
        off = blockers.SwitchedOff(rollout.paused, rollout.disabled).check(node)
        gate = min(self.closed_gates, default=None)
        if running and gate is not None and not complete:
            # A gate ahead closed again (a new node, a new version): what runs finishes,
            # nothing new starts.
            self.decided.wait(ctx.name, node.name, (blockers.gate_reason(gate),))
            self.noisy.add(node.name)
        elif running and not (off or blocked):
            if node.ready and not complete:
                # Advancing only ever starts stages, so the node stays incomplete.
                work_on = selection.nodes[node.name].work
                self.take(advance(ctx, self.work, node, work_on), node.name)
        elif running and off and not complete:
            self.decided.wait(ctx.name, node.name, (off,))
            self.noisy.add(node.name)
        status, finished = report.finish(
            ctx, self.work, rollout, node, complete=complete, running=running, blocked=blocked
        )
        self.take(finished, node.name)
        return status


def _mirror(
    work: SkyhookWork,
    matched: Sequence[NodeView],
    last: ShareTotals | None,
    reused: Mapping[str, NodeVerdict],
    looked_at: Sequence[str],
) -> dict[str, Mapping[str, Any]]:
    """The status's nodeState over the `matched` nodes: each node's entries, taken over from
    its verdict when kept, or from the last pass's totals (`last`) for all but the nodes looked
    at again."""
    if last is None:
        node_state: dict[str, Mapping[str, Any]] = {}
        for node in matched:
            verdict = reused.get(node.name)
            entries = verdict.mirror if verdict is not None else report.mirrored(work.state(node))
            if entries is not None:
                node_state[node.name] = entries
        return node_state
    node_state = dict(last.node_state)
    nodes = work.ctx.index.nodes
    for name in looked_at:
        entries = report.mirrored(work.state(nodes[name]))
        if entries is None:
            node_state.pop(name, None)
        else:
            node_state[name] = entries
    return node_state


def _list_sizes(
    last: ShareTotals | None, reused: Mapping[str, NodeVerdict], looked_at: Sequence[str]
) -> dict[str, int]:
    """The status list bytes of the nodes not looked at again (model/status_size.py), from
    their kept verdicts or the last pass's totals (`last`)."""
    if last is None:
        return {name: verdict.list_bytes for name, verdict in reused.items()}
    sizes = dict(last.list_sizes)
    for name in looked_at:
        del sizes[name]
    return sizes


def _release_unselected(ctx: SkyhookContext, work: SkyhookWork, rollout: prepare.Rollout) -> Step:
    """Nodes that left the selector get back a cordon we hold."""
    decided = Step()
    if len(rollout.matched) == len(ctx.index.nodes):
        return decided  # it selects every node (most fleets): none left the selector
    matched = {n.name for n in rollout.matched}
    for node in ctx.index.snap.nodes:
        if node.name not in matched:
            released = report.release_unselected(ctx, work, node)
            if released is not None:
                decided.merge(released)
    return decided


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
    index: PassIndex,
    scr: SkyhookView,
    rollout: prepare.Rollout,
    ahead: tuple[Mapping[str, bool], ...],
    memory: SkyhookMemory | None,
) -> tuple[dict[str, NodeInputs], dict[str, NodeVerdict], list[NodeView]]:
    """Each selected node's inputs, the verdicts of `memory` (kept for the same Skyhook
    inputs) whose node's inputs are unchanged, and the other nodes in node order. `ahead`: the
    verdicts of the Skyhooks a node finishes first.

    Over the same nodes as the last pass, with the same verdicts ahead and boot ids recorded,
    only the nodes whose views or pods changed since (`Grouped.changed_nodes`) can have other
    inputs: the rest keep the last pass's. Otherwise every selected node's inputs are built
    and compared, iterating in C (map, zip, compress)."""
    names, matched = rollout.selected.names, rollout.matched
    recorded = scr.status.node_boot_ids
    if (
        memory is not None
        and memory.selected is not None
        and memory.selected.names is names
        and memory.ahead == ahead
        and memory.recorded_boot_ids == recorded
    ):
        found = dict(memory.node_inputs)
        verdicts = memory.verdicts
        differ: set[str] = set()
        for name in index.grouped.changed_nodes & found.keys():
            now = _new_inputs(
                (
                    index.nodes[name],
                    index.pods_on_node.get(name, ()),
                    tuple(c.get(name) for c in ahead),
                    recorded.get(name),
                )
            )
            if now != found[name]:
                differ.add(name)
            found[name] = now
        quiet = list(map(operator.contains, repeat(verdicts), names))
        if differ:
            quiet = list(
                map(operator.and_, quiet, map(operator.not_, map(differ.__contains__, names)))
            )
    else:
        pods = map(index.pods_on_node.get, names, repeat(()))
        verdicts_ahead = (
            zip(*(map(c.get, names) for c in ahead), strict=True)
            if ahead
            else repeat((), len(names))
        )
        boot_ids = map(recorded.get, names)
        inputs = list(map(_new_inputs, zip(matched, pods, verdicts_ahead, boot_ids, strict=True)))
        found = dict(zip(names, inputs, strict=True))
        if memory is None:
            return found, {}, list(matched)
        verdicts = memory.verdicts
        # Kept: inputs equal to the last pass's (views kept across snapshots compare by
        # identity, element by element: passes/memory.py) and a verdict kept by it.
        unchanged = map(operator.eq, map(memory.node_inputs.get, names), inputs)
        quiet = list(map(operator.and_, unchanged, map(verdicts.__contains__, names)))
    kept_names = list(compress(names, quiet))
    kept = dict(zip(kept_names, map(verdicts.__getitem__, kept_names), strict=True))
    return found, kept, list(compress(matched, map(operator.not_, quiet)))


_PODS_GO_AT = operator.attrgetter("pods_go_at")

# NodeInputs built without its generated Python constructor: one per selected node per pass.
_new_inputs = functools.partial(tuple.__new__, NodeInputs)


def _ahead(index: PassIndex, scr: SkyhookView) -> tuple[SkyhookView, ...]:
    """The Skyhooks a node must finish before this one (rules/blockers.py)."""
    ordered = ordering.skyhook_order(index.snap.skyhooks)
    return blockers.EarlierSkyhooks.of(ordered, scr.name, lambda other, node: True).ahead


def _written(decision: Decision) -> set[str]:
    """The nodes `decision` writes to, evicts or deletes pods on, or reports an Event for."""
    found = {n for n, out in decision.nodes.items() if out != NodeOut()}
    found |= {e.name for e in decision.events if e.kind == "Node"}
    return found | decision.starting | decision.releasing


def _touched(work: SkyhookWork, step: Step, node: str | None = None) -> set[str]:
    """The nodes `step` does something to; all of `node`'s share when it decides anything
    beyond restating the node's state (a timer, an event, a wait)."""
    decision, nodes = step.out, work.ctx.index.nodes
    found = _written(decision)
    found |= {n for n, s in step.changes.states.items() if s != work.state(nodes[n])}
    found |= {n for _, n in decision.waiting}
    if node is not None and (found or decision.requeue_after is not None or decision.events):
        found.add(node)
    return found
