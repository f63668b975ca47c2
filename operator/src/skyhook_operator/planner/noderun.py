"""Advance one admitted node for one Skyhook: uninstalls first, then the runnable packages in
dependsOn order; interrupt packages need the node cordoned and drained, and every package due
for an interrupt shares one interrupt pod, which goes before anything new starts.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from skyhook_operator import podbuilder, status
from skyhook_operator.nodestate import (
    APPLY,
    CONFIG,
    ERRORING,
    IN_PROGRESS,
    INTERRUPT,
    SKIPPED,
    UNINSTALL,
    UPGRADE,
    PackageEntry,
)
from skyhook_operator.planner import gates, interrupts, ordering, stages
from skyhook_operator.planner.model import (
    CreatePod,
    EvictPod,
    NodeView,
)
from skyhook_operator.spec import Package
from skyhook_schemas import keys

if TYPE_CHECKING:
    from skyhook_operator.planner.skyhook import SkyhookPass


GATE_POLL_S = 5.0  # re-check a drain or a blocking pod at least this often


class NodeRun:
    """Advance one admitted node for one Skyhook: start the stages that may start now."""

    def __init__(self, sky: SkyhookPass, node: NodeView, work: stages.NodeWork) -> None:
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
