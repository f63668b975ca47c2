"""Metrics and probes: the Prometheus endpoint and `/healthz`, `/readyz`.

After each pass the reconciler hands its snapshot and plan to `Telemetry.record_pass`, which
computes upstream's gauges with the pure `skyhook_planner.telemetry` and replaces every Skyhook series
at once, so series of deleted Skyhooks, removed package versions and compartments vanish.
Our own `skyhook_operator_*` metrics (pass duration, API requests and errors, write queue
depth, stage hand-off delay) and `skyhook_held_*` (nodes waiting on a maintenance window or an
alert, and for how long) live in the same prometheus-client registry.

The text is written by `exposition()`, not by prometheus-client's `generate_latest`: the
latter prints every value through Python's float repr (`1.0`), while upstream's Go exporter
prints `1`, and scripts written against upstream compare the printed text. `exposition()`
walks the same registry and writes the same text format with Go's number formatting.

Both endpoints are aiohttp servers on the operator's one event loop: a loop that stops
answering fails the liveness probe by itself. `start_site`, `ServingTls` and `refresh_forever`
serve the admission webhooks (admission.py) in the same way. `/metrics` is secure unless told otherwise (`Secure`): served over
HTTPS, to callers the apiserver says may `get /metrics` (kube/reviews.py), as upstream's
kube-rbac-proxy and controller-runtime's secure metrics serve it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from skyhook_operator.kube import webhooks
from skyhook_operator.kube.reviews import ReviewFailed, Verdict
from skyhook_operator.settings import BindAddress
from skyhook_planner.model.actions import Plan
from skyhook_planner.model.snapshot import ClusterSnapshot
from skyhook_planner.telemetry import (
    Family,
    handoff_delays,
    held,
    held_family,
    skyhook_families,
    waiting_family,
)
from skyhook_schemas import keys

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

RequestTotals = tuple[Mapping[tuple[str, str], int], Mapping[tuple[str, str, str], int]]


# --- the text format --------------------------------------------------------------------------


def go_float(value: float) -> str:
    """A value as Go's Prometheus client prints it: `1`, `0.5`, `1e+06`, `+Inf`, `NaN`.

    prometheus-client's formatter already follows Go for exponents and infinities; only
    integral values below 1e6 differ, where Python keeps a `.0`."""
    text = str(floatToGoString(value))  # type: ignore[no-untyped-call]
    return text[:-2] if text.endswith(".0") else text


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _sample_line(name: str, labels: Mapping[str, str], value: float) -> str:
    pairs = ",".join(
        f'{key}="{go_float(float(text)) if key in ("le", "quantile") else _escape(text)}"'
        for key, text in sorted(labels.items())
    )
    return f"{name}{{{pairs}}} {go_float(value)}\n" if pairs else f"{name} {go_float(value)}\n"


def exposition(registry: CollectorRegistry) -> bytes:
    """The Prometheus text format (0.0.4) of everything in `registry`, as Go's client writes
    it: label pairs sorted by name, Go-formatted numbers, no `_created` samples, and no
    family without samples."""
    out: list[str] = []
    for metric in registry.collect():
        samples = [s for s in metric.samples if s.name != metric.name + "_created"]
        if not samples:
            continue
        name = metric.name + "_total" if metric.type == "counter" else metric.name
        kind = metric.type if metric.type in ("counter", "gauge", "histogram") else "untyped"
        out.append(f"# HELP {name} {metric.documentation.replace(chr(10), ' ')}\n")
        out.append(f"# TYPE {name} {kind}\n")
        out += [_sample_line(s.name, s.labels, s.value) for s in samples]
    return "".join(out).encode()


# --- collectors ---------------------------------------------------------------------------------


class _FamiliesCollector(Collector):
    """Upstream's gauges, counted at scrape time from the last pass's snapshot and plan: a
    pass every few hundred milliseconds need not count every node of the fleet each time."""

    def __init__(self, spellings: tuple[str, ...]) -> None:
        self.last: tuple[ClusterSnapshot, Plan] | None = None
        self._counted: tuple[object, tuple[Family, ...]] = (None, ())
        self._spellings = spellings

    def families(self) -> tuple[Family, ...]:
        last = self.last
        if last is not None and self._counted[0] is not last:
            snapshot, plan = last
            self._counted = (
                last,
                (*skyhook_families(snapshot), held_family(plan), waiting_family(plan)),
            )
        return self._counted[1]

    def collect(self) -> Iterable[Metric]:
        for family in self.families():
            for prefix in self._spellings:
                gauge = GaugeMetricFamily(
                    _respelled(family.name, prefix),
                    family.help,
                    labels=[_respelled(label, prefix) for label in family.labels],
                )
                for sample in family.samples:
                    gauge.add_metric(sample.labels, sample.value)
                yield gauge


def metric_prefixes(publish_legacy: bool) -> tuple[str, ...]:
    """The prefixes the gauges are published under: `skyhook_`; speaking upstream's newer
    group, `nodewright_` (and `skyhook_` beside it unless told not to)."""
    if keys.GROUP == keys.SKYHOOK_GROUP:
        return ("skyhook_",)
    return ("nodewright_", "skyhook_") if publish_legacy else ("nodewright_",)


def _respelled(name: str, prefix: str) -> str:
    """`skyhook_status` as `nodewright_status`, `skyhook_name` as `nodewright_name`."""
    return prefix + name.removeprefix("skyhook_") if name.startswith("skyhook_") else name


class _RequestsCollector(Collector):
    """API requests and failures, read from the client's own counts at scrape time."""

    def __init__(self, totals: Callable[[], RequestTotals]) -> None:
        self._totals = totals

    def collect(self) -> Iterable[Metric]:
        requests, errors = self._totals()
        made = CounterMetricFamily(
            "skyhook_operator_api_requests",
            "Kubernetes API requests the operator's client made, by verb and resource",
            labels=("verb", "resource"),
        )
        for (verb, resource), count in sorted(requests.items()):
            made.add_metric((verb, resource), count)
        failed = CounterMetricFamily(
            "skyhook_operator_api_errors",
            "Kubernetes API requests that failed, by verb, resource and HTTP status code "
            "(network: no answer)",
            labels=("verb", "resource", "code"),
        )
        for (verb, resource, code), count in sorted(errors.items()):
            failed.add_metric((verb, resource, code), count)
        yield made
        yield failed


