"""The planner's vocabulary: what it reads (a cluster snapshot) and what it returns (a plan).

Everything here is a frozen dataclass. The wiring side builds a `ClusterSnapshot` from API
objects (the `from_api` constructors below do the decoding, so there is one decoder per kind),
calls `plan(snapshot, settings)` and hands each `Action` of the resulting `Plan`, in order, to
the writer. Every action is idempotent: applying it twice, or applying a plan computed from a
snapshot that already reflects it, changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from skyhook_operator.spec import SkyhookSpec, SpecError, decode_spec

JsonDict = Mapping[str, Any]


# --- small value types shared by spec, snapshot and actions ---------------------------------


@dataclass(frozen=True)
class Taint:
    """A node taint. Two taints are "the same taint" when key and effect match."""

    key: str
    effect: str
    value: str = ""

    def same_as(self, other: Taint) -> bool:
        return self.key == other.key and self.effect == other.effect

    def to_api(self) -> dict[str, str]:
        body = {"key": self.key, "effect": self.effect}
        if self.value:
            body["value"] = self.value
        return body

    @classmethod
    def from_api(cls, body: JsonDict) -> Taint:
        return cls(
            key=body.get("key", ""), effect=body.get("effect", ""), value=body.get("value") or ""
        )

    @classmethod
    def parse(cls, text: str) -> Taint:
        """Parse `key[=value]:Effect` (the RUNTIME_REQUIRED_TAINT format)."""
        head, sep, effect = text.rpartition(":")
        if not sep or not head or effect not in {"NoSchedule", "PreferNoSchedule", "NoExecute"}:
            raise ValueError(
                f"{text!r} is not a taint: expected key[=value]:Effect with Effect one of "
                "NoSchedule, PreferNoSchedule, NoExecute"
            )
        key, _, value = head.partition("=")
        return cls(key=key, effect=effect, value=value)


@dataclass(frozen=True)
class NodeCondition:
    type: str
    status: str
    reason: str = ""
    message: str = ""


# --- the input snapshot ----------------------------------------------------------------------


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass(frozen=True)
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

    @classmethod
    def from_api(cls, obj: JsonDict) -> NodeView:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        conditions = tuple(
            NodeCondition(
                type=c.get("type", ""),
                status=c.get("status", ""),
                reason=c.get("reason") or "",
                message=c.get("message") or "",
            )
            for c in status.get("conditions") or ()
        )
        ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
        return cls(
            name=meta.get("name", ""),
            uid=meta.get("uid", ""),
            labels=dict(meta.get("labels") or {}),
            annotations=dict(meta.get("annotations") or {}),
            taints=tuple(Taint.from_api(t) for t in spec.get("taints") or ()),
            unschedulable=bool(spec.get("unschedulable")),
            ready=ready,
            boot_id=(status.get("nodeInfo") or {}).get("bootID", ""),
            created=_parse_time(meta.get("creationTimestamp")),
            conditions=conditions,
        )


@dataclass(frozen=True)
class ContainerView:
    """The parts of a (init) container spec the planner compares against what it would build."""

    name: str
    image: str = ""
    args: tuple[str, ...] = ()
    env: tuple[JsonDict, ...] = ()
    resources: JsonDict = field(default_factory=dict)

    @classmethod
    def from_api(cls, body: JsonDict) -> ContainerView:
        return cls(
            name=body.get("name", ""),
            image=body.get("image", ""),
            args=tuple(body.get("args") or ()),
            env=tuple(body.get("env") or ()),
            resources=dict(body.get("resources") or {}),
        )


@dataclass(frozen=True)
class ContainerStatusView:
    """One init container's status; `state` is "waiting", "running" or "terminated"."""

    name: str
    state: str
    reason: str = ""
    exit_code: int | None = None
    restart_count: int = 0
    finished_at: datetime | None = None

    @classmethod
    def from_api(cls, body: JsonDict) -> ContainerStatusView:
        states = body.get("state") or {}
        if states.get("terminated") is not None:
            term = states["terminated"]
            return cls(
                name=body.get("name", ""),
                state="terminated",
                reason=term.get("reason") or "",
                exit_code=term.get("exitCode"),
                restart_count=body.get("restartCount") or 0,
                finished_at=_parse_time(term.get("finishedAt")),
            )
        if states.get("running") is not None:
            return cls(body.get("name", ""), "running", restart_count=body.get("restartCount") or 0)
        waiting = states.get("waiting") or {}
        return cls(
            name=body.get("name", ""),
            state="waiting",
            reason=waiting.get("reason") or "",
            restart_count=body.get("restartCount") or 0,
        )


