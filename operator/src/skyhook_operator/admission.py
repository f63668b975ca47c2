"""Admission webhooks: an HTTPS server every replica runs, leader or not.

The decisions are skyhook_planner.admission's; this module reads the AdmissionReviews the
apiserver POSTs, hands each to its webhook's handler (with the DeploymentPolicies and nodes from
the same indexes the planner reads) and answers. A handler returns the warnings and, for a
mutating webhook, the object as it should be stored, or raises `Refused`; the answer carries
`allowed`, the warnings, a refusal's `status` {code, message}, and a change as a base64
`JSONPatch` computed against the object the apiserver sent. `Certificates` keeps the serving
certificate and the webhook configurations current (kube/webhooks.py); the server reloads the
certificate files within `CERTIFICATE_CHECK_SECONDS` of a change (new connections get the new
certificate, as /metrics does: observability.ServingTls).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
from aiohttp import web

from skyhook_operator.kube import webhooks
from skyhook_operator.kube.artifacts import ArtifactFetcher, pod_image_patch
from skyhook_operator.kube.client import ApiError, AsyncKube, Json
from skyhook_operator.observability import Endpoints, ServingTls, refresh_forever, start_site
from skyhook_operator.settings import Settings
from skyhook_planner import admission
from skyhook_planner.model import carryover
from skyhook_planner.model.spec import normalising_patch
from skyhook_schemas import keys

log = logging.getLogger(__name__)

# The largest admission review read. The apiserver takes objects of up to 3 MiB and an update's
# review carries two (new and old); aiohttp's default of 1 MiB answered a large Skyhook with
# 413, so kubectl showed a failed webhook call instead of the field that is too large.
MAX_REVIEW_BYTES = 8 * 1024 * 1024
# How long the pod image webhook waits for the node index to be listed at start-up (the
# apiserver gives a webhook call at most 30 s).
NODES_LISTED_SECONDS = 10.0
# How often the server looks at its certificate files (a renewal, a new Secret mounted).
CERTIFICATE_CHECK_SECONDS = 5.0


class Refused(Exception):
    """The object is not admitted: `message` says why; `code` is the HTTP status the
    apiserver reports to the client (403: refused; 503: could not be decided)."""

    def __init__(self, message: str, code: int = 403, warnings: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.warnings = tuple(warnings)


@dataclass(frozen=True)
class Request:
    """One admission request, as a handler reads it."""

    operation: str  # CREATE, UPDATE, DELETE
    new: Json | None  # the object as it would be stored (None on DELETE)
    old: Json | None  # the object as it is stored (None on CREATE)


@dataclass(frozen=True)
class Answer:
    """What a handler admits with: warnings for the client, and for a mutating webhook the
    object as it should be stored instead (None: as it is)."""

    warnings: tuple[str, ...] = ()
    mutated: Json | None = None


Handler = Callable[[Request], Awaitable[Answer]]


class Admission:
    """The handlers, one per webhook in kube/webhooks.py, by its name. They read through
    an unfenced view of the client: every replica answers reviews."""

    def __init__(
        self,
        kube: AsyncKube,
        indexes: Mapping[str, Any],
        fetcher: ArtifactFetcher,
        *,
        readable_secrets: frozenset[str] = frozenset(),
        namespace: str = "",
    ) -> None:
        self.kube = kube
        self.indexes = indexes  # the runtime's WatchedIndexes, by the name the store uses
        self.fetcher = fetcher
        # The Secrets of the operator's namespace a package's env may read.
        self.readable_secrets = readable_secrets
        self.namespace = namespace
        self.handlers: dict[str, Handler] = {
            webhooks.VALIDATE_SCR: self.validate_skyhook,
            webhooks.VALIDATE_POLICY: self.validate_policy,
            webhooks.VALIDATE_POLICY_DELETE: self.validate_policy,
            webhooks.MUTATE_SCR: self.normalise_skyhook,
            webhooks.MUTATE_POLICY: self.default_policy,
            webhooks.MUTATE_POD_IMAGE: self.choose_pod_image,
            webhooks.FREEZE_OTHER_SCR: self.freeze_other_scr,
            webhooks.FREEZE_OTHER_POLICY: self.freeze_other_policy,
        }

    async def freeze_other_scr(self, request: Request) -> Answer:
        return await self._freeze_other(request, carryover.OTHER_KIND, self.kube.skyhook_path)

    async def freeze_other_policy(self, request: Request) -> Answer:
        return await self._freeze_other(request, keys.POLICY_KIND, self.kube.policy_path)

    async def _freeze_other(
        self, request: Request, kind: str, ours: Callable[[str], str]
    ) -> Answer:
        """The other API group's objects: validated as ours are (an invalid one could never
        be carried over), and an edit only our twin may make is refused once that twin
        exists; every write is told which group this operator speaks."""
        body = request.new or {}
        name = str((body.get("metadata") or {}).get("name") or "")
        notice = (
            f"{carryover.OTHER_GROUP} {kind} is not reconciled by this operator, which speaks "
            f"{keys.GROUP}: it carries {kind} {name!r} over to its own group within a minute"
        )
        if kind == keys.POLICY_KIND:
            verdict = admission.review_policy(request.operation, request.new, request.old, ())
        else:
            verdict = admission.review_skyhook(
                request.operation, request.new, request.old, await self._policies_named(body)
            )
        valid = _verdict(verdict)
        if request.operation == "UPDATE" and request.old is not None:
            try:
                await self.kube.request("GET", ours(name))
            except ApiError as error:
                if error.status != 404:
                    raise
            else:
                refusal = carryover.frozen_edit(kind, request.old, body)
                if refusal is not None:
                    raise Refused(refusal)
        return Answer(warnings=(notice, *valid.warnings))

    async def _policies_named(self, scr: Json) -> set[str]:
        """The policy the other group's `scr` names when it exists in either group (ours, or
        the other group's, which is mirrored before it): all the check of its name needs."""
        spec = scr.get("spec")
        named = spec.get("deploymentPolicy") if isinstance(spec, dict) else None
        if not isinstance(named, str) or not named:
            return set()
        if named in {name for (_, name) in self.indexes["policy_index"].index}:
            return {named}
        other = f"/apis/{carryover.OTHER_GROUP}/{keys.VERSION}/{keys.POLICY_PLURAL}/{named}"
        for path in (self.kube.policy_path(named), other):
            try:
                await self.kube.request("GET", path)
            except ApiError as error:
                if error.status == 404:
                    continue
                raise
            return {named}
        return set()

    async def validate_skyhook(self, request: Request) -> Answer:
        policies = {name for (_, name) in self.indexes["policy_index"].index}
        spec = (request.new or {}).get("spec")
        named = spec.get("deploymentPolicy") if isinstance(spec, dict) else None
        # A policy created a moment ago (both applied together) may not be in the index yet:
        # ask.
        if (
            isinstance(named, str)
            and named
            and named not in policies
            and await _policy_exists(self.kube, named)
        ):
            policies.add(named)
        return _verdict(
            admission.review_skyhook(
                request.operation,
                request.new,
                request.old,
                policies,
                readable_secrets=self.readable_secrets,
                namespace=self.namespace,
            )
        )

    async def validate_policy(self, request: Request) -> Answer:
        body = request.old if request.old is not None else request.new
        name = str(((body or {}).get("metadata") or {}).get("name") or "")
        referenced_by: list[str] = []
        if request.operation == "DELETE":
            # Listed, not read from the index: a Skyhook created a moment ago must count.
            try:
                referenced_by = await _skyhooks_naming(self.kube, name)
            except (ApiError, OSError) as error:
                raise Refused(
                    f"cannot check which Skyhooks use DeploymentPolicy {name!r}: {error}",
                    code=503,
                ) from error
        return _verdict(
            admission.review_policy(request.operation, request.new, request.old, referenced_by)
        )

    async def normalise_skyhook(self, request: Request) -> Answer:
        """Store the spec in the form it is read in (each package named by its key, images
        without a tag): as upstream's, a Skyhook created through the webhook keeps generation
        1, and the operator's first write (adding its finalizer) has nothing left to
        normalise."""
        spec = (request.new or {}).get("spec")
        normalised = normalising_patch(spec) if isinstance(spec, dict) else None
        if normalised is None or request.new is None:
            return Answer()
        return Answer(mutated=merged(request.new, {"spec": normalised}))

    async def default_policy(self, request: Request) -> Answer:
        defaulted = admission.default_policy(request.new)
        if defaulted is None or request.new is None:
            return Answer()
        return Answer(mutated=merged(request.new, {"spec": defaulted}))

    async def choose_pod_image(self, request: Request) -> Answer:
        """Replace a labelled pod's placeholder image with the candidate its node flavour
        matches (docs/image-selection.md); refuse, saying why, when none can be chosen."""
        nodes = self.indexes["node_index"]  # the operator's own node watch
        try:  # the server starts before the watches: a pod reviewed then waits for them
            await asyncio.wait_for(nodes.listed.wait(), NODES_LISTED_SECONDS)
        except TimeoutError:
            raise Refused("image compatibility: the nodes are not listed yet", code=503) from None
        node_labels = [item.view.labels for item in nodes.index.values() if item.view]
        pod = request.new or {}
        decision = await pod_image_patch(self.fetcher, pod, node_labels)
        if not decision.allowed:
            raise Refused(decision.refusal)
        operations = [dict(op) for op in decision.patch]
        return Answer(mutated=jsonpatch.apply_patch(pod, operations))

    async def review(self, name: str, review: Json) -> Json:
        """The AdmissionReview answering `review` with webhook `name`'s handler."""
        request = review.get("request")
        if not isinstance(request, dict):
            raise ValueError("the AdmissionReview has no request")
        new, old = request.get("object"), request.get("oldObject")
        warnings: tuple[str, ...] = ()
        response: Json = {"uid": request.get("uid", ""), "allowed": True}
        try:
            answer = await self.handlers[name](
                Request(str(request.get("operation") or ""), new, old)
            )
        except Refused as refused:
            warnings = refused.warnings
            response["allowed"] = False
            response["status"] = {"message": refused.message, "code": refused.code}
        except Exception as error:  # a bug or an unreachable apiserver: refuse, saying so
            log.exception("admission webhook %s failed", name)
            response["allowed"] = False
            response["status"] = {"message": str(error) or repr(error), "code": 500}
        else:
            warnings = answer.warnings
            if answer.mutated is not None and new is not None:
                operations = jsonpatch.make_patch(new, answer.mutated).patch
                if operations:
                    response["patchType"] = "JSONPatch"
                    response["patch"] = base64.b64encode(orjson.dumps(operations)).decode()
        if warnings:
            response["warnings"] = list(warnings)
        return {
            "apiVersion": review.get("apiVersion", "admission.k8s.io/v1"),
            "kind": review.get("kind", "AdmissionReview"),
            "response": response,
        }


