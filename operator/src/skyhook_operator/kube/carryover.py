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

One object never holds up the others: an object of the other group that is invalid, or whose
mirror the apiserver refuses, is skipped and told so on itself (`Notices`); a write that fails
otherwise is counted in `CarriedOver.failed`, with the SCRs whose state it leaves behind in
`held`, and the rest is carried over all the same (the runtime keeps those SCRs out of the
passes and runs the carry-over again for them).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field

from skyhook_operator.kube.client import (
    APPLY_PATCH,
    FIELD_MANAGER,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    ApiError,
    AsyncKube,
    Json,
)
from skyhook_operator.kube.events import Event, Subject
from skyhook_operator.store import ClusterStore
from skyhook_planner.model import carryover
from skyhook_planner.model.snapshot import SkyhookView
from skyhook_schemas import keys

log = logging.getLogger(__name__)

# Which group the operator spoke last: data.group of this ConfigMap in its namespace.
SPOKEN_CONFIGMAP = "skyhook-operator-api-group"
_PAGE = 500


# Answers that refuse the object itself (a webhook's or the schema's), not a passing fault.
REFUSED_STATUSES = frozenset({400, 403, 422})


@dataclass
class CarriedOver:
    """What one carry-over wrote, for the log; what it could not, to be tried again."""

    mirrored: int = 0
    nodes: int = 0
    pods: int = 0
    configmaps: int = 0
    skipped: list[str] = field(default_factory=list)  # not carried over, told so on themselves
    failed: dict[str, str] = field(default_factory=dict)  # object -> why its write failed
    held: set[str] = field(default_factory=set)  # SCRs whose state a failed write left behind

    def __str__(self) -> str:
        return (
            f"{self.mirrored} objects mirrored, node state carried to {self.nodes} nodes, "
            f"{self.pods} pods and {self.configmaps} ConfigMaps adopted"
            + (f", {len(self.skipped)} not carried over" if self.skipped else "")
            + (f", {len(self.failed)} writes failed" if self.failed else "")
        )

    async def attempt(self, what: str, scrs: Iterable[str], write: Awaitable[Json]) -> Json | None:
        """`write`'s answer; None when it failed, which is counted against `what` and holds
        `scrs` back until the carry-over is run again."""
        try:
            return await write
        except (ApiError, OSError) as error:
            self.failed[what] = str(error)
            self.held.update(scrs)
            log.warning("%s failed (tried again later): %s", what, error)
            return None


class Notices:
    """Tells an object of the other group that it is not carried over, once per reason: on an
    SCR in its NotCarriedOver condition (kept while it holds, removed once it is carried
    over), with one Warning Event; on a DeploymentPolicy, which has no status, in the Event
    alone, once per message while the operator runs."""

    def __init__(self, record: Callable[[Event], None]) -> None:
        self._record = record
        self._told: set[tuple[str, str, str]] = set()  # (policy uid, name, message)

    async def not_carried(
        self, kube: AsyncKube, other: Json, kind: str, reason: str, problems: Iterable[str]
    ) -> None:
        meta = other["metadata"]
        name, uid = meta["name"], meta.get("uid", "")
        message = carryover.not_carried_message(kind, name, problems)
        if kind == keys.POLICY_KIND:
            if (uid, name, message) in self._told:
                return
            self._told.add((uid, name, message))
        else:
            patch = carryover.not_carried_patch(other, reason, message, dt.datetime.now(dt.UTC))
            if patch is None:
                return  # said already
            path = _other_path(carryover.OTHER_PLURAL, name) + "/status"
            try:
                await kube.request("PATCH", path, patch, MERGE_PATCH)
            except (ApiError, OSError) as error:  # said next round
                log.warning("%s %r: its condition not written: %s", kind, name, error)
                return
        log.warning("%s", message)
        subject = Subject(kind, name, uid, group=carryover.OTHER_GROUP)
        self._record(Event(subject, carryover.NOT_CARRIED_OVER, message, "Warning"))

    async def carried(self, kube: AsyncKube, other: Json) -> None:
        """`other` (an SCR) is carried over: its NotCarriedOver condition goes."""
        patch = carryover.carried_patch(other)
        if patch is None:
            return
        path = _other_path(carryover.OTHER_PLURAL, other["metadata"]["name"]) + "/status"
        try:
            await kube.request("PATCH", path, patch, MERGE_PATCH)
        except (ApiError, OSError) as error:  # removed next round
            log.warning("%s: NotCarriedOver condition not removed: %s", path, error)


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