@dataclass(frozen=True)
class PodView:
    name: str
    namespace: str
    node: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    phase: str = "Pending"
    init_containers: tuple[ContainerView, ...] = ()
    init_statuses: tuple[ContainerStatusView, ...] = ()
    deleting: bool = False
    # Drain decisions (operator.md §5.2): does the pod tolerate the cordon taint, who owns it.
    tolerates_unschedulable: bool = False
    owner_kinds: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        """Running or Pending and not on its way out."""
        return self.phase in {"Running", "Pending"} and not self.deleting

    @classmethod
    def from_api(cls, obj: JsonDict) -> PodView:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        return cls(
            name=meta.get("name", ""),
            namespace=meta.get("namespace", ""),
            node=spec.get("nodeName") or "",
            labels=dict(meta.get("labels") or {}),
            annotations=dict(meta.get("annotations") or {}),
            phase=status.get("phase") or "Pending",
            init_containers=tuple(
                ContainerView.from_api(c) for c in spec.get("initContainers") or ()
            ),
            init_statuses=tuple(
                ContainerStatusView.from_api(s) for s in status.get("initContainerStatuses") or ()
            ),
            deleting=bool(meta.get("deletionTimestamp")),
            tolerates_unschedulable=any(
                t.get("key") == "node.kubernetes.io/unschedulable"
                for t in spec.get("tolerations") or ()
            ),
            owner_kinds=tuple(o.get("kind", "") for o in meta.get("ownerReferences") or ()),
        )


@dataclass(frozen=True)
class ConfigMapView:
    name: str
    namespace: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    data: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_api(cls, obj: JsonDict) -> ConfigMapView:
        meta = obj.get("metadata") or {}
        return cls(
            name=meta.get("name", ""),
            namespace=meta.get("namespace", ""),
            labels=dict(meta.get("labels") or {}),
            annotations=dict(meta.get("annotations") or {}),
            data=dict(obj.get("data") or {}),
        )


@dataclass(frozen=True)
class SkyhookView:
    """A Skyhook object. `spec` is None when the spec is invalid; `spec_errors` then says why."""

    name: str
    uid: str = ""
    generation: int = 1
    annotations: Mapping[str, str] = field(default_factory=dict)
    spec: SkyhookSpec | None = None
    spec_errors: tuple[str, ...] = ()
    status: JsonDict = field(default_factory=dict)
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
            status=dict(obj.get("status") or {}),
            finalizers=tuple(meta.get("finalizers") or ()),
            deleting=bool(meta.get("deletionTimestamp")),
        )


@dataclass(frozen=True)
class ClusterSnapshot:
    """Everything one pass decides from. It must reflect every write of earlier passes
    (read-your-writes): a stale node annotation would make the planner redo finished work."""

    skyhooks: tuple[SkyhookView, ...]
    nodes: tuple[NodeView, ...]
    pods: tuple[PodView, ...] = ()
    configmaps: tuple[ConfigMapView, ...] = ()
    now: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass(frozen=True)
class PlannerSettings:
    """The operator settings the planner needs (operator.md §13); built by settings.py."""

    namespace: str = "skyhook"
    agent_image: str = "ghcr.io/nvidia/skyhook/agent:latest"
    pause_image: str = "registry.k8s.io/pause:3.10"
    copy_dir_root: str = "/var/lib/skyhook"
    agent_log_root: str = "/var/log/skyhook"
    runtime_required_taint: Taint = Taint("skyhook.nvidia.com", "NoSchedule", "runtime-required")
    reapply_on_reboot: bool = False
    image_pull_secret: str = ""
    # Failed stage pods (phase Failed) are retried after base * 2**restarts seconds, capped.
    retry_backoff_base_s: float = 10.0
    retry_backoff_max_s: float = 300.0
    # Written once per node and Skyhook into the version_<scr> annotation.
    operator_version: str = "dev"

    @property
    def agent_version(self) -> str:
        return image_tag(self.agent_image)


