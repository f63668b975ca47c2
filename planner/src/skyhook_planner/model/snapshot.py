"""What the core reads: a cluster snapshot of views, one frozen dataclass per kind.

The wiring side builds a `ClusterSnapshot` from API objects; the `from_api` constructors here do
the decoding, so there is one decoder per kind. A view keeps only what a decision needs.
"""

from __future__ import annotations

import functools
import hashlib
import operator
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from skyhook_planner.model.alerts import AlertReading
from skyhook_planner.model.imagecompat import Artifact
from skyhook_planner.model.policy import Policy, PolicyError, decode_policy
from skyhook_planner.model.spec import SkyhookSpec, SpecError, decode_spec
from skyhook_planner.model.vocabulary import JsonDict, NodeCondition, Taint, Toleration
from skyhook_schemas import keys
from skyhook_schemas.status import SkyhookStatus

# --- the input snapshot ----------------------------------------------------------------------

# A fleet's views repeat the same strings thousands of times (a label's key and value, our
# package annotation on every node's pod of one stage, a node's state once it is complete, a
# condition's reason, a container's name, the namespace): a decoded API object brings its own
# copy of each, so all but long ones are interned and the index holds one.
_SHARED_UP_TO = 512  # characters
# And the same small value objects: a healthy node's conditions, a finished pod's containers.
_SHARED_SHAPES = 1024


def _shared(text: str) -> str:
    # Tolerant of what a malformed object may hold instead (None): kept as it came.
    return sys.intern(text) if isinstance(text, str) and len(text) <= _SHARED_UP_TO else text


def _shared_values(mapping: Mapping[str, str] | None) -> dict[str, str]:
    return {_shared(key): _shared(value) for key, value in (mapping or {}).items()}


@functools.lru_cache(maxsize=_SHARED_SHAPES)
def _shared_conditions(fields: tuple[tuple[str, str, str, str], ...]) -> tuple[NodeCondition, ...]:
    return tuple(NodeCondition(*map(_shared, each)) for each in fields)


