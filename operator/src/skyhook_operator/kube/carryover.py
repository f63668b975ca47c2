"""Carrying SCRs and their state over from the other API group, once the replica leads and
before its first pass (the decisions: skyhook_planner.model.carryover). Until it has finished
no pass runs, so no stage starts from a node state that is not yet ours.

A ConfigMap in our namespace records the group the operator last spoke. When that was the
other group, the other group's node state is newer than ours and replaces it; otherwise it is
copied only where we have none (upstream's migration from the legacy group).

These are one-off writes at start, not a pass's: they are sent here, and each answer is put
into the store's overlays as the writer's are, so the first pass plans from them. Afterwards
the runtime calls `mirror` (the other group's objects made since) and `prune` (its copies
once LEGACY_CLEANUP_DELAY has passed) every MIRROR_INTERVAL_S.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

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
from skyhook_planner.model import carryover
from skyhook_planner.model.snapshot import SkyhookView
from skyhook_schemas import keys

log = logging.getLogger(__name__)

# Which group the operator spoke last: data.group of this ConfigMap in its namespace.
SPOKEN_CONFIGMAP = "skyhook-operator-api-group"
_PAGE = 500


@dataclass
class CarriedOver:
    """What one carry-over wrote, for the log."""

    mirrored: int = 0
    nodes: int = 0
    pods: int = 0
    configmaps: int = 0

    def __str__(self) -> str:
        return (
            f"{self.mirrored} objects mirrored, node state carried to {self.nodes} nodes, "
            f"{self.pods} pods and {self.configmaps} ConfigMaps adopted"
        )


def _other_path(plural: str, name: str = "") -> str:
    path = f"/apis/{carryover.OTHER_GROUP}/{keys.VERSION}/{plural}"
    return f"{path}/{name}" if name else path


async def _items(
    kube: AsyncKube, path: str, query: Mapping[str, str] | None = None
) -> AsyncIterator[Json]:
    """Every object a LIST returns, a page at a time."""
    token = ""
    while True:
        paging = {"limit": str(_PAGE), **({"continue": token} if token else {})}
        page = await kube.request("GET", path, query={**(query or {}), **paging})
        for item in page.get("items") or ():
            yield item
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return


async def _others(kube: AsyncKube, plural: str) -> list[Json]:
    """The other group's objects; none when the cluster does not serve that group."""
    try:
        return [item async for item in _items(kube, _other_path(plural))]
    except ApiError as error:
        if error.status == 404:
            return []
        raise


async def _last_spoken(kube: AsyncKube, namespace: str) -> str | None:
    try:
        found = await kube.request(
            "GET", kube.namespaced_path("configmaps", namespace, SPOKEN_CONFIGMAP)
        )
    except ApiError as error:
        if error.status == 404:
            return None
        raise
    return (found.get("data") or {}).get("group")


async def _record_spoken(kube: AsyncKube, namespace: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": SPOKEN_CONFIGMAP, "namespace": namespace},
        "data": {"group": keys.GROUP},
    }
    path = kube.namespaced_path("configmaps", namespace, SPOKEN_CONFIGMAP)
    await kube.request(
        "PATCH",
        path,
        body,
        APPLY_PATCH,
        query={"fieldManager": FIELD_MANAGER, "force": "true"},
    )


