"""What the Skyhooks before one in the pass decided, as a value (`Earlier`): which nodes each
of them has nothing left to do on, the pods they deleted, the nodes each runs, and the cordons
they put on or lifted. The pass (plan.py) builds it from each step's merged `Decision` between
Skyhooks (`Earlier.after`); a later Skyhook's context only reads it, and nothing it holds
changes once built.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from types import MappingProxyType

from skyhook_planner.model import nodestate
from skyhook_planner.model.snapshot import NodeView
from skyhook_planner.passes.decision import Decision, PodKey

_NOTHING: Mapping[str, str | None] = MappingProxyType({})


@dataclass(frozen=True)
class Cordon:
    """What the Skyhooks so far wrote of a node's cordon: `unschedulable` (None: untouched)
    and the cordon markers they set or removed."""

    unschedulable: bool | None
    markers: Mapping[str, str | None]


@dataclass(frozen=True)
class Earlier:
    # By Skyhook, then node: has it nothing left to do there? (passes/select.py)
    complete: Mapping[str, Mapping[str, bool]] = field(default_factory=lambda: MappingProxyType({}))
    deleted: Set[PodKey] = frozenset()
    # The nodes each Skyhook runs (in progress or admitted), for the limits shared by the
    # Skyhooks of one DeploymentPolicy (rules/sharing.py)
    running: Mapping[str, frozenset[str]] = field(default_factory=lambda: MappingProxyType({}))
    cordons: Mapping[str, Cordon] = field(default_factory=lambda: MappingProxyType({}))

    def is_complete(self, scr: str, node: str) -> bool | None:
        """`scr`'s verdict on `node`; None for a Skyhook not planned yet or a node it does not
        select."""
        found = self.complete.get(scr)
        return None if found is None else found.get(node)

    def running_for(self, scr: str) -> frozenset[str] | None:
        """The nodes an earlier Skyhook runs; None for one not planned yet."""
        return self.running.get(scr)

    def cordon_of(self, node: NodeView) -> tuple[bool, frozenset[str]]:
        """Whether `node` is cordoned and which Skyhooks' cordon markers are on it, once the
        Skyhooks so far have written theirs."""
        found = self.cordons.get(node.name)
        if found is None:
            return node.unschedulable, nodestate.cordoned_by(node.annotations)
        unschedulable = node.unschedulable if found.unschedulable is None else found.unschedulable
        return unschedulable, nodestate.cordoned_by({**node.annotations, **found.markers})

    def touched(self, node: str) -> bool:
        """Has a Skyhook so far written anything of `node`'s cordon?"""
        return node in self.cordons

    def after(
        self, decided: Decision, running: Mapping[str, frozenset[str]] | None = None
    ) -> Earlier:
        """This value with `decided` (the next step's output) and the nodes it runs added."""
        complete = self.complete
        if decided.complete:
            complete = MappingProxyType(
                {
                    **self.complete,
                    **{
                        scr: MappingProxyType({**self.complete.get(scr, {}), **nodes})
                        for scr, nodes in decided.complete.items()
                    },
                }
            )
        cordons = self.cordons
        changed: dict[str, Cordon] = {}
        for name, out in decided.nodes.items():
            markers = {
                k: v for k, v in out.changes.annotations.items() if nodestate.is_cordon_key(k)
            }
            if out.unschedulable is None and not markers:
                continue
            before = self.cordons.get(name)
            if before is not None:
                unschedulable = (
                    before.unschedulable if out.unschedulable is None else out.unschedulable
                )
                markers = {**before.markers, **markers}
            else:
                unschedulable = out.unschedulable
            changed[name] = Cordon(
                unschedulable, MappingProxyType(markers) if markers else _NOTHING
            )
        if changed:
            cordons = MappingProxyType({**self.cordons, **changed})
        return Earlier(
            complete=complete,
            deleted=self.deleted | decided.deleted if decided.deleted else self.deleted,
            running=MappingProxyType({**self.running, **running}) if running else self.running,
            cordons=cordons,
        )
