"""One action, one write: the apiserver requests that carry out each of a plan's actions.

Idempotent: creating what exists (409) and deleting what is gone (404) count as done, and
every patch states the end result (a merge patch of keys, a taint list computed from the
node as it is now), so sending an action twice changes nothing.

Conflict-aware: writes that replace a list (taints, finalizers) are preconditioned on the
resourceVersion they were computed from and recomputed from a fresh read on conflict. A cordon
or uncordon is preconditioned on the node's resourceVersion as last seen, and a conflict left
to the next pass.
Annotation and label writes are per-key merge patches and need no precondition: the planner
owns those keys. The lists are computed with the planner's own rules (model/effects.py), so
the replay and the simulator show what is sent.

Every object the API returns is handed to the store's overlays (read-your-writes).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

from skyhook_operator.kube.client import (
    APPLY_PATCH,
    FIELD_MANAGER,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    ApiError,
    AsyncKube,
    Json,
)
from skyhook_operator.store import ClusterStore
from skyhook_planner.model.actions import (
    STOP_DEADLINE_S,
    Action,
    AddFinalizer,
    AnnotateSkyhook,
    CreatePod,
    DeleteConfigMap,
    DeletePod,
    PatchNode,
    PatchSkyhookStatus,
    RemoveFinalizer,
    StopPod,
    UpsertConfigMap,
)
from skyhook_planner.model.effects import finalizers_after, taints_after
from skyhook_planner.model.vocabulary import Taint
from skyhook_schemas import keys

log = logging.getLogger(__name__)

_CONFLICT_RETRIES = 5
# A deletion we cannot date hides the watch's copy until the watch drops the object.
_GONE = 1 << 62


class TaintRefused(ApiError):
    """The apiserver did not take a taint the planner adds (the runtime-required one): not a
    problem of the spec, so it is tried again every pass rather than held back."""


class ApiVerbs:
    """Sends actions to the apiserver (`send`); evictions and Events are not sent here (the
    evictor and the Event recorder take them)."""

    def __init__(self, kube: AsyncKube, store: ClusterStore) -> None:
        self._kube = kube
        self._store = store
        # Per Skyhook, the bytes of the object its last status write returned.
        self.skyhook_bytes: dict[str, int] = {}
        self._verbs: dict[type, Callable[[Any], Awaitable[None]]] = {
            PatchNode: self.patch_node,
            CreatePod: self.create_pod,
            DeletePod: self.delete_pod,
            StopPod: self.stop_pod,
            UpsertConfigMap: self.upsert_configmap,
            DeleteConfigMap: self.delete_configmap,
            PatchSkyhookStatus: self.patch_skyhook_status,
            AddFinalizer: self.add_finalizer,
            RemoveFinalizer: self.remove_finalizer,
            AnnotateSkyhook: self.annotate_skyhook,
        }

    async def send(self, action: Action) -> None:
        await self._verbs[type(action)](action)

    # --- nodes ------------------------------------------------------------------------------

    async def patch_node(self, action: PatchNode) -> None:
        """One request in the common case: metadata and conditions go together through
        nodes/status (whose patches may change metadata, never spec). A spec change
        (cordon, uncordon) needs the node itself, and the conditions then follow on /status."""
        # A taint added goes first, with the marker that says it is ours (autoTaintNewNodes)
        # in the same request: refused, it leaves neither, nor a state to start a stage from,
        # so the next pass tries it again.
        if action.add_taints and not action.remove_taints:
            ours = {keys.auto_taint_key(t.key) for t in action.add_taints}
            markers = {k: v for k, v in action.annotations.items() if k in ours and v}
            path = self._kube.node_path(action.name)
            try:
                self._store.nodes.wrote(await self._patch_taints(path, action, markers))
            except ApiError as error:
                raise TaintRefused(
                    error.status, error.reason, "PATCH", path, error.fields, causes=error.causes
                ) from error
        metadata: Json = {}
        if action.annotations:
            metadata["annotations"] = dict(action.annotations)
        if action.labels:
            metadata["labels"] = dict(action.labels)
        conditions = _conditions_patch(action)
        if action.unschedulable is not None:
            body: Json = {"spec": {"unschedulable": action.unschedulable}}
            # Preconditioned on the node as this replica last saw it: a cordon or uncordon
            # planned before another writer changed the node (a replica that took over the
            # Lease) is a 409, left for the next pass to plan again from the newer node.
            seen = self._store.nodes.resource_version(("", action.name))
            if seen is not None:
                metadata = {**metadata, "resourceVersion": seen}
            if metadata:
                body["metadata"] = metadata
            path = self._kube.node_path(action.name)
            self._store.nodes.wrote(await self._kube.request("PATCH", path, body, MERGE_PATCH))
            metadata = {}
        if metadata or conditions:
            body = {"metadata": metadata} if metadata else {}
            if conditions:
                body["status"] = {"conditions": conditions}
            path = self._kube.node_path(action.name, "status")
            # Strategic merge: conditions merge by `type`; `$patch: delete` drops one.
            answer = await self._kube.request("PATCH", path, body, STRATEGIC_MERGE_PATCH)
            self._store.nodes.wrote(answer)
        # A taint removed goes after the state: removed because the node completed, it must
        # never be seen gone while the node still reads incomplete.
        if action.remove_taints:
            taints = await self._patch_taints(self._kube.node_path(action.name), action)
            self._store.nodes.wrote(taints)

    async def _patch_taints(
        self, path: str, action: PatchNode, annotations: Mapping[str, str] | None = None
    ) -> Json:
        """Replace spec.taints with the wanted list (and set `annotations` in the same
        write), retried on a concurrent change: the patch names the resourceVersion it was
        computed from, so a node changed meanwhile is a 409, and a 422 a refusal."""
        for attempt in range(_CONFLICT_RETRIES):
            node = await self._kube.request("GET", path)
            current = [Taint.from_api(t) for t in node.get("spec", {}).get("taints") or ()]
            wanted = taints_after(current, action.add_taints, action.remove_taints)
            if list(wanted) == current:
                return node
            metadata: Json = {"resourceVersion": node["metadata"]["resourceVersion"]}
            if annotations:
                metadata["annotations"] = dict(annotations)
            patch = {"metadata": metadata, "spec": {"taints": [t.to_api() for t in wanted]}}
            try:
                return await self._kube.request("PATCH", path, patch, MERGE_PATCH)
            except ApiError as error:
                if error.status != 409 or attempt == _CONFLICT_RETRIES - 1:
                    raise
                log.debug("taints of %s changed meanwhile, recomputing", path)
        raise AssertionError("unreachable")

    # --- pods -------------------------------------------------------------------------------

    async def create_pod(self, action: CreatePod) -> None:
        path = self._kube.namespaced_path("pods", action.namespace)
        try:
            self._store.pods.wrote(
                await self._kube.request("POST", path, action.manifest), created=True
            )
        except ApiError as error:
            if error.status != 409:
                raise

    async def delete_pod(self, action: DeletePod) -> None:
        path = self._kube.namespaced_path("pods", action.namespace, action.name)
        try:
            answer = await self._kube.request("DELETE", path)
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

    async def stop_pod(self, action: StopPod) -> None:
        path = self._kube.namespaced_path("pods", action.namespace, action.name)
        patch = {
            "metadata": {"annotations": dict(action.annotations)},
            "spec": {"activeDeadlineSeconds": STOP_DEADLINE_S},
        }
        try:
            answer = await self._kube.request("PATCH", path, patch, MERGE_PATCH)
        except ApiError as error:
            if error.status != 404:
                raise
            return
        log.info("stopped pod %s/%s: %s", action.namespace, action.name, action.reason)
        self._store.pods.wrote(answer)

    # --- configmaps -------------------------------------------------------------------------

    async def upsert_configmap(self, action: UpsertConfigMap) -> None:
        manifest = {"apiVersion": "v1", "kind": "ConfigMap", **action.manifest}
        namespace = manifest["metadata"]["namespace"]
        path = self._kube.namespaced_path("configmaps", namespace, action.name)
        query = {"fieldManager": FIELD_MANAGER, "force": "true"}
        answer = await self._kube.request("PATCH", path, manifest, APPLY_PATCH, query=query)
        self._store.configmaps.wrote(answer, created=True)

    async def delete_configmap(self, action: DeleteConfigMap) -> None:
        path = self._kube.namespaced_path("configmaps", action.namespace, action.name)
        try:
            await self._kube.request("DELETE", path)
        except ApiError as error:
            if error.status != 404:
                raise
        self._store.configmaps.deleted(action.namespace, action.name, _GONE)

    # --- skyhooks ---------------------------------------------------------------------------

    async def patch_skyhook_status(self, action: PatchSkyhookStatus) -> None:
        path = self._kube.skyhook_path(action.name, "status")
        try:
            answer = await self._kube.request(
                "PATCH", path, {"status": dict(action.patch)}, MERGE_PATCH
            )
        except ApiError as error:
            if error.status == 404:
                self.skyhook_bytes.pop(action.name, None)
                return  # deleted meanwhile: nothing left to report on
            raise
        self._store.skyhooks.wrote(answer)
        self.skyhook_bytes[action.name] = len(orjson.dumps(answer))

    async def annotate_skyhook(self, action: AnnotateSkyhook) -> None:
        path = self._kube.skyhook_path(action.name)
        body = {"metadata": {"annotations": dict(action.annotations)}}
        try:
            self._store.skyhooks.wrote(await self._kube.request("PATCH", path, body, MERGE_PATCH))
        except ApiError as error:
            if error.status != 404:
                raise

    async def add_finalizer(self, action: AddFinalizer) -> None:
        await self._edit_finalizers(action)

    async def remove_finalizer(self, action: RemoveFinalizer) -> None:
        await self._edit_finalizers(action)

    async def _edit_finalizers(self, action: AddFinalizer | RemoveFinalizer) -> None:
        """A metadata-only merge patch, preconditioned on the resourceVersion it was computed
        from: the spec stays as written and the generation does not move (as upstream's
        newest writes its finalizer)."""
        path = self._kube.skyhook_path(action.name)
        for attempt in range(_CONFLICT_RETRIES):
            try:
                current = await self._kube.request("GET", path)
            except ApiError as error:
                if error.status == 404:
                    return
                raise
            finalizers = list(current["metadata"].get("finalizers") or [])
            wanted = finalizers_after(finalizers, action)
            if wanted == finalizers:
                return
            body = {
                "metadata": {
                    "finalizers": wanted,
                    "resourceVersion": current["metadata"]["resourceVersion"],
                }
            }
            try:
                self._store.skyhooks.wrote(
                    await self._kube.request("PATCH", path, body, MERGE_PATCH)
                )
                return
            except ApiError as error:
                if error.status == 404:
                    return
                if error.status != 409 or attempt == _CONFLICT_RETRIES - 1:
                    raise


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
