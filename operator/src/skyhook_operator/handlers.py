"""kopf wiring: indexes that mirror the cluster, events that poke the reconciler.

Nothing here decides anything. Skyhooks and DeploymentPolicies each get a kopf index, which
turns every object into the planner's view as it changes, and an event handler, which asks the
one global reconcile loop (reconcile.py explains why one) for a pass. kopf calls no event
handler before every index is filled, so the first pass sees every Skyhook and policy.
Handlers are coroutines: they run on kopf's loop with no thread hop, and they only decode and
poke. No handler stores anything on the objects: finalizers and status are the planner's,
written by the writer.

Nodes, pods bound to a node, and our ConfigMaps (in the operator's namespace only) are the bulk
of what the operator watches; they get plain list+watch indexes of their own (kube/watch.py
says why not kopf's), listed in full at startup, before kopf starts watching, so they are
complete before kopf's first poke.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

import kopf
from kubernetes.client import Configuration

from skyhook_operator import admission
from skyhook_operator.kube.artifacts import ArtifactFetcher, ArtifactResolver
from skyhook_operator.kube.client import AsyncKube, configuration_from, connect_async
from skyhook_operator.kube.drain import Evictor
from skyhook_operator.kube.lease import LeaderElector
from skyhook_operator.kube.reviews import AccessReviewer
from skyhook_operator.kube.watch import WatchedIndex
from skyhook_operator.kube.writer import Writer
from skyhook_operator.observability import Secure, ServingTls, Telemetry, serve
from skyhook_operator.reconcile import Reconciler
from skyhook_operator.settings import Settings, load_settings
from skyhook_operator.store import ClusterStore, Versioned, versioned
from skyhook_planner.model.snapshot import ConfigMapView, NodeView, PodView, PolicyView, SkyhookView
from skyhook_planner.passes.plan import Replanner
from skyhook_schemas import keys

log = logging.getLogger(__name__)

KOPF_INDEXES = ("skyhook_index", "policy_index")


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
    """Configure kopf, build the client, writer and reconciler, start the loop."""
    ours: Settings = memo.get("settings") or load_settings()
    memo.settings = ours
    _configure_kopf(settings, ours)
    store = ClusterStore()
    for name in KOPF_INDEXES:
        store.attach(name, kwargs[name])
    # One client on kopf's loop for the whole process.
    aio = connect_async(memo.get("kubeconfig"))
    memo.aio = aio
    watches = _watches(aio, ours, memo)
    for name, watched in watches.items():
        store.attach(name, watched.index)
    leader = _elect(memo, ours, aio)
    evictor = Evictor(aio, watches["pod_index"], ours.drain_timeout, on_change=lambda: _poke(memo))
    memo.evictor = evictor
    store.eviction_refusals = evictor.refusals
    writer = Writer(aio, store, evictor.ensure, ours.write_concurrency, ours.event_interval)
    secure = _secure_metrics(ours, aio.unfenced())
    telemetry = Telemetry(aio.request_totals, lambda: writer.queue_depth)
    fetcher = ArtifactFetcher(
        aio,
        ours.namespace,
        ours.image_artifact_refresh,
        ours.insecure_registries.split(","),
    )
    reconciler = Reconciler(
        store,
        writer,
        ours,
        memo.get("planner") or Replanner(),
        telemetry=telemetry,
        leader=leader,
        artifacts=ArtifactResolver(fetcher),
    )
    memo.reconciler, memo.writer = reconciler, writer
    memo.artifact_fetcher = fetcher  # the pod image webhook fetches through the same cache
    certificates = (
        await _webhooks(settings, memo, ours, aio.unfenced()) if ours.enable_webhooks else None
    )
    # The probes answer from here on: not ready until every index is full (and, with
    # webhooks, until the apiserver can call them).
    try:
        memo.endpoints = await serve(
            telemetry,
            reconciler,
            ours.metrics_port,
            ours.probe_port,
            not_ready=(lambda: certificates.problem) if certificates else lambda: None,
            secure=secure,
        )
    except OSError as error:  # a port in use: say which, and do not start half-way
        raise kopf.PermanentError(
            f"cannot serve metrics on {ours.metrics_port!r} or probes on "
            f"{ours.probe_port!r}: {error}"
        ) from error
    for watched in watches.values():
        await watched.start()
    memo.watches = watches
    memo.loop_task = asyncio.create_task(reconciler.run_forever(), name="skyhook-reconcile")
    log.info("operator started; settings:\n  %s", "\n  ".join(ours.describe()))


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    """Stop the loop and let the writes going out finish; then hand the Lease over. All within
    `shutdown_timeout` of the start, whatever the apiserver does (`Deadline` ends the process
    then); never raises, since kopf would retry the whole cleanup a minute later."""
    ours: Settings = memo.get("settings") or load_settings()
    deadline = Deadline(ours.shutdown_timeout)
    log.info("stopping: exit within %.0f s", ours.shutdown_timeout)
    try:
        await _stop(memo, deadline)
    except Exception:
        log.exception("stopping failed part-way; exiting anyway")
    deadline.finished(EXIT_GRACE)


async def _stop(memo: kopf.Memo, deadline: Deadline) -> None:
    leader = memo.get("leader")
    if leader is not None:
        leader.step_down()  # writes still queued fail at once instead of going out
        memo.leader_task.cancel()
    for name in ("loop_task", "certificates_task"):
        task = memo.get(name)
        if task is not None:
            task.cancel()
    endpoints = memo.get("endpoints")
    if endpoints is not None:
        try:
            await asyncio.wait_for(endpoints.stop(), deadline.left(RELEASE_RESERVE))
        except TimeoutError:
            log.warning("metrics and probe endpoints not closed in time")
    for watched in (memo.get("watches") or {}).values():
        watched.stop()
    evictor = memo.get("evictor")
    if evictor is not None:
        evictor.cancel()
    writer = memo.get("writer")
    written = True
    if writer is not None:
        written = await writer.close(deadline.left(RELEASE_RESERVE))
    if leader is not None:  # after the last write: the successor starts at once
        if written:
            await leader.release(deadline.left(EXIT_GRACE))
        else:
            # A write may still reach the apiserver: a successor must not plan meanwhile.
            log.warning(
                "writes still waiting on the apiserver: Lease not released, another "
                "replica takes over once it expires"
            )
    aio = memo.get("aio")
    if aio is not None:
        log.info("operator stopped; API requests made: %s", aio.request_counts())
        await aio.close()


# Of the shutdown timeout, what the Lease release (and the exit after it) is left at least,
# and how long the process may take to exit once the cleanup is done before it is ended: a
# request stuck on an unreachable apiserver holds a thread the interpreter would wait for.
RELEASE_RESERVE = 6.0
EXIT_GRACE = 2.0


class Deadline:
    """When a stopping operator must be gone: `left` says how much of its time remains, and
    a daemon thread ends the process at the deadline (log lines flushed first), or
    `finished`'s grace after the cleanup, if it has not exited by itself by then."""

    def __init__(self, seconds: float) -> None:
        self._at = time.monotonic() + seconds
        self._seconds = seconds
        self._done = False
        self._moved = threading.Condition()
        threading.Thread(target=self._watch, name="shutdown-deadline", daemon=True).start()

    def left(self, reserve: float = 0.0) -> float:
        """Seconds until the deadline, less `reserve` (never below a tenth of the timeout,
        so each step gets some time)."""
        return max(self._seconds / 10, self._at - reserve - time.monotonic())

    def finished(self, grace: float) -> None:
        """The cleanup is done: the process should now exit by itself, at the latest in
        `grace` seconds."""
        with self._moved:
            self._done = True
            self._at = min(self._at, time.monotonic() + grace)
            self._moved.notify_all()

    def _watch(self) -> None:
        with self._moved:
            while (wait := self._at - time.monotonic()) > 0:
                self._moved.wait(wait)
            done = self._done
        if done:
            log.info("exiting without waiting for requests the apiserver never answered")
        else:
            log.error("not stopped after %.0f s: exiting now", self._seconds)
        logging.shutdown()
        os._exit(0 if done else 1)