def merged(body: Json, patch: Mapping[str, Any]) -> Json:
    """A copy of `body` with the merge patch `patch` applied (RFC 7386: None removes a key,
    a mapping merges, anything else replaces)."""
    result = copy.deepcopy(body)

    def apply(target: dict[str, Any], changes: Mapping[str, Any]) -> None:
        for key, value in changes.items():
            if value is None:
                target.pop(key, None)
            elif isinstance(value, Mapping):
                if not isinstance(target.get(key), dict):
                    target[key] = {}
                apply(target[key], value)
            else:
                target[key] = copy.deepcopy(value)

    apply(result, patch)
    return result


def _verdict(verdict: admission.Verdict) -> Answer:
    if not verdict.allowed:
        raise Refused(verdict.message, warnings=verdict.warnings)
    return Answer(warnings=tuple(verdict.warnings))


async def _policy_exists(kube: AsyncKube, name: str) -> bool:
    try:
        await kube.request("GET", kube.policy_path(name))
    except ApiError as error:
        if error.status == 404:
            return False
        raise
    return True


async def _skyhooks_naming(kube: AsyncKube, policy: str) -> list[str]:
    """Names of the Skyhooks whose spec names `policy`."""
    items = (await kube.request("GET", kube.skyhook_path()))["items"]
    return sorted(
        item["metadata"]["name"]
        for item in items
        if (item.get("spec") or {}).get("deploymentPolicy") == policy
    )


