"""What the core returns: a `Plan`, an ordered list of idempotent actions for the writer.

Every action is idempotent: applying it twice, or applying a plan computed from a snapshot that
already reflects it, changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from skyhook_planner.model.vocabulary import JsonDict, NodeCondition, Taint
from skyhook_planner.model.waiting import Held, Reason
from skyhook_schemas import keys


@dataclass(frozen=True)
class PatchNode:
    """Patch a node's metadata, spec and conditions. `None` values in the maps mean "remove".

    Taints are matched by key + effect: `remove_taints` drops every taint that is the same as
    one listed; `add_taints` adds (or updates the value of) the listed ones. `unschedulable`
    None leaves the field alone. `conditions` are upserted by type in status.conditions and
    the types in `remove_conditions` dropped. What that leaves: model/effects.py.
    """

    name: str
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    labels: Mapping[str, str | None] = field(default_factory=dict)
    add_taints: tuple[Taint, ...] = ()
    remove_taints: tuple[Taint, ...] = ()
    unschedulable: bool | None = None
    conditions: tuple[NodeCondition, ...] = ()
    remove_conditions: tuple[str, ...] = ()


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
    """Delete the pod (on `node`, whose lane it goes out in); NotFound counts as success."""

    namespace: str
    name: str
    node: str
    reason: str = ""


@dataclass(frozen=True)
class StopPod:
    """Stop a running pod where it is and keep it: its `activeDeadlineSeconds` lowered to
    `STOP_DEADLINE_S`, long passed, so the kubelet stops its containers and fails it with
    reason DeadlineExceeded, and `annotations` merged (what stopped it). The pod and its
    containers' logs stay until it is deleted; NotFound counts as done."""

    namespace: str
    name: str
    node: str  # the lane it goes out in
    annotations: Mapping[str, str] = field(default_factory=dict)
    reason: str = ""


# A live pod's deadline may only be set or lowered; one second has passed for any running pod.
STOP_DEADLINE_S = 1


@dataclass(frozen=True)
class EvictPod:
    """Remove a pod for a drain and wait until it is gone: a policy/v1 Eviction, whose refusal
    by a PodDisruptionBudget is a wait the drain reports, not a failure; or, with `delete`
    (drainConfig.disableEviction), a plain DELETE that no budget holds."""

    namespace: str
    name: str
    node: str  # the lane it goes out in
    grace_seconds: int | None = None  # deleteOptions.gracePeriodSeconds; None: the pod's own
    delete: bool = False


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
    finalizer: str = keys.FINALIZER


@dataclass(frozen=True)
class RemoveFinalizer:
    name: str
    finalizer: str = keys.FINALIZER


@dataclass(frozen=True)
class AnnotateSkyhook:
    """Merge-patch the Skyhook's annotations; `None` values remove a key."""

    name: str
    annotations: Mapping[str, str | None]


@dataclass(frozen=True)
class EmitEvent:
    """A Kubernetes Event (type Normal unless said), component `skyhook-controller`.

    `kind` is "Node" or `keys.KIND` (the SCR); both are cluster-scoped, so `name` identifies the object.
    `reason` says what happened, `action` what the operator did about it (a Node's `State` Event
    is a stage's `JobComplete` or the Skyhook's `MarkComplete`).
    """

    kind: str
    name: str
    reason: str
    message: str
    type: str = "Normal"
    action: str = ""


Action = (
    PatchNode
    | CreatePod
    | DeletePod
    | StopPod
    | EvictPod
    | UpsertConfigMap
    | DeleteConfigMap
    | PatchSkyhookStatus
    | AddFinalizer
    | RemoveFinalizer
    | AnnotateSkyhook
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
    # Nodes this plan moves into progress for some Skyhook (their status becomes in_progress
    # from anything else): the writer writes them after every node the plan releases.
    starting: frozenset[str] = frozenset()
    # Nodes this plan takes out of progress (they stop holding a budget slot): written before
    # any node the plan starts.
    releasing: frozenset[str] = frozenset()
    # Nodes held back this pass and every reason the blockers gave (rules/blockers.py): what
    # `kubectl skyhook plan` reports and the held-nodes metric counts.
    waiting: Mapping[tuple[str, str], tuple[Reason, ...]] = field(default_factory=dict)
    # How many (Skyhook, node) verdicts the pass made again rather than took over from the
    # last pass (passes/memory.py): what the pass cost, beyond its walks over every node. Not
    # part of what the plan does: a pass with memory plans the same as one without.
    looked_at: int = field(default=0, compare=False)

    def __bool__(self) -> bool:
        return bool(self.actions)

    @property
    def held(self) -> tuple[Held, ...]:
        """The waiting nodes held by a closed maintenance window, a firing alert, a soak, or a
        drain that cannot go on by itself (protected pods, a blocked or timed-out drain)."""
        return tuple(
            Held(skyhook, node, r.hold, r.message)
            for (skyhook, node), reasons in self.waiting.items()
            for r in reasons
            if r.hold
        )

    @property
    def needs_quiet(self) -> bool:
        """Whether the plan changes a Skyhook as a whole (finalizers, its annotations, package
        ConfigMaps): such a plan must be made and written while no node's writes are in
        flight, because it may rely on every node's state (a configMap edit waits until no
        stage runs; a finalizer goes once every pod is gone)."""
        return any(skyhook_wide(a) for a in self.actions)


def skyhook_wide(action: Action) -> bool:
    """An action about a Skyhook as a whole other than its status (finalizers, its
    annotations, package ConfigMaps)."""
    return lane_of(action) is None and not isinstance(action, PatchSkyhookStatus)


def lane_of(action: Action) -> str | None:
    """The node an action is about, or None for an action about a Skyhook as a whole. A
    node's actions are written in plan order; different nodes' concurrently."""
    if isinstance(action, PatchNode):
        return action.name
    if isinstance(action, CreatePod):
        return str(action.manifest.get("spec", {}).get("nodeName") or "") or None
    if isinstance(action, DeletePod | StopPod | EvictPod):
        return action.node or None
    if isinstance(action, UpsertConfigMap):
        meta = action.manifest.get("metadata", {})
        if keys.NODE_META_LABEL in (meta.get("labels") or {}):
            return (meta.get("annotations") or {}).get(keys.NODE_NAME_ANNOTATION)
        return None
    if isinstance(action, EmitEvent):
        return action.name  # events are posted in the background, never waited for
    return None