async def _webhooks(
    settings: kopf.OperatorSettings, memo: kopf.Memo, ours: Settings, kube: AsyncKube
) -> admission.Certificates:
    """A current serving certificate on disk before kopf starts the webhook server (it starts
    after the startup handlers), then kept current. Every replica serves the webhooks, so the
    certificate work goes through a view of the client that leader election does not fence."""
    certificates = admission.Certificates(kube, ours)
    await certificates.start()
    memo.certificates_task = asyncio.create_task(
        certificates.run_forever(), name="skyhook-webhook-certificates"
    )
    settings.admission.server = admission.server(ours)
    settings.admission.managed = None  # the chart (or, out of the cluster, Certificates) does
    return certificates


def _secure_metrics(ours: Settings, kube: AsyncKube) -> Secure[AccessReviewer] | None:
    """With `metrics_secure` (the default) and the endpoint on: reviews through an unfenced
    view of the client (leader election fences the main one off POSTs, and every replica
    answers scrapes), and a serving certificate."""
    if not ours.metrics_secure or ours.metrics_port.bind is None:
        return None
    try:
        tls = ServingTls(ours.metrics_cert_dir)
    except (OSError, ValueError) as error:  # ssl.SSLError is an OSError
        raise kopf.PermanentError(
            f"metrics: no usable tls.crt and tls.key in {ours.metrics_cert_dir!r}: {error}"
        ) from error
    return Secure(AccessReviewer(kube), tls)