# Hand-offs take a pass (tens of milliseconds) plus the watch delay; a slow one, seconds.
_HANDOFF_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, float("inf"))
_PASS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, float("inf"))


class Telemetry:
    """Every metric the operator exposes, in one registry of its own."""

    def __init__(
        self,
        requests: Callable[[], RequestTotals],
        queue_depth: Callable[[], float],
        prefixes: tuple[str, ...] = ("skyhook_",),
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._families = _FamiliesCollector(prefixes)
        self.registry.register(self._families)
        self.registry.register(_RequestsCollector(requests))
        self._pass_seconds = Histogram(
            "skyhook_operator_pass_duration_seconds",
            "Wall time of one reconcile pass: snapshot, plan and writes",
            buckets=_PASS_BUCKETS,
            registry=self.registry,
        )
        self._handoff_seconds = Histogram(
            "skyhook_operator_stage_handoff_seconds",
            "Time from a stage pod finishing to the next pod of the same Skyhook on the "
            "same node being created",
            buckets=_HANDOFF_BUCKETS,
            registry=self.registry,
        )
        self._held_seconds = Counter(
            "skyhook_held_seconds",
            "Seconds during which some node of the Skyhook waited on a closed maintenance "
            "window or an alert, by reason",
            ("skyhook_name", "reason"),
            registry=self.registry,
        )
        self._held_before: set[tuple[str, str]] = set()
        self._last_pass = time.monotonic()
        Gauge(
            "skyhook_operator_write_queue_depth",
            "Actions of the plan being written that have not been attempted yet",
            registry=self.registry,
        ).set_function(queue_depth)

    def record_pass(
        self, snapshot: ClusterSnapshot, plan: Plan, written: bool, seconds: float
    ) -> None:
        """Fold one finished pass in. `written`: every action of `plan` was applied, so its
        pod creations count as hand-offs."""
        self._families.last = (snapshot, plan)
        # A hold seen by the previous pass lasted until this one.
        now = time.monotonic()
        for skyhook, reason in self._held_before:
            self._held_seconds.labels(skyhook, reason).inc(now - self._last_pass)
        self._held_before, self._last_pass = set(held(plan)), now
        self._pass_seconds.observe(seconds)
        if written:
            for delay in handoff_delays(snapshot, plan, datetime.now(UTC)):
                self._handoff_seconds.observe(delay)

    def text(self) -> bytes:
        return exposition(self.registry)


# --- TLS and access for /metrics ------------------------------------------------------------


class ServingTls:
    """The certificate an endpoint (`what`: /metrics, the webhooks) is served with: `tls.crt`
    and `tls.key` in `directory` (a mounted Secret, or the files admission.Certificates
    writes), or, with no directory, a self-signed certificate this process makes, as
    controller-runtime does when given none (`kube/webhooks.py` makes both kinds). `refresh()`
    loads the files again when they changed, and renews our own before it expires; new
    connections get the new certificate."""

    def __init__(self, directory: str, names: Iterable[str] = (), what: str = "metrics") -> None:
        self.what = what
        self.own = not directory
        self.directory = Path(directory or tempfile.mkdtemp(prefix="skyhook-metrics-tls-"))
        self.names = list(dict.fromkeys([*names, socket.gethostname(), "localhost", "127.0.0.1"]))
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._loaded: tuple[float, float] | None = None
        self.refresh()

    def renewal_due(self) -> bool:
        """Whether our own certificate is missing or due (never, for mounted files)."""
        if not self.own:
            return False
        files = webhooks.read_files(self.directory)
        return files is None or webhooks.ServingCertificate(b"", *files).due(
            self.names, datetime.now(UTC)
        )

    def renew(self) -> None:
        """A new self-signed certificate in our own directory (a child process: see
        `kube/webhooks.generate`)."""
        webhooks.write_files(self.directory, webhooks.generate(self.names, datetime.now(UTC)))
        log.info("%s: self-signed serving certificate made for %s", self.what, self.names)

    def refresh(self) -> None:
        """Raises OSError, ssl.SSLError or webhooks.CertificateToolError when the files are
        missing or unusable."""
        if self.renewal_due():
            self.renew()
        cert, key = self.directory / "tls.crt", self.directory / "tls.key"
        stamp = (cert.stat().st_mtime, key.stat().st_mtime)
        if stamp != self._loaded:
            self.context.load_cert_chain(cert, key)
            self._loaded = stamp
            log.info("%s: serving certificate loaded from %s", self.what, self.directory)


class Access(Protocol):
    """Who may make a request (kube/reviews.py's AccessReviewer)."""

    async def review(self, token: str, verb: str, path: str) -> Verdict:
        """Raises ReviewFailed when the apiserver could not be asked."""


A = TypeVar("A", bound=Access)


@dataclass
class Secure(Generic[A]):
    """What makes `/metrics` secure: who may read it, and the TLS it is served over."""

    access: A
    tls: ServingTls
    refresh_interval: float = 60.0


def bearer_token(request: web.Request) -> str:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


async def refusal(access: Access, request: web.Request) -> web.Response | None:
    """None when the caller may make `request`, else the answer refusing it."""
    try:
        verdict = await access.review(bearer_token(request), request.method.lower(), request.path)
    except ReviewFailed as error:
        log.warning("metrics: %s; answering 500", error)
        return web.Response(status=500, text=str(error).partition(":")[0])
    if verdict.allowed:
        return None
    log.debug(
        "metrics: %s %s refused: %d %s",
        request.method,
        request.path,
        *(verdict.status, verdict.message),
    )
    return web.Response(status=verdict.status, text=verdict.message)


# --- the HTTP endpoints ----------------------------------------------------------------------


class Health(Protocol):
    """What the probes ask the reconciler."""

    @property
    def ready(self) -> bool: ...

    def alive(self) -> str | None:
        """None when alive, else why not."""


@dataclass
class Endpoints:
    """The running servers; `stop()` closes them."""

    runners: list[web.AppRunner]
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for runner in self.runners:
            await runner.cleanup()


async def start_site(
    app: web.Application,
    address: str,
    what: str,
    tls: ssl.SSLContext | None = None,
    *,
    reuse_port: bool = False,
) -> web.AppRunner | None:
    """Serve `app` on `address` (None when that says off); raises OSError when it cannot."""
    bind = BindAddress(address).bind  # the settings' BindAddress passes as it is
    if bind is None:
        log.info("%s endpoint off", what)
        return None
    host, port = bind
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(
            runner, host or None, port, ssl_context=tls, reuse_port=reuse_port or None
        ).start()
    except OSError:
        await runner.cleanup()
        raise
    log.info("%s endpoint on %s://%s:%d", what, "https" if tls else "http", host or "*", port)
    return runner


async def refresh_forever(tls: ServingTls, interval: float) -> None:
    """`tls.refresh()` every `interval` seconds; a failed one keeps the last certificate."""
    # On the loop: a refresh that finds nothing changed takes 0.07 ms, a reload 0.6 ms. A
    # renewal of our own certificate (once a year) waits for a child process: in a thread.
    while True:
        await asyncio.sleep(interval)
        try:
            if tls.renewal_due():
                await asyncio.to_thread(tls.renew)
            tls.refresh()
        except (OSError, ssl.SSLError, ValueError, webhooks.CertificateToolError) as error:
            log.warning(
                "%s: serving certificate not reloaded (%s); keeping the last", tls.what, error
            )


async def serve(
    telemetry: Telemetry,
    health: Health,
    metrics_address: str,
    probe_address: str,
    not_ready: Callable[[], str | None] = lambda: None,
    *,
    secure: Secure[Any] | None = None,
) -> Endpoints:
    """Start `/metrics` on `metrics_address` (with `secure`: over HTTPS, for callers its
    `access` lets through) and the probes on `probe_address`; readiness also waits for
    `not_ready()` (why else this replica cannot serve yet) to be None."""

    async def metrics(request: web.Request) -> web.Response:
        if secure is not None and (refused := await refusal(secure.access, request)) is not None:
            return refused
        started = time.monotonic()
        # The first scrape after a pass counts the fleet (12 ms at 1,000 nodes, 73 ms at
        # 5,000; later ones 0.7 ms): off the loop.
        body = await asyncio.to_thread(telemetry.text)
        log.debug("metrics scraped in %.3f s", time.monotonic() - started)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

    async def healthz(_: web.Request) -> web.Response:
        problem = health.alive()
        return web.Response(status=500 if problem else 200, text=problem or "ok")

    async def readyz(_: web.Request) -> web.Response:
        if not health.ready:
            return web.Response(status=503, text="waiting for the first full view of the cluster")
        problem = not_ready()
        if problem:
            return web.Response(status=503, text=problem)
        return web.Response(text="ok")

    metrics_app = web.Application()
    metrics_app.router.add_get("/metrics", metrics)
    probes_app = web.Application()
    probes_app.router.add_get("/healthz", healthz)
    probes_app.router.add_get("/readyz", readyz)
    endpoints = Endpoints([])
    for app, address, what, tls in (
        (metrics_app, metrics_address, "metrics", secure.tls.context if secure else None),
        (probes_app, probe_address, "probe", None),
    ):
        try:
            runner = await start_site(app, address, what, tls)
        except OSError:
            await endpoints.stop()
            raise
        if runner is not None:
            endpoints.runners.append(runner)
    if secure is not None and BindAddress(metrics_address).bind is not None:
        refresher = refresh_forever(secure.tls, secure.refresh_interval)
        endpoints.tasks.append(asyncio.create_task(refresher, name="skyhook-metrics-tls"))
    return endpoints
