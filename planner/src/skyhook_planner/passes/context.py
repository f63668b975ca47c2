"""What a step decides from, read-only: `PassIndex` (lookups over one snapshot, built once per
pass) and `SkyhookContext` (one Skyhook's view of the pass so far: the snapshot, what earlier
Skyhooks decided and what this Skyhook's earlier steps decided).

Steps read a context and return a `Decision`; only the pass that owns a decision merges into it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from skyhook_planner import podbuilder
from skyhook_planner.model import imagecompat, nodestate
from skyhook_planner.model.nodestate import NodeState
from skyhook_planner.model.settings import PlannerSettings
from skyhook_planner.model.snapshot import (
    ClusterSnapshot,
    ConfigMapView,
    NodeView,
    PodView,
    SkyhookView,
)
from skyhook_planner.model.spec import Package, SkyhookSpec
from skyhook_planner.model.vocabulary import FINISHED_PHASES
from skyhook_planner.passes.decision import Decision
from skyhook_planner.passes.earlier import Earlier
from skyhook_planner.rules import interrupts, ordering, results
from skyhook_planner.rules.holds import NO_HOLDS, Holds
from skyhook_schemas import keys
from skyhook_schemas.nodestate import (
    COMPLETE,
    INTERRUPT,
    UNINSTALL_CYCLE,
    UNINSTALL_INTERRUPT,
    PackageEntry,
)
from skyhook_schemas.podpackage import PodPackage


@dataclass(frozen=True)
class NodePackages:
    """A Skyhook's packages as one node runs them: images chosen from image compatibility
    artifacts (`chosen`: {"image", "matched"} per such package), or why none matched."""

    packages: Mapping[str, Package]
    chosen: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    unmatched: Mapping[str, str] = field(default_factory=dict)


class PassIndex:
    """Lookups over one snapshot: nodes by name, pods by node and by Skyhook, our ConfigMaps."""

    def __init__(self, snapshot: ClusterSnapshot, settings: PlannerSettings) -> None:
        self.snap = snapshot
        self.settings = settings
        self.now: datetime = snapshot.now
        self.nodes = {n.name: n for n in snapshot.nodes}
        on_node: dict[str, list[PodView]] = defaultdict(list)
        self.skyhook_pods: dict[str, list[PodView]] = defaultdict(list)
        for pod in snapshot.pods:
            if pod.node:
                on_node[pod.node].append(pod)
            if self.is_ours(pod):
                self.skyhook_pods[pod.labels[keys.NAME_LABEL]].append(pod)
        # Tuples: each pass's memory keeps a node's pods as one of its inputs.
        self.pods_on_node: dict[str, tuple[PodView, ...]] = {
            node: tuple(pods) for node, pods in on_node.items()
        }
        self.configmaps: dict[str, ConfigMapView] = {
            c.name: c for c in snapshot.configmaps if c.namespace == settings.namespace
        }
        self.policies = {p.name: p for p in snapshot.policies}
        self.alerts = {r.url: r for r in snapshot.alerts}
        self.terminating = {(p.namespace, p.name) for p in snapshot.pods if p.deleting}
        self._decoded: dict[tuple[str, str], PodPackage | None] = {}

    def is_ours(self, pod: PodView) -> bool:
        """A stage or interrupt pod of ours: labelled by us and in our namespace. Anyone who
        may create pods elsewhere could copy the labels; such a pod is an ordinary pod to us,
        never a stage result."""
        return keys.NAME_LABEL in pod.labels and pod.namespace == self.settings.namespace

    def pod_package(self, pod: PodView) -> PodPackage | None:
        """The package annotation of one of our pods, decoded once per pass."""
        key = (pod.namespace, pod.name)
        if key not in self._decoded:
            self._decoded[key] = podbuilder.decode_pod_package(pod)
        return self._decoded[key]


class SkyhookContext:
    """One Skyhook's view of the pass so far. `earlier` is what the Skyhooks before it decided,
    `so_far` what its own earlier steps decided; neither is written through this object."""

    def __init__(
        self,
        index: PassIndex,
        scr: SkyhookView,
        *,
        spec: SkyhookSpec,
        matched: Sequence[NodeView],
        earlier: Earlier,
        so_far: Decision,
        holds: Holds = NO_HOLDS,
        known: Mapping[str, NodeState] | None = None,
    ) -> None:
        self.index = index
        self.scr = scr
        self.name = scr.name
        self.spec = spec
        self.settings = index.settings
        self.now = index.now
        self.matched = matched
        self.earlier = earlier  # what the Skyhooks before this one decided: a value
        self._so_far = so_far
        self.holds = holds  # what a closed window or a firing alert holds back this pass
        # Node states decoded by an earlier pass from the same annotations (passes/memory.py).
        self._before: dict[str, NodeState] = dict(known or {})
        self._node_packages: dict[str, NodePackages] = {}
        self._orders: dict[str, int] | None = None

    # --- this Skyhook's state on nodes ------------------------------------------------------

    def before(self, node: NodeView) -> NodeState:
        """The state as the node's annotations record it (decoded once)."""
        found = self._before.get(node.name)
        if found is None:
            found = self._before[node.name] = nodestate.read(node, self.name)
        return found

    def state(self, node: NodeView) -> NodeState:
        """The state as this Skyhook's steps have left it so far."""
        return self._so_far.work.states.get(node.name) or self.before(node)

    def entries(self, node: NodeView) -> dict[str, PackageEntry]:
        """A copy of the node's package entries, for a step to change and return."""
        return dict(self.state(node).packages)

    def reboots(self, entry: PackageEntry) -> bool:
        """Does the package of `entry` interrupt with a reboot (its own or a config edit's)?"""
        package = self.spec.packages.get(entry.name)
        if package is None or package.version != entry.version:
            return False
        wanted = interrupts.wanted_interrupts(package, self.config_updates.get(entry.name, ()))
        return any(i.type == "reboot" for i in wanted)

    def failed_for_good(self, state: NodeState) -> bool:
        """Has a package on the node failed past its retries (rules/results.py): the node
        reads erroring? A reboot's failed runs are never counted: its own shutdown ends them."""
        retries = self.settings.stage_retries
        return any(
            results.failed_for_good(
                entry,
                None
                if entry.stage in {INTERRUPT, UNINSTALL_INTERRUPT} and self.reboots(entry)
                else retries,
            )
            for entry in state.packages.values()
        )

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

    def reselected(self, node: NodeView) -> frozenset[str]:
        """Packages complete on `node` whose chosen image differs from the image they ran
        with: like a new version, they run again."""
        state = self.state(node)
        records = state.images or {}
        names = set()
        for name, wanted in self.node_packages(node).chosen.items():
            package = self.spec.packages[name]
            entry = state.packages.get(package.key)
            if entry is None or entry.state != COMPLETE or entry.stage in UNINSTALL_CYCLE:
                continue
            ran = records.get(name, {}).get("image") or podbuilder.pull_reference(
                replace(package, image=entry.image, container_sha=entry.container_sha)
            )
            if ran != wanted["image"]:
                names.add(name)
        return frozenset(names)

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

    def node_order(self, node: str) -> int:
        """The node's SKYHOOK_NODE_ORDER (rules/ordering.py), counting the nodes admitted this
        pass: ask only once admission is done."""
        if self._orders is None:
            status = self.scr.status
            priority = {**status.node_priority, **self._so_far.work.picked}
            self._orders = ordering.node_orders(priority, status.node_order_offset)
        return self._orders.get(node, 0)

    @property
    def config_updates(self) -> dict[str, list[str]]:
        return self._so_far.work.config_updates or {}

    @property
    def stale_config(self) -> set[str]:
        return self._so_far.work.stale_config

    def complete(self, scr: str, node: str, default: bool) -> bool:
        """Has `scr` (this Skyhook or an earlier one) nothing left to do on `node`?"""
        found = self._so_far.complete.get((scr, node))
        if found is None:
            found = self.earlier.is_complete(scr, node)
        return default if found is None else found

    # --- pods -----------------------------------------------------------------------------

    def pods(self) -> list[PodView]:
        """This Skyhook's pods, wherever they run."""
        return self.index.skyhook_pods.get(self.name, [])

    def _gone(self, pod: PodView) -> bool:
        key = (pod.namespace, pod.name)
        return key in self._so_far.deleted or key in self.earlier.deleted

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
                and self.index.is_ours(pod)
                and results.outcome(pod).result == results.SUCCEEDED
            )
        )

    def name_taken(self, namespace: str, name: str) -> bool:
        """A pod of that name is on its way out: creating it again now would collide."""
        key = (namespace, name)
        return (
            key in self._so_far.deleted
            or key in self.earlier.deleted
            or key in self.index.terminating
        )

    def check_pod(self, node: str) -> PodView | None:
        """This Skyhook's health check pod on `node` (rules/health.py), if it is there."""
        return next(
            (
                p
                for p in self.index.pods_on_node.get(node, ())
                if keys.HEALTH_CHECK_LABEL in p.labels
                and p.labels.get(keys.NAME_LABEL) == self.name
                and self.index.is_ours(p)
                and self.present(p)
            ),
            None,
        )

    def ours_on(self, node: str) -> list[PodView]:
        """This Skyhook's pods on `node` that may still run: a finished pod kept for its logs
        holds nothing back."""
        return [
            p
            for p in self.index.pods_on_node.get(node, ())
            if p.labels.get(keys.NAME_LABEL) == self.name and self.index.is_ours(p) and self.live(p)
        ]