def _watches(kube: AsyncKube, ours: Settings, memo: kopf.Memo) -> dict[str, WatchedIndex[Any]]:
    """The list+watch indexes, by the name the snapshot reads them under. Their changes wake
    the loop only once kopf's first poke said its own indexes are full."""
    return {
        "node_index": WatchedIndex(
            kube, "/api/v1/nodes", decode=NodeView.from_api, on_change=lambda: _nudge(memo)
        ),
        "pod_index": WatchedIndex(
            kube,
            "/api/v1/pods",
            decode=PodView.from_api,
            selector="spec.nodeName!=",  # bound to a node: what the planner reasons about
            on_change=lambda: _nudge(memo),
        ),
        "configmap_index": WatchedIndex(
            kube,
            kube.namespaced_path("configmaps", ours.namespace),
            decode=ConfigMapView.from_api,
            keep=_ours,
            on_change=lambda: _nudge(memo),
        ),
    }


def _elect(memo: kopf.Memo, ours: Settings, kube: AsyncKube) -> LeaderElector | None:
    """With leader election on: fence `kube` off until this replica holds the Lease, and
    start trying to (through an unfenced view of the same client)."""
    if not ours.leader_election:
        return None
    leader = LeaderElector(
        kube.unfenced(),
        ours.namespace,
        ours.lease_name,
        ours.leader_identity,
        duration=ours.lease_duration,
        renew_deadline=ours.lease_renew_deadline,
        retry_period=ours.lease_retry_period,
    )
    kube.fence(lambda: leader.leading)
    memo.leader = leader
    memo.leader_task = asyncio.create_task(leader.run(), name="skyhook-lease")
    return leader


@kopf.on.login()
def login(memo: kopf.Memo, **_: Any) -> kopf.ConnectionInfo:
    """kopf's default login reads the kubeconfig location the `kubernetes` package fixed at
    import time; ours comes from the same place as our own client (`run --kubeconfig`,
    $KUBECONFIG, the in-cluster account, ~/.kube/config)."""
    return connection_info(configuration_from(memo.get("kubeconfig")))


