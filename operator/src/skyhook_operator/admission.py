"""Admission webhooks, wired into kopf: every replica serves them, leader or not.

The decisions are core/admission.py's; this module hands kopf's requests to them (with the
DeploymentPolicies and Skyhooks from the same indexes the planner reads) and keeps the serving
certificate and the webhook configurations current (kube/webhooks.py). Handlers are only
registered when webhooks are on: kopf refuses to start with admission handlers and no server.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonpatch
import kopf
from aiohttp import web

from skyhook_operator.kube import webhooks
from skyhook_operator.kube.artifacts import pod_image_patch
from skyhook_operator.kube.client import ApiError, AsyncKube
from skyhook_operator.settings import Settings
from skyhook_planner import admission
from skyhook_planner.model.spec import normalising_patch

log = logging.getLogger(__name__)


def register(registry: kopf.OperatorRegistry | None = None) -> None:
    """Register the admission handlers, one per webhook, under its path as handler id (kopf
    serves each on `/<id>`)."""
    handlers: dict[str, Callable[..., Any]] = {
        "validate-skyhook.nvidia.com": validate_skyhook,
        "validate-deploymentpolicy.nvidia.com": validate_policy,
        "mutate-skyhook.nvidia.com": normalise_skyhook,
        "mutate-deploymentpolicy.nvidia.com": default_policy,
        "mutate-pod-image.skyhook.nvidia.com": choose_pod_image,
    }
    for hook in webhooks.WEBHOOKS:
        decorator = kopf.on.mutate if hook.mutating else kopf.on.validate
        decorator(
            hook.group,
            hook.version,
            hook.plural,
            id=hook.handler_id,
            operations=list(hook.operations),  # type: ignore[arg-type]
            labels=dict(hook.object_labels) or None,
            registry=registry,
        )(handlers[hook.name])


def _deny(verdict: admission.Verdict, warnings: list[str]) -> None:
    warnings.extend(verdict.warnings)
    if not verdict.allowed:
        raise kopf.AdmissionError(verdict.message, code=403)


def _dict(body: kopf.Body | None) -> dict[str, Any] | None:
    return None if body is None else dict(body)


async def validate_skyhook(
    *,
    operation: str,
    new: kopf.Body | None,
    old: kopf.Body | None,
    warnings: list[str],
    policy_index: kopf.Index[Any, Any],
    memo: kopf.Memo,
    **_: Any,
) -> None:
    policies = {name for (_, name) in policy_index}
    spec = new.get("spec") if new is not None else None
    named = spec.get("deploymentPolicy") if isinstance(spec, dict) else None
    # A policy created a moment ago (both applied together) may not be in the index yet: ask.
    if (
        isinstance(named, str)
        and named
        and named not in policies
        and await _policy_exists(memo.aio, named)
    ):
        policies.add(named)
    _deny(admission.review_skyhook(operation, _dict(new), _dict(old), policies), warnings)


async def validate_policy(
    *,
    operation: str,
    new: kopf.Body | None,
    old: kopf.Body | None,
    warnings: list[str],
    memo: kopf.Memo,
    **_: Any,
) -> None:
    body = old if old is not None else new
    name = str(body.metadata.name or "") if body is not None else ""
    referenced_by: list[str] = []
    if operation == "DELETE":
        # Listed, not read from the index: a Skyhook created a moment ago must count.
        try:
            referenced_by = await _skyhooks_naming(memo.aio, name)
        except (ApiError, OSError) as error:
            raise kopf.AdmissionError(
                f"cannot check which Skyhooks use DeploymentPolicy {name!r}: {error}", code=503
            ) from error
    _deny(admission.review_policy(operation, _dict(new), _dict(old), referenced_by), warnings)


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


async def normalise_skyhook(new: kopf.Body | None, patch: kopf.Patch, **_: Any) -> None:
    """Store the spec in the form it is read in (each package named by its key, images without
    a tag): as upstream's, a Skyhook created through the webhook keeps generation 1, and the
    operator's first write (adding its finalizer) has nothing left to normalise."""
    spec = (_dict(new) or {}).get("spec")
    normalised = normalising_patch(spec) if isinstance(spec, dict) else None
    if normalised is not None:
        patch["spec"] = normalised


async def default_policy(new: kopf.Body | None, patch: kopf.Patch, **_: Any) -> None:
    defaulted = admission.default_policy(_dict(new))
    if defaulted is not None:
        patch["spec"] = defaulted


async def choose_pod_image(
    new: kopf.Body | None,
    patch: kopf.Patch,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    """Replace a labelled pod's placeholder image with the candidate its node flavour matches
    (docs/image-selection.md); refuse, saying why, when none can be chosen."""
    node_index = memo.watches["node_index"].index  # the operator's own node watch
    node_labels = [item.view.labels for store in node_index.values() for item in store if item.view]
    decision = await pod_image_patch(memo.artifact_fetcher, _dict(new) or {}, node_labels)
    if not decision.allowed:
        raise kopf.AdmissionError(decision.refusal, code=403)
    operations = [dict(op) for op in decision.patch]
    patch.fns.append(lambda body: jsonpatch.apply_patch(body, operations, in_place=True))


# The largest admission review read. The apiserver takes objects of up to 3 MiB and an update's
# review carries two (new and old); aiohttp's default of 1 MiB answered a large Skyhook with
# 413, so kubectl showed a failed webhook call instead of the field that is too large.
MAX_REVIEW_BYTES = 8 * 1024 * 1024


class _WebhookServer(kopf.WebhookServer):
    """kopf's webhook server, reading reviews of up to MAX_REVIEW_BYTES."""

    @staticmethod
    async def _serve(fn: Any, request: web.Request) -> web.Response:
        larger = request.clone(client_max_size=MAX_REVIEW_BYTES)
        return await kopf.WebhookServer._serve(fn, larger)


def server(ours: Settings) -> kopf.WebhookServer:
    """kopf's HTTPS server on `webhook_port`, with the certificate files in `webhook_cert_dir`
    (it restarts itself when they change)."""
    bind = ours.webhook_port.bind
    assert bind is not None  # refused by the settings
    host, port = bind
    directory = Path(ours.webhook_cert_dir)
    return _WebhookServer(
        addr=host or None,
        port=port,
        certfile=str(directory / "tls.crt"),
        pkeyfile=str(directory / "tls.key"),
        file_check_interval=5.0,
    )


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

    async def start(self) -> None:
        """Before the server starts: a certificate on disk, or a PermanentError saying why
        there is none."""
        try:
            await self.check()
        except Exception as error:
            raise kopf.PermanentError(f"admission webhooks: {error}") from error
        if webhooks.read_files(self.directory) is None:
            raise kopf.PermanentError(
                f"admission webhooks: no tls.crt and tls.key in {self.directory}"
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
        loop: its work is a few requests, two small file writes and, when due, a key pair
        (`webhooks.generate`, under a millisecond)."""
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
        if self.ours.webhook_url:
            if await webhooks.configuration_problem(
                self.kube, certificate.ca, self.ours.webhook_url
            ):
                await webhooks.apply_configurations(
                    self.kube, self.ours.webhook_url, certificate.ca
                )
        else:
            await webhooks.set_ca_bundle(self.kube, certificate.ca)
        self.problem = await webhooks.configuration_problem(
            self.kube, certificate.ca, self.ours.webhook_url
        )
