"""What a step decides from, read-only: `PassIndex` (lookups over one snapshot, built once per
pass) and `SkyhookContext` (one Skyhook's facts for the pass: the snapshot, its spec and
selected nodes, its holds, and what the Skyhooks before it decided, `Earlier`).

Nothing a step decides reaches it through the context: a step of a Skyhook's share also gets
that Skyhook's working state (`SkyhookWork`, passes/work.py) as an argument, and returns what
it decides (`Step`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cached_property
from operator import attrgetter
from typing import Protocol

from skyhook_planner import podbuilder
from skyhook_planner.model import imagecompat, nodestate
from skyhook_planner.model.nodestate import NodeState
from skyhook_planner.model.settings import PlannerSettings
from skyhook_planner.model.snapshot import (
    ClusterSnapshot,
    NodeView,
    PodView,
    SkyhookView,
)
from skyhook_planner.model.spec import Package, SkyhookSpec
from skyhook_planner.passes.earlier import Earlier
from skyhook_planner.passes.grouped import Grouped
from skyhook_planner.rules.holds import NO_HOLDS, Holds
from skyhook_schemas.podpackage import PodPackage

_NAME = attrgetter("name")


@dataclass(frozen=True)
class NodePackages:
    """A Skyhook's packages as one node runs them: images chosen from image compatibility
    artifacts (`chosen`: {"image", "matched"} per such package), or why none matched."""

    packages: Mapping[str, Package]
    chosen: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    unmatched: Mapping[str, str] = field(default_factory=dict)


class PassIndex:
    """Lookups over one snapshot: nodes by name, pods by node and by Skyhook, our ConfigMaps
    (passes/grouped.py). `grouped`: the last pass's groups, which this one starts from."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        settings: PlannerSettings,
        grouped: Grouped | None = None,
    ) -> None:
        self.snap = snapshot
        self.settings = settings
        self.now: datetime = snapshot.now
        self.nodes = dict(zip(map(_NAME, snapshot.nodes), snapshot.nodes, strict=True))
        if grouped is None or grouped.namespace != settings.namespace:
            grouped = Grouped(settings.namespace)
        self.grouped = grouped.after(snapshot)
        self.pods_on_node = self.grouped.pods_on_node
        self.terminating = self.grouped.terminating
        self.configmaps = self.grouped.configmaps_by_name
        self.policies = {p.name: p for p in snapshot.policies}
        self.alerts = {r.url: r for r in snapshot.alerts}
        self._decoded: dict[tuple[str, str], PodPackage | None] = {}

    def is_ours(self, pod: PodView) -> bool:
        """A stage, interrupt or check pod of ours, never an ordinary pod with copied labels
        (`Grouped.skyhook_of`)."""
        return self.grouped.skyhook_of(pod) is not None

    def skyhook_pods(self, skyhook: str) -> Mapping[str, tuple[PodView, ...]]:
        """A Skyhook's pods by node ("": not bound to one yet)."""
        return self.grouped.skyhook_pods.get(skyhook, {})

    def check_pods(self, skyhook: str) -> list[PodView]:
        """A Skyhook's health check pods, in (namespace, name) order."""
        found = self.grouped.check_pods.get(skyhook, {})
        return [found[key] for key in sorted(found)]

    def pods_of(self, skyhook: str, skip: Collection[str] = ()) -> Iterator[PodView]:
        """A Skyhook's pods, node by node in name order, except those on the nodes in `skip`."""
        by_node = self.skyhook_pods(skyhook)
        for node in sorted(by_node.keys() - skip if skip else by_node):
            yield from by_node[node]

    def pod_package(self, pod: PodView) -> PodPackage | None:
        """The package annotation of one of our pods, decoded once per pass."""
        key = (pod.namespace, pod.name)
        if key not in self._decoded:
            self._decoded[key] = podbuilder.decode_pod_package(pod)
        return self._decoded[key]


