"""Advance one admitted node for one Skyhook: explicit uninstalls first, then the runnable
packages in dependsOn order; interrupt packages need the node cordoned and drained, and every package due
for an interrupt shares one interrupt pod. It goes before anything new starts, once the other
packages with an interrupt of their own (not erroring) have run their stages before it.

An explicit uninstall (`uninstall.apply`) runs before any install work of the Skyhook on the
node and ignores dependsOn; a package with an interrupt cordons and drains first, and its
uninstall-interrupt pod follows the uninstall pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from skyhook_planner import podbuilder
from skyhook_planner.model import status, times
from skyhook_planner.model.actions import CreatePod, EvictPod
from skyhook_planner.model.snapshot import NodeView, PodView
from skyhook_planner.model.spec import Package
from skyhook_planner.model.vocabulary import FINISHED_PHASES
from skyhook_planner.model.waiting import Reason
from skyhook_planner.passes.context import SkyhookContext
from skyhook_planner.passes.work import SkyhookWork, Step
from skyhook_planner.rules import blockers, drain, interrupts, ordering, results, stages
from skyhook_planner.rules.holds import Hold
from skyhook_schemas import keys
from skyhook_schemas.nodestate import (
    APPLY,
    CONFIG,
    ERRORING,
    IN_PROGRESS,
    INTERRUPT,
    SKIPPED,
    UNINSTALL,
    UNINSTALL_CYCLE,
    UNINSTALL_INTERRUPT,
    UPGRADE,
    PackageEntry,
)

DRAIN_POLL_S = 5.0  # re-check a drain or a blocking pod at least this often


def advance(
    ctx: SkyhookContext, work: SkyhookWork, node: NodeView, node_work: stages.NodeWork
) -> Step:
    """Start the stages that may start on `node` now; returns what that decides."""
    return _NodeRun(ctx, work, node, node_work).run()


class _NodeRun:
    """One node's advance. Its fields are its own working copy; `run` returns them as a
    `Step`."""

    def __init__(
        self, ctx: SkyhookContext, work: SkyhookWork, node: NodeView, node_work: stages.NodeWork
    ) -> None:
        self.ctx = ctx
        self.node = node
        self.work = work
        self.node_work = node_work
        self.decision = Step()
        self.state = work.state(node)
        self.entries = dict(self.state.packages)
        self.images = dict(self.state.images or {})
        self.node_packages = ctx.node_packages(node)
        on_node = ctx.index.pods_on_node.get(node.name, ())
        self.ours = work.ours_on(node.name)
        self.running_packages = {p.labels.get(keys.PACKAGE_LABEL) for p in self.ours}
        # Finished stage pods kept for their logs, by package label and stage: they hold
        # nothing back, but the last failed one's end times the next attempt, and a stage that
        # runs again needs their names.
        self.kept: dict[tuple[str, str], list[PodView]] = {}
        for p in on_node:
            if (
                p.phase in FINISHED_PHASES
                and p.labels.get(keys.NAME_LABEL) == ctx.name
                and keys.INTERRUPT_LABEL not in p.labels
                and ctx.index.is_ours(p)
                and work.present(p)
                and (found := ctx.index.pod_package(p)) is not None
            ):
                label = p.labels.get(keys.PACKAGE_LABEL, "")
                self.kept.setdefault((label, found.stage), []).append(p)
        # Packages (any version) with a pod of ours on its way out (deleted by this pass or
        # terminating) whose step may still run: a deleted agent finishes its running step, so
        # nothing else of the package starts on the host until that pod has stopped.
        self.leaving = {
            pkg.name
            for p in on_node
            if p.labels.get(keys.NAME_LABEL) == ctx.name
            and ctx.index.is_ours(p)
            and not work.present(p)
            and p.phase not in FINISHED_PHASES
            and results.outcome(p).result in {results.RUNNING, results.WAITING}
            and (pkg := ctx.index.pod_package(p)) is not None
        }
        self.created = 0

    def run(self) -> Step:
        stage_hold = self.ctx.holds.stages
        if stage_hold is not None:
            # A closed window that holds every stage: what runs finishes, nothing new starts.
            if self.node_work.due:
                self._hold(stage_hold)
        else:
            self._spec_work()
        images = self.images if self.images or self.state.images is not None else None
        self.decision.changes.states[self.node.name] = replace(
            self.state, entries=self.entries, error="", images=images
        )
        return self.decision

    def _spec_work(self) -> None:
        ctx = self.ctx
        packages = self.node_packages.packages
        removing = {n: s for n, s in self.node_work.due.items() if s in UNINSTALL_CYCLE}
        if removing:
            self._uninstall_work(removing)
            return
        updates = self.work.config_updates
        due = {n: s for n, s in self.node_work.due.items() if n not in self.work.stale_config}
        ready = ordering.runnable(
            packages,
            due,
            lambda dep: stages.is_complete(packages[dep], self.entries, updates),
        )
        interrupting = [
            n
            for n in ready
            if due[n] in {APPLY, UPGRADE, CONFIG, INTERRUPT}
            and interrupts.has_interrupt(packages[n], updates.get(n, ()))
        ]
        at_interrupt = [packages[n] for n in ready if due[n] == INTERRUPT]
        hold = ctx.holds.interrupts
        if hold is not None and (interrupting or at_interrupt):
            # No cordon, drain or interrupt starts now; an interrupt pod that already runs is
            # left alone (and so is a cordon already in place: the interrupt still comes).
            self._hold(hold)
            if not at_interrupt:
                for name in ready:
                    if name not in interrupting:
                        self._start(packages[name], due[name])
            return
        # Made here, not kept on the run: a run that held it would be a reference cycle, and
        # every run would then wait for the cyclic collector instead of going at once.
        node_interrupt = _NodeInterrupt(self)
        drained = node_interrupt.check_drain()
        if interrupting:
            node_interrupt.cordon_and_drain(drained, packages[interrupting[0]])
        if at_interrupt:
            # The interrupt goes first: it needs the node to itself, and starting more work now
            # would only delay it (and a reboot would cut that work short). Only the packages
            # with an interrupt of their own catch up first, so one interrupt covers them all.
            behind = {n: due[n] for n in interrupting if due[n] != INTERRUPT}
            if not (drained.open and self._catching_up(behind)):
                node_interrupt.start(at_interrupt, drained)
            return
        for name in ready:
            if name in interrupting and not drained.open:
                continue
            self._start(packages[name], due[name])

    def _uninstall_work(self, due: dict[str, str]) -> None:
        """Explicit uninstalls, in name order and regardless of dependsOn. A package with an
        interrupt (its own `interrupt`: configInterrupts belong to config edits) is uninstalled
        on a cordoned, drained node, then its interrupt runs; interrupts of several packages
        merge into one pod."""
        ctx = self.ctx
        packages = self.node_packages.packages
        interrupting = [n for n in sorted(due) if packages[n].interrupt is not None]
        at_interrupt = [packages[n] for n in sorted(due) if due[n] == UNINSTALL_INTERRUPT]
        hold = ctx.holds.interrupts
        if hold is not None and interrupting:
            self._hold(hold)
            if not at_interrupt:
                for name in sorted(due):
                    if name not in interrupting:
                        self._start(packages[name], due[name])
            return
        node_interrupt = _NodeInterrupt(self)
        drained = node_interrupt.check_drain()
        if interrupting:
            node_interrupt.cordon_and_drain(drained, packages[interrupting[0]])
        if at_interrupt:
            behind = {n: due[n] for n in interrupting if due[n] != UNINSTALL_INTERRUPT}
            if not (drained.open and self._catching_up(behind)):
                node_interrupt.start(at_interrupt, drained, UNINSTALL_INTERRUPT)
            return
        for name in sorted(due):
            if name in interrupting and not drained.open:
                continue
            self._start(packages[name], due[name])

    def _catching_up(self, behind: Mapping[str, str]) -> bool:
        """Start the stages due before the interrupt of the packages in `behind` (name: stage)
        on the drained node, but not those erroring: one interrupt later covers them as well,
        not one now and another after their stages. True while any of them runs."""
        packages = self.node_packages.packages
        running = False
        for name, stage in behind.items():
            package = packages[name]
            entry = self.entries.get(package.key)
            if entry is not None and entry.state == ERRORING:
                continue  # retrying after a failure: the interrupt does not wait for it
            created = self.created
            self._start(package, stage)
            label = podbuilder.package_label(package.name, package.version)
            running = running or label in self.running_packages or self.created > created
        return running

    def _hold(self, hold: Hold) -> None:
        self.decision.wait(self.ctx.name, self.node.name, (blockers.hold_reason(hold),))
        self.decision.wake_in(hold.recheck_s)

    def _start(self, package: Package, stage: str) -> None:
        ctx = self.ctx
        label = podbuilder.package_label(package.name, package.version)
        if label in self.running_packages:
            return  # its pod is still running; its result arrives through learning
        if package.name in self.leaving:
            self.decision.wake_in(1.0)  # a pod of it is still going away
            return
        if ctx.spec.serial and (self.ours or self.created):
            return
        kept = self.kept.get((label, stage), [])
        attempt = self._attempt(self.entries.get(package.key), stage, kept)
        if attempt is None:
            return
        stale = [p for p in kept if podbuilder.pod_attempt(p) >= attempt]
        for pod in stale:  # an earlier round's (a rerun, an edit): its names are needed again
            self.decision.delete_pod(pod, "a new round of attempts at its stage")
        manifest = podbuilder.build_stage_pod(
            ctx.settings,
            ctx.scr,
            package,
            self.node.name,
            stage,
            node_order=self.work.node_order(self.node.name),
            attempt=attempt,
        )
        if stale or not self.create(manifest):
            self.decision.wake_in(1.0)
            return
        chosen = self.node_packages.chosen.get(package.name)
        if chosen is not None and stage != UNINSTALL:
            self.images[package.name] = dict(chosen)
        self.entries[package.key] = PackageEntry(
            package.name,
            package.version,
            package.image,
            stage,
            IN_PROGRESS,
            package.container_sha,
            attempt,  # the failed attempts before this one
        )
        label = f"[{package.name}:{package.version}]"
        self.decision.event(
            "Node",
            self.node.name,
            "Apply",
            f"Applying package {label} from [{keys.SINGULAR}:{ctx.name}] stage [{stage}]",
            action="StartStage",
        )
        self.decision.event(
            keys.KIND,
            ctx.name,
            "Apply",
            f"Applying package {label} to node [{self.node.name}] stage [{stage}]",
            action="StartStage",
        )
        self.decision.changes.conditions.append(
            status.condition(
                keys.CONDITION_APPLY_PACKAGE,
                True,
                "ApplyPackage",
                f"Applying package [{package.name}:{package.version}] to node [{self.node.name}]",
                ctx.now,
                generation=ctx.scr.generation,
            )
        )

    def _attempt(self, entry: PackageEntry | None, stage: str, kept: list[PodView]) -> int | None:
        """The number of the attempt at `stage` to start now (0: the first), or None while
        the stage backs off after a failed attempt or has given up.

        The entry's restarts count the failed attempts at its stage. In progress with no pod
        (paused, or a create that did not land): that attempt again. Erroring: the next one
        after the backoff, unless the retries are spent; then the stage stays parked while
        the last failed pod is kept. Once it is gone (retention, an edit of the package),
        the stage starts over."""
        if entry is None or entry.stage != stage or entry.state not in {IN_PROGRESS, ERRORING}:
            return 0
        if entry.state == IN_PROGRESS:
            return entry.restarts
        last = next(
            (
                p
                for p in kept
                if p.phase == "Failed" and podbuilder.pod_attempt(p) == entry.restarts - 1
            ),
            None,
        )
        if last is None:
            return 0
        settings = self.ctx.settings
        if entry.restarts > settings.stage_retries:
            return None  # gave up: learn said so in a Warning Event
        wait = results.backoff_s(
            entry.restarts - 1, settings.retry_backoff_base_s, settings.retry_backoff_max_s
        )
        finished = results.outcome(last).finished_at or last.created
        since = (self.ctx.now - finished).total_seconds() if finished else wait
        if since < wait:
            self.decision.wake_in(wait - since)
            return None
        return entry.restarts

    def create(self, manifest: dict[str, Any]) -> bool:
        """Create the pod `manifest` on the node; False while its name is still taken."""
        meta = manifest["metadata"]
        if self.work.name_taken(meta["namespace"], meta["name"]):
            self.decision.wake_in(1.0)
            return False
        out = self.decision.node(self.node.name)
        if self.ctx.scr not in out.metadata_for:
            out.metadata_for.append(self.ctx.scr)
        out.actions.append(CreatePod(manifest))
        self.running_packages.add(meta["labels"][keys.PACKAGE_LABEL])
        self.created += 1
        return True


class _NodeInterrupt:
    """The interrupt part of one node's run: the cordon, the drain (evictions, its timeout and
    what holds it) and the one interrupt pod. It works on the run's working copy: its state,
    entries and decision."""

    def __init__(self, run: _NodeRun) -> None:
        self.run = run

    def check_drain(self) -> drain.Drain:
        ctx = self.run.ctx
        on_node = ctx.index.pods_on_node.get(self.run.node.name, ())
        return drain.check(
            self.run.node,
            [p for p in on_node if self.run.work.on_its_node(p)],
            ctx.spec.pod_non_interrupt_labels,
            ctx.index.settings.namespace,
            config=ctx.spec.drain,
            refusals=ctx.index.snap.eviction_refusals,
        )

    def cordon_and_drain(self, drained: drain.Drain, package: Package) -> None:
        out = self.run.decision.node(self.run.node.name)
        cordoned, holders = self.run.ctx.cordon_of(self.run.node)
        if not self.run.state.cordoned and (not cordoned or holders - {self.run.ctx.name}):
            # Not an administrator's cordon: ours to take (shared with the Skyhooks whose
            # markers are there) and to lift once the last of them is done.
            self.run.state = replace(self.run.state, cordoned=True)
        if self.run.state.cordoned and not cordoned:
            # Ours to put on, or on again should someone have uncordoned the node meanwhile;
            # a node already cordoned gets no write (and stays quiet for the next pass).
            out.unschedulable = True
        if drained.open:
            self.run.state = replace(self.run.state, drain_start=None, drain_blocked=None)
            return
        if drained.protected:
            # Waiting for the protected pods is not the drain: its clock has not started.
            if out.unschedulable:  # the wait begins with the cordon: said once, here
                self.run.decision.event(
                    "Node",
                    self.run.node.name,
                    "Drain",
                    f"waiting for non-interrupt pods {blockers.pod_names(drained.protected)} "
                    f"before package [{package.name}:{package.version}] from "
                    f"[{keys.SINGULAR}:{self.run.ctx.name}] interrupts node [{self.run.node.name}]",
                    type="Warning",
                    action="WaitForPods",
                )
            self._drain_held(drained, blockers.drain_reason(drained))
            return
        self._drain(drained, package)

    def _drain(self, drained: drain.Drain, package: Package) -> None:
        """Remove what the drain may remove, or, past drainConfig.timeout, mark the package
        erroring (the node stays cordoned) and remove nothing more."""
        ctx, node = self.run.ctx, self.run.node
        config = ctx.spec.drain
        started = drain.started_at(node, ctx.name)
        if started is None:
            self.run.state = replace(self.run.state, drain_start=times.exact_stamp(ctx.now))
        blocked = drain.blocked_annotation(drained.blocked) if drained.blocked else None
        # One Warning per pod per drain: for the pods the node's annotation does not list yet.
        listed = drain.listed_pods(self.run.state.drain_blocked)
        for pod in drained.blocked:
            if (pod.namespace, pod.name) in listed:
                continue
            self.run.decision.event(
                "Node",
                node.name,
                "Drain",
                f"drain blocked for node [{node.name}] package [{package.name}:{package.version}] "
                f"from [{keys.SINGULAR}:{ctx.name}]: {blockers.blocked_pods((pod,))}",
                type="Warning",
                action="BlockDrain",
            )
        self.run.state = replace(self.run.state, drain_blocked=blocked)
        label = f"[{package.name}:{package.version}]"
        if drain.timed_out(started, config, ctx.now):
            assert config.timeout_s is not None
            stage = self.run.node_work.due[package.name]
            entry = self.run.entries.get(package.key) or PackageEntry(
                package.name, package.version, package.image, stage
            )
            if not (entry.stage == stage and entry.state == ERRORING):
                after = times.describe(config.timeout_s)
                # No restarts: a stop no retry ends (rules/results.py failed_for_good).
                self.run.entries[package.key] = replace(
                    entry, stage=stage, state=ERRORING, restarts=0
                )
                message = f"drain timed out after [{after}] for node [{node.name}] package {label}"
                self.run.decision.event(
                    "Node",
                    node.name,
                    "Drain",
                    f"{message} from [{keys.SINGULAR}:{ctx.name}]",
                    "Warning",
                    action="DrainTimeout",
                )
                self.run.decision.event(
                    keys.KIND, ctx.name, "Drain", message, "Warning", action="DrainTimeout"
                )
            self._drain_held(drained, blockers.drain_timeout_reason(drained, config.timeout_s))
            return
        if drained.to_remove:
            self.run.decision.event(
                "Node",
                node.name,
                "Drain",
                f"draining node [{node.name}] package {label} from [{keys.SINGULAR}:{ctx.name}]",
                action="DrainNode",
            )
            self.run.decision.node(node.name).actions += [
                EvictPod(
                    pod.namespace,
                    pod.name,
                    pod.node,
                    config.grace_period_s,
                    delete=drained.removal == drain.DELETE,
                )
                for pod in drained.to_remove
            ]
        self._drain_held(drained, blockers.drain_reason(drained))

    def _drain_held(self, drained: drain.Drain, reason: Reason | None) -> None:
        if drained.protected or drained.blocked:
            self.run.decision.changes.drains[self.run.node.name] = drained
        if reason is not None:
            self.run.decision.wait(self.run.ctx.name, self.run.node.name, (reason,))
            self.run.decision.wake_in(DRAIN_POLL_S)

    def start(self, due: list[Package], drained: drain.Drain, stage: str = INTERRUPT) -> None:
        """One interrupt pod for every package due for an interrupt (at `stage`: interrupt or
        uninstall-interrupt), once nothing else of ours runs on the node and the node is
        drained."""
        ctx = self.run.ctx
        on_node = ctx.index.pods_on_node.get(self.run.node.name, ())
        if any(
            ctx.index.is_ours(p)
            # A finished stage pod kept for its logs holds nothing back; an interrupt pod
            # kept at its stageTimeout or restart limit is the interrupt given up on.
            and (
                self.run.work.live(p)
                or (keys.INTERRUPT_LABEL in p.labels and self.run.work.present(p))
            )
            for p in on_node
        ):
            return
        if self.run.created or not drained.open:
            return
        # An uninstall's interrupt is the package's own, whatever config edit is pending.
        updates = self.run.work.config_updates if stage == INTERRUPT else {}
        merged = interrupts.merge(due, updates)
        if merged is None:
            return
        if merged.interrupt.type != "reboot" and any(
            (entry := self.run.entries.get(p.key)) is not None
            and results.restart_limit_spent(entry, stage, ctx.settings.stage_retries)
            for p in merged.covered
        ):
            return  # its restart budget is spent (passes/learn.py): erroring until rerun or reset
        manifest = podbuilder.build_interrupt_pod(
            ctx.settings,
            ctx.scr,
            merged.chosen,
            self.run.node.name,
            merged.interrupt,
            stage=stage,
            node_order=self.run.work.node_order(self.run.node.name),
        )
        if not self.run.create(manifest):
            return
        for package in merged.covered:
            state = IN_PROGRESS if package.name == merged.chosen.name else SKIPPED
            base = self.run.entries.get(package.key) or PackageEntry(
                package.name, package.version, package.image
            )
            self.run.entries[package.key] = replace(base, stage=stage, state=state, restarts=0)
        chosen = merged.chosen
        self.run.decision.event(
            keys.KIND,
            ctx.name,
            "Interrupt",
            f"Interrupting node [{self.run.node.name}] package [{chosen.name}:{chosen.version}] from [{keys.SINGULAR}:{ctx.name}]",
            action="InterruptNode",
        )
