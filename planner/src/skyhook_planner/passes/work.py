"""One Skyhook's working state in a pass (`SkyhookWork`), and what a step of its share returns
(`Step`).

The share (passes/rollout.py) owns its `SkyhookWork`: node states as its steps left them,
config updates, packages whose ConfigMap must be rewritten first, status conditions, nodes
first picked now, held drains, and the pods its steps deleted. It hands the work to each step
as an argument; the step reads it (with the `SkyhookContext`, the pass's facts) and returns a
`Step`: its output for the plan (a `Decision`) and its changes to the working state
(`WorkChanges`). Only the share folds a step in (`SkyhookWork.take`), before the next step
runs; by the end of the share the working state has become node changes and the Skyhook's
status, and only the plan output leaves it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from skyhook_planner import podbuilder
from skyhook_planner.model.nodestate import NodeState
from skyhook_planner.model.snapshot import NodeView, PodView
from skyhook_planner.model.vocabulary import FINISHED_PHASES
from skyhook_planner.model.waiting import Reason
from skyhook_planner.passes.context import SkyhookContext
from skyhook_planner.passes.decision import Decision, NodeOut, PodKey
from skyhook_planner.rules import interrupts, ordering, results
from skyhook_planner.rules.drain import Drain
from skyhook_schemas import keys
from skyhook_schemas.nodestate import (
    COMPLETE,
    INTERRUPT,
    UNINSTALL_CYCLE,
    UNINSTALL_INTERRUPT,
    PackageEntry,
)


@dataclass
class WorkChanges:
    """A step's changes to its Skyhook's working state."""

    states: dict[str, NodeState] = field(default_factory=dict)
    config_updates: dict[str, list[str]] | None = None  # replaces the whole map when set
    stale_config: set[str] = field(default_factory=set)
    conditions: list[dict[str, Any]] = field(default_factory=list)
    picked: dict[str, str] = field(default_factory=dict)  # nodes first picked now: pick time
    # Nodes whose drain is held this pass (protected pods, blocked pods): what the Skyhook's
    # Blocked and DrainBlocked conditions say (passes/report.py)
    drains: dict[str, Drain] = field(default_factory=dict)

    def merge(self, other: WorkChanges) -> None:
        self.states.update(other.states)
        self.picked.update(other.picked)
        self.drains.update(other.drains)
        if other.config_updates is not None:
            self.config_updates = other.config_updates
        self.stale_config |= other.stale_config
        self.conditions += other.conditions


@dataclass
class Step:
    """What a step of one Skyhook's share returns: its output for the plan (`out`) and its
    changes to the Skyhook's working state (`changes`). The shorthands write to `out`."""

    out: Decision = field(default_factory=Decision)
    changes: WorkChanges = field(default_factory=WorkChanges)

    def node(self, name: str) -> NodeOut:
        return self.out.node(name)

    def delete_pod(self, pod: PodView, reason: str) -> None:
        self.out.delete_pod(pod, reason)

    def stop_pod(self, pod: PodView, reason: str, annotations: dict[str, str]) -> None:
        self.out.stop_pod(pod, reason, annotations)

    def event(
        self, kind: str, name: str, reason: str, message: str, type: str = "Normal", *, action: str
    ) -> None:
        self.out.event(kind, name, reason, message, type, action=action)

    def wait(self, skyhook: str, node: str, reasons: tuple[Reason, ...]) -> None:
        self.out.wait(skyhook, node, reasons)

    def wake_in(self, seconds: float) -> None:
        self.out.wake_in(seconds)

    def merge(self, other: Step) -> Step:
        """Fold `other` (a later step's) into this one; returns self."""
        self.out.merge(other.out)
        self.changes.merge(other.changes)
        return self


