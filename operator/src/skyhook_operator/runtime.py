"""The operator's lifecycle: start every part, run until SIGTERM or SIGINT, stop in time.

Nothing here decides anything. `main` builds the one API client, the list+watch indexes of
every kind the planner reads (kube/watch.py), the writer, the reconciler, the endpoints
(metrics, probes, admission webhooks) and the Lease, all as tasks on one event loop
(ARCHITECTURE.md, "One event loop"). Every change of any index wakes the reconciler; its first
pass, and readiness, wait until every index has listed, so the first pass sees the whole
cluster. A part that cannot start (credentials it cannot use, a port in use, no certificate
files) ends `main` with a `StartError` saying which, before any Lease is taken or watch started.

`stop` takes the parts down in the order that keeps the cluster safe (no new passes, the
writes going out finished, then the Lease handed over), all within `shutdown_timeout` of the
signal, whatever the apiserver does: `Deadline` ends the process then.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from typing import Any

from skyhook_operator import admission
from skyhook_operator.kube import carryover
from skyhook_operator.kube.artifacts import (
    ArtifactFetcher,
    ArtifactResolver,
    allowed_registries,
    pod_executor,
)
from skyhook_operator.kube.client import ApiError, AsyncKube, connect_async
from skyhook_operator.kube.credentials import CredentialsError
from skyhook_operator.kube.drain import Evictor
from skyhook_operator.kube.lease import LeaderElector
from skyhook_operator.kube.reviews import AccessReviewer
from skyhook_operator.kube.watch import WatchedIndex
from skyhook_operator.kube.webhooks import CertificateToolError
from skyhook_operator.kube.writer import Writer
from skyhook_operator.observability import (
    Endpoints,
    Secure,
    ServingTls,
    Telemetry,
    metric_prefixes,
    serve,
)
from skyhook_operator.reconcile import Reconciler
from skyhook_operator.settings import Settings
from skyhook_operator.store import ClusterStore
from skyhook_planner.model.carryover import OTHER_GROUP
from skyhook_planner.model.snapshot import ConfigMapView, NodeView, PodView, PolicyView, SkyhookView
from skyhook_planner.passes.plan import Replanner
from skyhook_schemas import keys

log = logging.getLogger(__name__)


CARRY_OVER_RETRY_S = 10.0
CARRY_OVER_MAX_RETRY_S = 300.0
MIRROR_INTERVAL_S = 30.0


class StartError(Exception):
    """A part of the operator cannot start; the message says which and why."""


async def main(ours: Settings, kubeconfig: str | None = None) -> None:
    """Run the operator until SIGTERM or SIGINT; raises StartError when it cannot start."""
    try:
        operator = Operator(ours, kubeconfig)
    except CredentialsError as error:
        raise StartError(f"credentials: {error}") from error
    try:
        await operator.start()
    except BaseException:
        await operator.abandon()
        raise
    received = await until_signalled()
    log.info("%s received", received.name)
    await operator.stop()


async def until_signalled() -> signal.Signals:
    """Wait for SIGTERM or SIGINT. The handlers stay: a second signal while stopping is
    logged and changes nothing (the shutdown deadline holds)."""
    loop = asyncio.get_running_loop()
    received: asyncio.Future[signal.Signals] = loop.create_future()

    def handle(number: signal.Signals) -> None:
        if received.done():
            log.info("%s received while stopping: still stopping", number.name)
        else:
            received.set_result(number)

    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, handle, number)
    return await received


class Operator:
    """The running operator's parts: built by `start`, taken down by `stop`."""

    def __init__(self, ours: Settings, kubeconfig: str | None) -> None:
        self.ours = ours
        # One client, one session, for the whole process (kube/client.py).
        self.kube = connect_async(kubeconfig)
        self.store = ClusterStore()
        self.leader: LeaderElector | None = None
        self.reconciler: Reconciler | None = None
        self.evictor: Evictor | None = None
        self.writer: Writer | None = None
        self.watches: dict[str, WatchedIndex[Any]] = {}
        self.endpoints: list[Endpoints] = []
        self.pod_fetches: Executor | None = None  # the pod image webhook's threads
        self.tasks: list[asyncio.Task[None]] = []

    def _wake(self) -> None:
        if self.reconciler is not None:
            self.reconciler.poke()

    async def start(self) -> None:
        """Build the parts and start the endpoints; then, once nothing can fail any more,
        the Lease, the watches and the loop."""
        ours, kube = self.ours, self.kube
        self.watches = watches = _watches(kube, ours, self._wake)
        for name, watched in watches.items():
            self.store.attach(name, watched)
        self.leader = leader = _leader(ours, kube)
        self.evictor = evictor = Evictor(
            kube, watches["pod_index"], ours.drain_timeout, on_change=self._wake
        )
        self.store.eviction_refusals = evictor.refusals
        self.writer = writer = Writer(
            kube,
            self.store,
            evictor.ensure,
            ours.write_concurrency,
            ours.event_interval,
            reporter=ours.leader_identity,
        )
        telemetry = Telemetry(
            kube.request_totals,
            lambda: writer.queue_depth,
            metric_prefixes(ours.publish_legacy_metrics),
        )
        fetcher = self._artifact_fetcher()
        self.reconciler = reconciler = Reconciler(
            self.store,
            writer,
            ours,
            Replanner(),
            telemetry=telemetry,
            leader=leader,
            artifacts=ArtifactResolver(fetcher),
            before_passes=self._carry_over,
        )
        certificates = await self._webhooks() if ours.enable_webhooks else None
        # After the webhook certificate is on disk: /metrics may be served with it.
        secure = _secure_metrics(ours, kube.unfenced())
        # The probes answer from here on: not ready until every index is full (and, with
        # webhooks, until the apiserver can call them).
        try:
            self.endpoints.append(
                await serve(
                    telemetry,
                    reconciler,
                    ours.metrics_port,
                    ours.probe_port,
                    not_ready=(lambda: certificates.problem) if certificates else lambda: None,
                    secure=secure,
                )
            )
        except OSError as error:  # a port in use: say which, and do not start half-way
            raise StartError(
                f"cannot serve metrics on {ours.metrics_port!r} or probes on "
                f"{ours.probe_port!r}: {error}"
            ) from error
        if certificates is not None:
            self._task(certificates.run_forever(), "skyhook-webhook-certificates")
        if leader is not None:
            self._task(leader.run(), "skyhook-lease")
        for watched in watches.values():
            watched.run()
        self._task(self._plan_once_listed(), "skyhook-reconcile")
        log.info("operator started; settings:\n  %s", "\n  ".join(ours.describe()))

    def _artifact_fetcher(self, executor: Executor | None = None) -> ArtifactFetcher:
        """A fetcher of image compatibility artifacts from the registries the Skyhooks name
        (as the index has them at each fetch) and those the settings add."""
        ours, skyhooks = self.ours, self.watches["skyhook_index"]
        extra = ours.image_artifact_registries.split(",")

        def registries() -> frozenset[str]:
            named = (item.view for item in skyhooks.index.values() if item.view is not None)
            return allowed_registries(named, extra)

        return ArtifactFetcher(
            self.kube,
            ours.namespace,
            ours.image_artifact_refresh,
            ours.insecure_registries.split(","),
            registries=registries,
            max_bytes=ours.image_artifact_max_bytes,
            cache_entries=ours.image_artifact_cache_size,
            executor=executor,
        )

    async def _webhooks(self) -> admission.Certificates:
        """A current serving certificate on disk, then the webhook server. Every replica
        serves the webhooks, so they read and write through views of the client that leader
        election does not fence. The pod image webhook fetches with a cache and threads of its
        own: pods, which anyone may create, never take the planner's."""
        ours = self.ours
        self.pod_fetches = pod_executor()
        fetcher = self._artifact_fetcher(self.pod_fetches)
        certificates = admission.Certificates(self.kube.unfenced(), ours)
        try:
            await certificates.start()
        except admission.CertificateError as error:
            raise StartError(f"admission webhooks: {error}") from error
        planning = ours.for_planner()
        reviews = admission.Admission(
            self.kube.unfenced(),
            self.watches,
            fetcher,
            readable_secrets=planning.package_secrets or frozenset(),
            namespace=ours.namespace,
        )
        try:
            self.endpoints.append(
                await admission.serve(reviews, ours.webhook_port, ours.webhook_cert_dir)
            )
        except OSError as error:  # a port in use, or certificate files it cannot load
            raise StartError(
                f"admission webhooks: cannot serve on {ours.webhook_port!r} with the "
                f"certificate in {ours.webhook_cert_dir!r}: {error}"
            ) from error
        return certificates

    def _task(self, work: Any, name: str) -> None:
        self.tasks.append(asyncio.create_task(work, name=name))

    async def _plan_once_listed(self) -> None:
        """The loop starts (and readiness comes) once every index is full: the first pass
        then plans from the whole cluster, even one with no node or Skyhook yet."""
        started = time.monotonic()
        await asyncio.gather(*(w.listed.wait() for w in self.watches.values()))
        log.info("every index listed in %.1f s", time.monotonic() - started)
        assert self.reconciler is not None
        await self.reconciler.run_forever()

    async def _carry_over(self) -> None:
        """Carry the other API group's SCRs and state over (kube/carryover.py); the loop
        awaits it once leading, so no pass runs before it has run. One object does not hold
        up the others: an SCR whose state a failed write left behind is kept out of the
        passes and carried over again with backoff, while every other one is planned."""
        assert self.writer is not None
        notices = carryover.Notices(self.writer.record_event)
        while True:
            if self.leader is not None and not self.leader.leading:
                await self.leader.wait_leading()
            try:
                done = await carryover.carry_over(
                    self.kube, self.store, self.ours.namespace, notices
                )
            except (ApiError, OSError) as error:  # a listing failed: nothing known to carry
                log.warning(
                    "carrying state over from %s failed, no pass until it succeeds "
                    "(again in %.0f s): %s",
                    OTHER_GROUP,
                    CARRY_OVER_RETRY_S,
                    error,
                )
                await asyncio.sleep(CARRY_OVER_RETRY_S)
                continue
            break
        if done.mirrored or done.nodes or done.pods or done.configmaps or done.failed:
            log.info("carried over from %s: %s", OTHER_GROUP, done)
        if done.failed:
            self.store.withheld = frozenset(done.held)
            if done.held:
                log.warning(
                    "%s %s held back until their state is carried over",
                    keys.KIND,
                    sorted(done.held),
                )
            self._task(self._carry_over_again(notices, done.held), "skyhook-carry-over")
        self._task(self._mirror_forever(notices), "skyhook-mirror")

    async def _carry_over_again(self, notices: carryover.Notices, held: set[str]) -> None:
        """Run the carry-over again for the SCRs an earlier run held back, waiting twice as
        long after each failed run (up to CARRY_OVER_MAX_RETRY_S); each is planned as soon
        as its state is carried over."""
        delay = CARRY_OVER_RETRY_S
        while True:
            await asyncio.sleep(delay)
            delay = min(delay * 2, CARRY_OVER_MAX_RETRY_S)
            if self.leader is not None and not self.leader.leading:
                continue
            try:
                done = await carryover.carry_over(
                    self.kube, self.store, self.ours.namespace, notices, only=held
                )
            except (ApiError, OSError) as error:
                log.warning("carrying state over from %s failed again: %s", OTHER_GROUP, error)
                continue
            released = held - done.held
            held = done.held
            self.store.withheld = frozenset(held)
            if released:
                log.info("%s %s carried over from %s", keys.KIND, sorted(released), OTHER_GROUP)
                self._wake()
            if not done.failed:
                return

    async def _mirror_forever(self, notices: carryover.Notices) -> None:
        """The other group's objects created since are mirrored within MIRROR_INTERVAL_S
        (nothing to carry: no operator of that group handled them), and its copies of state
        carried over LEGACY_CLEANUP_DELAY ago are removed."""
        while True:
            await asyncio.sleep(MIRROR_INTERVAL_S)
            if self.leader is not None and not self.leader.leading:
                continue
            done = carryover.CarriedOver()
            try:
                await carryover.mirror(self.kube, self.store, done, notices)
                pruned = await carryover.prune(
                    self.kube, self.store, self.ours.namespace, self.ours.legacy_cleanup_delay
                )
            except (ApiError, OSError) as error:
                log.warning("mirroring %s objects failed: %s", OTHER_GROUP, error)
                continue
            if pruned:
                log.info("%s copies of %s removed (LEGACY_CLEANUP_DELAY)", OTHER_GROUP, pruned)
            if done.mirrored:
                self._wake()

    async def abandon(self) -> None:
        """After a failed start: close what did start (no Lease was taken, no write made)."""
        for task in self.tasks:
            task.cancel()
        for endpoints in self.endpoints:
            await endpoints.stop()
        await self.kube.close()

    async def stop(self) -> None:
        """Stop the loop and let the writes going out finish; then hand the Lease over. All
        within `shutdown_timeout` of the signal, whatever the apiserver does (`Deadline` ends
        the process then); never raises."""
        deadline = Deadline(self.ours.shutdown_timeout)
        log.info("stopping: exit within %.0f s", self.ours.shutdown_timeout)
        try:
            await self._stop(deadline)
        except Exception:
            log.exception("stopping failed part-way; exiting anyway")
        deadline.finished(EXIT_GRACE)

    async def _stop(self, deadline: Deadline) -> None:
        leader = self.leader
        if leader is not None:
            leader.step_down()  # writes still queued fail at once instead of going out
        for task in self.tasks:
            task.cancel()
        for endpoints in self.endpoints:
            try:
                await asyncio.wait_for(endpoints.stop(), deadline.left(RELEASE_RESERVE))
            except TimeoutError:
                log.warning("metrics, probe and webhook endpoints not closed in time")
        for watched in self.watches.values():
            watched.stop()
        if self.pod_fetches is not None:
            self.pod_fetches.shutdown(wait=False, cancel_futures=True)
        if self.evictor is not None:
            self.evictor.cancel()
        written = True
        if self.writer is not None:
            written = await self.writer.close(deadline.left(RELEASE_RESERVE))
        if leader is not None:  # after the last write: the successor starts at once
            if written:
                await leader.release(deadline.left(EXIT_GRACE))
            else:
                # A write may still reach the apiserver: a successor must not plan meanwhile.
                log.warning(
                    "writes still waiting on the apiserver: Lease not released, another "
                    "replica takes over once it expires"
                )
        log.info("operator stopped; API requests made: %s", self.kube.request_counts())
        await self.kube.close()


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