async def carry_over(
    kube: AsyncKube,
    store: ClusterStore,
    namespace: str,
    notices: Notices,
    only: set[str] | None = None,
) -> CarriedOver:
    """Mirror the other group's objects, carry their node state to our keys and adopt their
    pods and ConfigMaps; then, when no write failed, record that we speak our group. `only`:
    carry the state of these SCRs alone (the ones an earlier run held back; the others' state
    is ours now and moved on). Idempotent: run again after a failure, it writes what is still
    missing."""
    done = CarriedOver()
    newer = await _last_spoken(kube, namespace) == carryover.OTHER_GROUP
    owners = await mirror(kube, store, done, notices)
    if only is not None:
        owners = {name: owner for name, owner in owners.items() if name in only}
    if not owners:
        if not done.failed:
            await _record_spoken(kube, namespace)
        return done
    async for node in _items(kube, "/api/v1/nodes"):
        patch = carryover.node_patch(node, owners, newer)
        if patch is not None:
            name = node["metadata"]["name"]
            answer = await done.attempt(
                f"carrying node {name!r} over from {carryover.OTHER_GROUP}",
                carryover.state_on(node, owners),
                kube.request("PATCH", kube.node_path(name, "status"), patch, STRATEGIC_MERGE_PATCH),
            )
            if answer is not None:
                store.nodes.wrote(answer)
                done.nodes += 1
    for plural, overlay in (("pods", store.pods), ("configmaps", store.configmaps)):
        for label in (keys.NAME_LABEL, keys.NODE_META_LABEL):
            query = {"labelSelector": carryover.theirs(label)}
            async for obj in _items(kube, kube.namespaced_path(plural, namespace), query):
                scr = obj["metadata"]["labels"][carryover.theirs(label)]
                owner = owners.get(scr)
                patch = carryover.adoption_patch(obj, owner) if owner else None
                if patch is None:
                    continue
                name = obj["metadata"]["name"]
                path = kube.namespaced_path(plural, namespace, name)
                answer = await done.attempt(
                    f"carrying {plural} {name!r} over from {carryover.OTHER_GROUP}",
                    (scr,),
                    _gone_or(kube.request("PATCH", path, patch, MERGE_PATCH)),
                )
                if not answer:  # failed, or gone since it was listed (a finished pod deleted)
                    continue
                overlay.wrote(answer)
                if plural == "pods":
                    done.pods += 1
                else:
                    done.configmaps += 1
    for name, owner in owners.items():
        annotations = owner["metadata"].get("annotations") or {}
        if carryover.CARRIED_AT not in annotations and name not in done.held:
            stamp = {"metadata": {"annotations": {carryover.CARRIED_AT: _now()}}}
            answer = await done.attempt(
                f"stamping {keys.KIND} {name!r} carried over",
                (name,),
                kube.request("PATCH", kube.skyhook_path(name), stamp, MERGE_PATCH),
            )
            if answer is not None:
                store.skyhooks.wrote(answer)
    if not done.failed:
        await _record_spoken(kube, namespace)
    return done


async def _gone_or(write: Awaitable[Json]) -> Json:
    """`write`'s answer; an empty one when its object is gone (404)."""
    try:
        return await write
    except ApiError as error:
        if error.status == 404:
            return {}
        raise


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
    # A write that fails keeps its SCRs' stamp: their copies are removed again next round.
    failed = CarriedOver()
    async for node in _items(kube, "/api/v1/nodes"):
        patch = carryover.prune_node_patch(node, due)
        if patch is not None:
            name = node["metadata"]["name"]
            answer = await failed.attempt(
                f"removing {carryover.OTHER_GROUP} copies from node {name!r}",
                carryover.state_on(node, due),
                kube.request("PATCH", kube.node_path(name, "status"), patch, STRATEGIC_MERGE_PATCH),
            )
            if answer is not None:
                store.nodes.wrote(answer)
    for label in (keys.NAME_LABEL, keys.NODE_META_LABEL):
        query = {"labelSelector": carryover.theirs(label)}
        path = kube.namespaced_path("configmaps", namespace)
        async for configmap in _items(kube, path, query):
            scr = configmap["metadata"]["labels"][carryover.theirs(label)]
            if scr not in due:
                continue
            patch = carryover.unlabel_patch(configmap)
            if patch is not None:
                name = configmap["metadata"]["name"]
                answer = await failed.attempt(
                    f"removing {carryover.OTHER_GROUP} labels from ConfigMap {name!r}",
                    (scr,),
                    kube.request(
                        "PATCH",
                        kube.namespaced_path("configmaps", namespace, name),
                        patch,
                        MERGE_PATCH,
                    ),
                )
                if answer is not None:
                    store.configmaps.wrote(answer)
    pruned = []
    for name in sorted(due - failed.held):
        clear = {"metadata": {"annotations": {carryover.CARRIED_AT: None}}}
        answer = await failed.attempt(
            f"clearing the carry-over stamp of {keys.KIND} {name!r}",
            (name,),
            kube.request("PATCH", kube.skyhook_path(name), clear, MERGE_PATCH),
        )
        if answer is not None:
            store.skyhooks.wrote(answer)
            pruned.append(name)
    return pruned