class SkyhookWork:
    """One Skyhook's working state as its steps have left it so far, and what a step reads of
    it. Steps never write it: only its share does, with `take`."""

    def __init__(self, ctx: SkyhookContext, config_updates: dict[str, list[str]]) -> None:
        self.ctx = ctx
        self._made = WorkChanges(config_updates=config_updates)  # every step's, folded in
        self.deleted: set[PodKey] = set()  # pods this Skyhook's steps deleted
        self._orders: dict[str, int] | None = None

    def take(self, step: Step) -> None:
        """Fold in a step's changes, and the pods it deleted."""
        self._made.merge(step.changes)
        self.deleted |= step.out.deleted

    @property
    def states(self) -> dict[str, NodeState]:
        return self._made.states

    @property
    def config_updates(self) -> dict[str, list[str]]:
        assert self._made.config_updates is not None  # set at the start, replaced since
        return self._made.config_updates

    @property
    def stale_config(self) -> set[str]:
        return self._made.stale_config

    @property
    def conditions(self) -> list[dict[str, Any]]:
        return self._made.conditions

    @property
    def picked(self) -> dict[str, str]:
        """Nodes first picked now: pick time."""
        return self._made.picked

    @property
    def drains(self) -> dict[str, Drain]:
        """Nodes whose drain is held this pass."""
        return self._made.drains

    # --- this Skyhook's state on nodes ------------------------------------------------------

    def state(self, node: NodeView) -> NodeState:
        """The state as this Skyhook's steps have left it so far."""
        return self.states.get(node.name) or self.ctx.before(node)

    def entries(self, node: NodeView) -> dict[str, PackageEntry]:
        """A copy of the node's package entries, for a step to change and return."""
        return dict(self.state(node).packages)

    def reboots(self, entry: PackageEntry) -> bool:
        """Does the package of `entry` interrupt with a reboot (its own or a config edit's)?"""
        package = self.ctx.spec.packages.get(entry.name)
        if package is None or package.version != entry.version:
            return False
        wanted = interrupts.wanted_interrupts(package, self.config_updates.get(entry.name, ()))
        return any(i.type == "reboot" for i in wanted)

    def failed_for_good(self, state: NodeState) -> bool:
        """Has a package on the node failed past its retries (rules/results.py): the node
        reads erroring? A reboot's failed runs are never counted: its own shutdown ends them."""
        retries = self.ctx.settings.stage_retries
        return any(
            results.failed_for_good(
                entry,
                None
                if entry.stage in {INTERRUPT, UNINSTALL_INTERRUPT} and self.reboots(entry)
                else retries,
            )
            for entry in state.packages.values()
        )

    def reselected(self, node: NodeView) -> frozenset[str]:
        """Packages complete on `node` whose chosen image differs from the image they ran
        with: like a new version, they run again."""
        state = self.state(node)
        records = state.images or {}
        names = set()
        spec = self.ctx.spec
        for name, wanted in self.ctx.node_packages(node).chosen.items():
            package = spec.packages[name]
            entry = state.packages.get(package.key)
            if entry is None or entry.state != COMPLETE or entry.stage in UNINSTALL_CYCLE:
                continue
            ran = records.get(name, {}).get("image") or podbuilder.pull_reference(
                replace(package, image=entry.image, container_sha=entry.container_sha)
            )
            if ran != wanted["image"]:
                names.add(name)
        return frozenset(names)

    def node_order(self, node: str) -> int:
        """The node's SKYHOOK_NODE_ORDER (rules/ordering.py), counting the nodes admitted this
        pass: ask only once admission is done."""
        if self._orders is None:
            status = self.ctx.scr.status
            priority = {**status.node_priority, **self.picked}
            self._orders = ordering.node_orders(priority, status.node_order_offset)
        return self._orders.get(node, 0)

    # --- pods -----------------------------------------------------------------------------

    def _gone(self, pod: PodView) -> bool:
        key = (pod.namespace, pod.name)
        return key in self.deleted or key in self.ctx.earlier.deleted

    def on_its_node(self, pod: PodView) -> bool:
        """Not deleted by this pass: a pod on its way out is still on its node until it has
        gone (a drain waits for it)."""
        return not self._gone(pod)

    def present(self, pod: PodView) -> bool:
        """Still there after this pass (finished pods kept for a retry backoff included)."""
        return not (self._gone(pod) or pod.deleting)

    def live(self, pod: PodView) -> bool:
        """Present and its containers may still run. A stage pod of ours whose steps passed
        only ends (its `done` container): it holds nothing back, whether or not its phase
        says Succeeded yet."""
        return (
            self.present(pod)
            and pod.phase not in FINISHED_PHASES
            and not (
                podbuilder.ends_when_done(pod)
                and self.ctx.index.is_ours(pod)
                and results.outcome(pod).result == results.SUCCEEDED
            )
        )

    def name_taken(self, namespace: str, name: str) -> bool:
        """A pod of that name is on its way out: creating it again now would collide."""
        key = (namespace, name)
        return (
            key in self.deleted
            or key in self.ctx.earlier.deleted
            or key in self.ctx.index.terminating
        )

    def check_pod(self, node: str) -> PodView | None:
        """This Skyhook's health check pod on `node` (rules/health.py), if it is there."""
        return next(
            (
                p
                for p in self.ctx.index.skyhook_pods(self.ctx.name).get(node, ())
                if keys.HEALTH_CHECK_LABEL in p.labels and self.present(p)
            ),
            None,
        )

    def ours_on(self, node: str) -> list[PodView]:
        """This Skyhook's pods on `node` that may still run: a finished pod kept for its logs
        holds nothing back."""
        return [p for p in self.ctx.index.skyhook_pods(self.ctx.name).get(node, ()) if self.live(p)]