def _secure_metrics(ours: Settings, kube: AsyncKube) -> Secure[AccessReviewer] | None:
    """With `metrics_secure` (the default) and the endpoint on: reviews through an unfenced
    view of the client (leader election fences the main one off POSTs, and every replica
    answers scrapes), and a serving certificate."""
    if not ours.metrics_secure or ours.metrics_port.bind is None:
        return None
    try:
        tls = ServingTls(ours.metrics_cert_dir)
    except (OSError, ValueError, CertificateToolError) as error:  # ssl.SSLError is an OSError
        raise StartError(
            f"metrics: no usable tls.crt and tls.key in {ours.metrics_cert_dir!r}: {error}"
        ) from error
    return Secure(AccessReviewer(kube), tls)


def _watches(
    kube: AsyncKube, ours: Settings, wake: Callable[[], None]
) -> dict[str, WatchedIndex[Any]]:
    """The list+watch indexes, by the name the store reads them under; each change wakes
    the loop (which plans only once every index has listed)."""
    return {
        "skyhook_index": WatchedIndex(
            kube, kube.skyhook_path(), decode=SkyhookView.from_api, on_change=wake
        ),
        "policy_index": WatchedIndex(
            kube, kube.policy_path(), decode=PolicyView.from_api, on_change=wake
        ),
        "node_index": WatchedIndex(kube, "/api/v1/nodes", decode=NodeView.from_api, on_change=wake),
        "pod_index": WatchedIndex(
            kube,
            "/api/v1/pods",
            decode=PodView.from_api,
            selector="spec.nodeName!=",  # bound to a node: what the planner reasons about
            on_change=wake,
        ),
        "configmap_index": WatchedIndex(
            kube,
            kube.namespaced_path("configmaps", ours.namespace),
            decode=ConfigMapView.from_api,
            keep=_ours,
            on_change=wake,
        ),
    }


def _leader(ours: Settings, kube: AsyncKube) -> LeaderElector | None:
    """With leader election on: fence `kube` off until this replica holds the Lease (which
    it tries for through an unfenced view of the same client, once started)."""
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
    kube.fence(leader.write_time_left)
    return leader


def _ours(configmap: Mapping[str, Any]) -> bool:
    """A package or node-metadata ConfigMap of some Skyhook (the watch is in our namespace)."""
    labels = (configmap.get("metadata") or {}).get("labels") or {}
    return keys.NAME_LABEL in labels or keys.NODE_META_LABEL in labels
