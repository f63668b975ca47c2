"""kopf wiring: indexes that mirror the cluster, events that poke the reconciler.

Nothing here decides anything. Skyhooks, Nodes, Pods (bound to a node) and our ConfigMaps
each get an index, which turns every object into the planner's view as it changes, and an
event handler, which asks the one global reconcile loop (reconcile.py explains why one) for
a pass. kopf calls no event handler before every index is filled, so the first pass sees the
whole cluster. Handlers are coroutines: they run on kopf's loop with no thread hop, and they
only decode and poke. No handler stores anything on the objects: finalizers and status are the
planner's, written by the writer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from skyhook_operator.kube.client import connect
from skyhook_operator.kube.drain import Evictor
from skyhook_operator.kube.writer import Writer
from skyhook_operator.planner.model import ConfigMapView, NodeView, PodView, SkyhookView
from skyhook_operator.planner.plan import plan
from skyhook_operator.reconcile import Reconciler
from skyhook_operator.settings import Settings, load_settings
from skyhook_operator.snapshot import ClusterStore, Versioned, versioned
from skyhook_schemas import keys

log = logging.getLogger(__name__)

INDEXES = ("skyhook_index", "node_index", "pod_index", "configmap_index")


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
    """Configure kopf, build the client, writer and reconciler, start the loop."""
    ours: Settings = memo.get("settings") or load_settings()
    memo.settings = ours
    _configure_kopf(settings, ours)
    store = ClusterStore()
    for name in INDEXES:
        store.attach(name, kwargs[name])
    kube = connect()
    evictor = Evictor(kube, ours.drain_timeout, on_change=lambda: _poke(memo))
    writer = Writer(kube, store, evictor, ours.write_concurrency)
    reconciler = Reconciler(store, writer, ours, memo.get("planner") or plan)
    memo.reconciler, memo.writer = reconciler, writer
    memo.loop_task = asyncio.create_task(reconciler.run_forever(), name="skyhook-reconcile")
    log.info("operator started; settings:\n  %s", "\n  ".join(ours.describe()))


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    """Stop the loop and let in-flight writes finish."""
    task = memo.get("loop_task")
    if task is not None:
        task.cancel()
    writer = memo.get("writer")
    if writer is not None:
        await asyncio.to_thread(writer.close)


def _configure_kopf(settings: kopf.OperatorSettings, ours: Settings) -> None:
    # kopf's own bookkeeping lives in annotations under our prefix, never in `status`,
    # whose schema is upstream's and would prune it.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ours.kopf_prefix)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ours.kopf_prefix, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{ours.kopf_prefix}/kopf"
    # Only warnings become Kubernetes Events; our own events come from the writer.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330


def _poke(memo: kopf.Memo) -> None:
    reconciler = memo.get("reconciler")
    if reconciler is not None:
        reconciler.poke()


# --- indexes: one view per object, keyed by (namespace, name) ---------------------------------


def _key(body: kopf.Body) -> tuple[str, str]:
    return (body.metadata.namespace or "", body.metadata.name or "")


@kopf.index(keys.GROUP, keys.VERSION, keys.PLURAL)
async def skyhook_index(body: kopf.Body, **_: Any) -> dict[tuple[str, str], Versioned[SkyhookView]]:
    return {_key(body): versioned(body, SkyhookView.from_api)}


@kopf.index("", "v1", "nodes")
async def node_index(body: kopf.Body, **_: Any) -> dict[tuple[str, str], Versioned[NodeView]]:
    return {_key(body): versioned(body, NodeView.from_api)}


def _bound_to_node(spec: kopf.Spec, **_: Any) -> bool:
    return bool(spec.get("nodeName"))


@kopf.index("", "v1", "pods", when=_bound_to_node)
async def pod_index(body: kopf.Body, **_: Any) -> dict[tuple[str, str], Versioned[PodView]]:
    return {_key(body): versioned(body, PodView.from_api)}


def _ours(labels: kopf.Labels, namespace: str | None, memo: kopf.Memo, **_: Any) -> bool:
    wanted = memo.settings.namespace if "settings" in memo else None
    return namespace == wanted and (keys.NAME_LABEL in labels or keys.NODE_META_LABEL in labels)


@kopf.index("", "v1", "configmaps", when=_ours)
async def configmap_index(
    body: kopf.Body, **_: Any
) -> dict[tuple[str, str], Versioned[ConfigMapView]]:
    return {_key(body): versioned(body, ConfigMapView.from_api)}


# --- events: each change asks for a pass -----------------------------------------------------


@kopf.on.event(keys.GROUP, keys.VERSION, keys.PLURAL)
async def skyhook_changed(memo: kopf.Memo, **_: Any) -> None:
    _poke(memo)


@kopf.on.event("", "v1", "nodes")
async def node_changed(memo: kopf.Memo, **_: Any) -> None:
    _poke(memo)


@kopf.on.event("", "v1", "pods", when=_bound_to_node)
async def pod_changed(memo: kopf.Memo, **_: Any) -> None:
    _poke(memo)


@kopf.on.event("", "v1", "configmaps", when=_ours)
async def configmap_changed(memo: kopf.Memo, **_: Any) -> None:
    _poke(memo)
