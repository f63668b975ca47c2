"""Applies a plan's Actions to the cluster as idempotent, conflict-aware writes.

Idempotent: creating what exists (409) and deleting what is gone (404) count as done, and
every patch states the end result (a merge patch of keys, a taint list computed from the
node as it is now), so applying an action twice changes nothing.

Conflict-aware: writes that replace a list (taints, finalizers) are preconditioned on the
resourceVersion they were computed from and recomputed from a fresh read on conflict.
Annotation and label writes are per-key merge patches and need no precondition: the planner
owns those keys.

Order and speed: the plan's order is kept where it matters. Actions about one node (its
patches, conditions, metadata ConfigMap, pods, events) form that node's lane and run in
order; lanes of different nodes run concurrently, except that lanes of nodes the plan moves
into progress wait for all the others (releases before admissions, so the budget a watcher
counts always holds). Actions about an
SCR as a whole (package ConfigMaps, status, finalizers) are barriers: every lane queued
before one finishes first. When an action fails, the rest of its lane is skipped and the
writer stops at the next barrier; the next pass re-plans from a fresh snapshot.

Every object the API returns is handed to the snapshot overlays (read-your-writes).
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import urllib3

from skyhook_operator.core.actions import (
    Action,
    AddFinalizer,
    AnnotateSkyhook,
    CreatePod,
    DeleteConfigMap,
    DeletePod,
    EmitEvent,
    EvictPod,
    PatchNode,
    PatchSkyhookStatus,
    Plan,
    RemoveFinalizer,
    UpsertConfigMap,
)
from skyhook_operator.core.vocabulary import Taint
from skyhook_operator.kube import events
from skyhook_operator.kube.client import (
    APPLY_PATCH,
    FIELD_MANAGER,
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    ApiError,
    Json,
    Kube,
)
from skyhook_operator.kube.drain import Evictor
from skyhook_operator.snapshot import ClusterStore
from skyhook_schemas import keys

log = logging.getLogger(__name__)

_CONFLICT_RETRIES = 5
# A deletion we cannot date hides the watch's copy until the watch drops the object.
_GONE = 1 << 62


@dataclass
class ApplyResult:
    """What one plan did: how many actions took effect and which failed (and why)."""

    applied: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


@dataclass
class _Run:
    """One plan's progress, shared by the threads applying it."""

    result: ApplyResult = field(default_factory=ApplyResult)
    failed_lanes: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Writer:
    """Applies plans; one instance per process, shared by every pass."""

    def __init__(
        self, kube: Kube, store: ClusterStore, evictor: Evictor, concurrency: int = 16
    ) -> None:
        self._kube = kube
        self._store = store
        self._evictor = evictor
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="writer")
        self._recorder = events.Recorder(kube)
        self._events = ThreadPoolExecutor(max_workers=2, thread_name_prefix="events")
        self._queued = 0  # actions of the plan being applied that have not run yet
        self._queue_lock = threading.Lock()

    @property
    def queue_depth(self) -> int:
        """Actions of the plan being applied that have not been attempted yet."""
        return self._queued

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._events.shutdown(wait=True)
        self._recorder.close()

    def apply(self, plan: Plan, pod_nodes: Mapping[tuple[str, str], str]) -> ApplyResult:
        """Apply every action of `plan`.

        `pod_nodes` maps (namespace, pod) to its node. The lanes of the nodes the plan starts
        (`plan.starting`) run only after every other lane of the same segment has finished, so
        a node the plan releases is written before one it starts, and no watcher ever sees
        more nodes in progress than the budget.
        """
        with self._queue_lock:
            self._queued = len(plan.actions)
        try:
            return self._apply(plan, pod_nodes)
        finally:
            with self._queue_lock:
                self._queued = 0

    def _apply(self, plan: Plan, pod_nodes: Mapping[tuple[str, str], str]) -> ApplyResult:
        starting = plan.starting
        run = _Run()
        lanes: dict[str, list[Action]] = {}
        for action in plan.actions:
            lane = self._lane(action, pod_nodes)
            if lane is not None:
                lanes.setdefault(lane, []).append(action)
                continue
            self._run_segment(lanes, starting, run)
            lanes = {}
            if run.result.ok:
                self._run_one(action, run, lane=None)
            if not run.result.ok:
                return run.result
        self._run_segment(lanes, starting, run)
        return run.result

    def _run_segment(
        self, lanes: Mapping[str, list[Action]], starting: Collection[str], run: _Run
    ) -> None:
        releasing = [(lane, actions) for lane, actions in lanes.items() if lane not in starting]
        admitting = [(lane, actions) for lane, actions in lanes.items() if lane in starting]
        for group in (releasing, admitting):
            for _ in self._pool.map(lambda item: self._run_lane(*item, run=run), group):
                pass

    def _run_lane(self, lane: str, actions: Sequence[Action], *, run: _Run) -> None:
        for action in actions:
            self._run_one(action, run, lane)

    # --- scheduling -------------------------------------------------------------------------

    @staticmethod
    def _lane(action: Action, pod_nodes: Mapping[tuple[str, str], str]) -> str | None:
        """The node an action belongs to, or None for an SCR-wide barrier."""
        if isinstance(action, PatchNode):
            return action.name
        if isinstance(action, CreatePod):
            return str(action.manifest.get("spec", {}).get("nodeName") or "") or None
        if isinstance(action, DeletePod | EvictPod):
            return pod_nodes.get((action.namespace, action.name))
        if isinstance(action, UpsertConfigMap):
            meta = action.manifest.get("metadata", {})
            if keys.NODE_META_LABEL in (meta.get("labels") or {}):
                return (meta.get("annotations") or {}).get(keys.NODE_NAME_ANNOTATION)
            return None
        if isinstance(action, EmitEvent):
            return action.name  # never a barrier: events are posted in the background
        return None

    def _run_one(self, action: Action, run: _Run, lane: str | None) -> None:
        with self._queue_lock:
            self._queued = max(0, self._queued - 1)
        if lane is not None and lane in run.failed_lanes:
            return  # an earlier action for this node failed: the next pass re-plans it
        try:
            self._dispatch(action)
        except (ApiError, OSError, urllib3.exceptions.HTTPError) as error:
            log.warning("%s failed, the next pass re-plans: %s", type(action).__name__, error)
            with run.lock:
                run.result.failures.append(f"{type(action).__name__}: {error}")
                if lane is not None:
                    run.failed_lanes.add(lane)
            return
        with run.lock:
            run.result.applied += 1

    def _dispatch(self, action: Action) -> None:
        handlers: dict[type, Callable[[Any], None]] = {
            PatchNode: self.patch_node,
            CreatePod: self.create_pod,
            DeletePod: self.delete_pod,
            EvictPod: self.evict_pod,
            UpsertConfigMap: self.upsert_configmap,
            DeleteConfigMap: self.delete_configmap,
            PatchSkyhookStatus: self.patch_skyhook_status,
            AddFinalizer: self.add_finalizer,
            RemoveFinalizer: self.remove_finalizer,
            AnnotateSkyhook: self.annotate_skyhook,
            EmitEvent: self.emit_event,
        }
        handlers[type(action)](action)

    # --- nodes ------------------------------------------------------------------------------

    def patch_node(self, action: PatchNode) -> None:
        """One request in the common case: metadata and conditions go together through
        nodes/status (whose patches may change metadata, never spec). A spec change
        (cordon, uncordon) needs the node itself, and the conditions then follow on /status."""
        metadata: Json = {}
        if action.annotations:
            metadata["annotations"] = dict(action.annotations)
        if action.labels:
            metadata["labels"] = dict(action.labels)
        conditions = _conditions_patch(action)
        if action.unschedulable is not None:
            body: Json = {"spec": {"unschedulable": action.unschedulable}}
            if metadata:
                body["metadata"] = metadata
            path = self._kube.node_path(action.name)
            self._store.nodes.wrote(self._kube.request("PATCH", path, body, MERGE_PATCH))
            metadata = {}
        if metadata or conditions:
            body = {"metadata": metadata} if metadata else {}
            if conditions:
                body["status"] = {"conditions": conditions}
            path = self._kube.node_path(action.name, "status")
            # Strategic merge: conditions merge by `type`; `$patch: delete` drops one.
            answer = self._kube.request("PATCH", path, body, STRATEGIC_MERGE_PATCH)
            self._store.nodes.wrote(answer)
        # Taints after the state: a taint removed because the node completed must never be
        # seen gone while the node still reads incomplete.
        if action.add_taints or action.remove_taints:
            self._store.nodes.wrote(self._patch_taints(self._kube.node_path(action.name), action))

    def _patch_taints(self, path: str, action: PatchNode) -> Json:
        """Replace spec.taints with the wanted list, retried on a concurrent change."""
        for attempt in range(_CONFLICT_RETRIES):
            node = self._kube.request("GET", path)
            current = [Taint.from_api(t) for t in node.get("spec", {}).get("taints") or ()]
            wanted = _wanted_taints(current, action.add_taints, action.remove_taints)
            if wanted == current:
                return node
            patch = [
                {
                    "op": "test",
                    "path": "/metadata/resourceVersion",
                    "value": node["metadata"]["resourceVersion"],
                },
                {"op": "add", "path": "/spec/taints", "value": [t.to_api() for t in wanted]},
            ]
            try:
                return self._kube.request("PATCH", path, patch, JSON_PATCH)
            except ApiError as error:
                if error.status not in (409, 422) or attempt == _CONFLICT_RETRIES - 1:
                    raise
                log.debug("taints of %s changed meanwhile, recomputing", path)
        raise AssertionError("unreachable")

    # --- pods -------------------------------------------------------------------------------

    def create_pod(self, action: CreatePod) -> None:
        path = self._kube.namespaced_path("pods", action.namespace)
        try:
            self._store.pods.wrote(self._kube.request("POST", path, action.manifest), created=True)
        except ApiError as error:
            if error.status != 409:
                raise

    def delete_pod(self, action: DeletePod) -> None:
        path = self._kube.namespaced_path("pods", action.namespace, action.name)
        try:
            answer = self._kube.request("DELETE", path)
        except ApiError as error:
            if error.status != 404:
                raise
            answer = {"kind": "Status"}
        if action.reason:
            log.info("deleted pod %s/%s: %s", action.namespace, action.name, action.reason)
        if answer.get("kind") == "Pod":
            self._store.pods.wrote(answer)  # still terminating: deletionTimestamp set
        else:
            self._store.pods.deleted(action.namespace, action.name, _GONE)

    def evict_pod(self, action: EvictPod) -> None:
        self._evictor.ensure(action.namespace, action.name)

    # --- configmaps -------------------------------------------------------------------------

    def upsert_configmap(self, action: UpsertConfigMap) -> None:
        manifest = {"apiVersion": "v1", "kind": "ConfigMap", **action.manifest}
        namespace = manifest["metadata"]["namespace"]
        path = self._kube.namespaced_path("configmaps", namespace, action.name)
        query = {"fieldManager": FIELD_MANAGER, "force": "true"}
        answer = self._kube.request("PATCH", path, manifest, APPLY_PATCH, query=query)
        self._store.configmaps.wrote(answer, created=True)

    def delete_configmap(self, action: DeleteConfigMap) -> None:
        path = self._kube.namespaced_path("configmaps", action.namespace, action.name)
        try:
            self._kube.request("DELETE", path)
        except ApiError as error:
            if error.status != 404:
                raise
        self._store.configmaps.deleted(action.namespace, action.name, _GONE)

    # --- skyhooks ---------------------------------------------------------------------------

    def patch_skyhook_status(self, action: PatchSkyhookStatus) -> None:
        path = self._kube.skyhook_path(action.name, "status")
        try:
            answer = self._kube.request("PATCH", path, {"status": dict(action.patch)}, MERGE_PATCH)
        except ApiError as error:
            if error.status == 404:
                return  # deleted meanwhile: nothing left to report on
            raise
        self._store.skyhooks.wrote(answer)

    def annotate_skyhook(self, action: AnnotateSkyhook) -> None:
        path = self._kube.skyhook_path(action.name)
        body = {"metadata": {"annotations": dict(action.annotations)}}
        try:
            self._store.skyhooks.wrote(self._kube.request("PATCH", path, body, MERGE_PATCH))
        except ApiError as error:
            if error.status != 404:
                raise

    def add_finalizer(self, action: AddFinalizer) -> None:
        self._edit_finalizers(
            action.name, lambda f: f if action.finalizer in f else [*f, action.finalizer]
        )

    def remove_finalizer(self, action: RemoveFinalizer) -> None:
        self._edit_finalizers(action.name, lambda f: [x for x in f if x != action.finalizer])

    def _edit_finalizers(self, name: str, edit: Callable[[list[str]], list[str]]) -> None:
        path = self._kube.skyhook_path(name)
        for attempt in range(_CONFLICT_RETRIES):
            try:
                current = self._kube.request("GET", path)
            except ApiError as error:
                if error.status == 404:
                    return
                raise
            finalizers = list(current["metadata"].get("finalizers") or [])
            wanted = edit(finalizers)
            if wanted == finalizers:
                return
            body = {
                "metadata": {
                    "finalizers": wanted,
                    "resourceVersion": current["metadata"]["resourceVersion"],
                }
            }
            try:
                self._store.skyhooks.wrote(self._kube.request("PATCH", path, body, MERGE_PATCH))
                return
            except ApiError as error:
                if error.status == 404:
                    return
                if error.status != 409 or attempt == _CONFLICT_RETRIES - 1:
                    raise

    def emit_event(self, action: EmitEvent) -> None:
        """Events are best-effort and order-free: posted in the background, never waited for,
        so they add nothing to a pass's latency; the recorder aggregates repeats."""
        subject = events.Subject(kind=action.kind, name=action.name)
        event = events.Event(subject, action.reason, action.message, action.type)
        self._events.submit(self._recorder.record, event)


def _conditions_patch(action: PatchNode) -> list[Json]:
    """The strategic-merge list for status.conditions: upserts, then `$patch: delete` entries."""
    now = _now()
    upserts: list[Json] = [
        {
            "type": c.type,
            "status": c.status,
            "reason": c.reason,
            "message": c.message,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }
        for c in action.conditions
    ]
    return upserts + [{"type": t, "$patch": "delete"} for t in action.remove_conditions]


def _wanted_taints(
    current: Sequence[Taint], add: Sequence[Taint], remove: Sequence[Taint]
) -> list[Taint]:
    """`current` without the removed taints, with the added ones set (same key and effect)."""
    wanted = [t for t in current if not any(t.same_as(r) for r in remove)]
    for taint in add:
        wanted = [t for t in wanted if not t.same_as(taint)]
        wanted.append(taint)
    # Keep the original order for taints that did not change.
    order = {(t.key, t.effect): i for i, t in enumerate(current)}
    return sorted(wanted, key=lambda t: order.get((t.key, t.effect), len(order)))