async def mirror(
    kube: AsyncKube, store: ClusterStore, done: CarriedOver, notices: Notices
) -> dict[str, Json]:
    """Mirror the other group's objects that have no twin of ours and release their
    finalizer; our SCR of each name the other group has, by name (its state is carried over
    to it). Ours are read from the store's indexes: only the other group is listed. An
    object that is invalid or refused is skipped and told so; one whose write fails is
    counted in `done` and tried again next round."""
    # Policies first: a mirrored SCR names its policy.
    others = await _others(kube, keys.POLICY_PLURAL)
    own_policies = store.policy_names() if others else set()
    for policy in others:
        if policy["metadata"]["name"] not in own_policies:
            body = carryover.mirrored(policy, keys.POLICY_KIND)
            if await _mirror_one(
                kube, kube.policy_path(), policy, body, done=done, notices=notices
            ):
                done.mirrored += 1
    others = await _others(kube, carryover.OTHER_PLURAL)
    own = {v.name: _as_owner(v) for v in store.skyhook_views()} if others else {}
    owners: dict[str, Json] = {}
    for listed in others:
        name = listed["metadata"]["name"]
        # Whether it is carried over or not: no operator of that group removes it now.
        release = carryover.finalizer_patch(listed)
        if release is not None:
            path = _other_path(carryover.OTHER_PLURAL, name)
            what = f"releasing the finalizer of {carryover.OTHER_KIND} {name!r}"
            released = await done.attempt(
                what, (), kube.request("PATCH", path, release, MERGE_PATCH)
            )
            other = released or listed  # its status is written next, at this version
        else:
            other = listed
        if name not in own:
            body = carryover.mirrored(other, keys.KIND)
            created = await _mirror_one(
                kube, kube.skyhook_path(), other, body, done=done, notices=notices
            )
            if created is None:
                continue
            store.skyhooks.wrote(created, created=True)
            own[name] = created
            done.mirrored += 1
            log.info("%s %r mirrored from %s", keys.KIND, name, carryover.OTHER_GROUP)
        owners[name] = own[name]
        await notices.carried(kube, other)
    return owners


async def _mirror_one(
    kube: AsyncKube, path: str, other: Json, body: Json, *, done: CarriedOver, notices: Notices
) -> Json | None:
    """Our mirror of `other`, created; None when it is not: `other` is invalid or refused
    (skipped, told so on itself) or the write failed (counted in `done`, held back)."""
    name = other["metadata"]["name"]
    kind = carryover.OTHER_KIND if body["kind"] == keys.KIND else body["kind"]
    problems = carryover.mirror_problems(other, kind)
    reason = carryover.SPEC_INVALID
    if not problems:
        try:
            return await _create(kube, path, body)
        except (ApiError, OSError) as error:
            if not isinstance(error, ApiError) or error.status not in REFUSED_STATUSES:
                what = f"mirroring {kind} {name!r}"
                done.failed[what] = str(error)
                if kind == carryover.OTHER_KIND:
                    done.held.add(name)  # its state is carried over once it is mirrored
                log.warning("%s failed (tried again later): %s", what, error)
                return None
            problems, reason = (error.reason,), carryover.MIRROR_REFUSED
    done.skipped.append(f"{kind} {name!r}")
    await notices.not_carried(kube, other, kind, reason, problems)
    return None


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