def image_tag(reference: str) -> str:
    """The tag of an image reference: `repo:1.2@sha256:<hex>` -> `1.2` (a digest is not a tag;
    a registry port such as `host:5000/repo` is not one either). Empty when there is none."""
    name = reference.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] if ":" in last else ""


# --- the output plan -------------------------------------------------------------------------


@dataclass(frozen=True)
class PatchNode:
    """Merge-patch a node's metadata and spec. `None` values in the maps mean "remove".

    Taints are matched by key + effect: `remove_taints` drops every taint that is the same as
    one listed; `add_taints` adds (or updates the value of) the listed ones. `unschedulable`
    None leaves the field alone.
    """

    name: str
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    labels: Mapping[str, str | None] = field(default_factory=dict)
    add_taints: tuple[Taint, ...] = ()
    remove_taints: tuple[Taint, ...] = ()
    unschedulable: bool | None = None


@dataclass(frozen=True)
class SetNodeConditions:
    """Upsert these conditions (by type) in the node's status.conditions (nodes/status) and drop
    the condition types listed in `remove_types`."""

    name: str
    conditions: tuple[NodeCondition, ...]
    remove_types: tuple[str, ...] = ()


@dataclass(frozen=True)
class CreatePod:
    """Create the pod; AlreadyExists counts as success (names are deterministic)."""

    manifest: JsonDict

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.manifest["metadata"]["namespace"])


@dataclass(frozen=True)
class DeletePod:
    """Delete the pod; NotFound counts as success."""

    namespace: str
    name: str
    reason: str = ""


@dataclass(frozen=True)
class EvictPod:
    """Post a policy/v1 Eviction; a 429 (PDB) means "try again later", not a failure."""

    namespace: str
    name: str


@dataclass(frozen=True)
class UpsertConfigMap:
    manifest: JsonDict

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])


@dataclass(frozen=True)
class DeleteConfigMap:
    namespace: str
    name: str


@dataclass(frozen=True)
class PatchSkyhookStatus:
    """JSON merge patch (RFC 7386) for the status subresource: `{"status": patch}`."""

    name: str
    patch: JsonDict


@dataclass(frozen=True)
class AddFinalizer:
    name: str
    finalizer: str = "skyhook.nvidia.com/skyhook"


@dataclass(frozen=True)
class RemoveFinalizer:
    name: str
    finalizer: str = "skyhook.nvidia.com/skyhook"


@dataclass(frozen=True)
class EmitEvent:
    """A Kubernetes Event (type Normal unless said), component `skyhook-controller`.

    `kind` is "Node" or "Skyhook"; both are cluster-scoped, so `name` identifies the object.
    """

    kind: str
    name: str
    reason: str
    message: str
    type: str = "Normal"


Action = (
    PatchNode
    | SetNodeConditions
    | CreatePod
    | DeletePod
    | EvictPod
    | UpsertConfigMap
    | DeleteConfigMap
    | PatchSkyhookStatus
    | AddFinalizer
    | RemoveFinalizer
    | EmitEvent
)


@dataclass(frozen=True)
class Plan:
    """The planner's only output: actions to apply in order, and when to plan again.

    Order matters and is part of the contract: a node's state annotation is written before the
    pod that carries that stage out, and cordons before evictions. If applying an action fails,
    the writer stops and the next pass re-plans from a fresh snapshot.
    `requeue_after` (seconds) is set when a timer, not an event, will change the decision (a
    retry backoff, waiting for a drain); None means "only on the next event".
    """

    actions: tuple[Action, ...] = ()
    requeue_after: float | None = None

    def __bool__(self) -> bool:
        return bool(self.actions)