def connection_info(configuration: Configuration) -> kopf.ConnectionInfo:
    header = configuration.get_api_key_with_prefix(
        "BearerToken"
    ) or configuration.get_api_key_with_prefix("authorization")
    scheme, _, token = (header or "").partition(" ")
    return kopf.ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert or None,
        insecure=not configuration.verify_ssl,
        scheme=scheme if token else None,
        token=token or scheme or None,
        certificate_path=configuration.cert_file or None,
        private_key_path=configuration.key_file or None,
        username=configuration.username or None,
        password=configuration.password or None,
    )


def _configure_kopf(settings: kopf.OperatorSettings, ours: Settings) -> None:
    # kopf's own bookkeeping lives in annotations under our prefix, never in `status`,
    # whose schema is upstream's and would prune it.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ours.kopf_prefix)
    settings.persistence.diffbase_storage = _NoDiffBase(
        prefix=ours.kopf_prefix, key="last-handled-configuration"
    )
    settings.persistence.finalizer = f"{ours.kopf_prefix}/kopf"
    # Only warnings become Kubernetes Events; our own events come from the writer.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    # From the signal on, whatever happens before our cleanup starts its own deadline: kopf
    # kills the process once the pod's grace period would be over (default: ten minutes).
    settings.process.ultimate_exiting_timeout = ours.shutdown_timeout + EXIT_GRACE


class _NoDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf builds a diff-base (a deep copy of the whole object, status included) on every
    watch event, for change handlers (on.create/update/...). We register none: indexes and
    event handlers never see it. Skipping the copy saves a fifth of the operator's CPU at
    1,000 nodes (pods, nodes, and a Skyhook whose status lists every node)."""

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None
    ) -> kopf.BodyEssence:
        return kopf.BodyEssence()


def _poke(memo: kopf.Memo) -> None:
    reconciler = memo.get("reconciler")
    if reconciler is not None:
        reconciler.poke()


def _nudge(memo: kopf.Memo) -> None:
    """A poke from outside kopf: ignored until kopf's first poke says its indexes are full."""
    reconciler = memo.get("reconciler")
    if reconciler is not None:
        reconciler.nudge()


# --- indexes: one view per object, keyed by (namespace, name) ---------------------------------


def _key(body: kopf.Body) -> tuple[str, str]:
    return (body.metadata.namespace or "", body.metadata.name or "")


@kopf.index(keys.GROUP, keys.VERSION, keys.PLURAL)
async def skyhook_index(body: kopf.Body, **_: Any) -> dict[tuple[str, str], Versioned[SkyhookView]]:
    return {_key(body): versioned(body, SkyhookView.from_api)}


@kopf.index(keys.GROUP, keys.VERSION, keys.POLICY_PLURAL)
async def policy_index(body: kopf.Body, **_: Any) -> dict[tuple[str, str], Versioned[PolicyView]]:
    return {_key(body): versioned(body, PolicyView.from_api)}


def _ours(configmap: Mapping[str, Any]) -> bool:
    """A package or node-metadata ConfigMap of some Skyhook (the watch is in our namespace)."""
    labels = (configmap.get("metadata") or {}).get("labels") or {}
    return keys.NAME_LABEL in labels or keys.NODE_META_LABEL in labels


# --- events: each change asks for a pass -----------------------------------------------------


@kopf.on.event(keys.GROUP, keys.VERSION, keys.PLURAL)
async def skyhook_changed(memo: kopf.Memo, **_: Any) -> None:
    _poke(memo)


@kopf.on.event(keys.GROUP, keys.VERSION, keys.POLICY_PLURAL)
async def policy_changed(memo: kopf.Memo, **_: Any) -> None:
    """Upstream reads a policy edit only at its next reconcile; ours starts a pass."""
    _poke(memo)


def _operator_namespace(name: str, memo: kopf.Memo, **_: Any) -> bool:
    settings = memo.get("settings")
    return settings is not None and name == settings.namespace


@kopf.on.event("", "v1", "namespaces", when=_operator_namespace)
async def namespace_seen(memo: kopf.Memo, **_: Any) -> None:
    """The operator's own namespace always exists, so its first event tells that every index
    is full (readiness, the first pass) even in a cluster with no node or Skyhook yet."""
    _poke(memo)