@functools.lru_cache(maxsize=_SHARED_SHAPES)
def _shared_names(names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(map(_shared, names))


@functools.lru_cache(maxsize=_SHARED_SHAPES)
def _named_only(names: tuple[str, ...]) -> tuple[ContainerView, ...]:
    return tuple(ContainerView(_shared(name)) for name in names)


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    boot_id: str = ""
    created: datetime | None = None
    conditions: tuple[NodeCondition, ...] = ()
    # When the Ready condition last changed (its lastTransitionTime): how long a node has
    # been NotReady, for reboot deadlines (rules/deadlines.py)
    ready_since: datetime | None = None

    def carries_any(self, taints: tuple[Taint, ...]) -> bool:
        """Does the node carry one of `taints` (matched by key and effect)?"""
        return any(mine.same_as(taint) for taint in taints for mine in self.taints)

    @classmethod
    def from_api(cls, obj: JsonDict) -> NodeView:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        conditions = _shared_conditions(
            tuple(
                (
                    c.get("type", ""),
                    c.get("status", ""),
                    c.get("reason") or "",
                    c.get("message") or "",
                )
                for c in status.get("conditions") or ()
            )
        )
        ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
        ready_since = next(
            (
                _parse_time(c.get("lastTransitionTime"))
                for c in status.get("conditions") or ()
                if c.get("type") == "Ready"
            ),
            None,
        )
        return cls(
            name=_shared(meta.get("name", "")),
            uid=meta.get("uid", ""),
            labels=_shared_values(meta.get("labels")),
            annotations=_shared_values(meta.get("annotations")),
            taints=tuple(Taint.from_api(t) for t in spec.get("taints") or ()),
            unschedulable=bool(spec.get("unschedulable")),
            ready=ready,
            boot_id=(status.get("nodeInfo") or {}).get("bootID", ""),
            created=_parse_time(meta.get("creationTimestamp")),
            conditions=conditions,
            ready_since=ready_since,
        )


@dataclass(frozen=True, slots=True)
class ContainerView:
    """The parts of a (init) container spec the planner compares against what it would build
    (podbuilder.matches; not the arguments, which carry the Skyhook's generation)."""

    name: str
    image: str = ""
    env: tuple[JsonDict, ...] = ()
    resources: JsonDict = field(default_factory=dict)

    @classmethod
    def from_api(cls, body: JsonDict) -> ContainerView:
        return cls(
            name=_shared(body.get("name", "")),
            image=_shared(body.get("image", "")),
            env=tuple(body.get("env") or ()),
            resources=dict(body.get("resources") or {}),
        )


@dataclass(frozen=True, slots=True)
class ContainerStatusView:
    """One init container's status; `state` is "waiting", "running" or "terminated"."""

    name: str
    state: str
    reason: str = ""
    exit_code: int | None = None
    restart_count: int = 0
    finished_at: datetime | None = None

    @classmethod
    def from_api(cls, body: JsonDict, last: bool = True) -> ContainerStatusView:
        """`last`: the pod's last init container status so far. A step that ended with 0
        before it keeps no time (only the last one's is read: rules/results.outcome) and is
        shared by every pod where that step passed alike."""
        states = body.get("state") or {}
        name = _shared(body.get("name", ""))
        if states.get("terminated") is not None:
            term = states["terminated"]
            if not last and term.get("exitCode") == 0:
                return _passed_step(
                    name, _shared(term.get("reason") or ""), body.get("restartCount") or 0
                )
            return cls(
                name=name,
                state="terminated",
                reason=_shared(term.get("reason") or ""),
                exit_code=term.get("exitCode"),
                restart_count=body.get("restartCount") or 0,
                finished_at=_parse_time(term.get("finishedAt")),
            )
        if states.get("running") is not None:
            return cls(name, "running", restart_count=body.get("restartCount") or 0)
        waiting = states.get("waiting") or {}
        return cls(
            name=name,
            state="waiting",
            reason=_shared(waiting.get("reason") or ""),
            restart_count=body.get("restartCount") or 0,
        )


@functools.lru_cache(maxsize=_SHARED_SHAPES)
def _passed_step(name: str, reason: str, restart_count: int) -> ContainerStatusView:
    return ContainerStatusView(name, "terminated", reason, 0, restart_count)


_CORDON_TAINT = Taint(keys.UNSCHEDULABLE_TAINT_KEY, "NoSchedule")
_MIRROR_ANNOTATION = "kubernetes.io/config.mirror"  # a static pod's copy in the API


def _toleration(body: JsonDict) -> Toleration:
    return Toleration(
        body.get("key") or "",
        body.get("operator") or "Equal",
        body.get("value") or "",
        body.get("effect") or "",
    )


@dataclass(frozen=True, slots=True)
class PodView:
    name: str
    namespace: str
    node: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    phase: str = "Pending"
    init_containers: tuple[ContainerView, ...] = ()
    init_statuses: tuple[ContainerStatusView, ...] = ()
    containers: tuple[str, ...] = ()  # the app containers' names
    deleting: bool = False
    # What a drain needs to know (rules/drain.py): does the pod tolerate the cordon taint,
    # the kind of its controller ("" when none owns it), an emptyDir volume, a mirror pod.
    tolerates_unschedulable: bool = False
    controller_kind: str = ""
    empty_dir: bool = False
    mirror: bool = False
    created: datetime | None = None  # creationTimestamp: when an interrupt began
    reason: str = ""  # status.reason: DeadlineExceeded when the kubelet stopped it at its deadline
    # Condition DisruptionTarget: the cluster ended it (an eviction, a preemption, the taint
    # manager), not its own steps.
    disrupted: bool = False

    @property
    def active(self) -> bool:
        """Running or Pending and not on its way out."""
        return self.phase in {"Running", "Pending"} and not self.deleting

    @classmethod
    def from_api(cls, obj: JsonDict) -> PodView:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        labels = _shared_values(meta.get("labels"))
        phase = _shared(status.get("phase") or "Pending")
        # Only what a pass reads is kept (every pod on every node is held between passes):
        # annotations of our own pods only, and an init container's spec, which is compared
        # with what the planner would build, only while one of ours may still run or be
        # retried; a succeeded pod kept for its logs, or anyone else's, keeps the names.
        ours = keys.NAME_LABEL in labels
        detailed = ours and phase != "Succeeded"
        statuses: list[JsonDict] = status.get("initContainerStatuses") or []
        return cls(
            name=meta.get("name", ""),
            namespace=_shared(meta.get("namespace", "")),
            node=_shared(spec.get("nodeName") or ""),
            labels=labels,
            annotations=_shared_values(meta.get("annotations")) if ours else {},
            phase=phase,
            init_containers=tuple(
                ContainerView.from_api(c) for c in spec.get("initContainers") or ()
            )
            if detailed
            else _named_only(tuple(c.get("name", "") for c in spec.get("initContainers") or ())),
            init_statuses=tuple(
                ContainerStatusView.from_api(s, last=s is statuses[-1]) for s in statuses
            ),
            containers=_shared_names(
                tuple(c.get("name", "") for c in spec.get("containers") or ())
            ),
            deleting=bool(meta.get("deletionTimestamp")),
            tolerates_unschedulable=any(
                _toleration(t).tolerates(_CORDON_TAINT) for t in spec.get("tolerations") or ()
            ),
            controller_kind=next(
                (
                    o.get("kind", "")
                    for o in meta.get("ownerReferences") or ()
                    if o.get("controller")
                ),
                "",
            ),
            empty_dir=any("emptyDir" in v for v in spec.get("volumes") or ()),
            mirror=_MIRROR_ANNOTATION in (meta.get("annotations") or {}),
            created=_parse_time(meta.get("creationTimestamp")),
            reason=_shared(status.get("reason") or ""),
            disrupted=any(
                c.get("type") == "DisruptionTarget" and c.get("status") == "True"
                for c in status.get("conditions") or ()
            ),
        )


@dataclass(frozen=True, slots=True)
class ConfigMapView:
    name: str
    namespace: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    data: Mapping[str, str] = field(default_factory=dict)
    # A node-metadata ConfigMap (one per node and Skyhook: a fleet's worth of labels and
    # annotations as JSON) keeps only a digest of its data: a pass only asks whether it already
    # holds what the pass would write (`holds`).
    data_digest: bytes = b""

    def holds(self, data: Mapping[str, str]) -> bool:
        """Is `data` exactly this ConfigMap's data?"""
        if self.data_digest:
            return _digest(data) == self.data_digest
        return dict(self.data) == dict(data)

    @classmethod
    def from_api(cls, obj: JsonDict) -> ConfigMapView:
        meta = obj.get("metadata") or {}
        labels = _shared_values(meta.get("labels"))
        data = obj.get("data") or {}
        digested = keys.NODE_META_LABEL in labels
        return cls(
            name=meta.get("name", ""),
            namespace=_shared(meta.get("namespace", "")),
            labels=labels,
            annotations=_shared_values(meta.get("annotations")),
            data={} if digested else dict(data),
            data_digest=_digest(data) if digested else b"",
        )


def _digest(data: Mapping[str, str]) -> bytes:
    hashed = hashlib.blake2b(digest_size=16)
    for key in sorted(data):
        value = data[key]
        hashed.update(f"{len(key)}:{key}{len(value)}:{value}".encode())
    return hashed.digest()


@dataclass(frozen=True)
class SkyhookView:
    """A Skyhook object. `spec` is None when the spec is invalid; `spec_errors` then says why."""

    name: str
    uid: str = ""
    generation: int = 1
    annotations: Mapping[str, str] = field(default_factory=dict)
    spec: SkyhookSpec | None = None
    spec_errors: tuple[str, ...] = ()
    status: SkyhookStatus = field(default_factory=SkyhookStatus)
    finalizers: tuple[str, ...] = ()
    deleting: bool = False

    @classmethod
    def from_api(cls, obj: JsonDict) -> SkyhookView:
        meta = obj.get("metadata") or {}
        spec: SkyhookSpec | None = None
        errors: tuple[str, ...] = ()
        try:
            spec = decode_spec(obj.get("spec") or {})
        except SpecError as err:
            errors = tuple(err.messages)
        return cls(
            name=meta.get("name", ""),
            uid=meta.get("uid", ""),
            generation=meta.get("generation") or 1,
            annotations=dict(meta.get("annotations") or {}),
            spec=spec,
            spec_errors=errors,
            status=SkyhookStatus.from_json(obj.get("status")),
            finalizers=tuple(meta.get("finalizers") or ()),
            deleting=bool(meta.get("deletionTimestamp")),
        )


@dataclass(frozen=True)
class PolicyView:
    """A DeploymentPolicy. `policy` is None when its spec is invalid; `errors` then says why."""

    name: str
    policy: Policy | None = None
    errors: tuple[str, ...] = ()

    @classmethod
    def from_api(cls, obj: JsonDict) -> PolicyView:
        name = (obj.get("metadata") or {}).get("name", "")
        try:
            return cls(name, decode_policy(name, obj.get("spec") or {}))
        except PolicyError as err:
            return cls(name, errors=tuple(err.messages))


@dataclass(frozen=True)
class WriteRefusal:
    """A write of the operator's that the apiserver refused as invalid (HTTP 422): the
    operator does not send it again while the Skyhook's spec stays at `generation`, and the
    Skyhook's status says so (passes/report.py)."""

    skyhook: str
    kind: str  # ConfigMap, Pod, Node, Skyhook (its finalizer)
    namespace: str  # "" for a Node
    name: str
    message: str  # the apiserver's, naming the field
    generation: int

    @property
    def object(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where}"


@dataclass(frozen=True)
class EvictionRefusal:
    """A removal the apiserver refused: an eviction a PodDisruptionBudget held (`by_budget`,
    a wait), or any other failed eviction or delete (a 403 from RBAC or a policy engine, a
    500): the drain is blocked until a later try is accepted or the pod is gone."""

    namespace: str
    name: str
    node: str
    uid: str
    detail: str  # the apiserver's answer: for a budget its message, naming the budget
    at: datetime
    by_budget: bool = True
    delete: bool = False  # the refused request was a DELETE (drainConfig.disableEviction)


# The snapshot's order: objects by name, pods by namespace and name (C-level keys: a pass sorts
# every node and pod).
BY_NAME = operator.attrgetter("name")
BY_NAMESPACE_AND_NAME = operator.attrgetter("namespace", "name")


@dataclass(frozen=True)
class ClusterSnapshot:
    """Everything one pass decides from. It must reflect every write of earlier passes
    (read-your-writes): a stale node annotation would make the planner redo finished work."""

    skyhooks: tuple[SkyhookView, ...]
    nodes: tuple[NodeView, ...]
    pods: tuple[PodView, ...] = ()
    configmaps: tuple[ConfigMapView, ...] = ()
    policies: tuple[PolicyView, ...] = ()
    # Image compatibility artifacts fetched by the operator, by `ImageCompatibility.source`:
    # the parsed artifact, or why it could not be had (a registry error, a malformed artifact).
    image_artifacts: Mapping[str, Artifact | str] = field(default_factory=dict)
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    # What the operator last read from each Prometheus URL an alertGate names.
    alerts: tuple[AlertReading, ...] = ()
    # Writes the apiserver refused as invalid, and for which Skyhook generation.
    refusals: tuple[WriteRefusal, ...] = ()
    # Removals the apiserver refused (a budget's wait or a failure), by (namespace, name),
    # until the pod is removed or gone.
    eviction_refusals: Mapping[tuple[str, str], EvictionRefusal] = field(default_factory=dict)