def application(reviews: Admission) -> web.Application:
    """The webhooks' routes: each webhook's path, as the webhook configurations name it
    (kube/webhooks.py `WEBHOOKS`; the chart's configurations use the same paths)."""

    def route(name: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def answer(request: web.Request) -> web.Response:
            try:
                review = orjson.loads(await request.read())
                if not isinstance(review, dict):
                    raise ValueError("not an AdmissionReview")
                answered = await reviews.review(name, review)
            except ValueError as error:  # orjson.JSONDecodeError is a ValueError
                raise web.HTTPBadRequest(reason=str(error).splitlines()[0]) from error
            return web.Response(body=orjson.dumps(answered), content_type="application/json")

        return answer

    app = web.Application(client_max_size=MAX_REVIEW_BYTES)
    for hook in webhooks.WEBHOOKS:
        app.router.add_post(hook.path, route(hook.name))
    return app


async def serve(
    reviews: Admission,
    address: str,
    cert_dir: str,
    check_interval: float = CERTIFICATE_CHECK_SECONDS,
) -> Endpoints:
    """The HTTPS server on `address` (`webhook_port`) with `tls.crt` and `tls.key` from
    `cert_dir` (`webhook_cert_dir`), looked at again every `check_interval` seconds. Replicas
    (and tests) may bind the same address: the port is opened with SO_REUSEPORT. Raises
    OSError when the port or the files cannot be used."""
    tls = ServingTls(cert_dir, what="webhook")
    runner = await start_site(
        application(reviews), address, "webhook", tls.context, reuse_port=True
    )
    endpoints = Endpoints([runner] if runner is not None else [])
    refresher = refresh_forever(tls, check_interval)
    endpoints.tasks.append(asyncio.create_task(refresher, name="skyhook-webhook-tls"))
    return endpoints


class CertificateError(Exception):
    """No serving certificate for the webhooks: the message says why."""


class Certificates:
    """Keeps this replica's serving certificate and the webhook configurations current, and
    says what is missing while something is (the readiness probe)."""

    def __init__(self, kube: AsyncKube, ours: Settings) -> None:
        self.kube = kube
        self.ours = ours
        self.directory = Path(ours.webhook_cert_dir)
        self.problem: str | None = "webhook certificate not checked yet"

    @property
    def names(self) -> list[str]:
        return webhooks.served_names(
            self.ours.webhook_service_name, self.ours.namespace, self.ours.webhook_url
        )

    @property
    def excluded_namespaces(self) -> list[str]:
        """Namespaces the pod image webhook is not called for (out of the cluster; the chart
        sets its own): the operator's, and those the setting lists."""
        return [self.ours.namespace, *self.ours.pod_image_excluded_namespaces.split(",")]

    async def start(self) -> None:
        """Before the server starts: a certificate on disk, or a CertificateError saying
        why there is none."""
        try:
            await self.check()
        except Exception as error:
            raise CertificateError(str(error)) from error
        if webhooks.read_files(self.directory) is None:
            raise CertificateError(
                f"no tls.crt and tls.key in {self.directory}"
                + (
                    " (cert-manager mode: is the certificate Secret mounted there?)"
                    if self.ours.webhook_certs == "cert-manager"
                    else ""
                )
            )

    async def run_forever(self) -> None:
        while True:
            await asyncio.sleep(self.ours.webhook_check_interval)
            try:
                await self.check()
            except Exception as error:
                self.problem = f"webhook certificate check failed: {error}"
                log.warning("%s", self.problem)

    async def check(self) -> None:
        """One round: certificate from the Secret to disk, CA into the configurations. On the
        loop: its work is a few requests and two small file writes; a certificate made or
        read for the first time waits for a child process in a thread (`webhooks.generate`)."""
        if self.ours.webhook_certs == "cert-manager":
            missing = webhooks.read_files(self.directory) is None
            self.problem = f"no tls.crt and tls.key in {self.directory}" if missing else None
            return
        certificate = await webhooks.sync_secret(
            self.kube,
            self.ours.namespace,
            self.ours.webhook_secret_name,
            self.ours.webhook_service_name,
            self.names,
        )
        if webhooks.write_files(self.directory, certificate):
            log.info("webhook certificate written to %s", self.directory)
        excluded = self.excluded_namespaces
        if self.ours.webhook_url:
            if await webhooks.configuration_problem(
                self.kube, certificate.ca, self.ours.webhook_url, excluded
            ):
                await webhooks.apply_configurations(
                    self.kube, self.ours.webhook_url, certificate.ca, excluded
                )
        else:
            await webhooks.set_ca_bundle(self.kube, certificate.ca)
        self.problem = await webhooks.configuration_problem(
            self.kube, certificate.ca, self.ours.webhook_url, excluded
        )