class Decoded(Protocol):
    """A node's state decoded by an earlier pass from the annotations the node still has (a
    kept verdict, passes/memory.py)."""

    @property
    def state(self) -> NodeState: ...


class SkyhookContext:
    """One Skyhook's facts for the pass. `earlier` is what the Skyhooks before it decided, a
    value built before its share began; the caches only remember what the snapshot says."""

    def __init__(
        self,
        index: PassIndex,
        scr: SkyhookView,
        *,
        spec: SkyhookSpec,
        matched: Sequence[NodeView],
        earlier: Earlier,
        holds: Holds = NO_HOLDS,
        known: Mapping[str, Decoded] | None = None,
    ) -> None:
        self.index = index
        self.scr = scr
        self.name = scr.name
        self.spec = spec
        self.settings = index.settings
        self.now = index.now
        self.matched = matched
        self.earlier = earlier  # what the Skyhooks before this one decided: a value
        self.holds = holds  # what a closed window or a firing alert holds back this pass
        # Node states decoded by an earlier pass from the same annotations (passes/memory.py).
        self._known: Mapping[str, Decoded] = known or {}
        self._before: dict[str, NodeState] = {}
        self._node_packages: dict[str, NodePackages] = {}

    @cached_property
    def selected_names(self) -> frozenset[str]:
        """The names of the nodes the Skyhook selects."""
        return frozenset(map(_NAME, self.matched))

    def before(self, node: NodeView) -> NodeState:
        """The state as the node's annotations record it (decoded once)."""
        found = self._before.get(node.name)
        if found is None:
            kept = self._known.get(node.name)
            found = self._before[node.name] = (
                kept.state if kept is not None else nodestate.read(node, self.name)
            )
        return found

    def node_packages(self, node: NodeView) -> NodePackages:
        """The packages with the image each package's artifact chooses for `node` (decided
        once per pass). A package whose artifact is unavailable keeps no image here: the
        Skyhook is blocked before any node is looked at."""
        found = self._node_packages.get(node.name)
        if found is not None:
            return found
        packages = dict(self.spec.packages)
        chosen: dict[str, dict[str, str]] = {}
        unmatched: dict[str, str] = {}
        for name, package in self.spec.packages.items():
            source = package.image_compatibility
            if source is None:
                continue
            artifact = source.inline or self.index.snap.image_artifacts.get(source.source)
            if not isinstance(artifact, imagecompat.Artifact):
                continue
            choice = imagecompat.choose(artifact, node.labels)
            if isinstance(choice, imagecompat.NoMatch):
                unmatched[name] = choice.reason
                continue
            image = imagecompat.pinned(choice.image, package.version)
            packages[name] = replace(package, chosen_image=image)
            chosen[name] = {"image": image, "matched": choice.matched}
        found = self._node_packages[node.name] = NodePackages(packages, chosen, unmatched)
        return found

    def running_for(self, scr: str) -> frozenset[str] | None:
        """The nodes an earlier Skyhook of this pass runs; None for one not planned yet."""
        return self.earlier.running_for(scr)

    def cordon_of(self, node: NodeView) -> tuple[bool, frozenset[str]]:
        """Whether `node` is cordoned and which Skyhooks' cordon markers are on it, once the
        Skyhooks before this one in the pass have written theirs. Cordoned with no marker is
        someone else's cordon (an administrator's), which no Skyhook takes or lifts."""
        return self.earlier.cordon_of(node)

    def admin_cordoned(self, node: NodeView) -> bool:
        """Cordoned by someone else (no Skyhook's marker on it), once the Skyhooks before
        this one in the pass have written theirs."""
        if not node.unschedulable and not self.earlier.touched(node.name):
            return False  # the common case, answered without reading the annotations
        return self.cordon_of(node) == (True, frozenset())

    # --- pods -----------------------------------------------------------------------------

    def pods(self, skip: Collection[str] = ()) -> Iterator[PodView]:
        """This Skyhook's pods, node by node, except those on the nodes in `skip`."""
        return self.index.pods_of(self.name, skip)