async def carry_over(kube: AsyncKube, store: ClusterStore, namespace: str) -> CarriedOver:
    """Mirror the other group's objects, carry their node state to our keys and adopt their
    pods and ConfigMaps; then record that we speak our group. Idempotent: run again after a
    failure, it writes what is still missing."""
    done = CarriedOver()
    newer = await _last_spoken(kube, namespace) == carryover.OTHER_GROUP
    owners = await mirror(kube, store, done)
    if not owners:
        await _record_spoken(kube, namespace)
        return done
    async for node in _items(kube, "/api/v1/nodes"):
        patch = carryover.node_patch(node, owners, newer)
        if patch is not None:
            path = kube.node_path(node["metadata"]["name"], "status")
            store.nodes.wrote(await kube.request("PATCH", path, patch, STRATEGIC_MERGE_PATCH))
            done.nodes += 1
    for plural, overlay in (("pods", store.pods), ("configmaps", store.configmaps)):
        for label in (keys.NAME_LABEL, keys.NODE_META_LABEL):
            query = {"labelSelector": carryover.theirs(label)}
            async for obj in _items(kube, kube.namespaced_path(plural, namespace), query):
                owner = owners.get(obj["metadata"]["labels"][carryover.theirs(label)])
                patch = carryover.adoption_patch(obj, owner) if owner else None
                if patch is None:
                    continue
                path = kube.namespaced_path(plural, namespace, obj["metadata"]["name"])
                try:
                    overlay.wrote(await kube.request("PATCH", path, patch, MERGE_PATCH))
                except ApiError as error:
                    if error.status == 404:
                        continue  # gone since it was listed (a finished pod deleted)
                    raise
                if plural == "pods":
                    done.pods += 1
                else:
                    done.configmaps += 1
    for name, owner in owners.items():
        annotations = owner["metadata"].get("annotations") or {}
        if carryover.CARRIED_AT not in annotations:
            stamp = {"metadata": {"annotations": {carryover.CARRIED_AT: _now()}}}
            answer = await kube.request("PATCH", kube.skyhook_path(name), stamp, MERGE_PATCH)
            store.skyhooks.wrote(answer)
    await _record_spoken(kube, namespace)
    return done


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def prune(kube: AsyncKube, store: ClusterStore, namespace: str, delay: float) -> list[str]:
    """Remove the other group's copies of the state carried over `delay` seconds ago or more
    (from nodes and our ConfigMaps), then the SCR's `legacy-migrated-at`; the SCRs pruned."""
    now = dt.datetime.now(dt.UTC)
    due: set[str] = set()
    for scr in store.skyhook_views():
        stamped = scr.annotations.get(carryover.CARRIED_AT)
        if stamped is None:
            continue
        try:
            at = dt.datetime.fromisoformat(stamped.replace("Z", "+00:00"))
        except ValueError:
            at = now  # unreadable: count from now, the annotation is removed below
        if (now - at).total_seconds() >= delay:
            due.add(scr.name)
    if not due:
        return []
    async for node in _items(kube, "/api/v1/nodes"):
        patch = carryover.prune_node_patch(node, due)
        if patch is not None:
            path = kube.node_path(node["metadata"]["name"], "status")
            store.nodes.wrote(await kube.request("PATCH", path, patch, STRATEGIC_MERGE_PATCH))
    for label in (keys.NAME_LABEL, keys.NODE_META_LABEL):
        query = {"labelSelector": carryover.theirs(label)}
        path = kube.namespaced_path("configmaps", namespace)
        async for configmap in _items(kube, path, query):
            if configmap["metadata"]["labels"][carryover.theirs(label)] not in due:
                continue
            patch = carryover.unlabel_patch(configmap)
            if patch is not None:
                name = configmap["metadata"]["name"]
                answer = await kube.request(
                    "PATCH", kube.namespaced_path("configmaps", namespace, name), patch, MERGE_PATCH
                )
                store.configmaps.wrote(answer)
    for name in due:
        clear = {"metadata": {"annotations": {carryover.CARRIED_AT: None}}}
        store.skyhooks.wrote(
            await kube.request("PATCH", kube.skyhook_path(name), clear, MERGE_PATCH)
        )
    return sorted(due)


async def mirror(kube: AsyncKube, store: ClusterStore, done: CarriedOver) -> dict[str, Json]:
    """Mirror the other group's objects that have no twin of ours and release their
    finalizer; our SCR of each name the other group has, by name (its state is carried over
    to it). Ours are read from the store's indexes: only the other group is listed."""
    # Policies first: a mirrored SCR names its policy.
    others = await _others(kube, keys.POLICY_PLURAL)
    own_policies = store.policy_names() if others else set()
    for policy in others:
        if policy["metadata"]["name"] not in own_policies:
            await _create(kube, kube.policy_path(), carryover.mirrored(policy, keys.POLICY_KIND))
            done.mirrored += 1
    others = await _others(kube, carryover.OTHER_PLURAL)
    own = {v.name: _as_owner(v) for v in store.skyhook_views()} if others else {}
    owners: dict[str, Json] = {}
    for other in others:
        name = other["metadata"]["name"]
        if name not in own:
            body = carryover.mirrored(other, keys.KIND)
            created = await _create(kube, kube.skyhook_path(), body)
            store.skyhooks.wrote(created, created=True)
            own[name] = created
            done.mirrored += 1
            log.info("%s %r mirrored from %s", keys.KIND, name, carryover.OTHER_GROUP)
        owners[name] = own[name]
        release = carryover.finalizer_patch(other)
        if release is not None:
            path = _other_path(carryover.OTHER_PLURAL, name)
            await kube.request("PATCH", path, release, MERGE_PATCH)
    return owners


def _as_owner(view: SkyhookView) -> Json:
    """The parts of our SCR the carry-over reads: its name, uid and annotations."""
    return {"metadata": {"name": view.name, "uid": view.uid, "annotations": view.annotations}}


async def _create(kube: AsyncKube, path: str, body: Json) -> Json:
    """POST `body`; one the indexes have not seen yet that exists already is read instead."""
    try:
        return await kube.request("POST", path, body)
    except ApiError as error:
        if error.status != 409:
            raise
    return await kube.request("GET", f"{path}/{body['metadata']['name']}")
