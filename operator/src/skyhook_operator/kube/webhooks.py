"""The admission webhooks' plumbing: which webhooks exist, their configurations, and the
serving certificate.

Certificates come from one of two places:
- `operator`: a Secret in the operator's namespace (`ca.crt`, `tls.crt`, `tls.key`) that any
  replica creates when it is missing and replaces when it is due (7 days before expiry, or when
  the names it must cover changed). Creation and replacement are conditional (create fails on
  an existing Secret, replace carries the resourceVersion read), so replicas racing to do it
  agree on one. Every replica copies the Secret to its certificate directory, where the webhook
  server picks up a change within a minute, and puts the CA into the webhook configurations.
  A renewed CA bundle keeps the previous CA after the new one, so replicas still serving the
  old certificate stay trusted until they reload.
- `cert-manager`: the chart mounts cert-manager's Secret at the certificate directory and
  cert-manager's CA injector fills the configurations; the operator only reads the files.

The round is a few requests through the operator's client, so it runs on the event loop like
every other caller of the client. The X.509 work (make a certificate, read one's expiry and
names) runs in a child process (`skyhook_operator/certificates.py`), started from a thread
when a certificate is new to this process: at start, and about once a year after.

Configurations: in a cluster the chart creates them (pointing at the webhook Service) and the
operator only sets their CA bundle. Out of the cluster (`webhook_url` set: the sandbox, tests,
a laptop) the operator applies them itself, pointing the apiserver at that URL.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from skyhook_operator.kube.client import (
    APPLY_PATCH,
    FIELD_MANAGER,
    JSON_PATCH,
    ApiError,
    AsyncKube,
)
from skyhook_planner.model.carryover import theirs
from skyhook_planner.model.imagecompat import ENABLED_LABEL
from skyhook_schemas import keys

log = logging.getLogger(__name__)

VALIDATING_CONFIGURATION = "skyhook-operator-validating-webhook"
MUTATING_CONFIGURATION = "skyhook-operator-mutating-webhook"
ADMISSION_API = "/apis/admissionregistration.k8s.io/v1"
EXPIRATION_ANNOTATION = f"{keys.GROUP}/expiration"
SERVICE_ANNOTATION = f"{keys.GROUP}/service"
RENEW_BEFORE = dt.timedelta(days=7)
# The label the apiserver puts on every namespace, holding its name.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class Webhook:
    """One webhook: its name in the configuration, the URL path it is served on, and what it is
    called for."""

    name: str
    path: str
    group: str
    version: str
    plural: str
    operations: tuple[str, ...]
    mutating: bool
    # Only objects with these labels are sent (the apiserver filters): an optional feature
    # must not put every pod create behind our webhook.
    object_labels: tuple[tuple[str, str], ...] = ()
    # Objects in the excluded namespaces are never sent (namespaceSelector): a webhook any
    # pod may ask for stays off the system namespaces and the operator's own.
    skips_namespaces: bool = False
    # Only requests for which this condition (a name, a CEL expression) holds are sent.
    sent_when: tuple[str, str] | None = None
    # Fail: nothing passes unchecked while the operator is down. Ignore: a check that must
    # never stand between a user and a deletion.
    failure_policy: str = "Fail"


# Named after the group the operator speaks, as upstream names them: the apiserver's denial
# reads `admission webhook "validate-<group>" denied the request`.
VALIDATE_SCR = f"validate-{keys.GROUP}"
MUTATE_SCR = f"mutate-{keys.GROUP}"
VALIDATE_POLICY = "validate-deploymentpolicy.nvidia.com"
MUTATE_POLICY = "mutate-deploymentpolicy.nvidia.com"
MUTATE_POD_IMAGE = f"mutate-pod-image.{keys.GROUP}"
# The other API group's objects: validated as ours are (one that is invalid could never be
# carried over), and read-only once carried over (model/carryover.py).
_OTHER_KIND, _OTHER_PLURAL, _OTHER_SINGULAR = keys.KINDS[keys.OTHER_GROUP]
FREEZE_OTHER_SCR = f"validate-readonly.{keys.OTHER_GROUP}"
FREEZE_OTHER_POLICY = f"validate-readonly-deploymentpolicy.{keys.OTHER_GROUP}"
VALIDATE_POLICY_DELETE = "validate-deploymentpolicy-delete.nvidia.com"
_PATH_GROUP = f"{keys.GROUP.replace('.', '-')}-{keys.VERSION}"
_OTHER_PATH_GROUP = f"{keys.OTHER_GROUP.replace('.', '-')}-{keys.VERSION}"

# The break-glass rule: the apiserver calls the Skyhook and policy webhooks only for a create or
# an update that changes `spec`, which is all they check (an unchanged spec is admitted as it
# is). So the pause and disable annotations, labels and finalizers can be written while the
# operator is down, and deletions go through (the policy delete check fails open).
# Status writes go to the status subresource, which no webhook's rules name.
_SPEC_CHANGED = (
    "request.operation != 'UPDATE' || has(object.spec) != has(oldObject.spec)"
    " || (has(object.spec) && object.spec != oldObject.spec)"
)
SPEC_CHANGED = ("spec-changed", _SPEC_CHANGED)


def _annotation(obj: str, key: str) -> str:
    """CEL: annotation `key` of `obj`, null when it has none."""
    annotations = f"{obj}.metadata.annotations"
    return f"(has({annotations}) && '{key}' in {annotations} ? {annotations}['{key}'] : null)"


# The other group's objects once carried over: their pause and disable annotations are frozen
# too (model/carryover.py frozen_edit), so a change to either is still sent.
SPEC_OR_OTHER_SWITCHES_CHANGED = (
    "spec-or-switch-changed",
    _SPEC_CHANGED
    + "".join(
        f" || {_annotation('object', key)} != {_annotation('oldObject', key)}"
        for key in (theirs(keys.PAUSE_ANNOTATION), theirs(keys.DISABLE_ANNOTATION))
    ),
)

WEBHOOKS = (
    Webhook(
        VALIDATE_SCR,
        f"/validate-{_PATH_GROUP}-{keys.SINGULAR}",
        keys.GROUP,
        keys.VERSION,
        keys.PLURAL,
        ("CREATE", "UPDATE"),
        mutating=False,
        sent_when=SPEC_CHANGED,
    ),
    Webhook(
        VALIDATE_POLICY,
        f"/validate-{_PATH_GROUP}-deploymentpolicy",
        keys.GROUP,
        keys.VERSION,
        keys.POLICY_PLURAL,
        ("CREATE", "UPDATE"),
        mutating=False,
        sent_when=SPEC_CHANGED,
    ),
    Webhook(
        VALIDATE_POLICY_DELETE,
        f"/validate-{_PATH_GROUP}-deploymentpolicy-delete",
        keys.GROUP,
        keys.VERSION,
        keys.POLICY_PLURAL,
        ("DELETE",),
        mutating=False,
        failure_policy="Ignore",
    ),
    Webhook(
        FREEZE_OTHER_SCR,
        f"/validate-readonly-{_OTHER_PATH_GROUP}-{_OTHER_SINGULAR}",
        keys.OTHER_GROUP,
        keys.VERSION,
        _OTHER_PLURAL,
        ("CREATE", "UPDATE"),
        mutating=False,
        sent_when=SPEC_OR_OTHER_SWITCHES_CHANGED,
    ),
    Webhook(
        FREEZE_OTHER_POLICY,
        f"/validate-readonly-{_OTHER_PATH_GROUP}-deploymentpolicy",
        keys.OTHER_GROUP,
        keys.VERSION,
        keys.POLICY_PLURAL,
        ("CREATE", "UPDATE"),
        mutating=False,
        sent_when=SPEC_OR_OTHER_SWITCHES_CHANGED,
    ),
    Webhook(
        MUTATE_SCR,
        f"/mutate-{_PATH_GROUP}-{keys.SINGULAR}",
        keys.GROUP,
        keys.VERSION,
        keys.PLURAL,
        ("CREATE", "UPDATE"),
        mutating=True,
        sent_when=SPEC_CHANGED,
    ),
    Webhook(
        MUTATE_POLICY,
        f"/mutate-{_PATH_GROUP}-deploymentpolicy",
        keys.GROUP,
        keys.VERSION,
        keys.POLICY_PLURAL,
        ("CREATE", "UPDATE"),
        mutating=True,
        sent_when=SPEC_CHANGED,
    ),
    Webhook(
        MUTATE_POD_IMAGE,
        "/mutate-v1-pod-image",
        "",
        "v1",
        "pods",
        ("CREATE",),
        mutating=True,
        object_labels=((ENABLED_LABEL, "true"),),
        skips_namespaces=True,
    ),
)


WEBHOOK_NAMES = frozenset(w.name for w in WEBHOOKS)


# --- certificates -----------------------------------------------------------------------------


@dataclass(frozen=True)
class CertificateFacts:
    """What decides a renewal: when the server certificate expires, and the names it covers."""

    not_after: dt.datetime
    names: frozenset[str]

    def due(self, names: Sequence[str], now: dt.datetime) -> bool:
        return self.not_after - RENEW_BEFORE <= now or not set(names) <= self.names


@dataclass(frozen=True)
class ServingCertificate:
    """PEM texts: the CA bundle clients trust, the server's certificate and its key."""

    ca: bytes
    cert: bytes
    key: bytes

    @classmethod
    def from_secret(cls, secret: dict[str, Any]) -> ServingCertificate | None:
        data = secret.get("data") or {}
        try:
            return cls(*(base64.b64decode(data[k]) for k in ("ca.crt", "tls.crt", "tls.key")))
        except (KeyError, ValueError):
            return None

    def secret_data(self) -> dict[str, str]:
        return {
            k: base64.b64encode(v).decode()
            for k, v in (("ca.crt", self.ca), ("tls.crt", self.cert), ("tls.key", self.key))
        }

    @property
    def not_after(self) -> dt.datetime:
        facts = read_facts(self.cert)
        if facts is None:
            raise CertificateToolError("the server certificate is not a PEM certificate")
        return facts.not_after

    def due(self, names: Sequence[str], now: dt.datetime) -> bool:
        """Whether to replace it: it expires within RENEW_BEFORE, misses one of `names`, or
        is not a certificate at all."""
        facts = read_facts(self.cert)
        return facts is None or facts.due(names, now)


class CertificateToolError(RuntimeError):
    """The certificate child process failed, or a certificate could not be read."""


# The X.509 work runs in a child process (`skyhook_operator/certificates.py` says why). What
# it read of each certificate is kept by the certificate's text: a round that finds the same
# certificate again starts no child.
_CERTIFICATE_TOOL = "skyhook_operator.certificates"
_TOOL_TIMEOUT = 60.0  # seconds: a Python start and two key pairs, on a loaded node
_KNOWN_FACTS: dict[bytes, CertificateFacts | None] = {}
_KNOWN_UP_TO = 8


def _run_tool(command: str, request: dict[str, Any]) -> dict[str, Any]:
    try:
        done = subprocess.run(
            [sys.executable, "-m", _CERTIFICATE_TOOL, command],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            timeout=_TOOL_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise CertificateToolError(f"{_CERTIFICATE_TOOL} {command}: {error}") from error
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise CertificateToolError(
            f"{_CERTIFICATE_TOOL} {command} exited with {done.returncode}: {last}"
        )
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def _remember(cert: bytes, answer: dict[str, Any]) -> CertificateFacts | None:
    facts = (
        None
        if "error" in answer
        else CertificateFacts(
            dt.datetime.fromisoformat(answer["not_after"]), frozenset(answer["names"])
        )
    )
    _KNOWN_FACTS[cert] = facts
    while len(_KNOWN_FACTS) > _KNOWN_UP_TO:
        del _KNOWN_FACTS[next(iter(_KNOWN_FACTS))]
    return facts


def read_facts(cert: bytes) -> CertificateFacts | None:
    """When `cert` expires and what it covers; None when it is not a certificate. Blocks for
    the child process (about 0.2 s) the first time a certificate is seen."""
    if cert in _KNOWN_FACTS:
        return _KNOWN_FACTS[cert]
    return _remember(cert, _run_tool("read", {"cert": cert.decode(errors="replace")}))


def generate(
    names: Sequence[str], now: dt.datetime, previous_ca: bytes = b""
) -> ServingCertificate:
    """A new CA and a server certificate for `names` (DNS names or IP addresses), both valid
    for a year; `previous_ca` (its first certificate) stays in the bundle after the new CA.
    Blocks for the child process, about 0.2 s."""
    answer = _run_tool(
        "make", {"names": list(names), "now": now.isoformat(), "previous_ca": previous_ca.decode()}
    )
    made = ServingCertificate(
        answer["ca"].encode(), answer["cert"].encode(), answer["key"].encode()
    )
    _remember(made.cert, answer)
    return made


def served_names(service: str, namespace: str, url: str) -> list[str]:
    """The names the server certificate must carry: the URL's host when the apiserver calls
    a URL, else the Service's in-cluster names."""
    if url:
        return [urlsplit(url).hostname or ""]
    return [f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


async def sync_secret(
    kube: AsyncKube, namespace: str, name: str, service: str, names: Sequence[str]
) -> ServingCertificate:
    """The serving certificate in Secret `name`, created or renewed first when it is missing
    or due. Conditional writes (a create, a patch testing the resourceVersion read): when
    another replica got there first, its certificate wins."""
    path = kube.namespaced_path("secrets", namespace, name)
    now = dt.datetime.now(dt.UTC)
    try:
        secret = await kube.request("GET", path)
    except ApiError as error:
        if error.status != 404:
            raise
        secret = None
    current = ServingCertificate.from_secret(secret) if secret else None
    # The child process behind a certificate new to this process, and behind a new one, takes
    # a fraction of a second: off the loop. A known certificate is answered on it (a worker
    # thread started for nothing would keep a malloc arena of its own).
    if current is not None:
        if current.cert in _KNOWN_FACTS:
            due = current.due(names, now)
        else:
            due = await asyncio.to_thread(current.due, names, now)
        if not due:
            return current
    fresh = await asyncio.to_thread(generate, names, now, current.ca if current else b"")
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {
                EXPIRATION_ANNOTATION: fresh.not_after.strftime("%Y-%m-%dT%H:%M:%SZ"),
                SERVICE_ANNOTATION: service,
            },
        },
        "data": fresh.secret_data(),
    }
    try:
        if secret is None:
            body["type"] = "kubernetes.io/tls"
            await kube.request("POST", kube.namespaced_path("secrets", namespace), body)
        else:  # only if nobody renewed it since we read it
            version = secret["metadata"]["resourceVersion"]
            ops = [{"op": "test", "path": "/metadata/resourceVersion", "value": version}]
            ops += [
                {"op": "add", "path": "/data", "value": body["data"]},
                {
                    "op": "add",
                    "path": "/metadata/annotations",
                    "value": body["metadata"]["annotations"],
                },
            ]
            await kube.request("PATCH", path, ops, JSON_PATCH)
    except ApiError as error:
        if error.status not in (404, 409, 422):  # 422: the test failed, another replica won
            raise
        log.info("webhook certificate Secret %s/%s was written by another replica", namespace, name)
        return await sync_secret(kube, namespace, name, service, names)
    log.info(
        "webhook certificate %s for %s, valid until %s",
        "created" if secret is None else "renewed",
        ", ".join(names),
        fresh.not_after.isoformat(),
    )
    return fresh


def write_files(directory: Path, certificate: ServingCertificate) -> bool:
    """Write `tls.crt` and `tls.key` (readable by the owner only) when they differ; each file
    is created private (never readable by others, not even before its first byte) and
    replaced in one rename, so the server never reads half a file. True when written."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    changed = False
    for file_name, content in (("tls.crt", certificate.cert), ("tls.key", certificate.key)):
        target = directory / file_name
        if target.exists() and target.read_bytes() == content:
            continue
        scratch = directory / f".{file_name}.new"
        scratch.unlink(missing_ok=True)  # left by a process stopped half-way
        handle = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(handle, "wb") as file:
            file.write(content)
        scratch.replace(target)
        changed = True
    return changed


def read_files(directory: Path) -> tuple[bytes, bytes] | None:
    try:
        return (directory / "tls.crt").read_bytes(), (directory / "tls.key").read_bytes()
    except OSError:
        return None


# --- configurations ---------------------------------------------------------------------------


def _kind_path(mutating: bool) -> str:
    kind = "mutatingwebhookconfigurations" if mutating else "validatingwebhookconfigurations"
    return f"{ADMISSION_API}/{kind}"


def namespace_selector(excluded: Iterable[str]) -> dict[str, Any]:
    """The selector of every namespace but `excluded` (by the name label the apiserver puts on
    each namespace)."""
    names = sorted({name.strip() for name in excluded if name.strip()})
    return {
        "matchExpressions": [{"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": names}]
    }


def configuration(
    mutating: bool, url: str, ca: bytes, excluded_namespaces: Iterable[str] = ()
) -> dict[str, Any]:
    """A webhook configuration with our webhooks of one kind, calling `url` + each path; the
    webhooks that skip namespaces skip `excluded_namespaces`."""
    name = MUTATING_CONFIGURATION if mutating else VALIDATING_CONFIGURATION
    entries = []
    for hook in WEBHOOKS:
        if hook.mutating != mutating:
            continue
        entry: dict[str, Any] = {
            "name": hook.name,
            "clientConfig": {
                "url": url.rstrip("/") + hook.path,
                "caBundle": base64.b64encode(ca).decode(),
            },
            "rules": [
                {
                    "apiGroups": [hook.group],
                    "apiVersions": [hook.version],
                    "operations": list(hook.operations),
                    "resources": [hook.plural],
                    "scope": "*",
                }
            ],
            "failurePolicy": hook.failure_policy,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "matchPolicy": "Equivalent",
            "timeoutSeconds": 10,
        }
        if mutating:
            entry["reinvocationPolicy"] = "Never"
        if hook.object_labels:
            entry["objectSelector"] = {"matchLabels": dict(hook.object_labels)}
        if hook.skips_namespaces:
            entry["namespaceSelector"] = namespace_selector(excluded_namespaces)
        if hook.sent_when:
            condition, expression = hook.sent_when
            entry["matchConditions"] = [{"name": condition, "expression": expression}]
        entries.append(entry)
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration" if mutating else "ValidatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER}},
        "webhooks": entries,
    }


async def apply_configurations(
    kube: AsyncKube, url: str, ca: bytes, excluded_namespaces: Iterable[str] = ()
) -> None:
    """Create or update both configurations to call `url` (out-of-cluster operation)."""
    for mutating in (False, True):
        body = configuration(mutating, url, ca, excluded_namespaces)
        await kube.request(
            "PATCH",
            f"{_kind_path(mutating)}/{body['metadata']['name']}",
            body,
            APPLY_PATCH,
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
        )


async def configuration_problem(
    kube: AsyncKube, ca: bytes, url: str = "", excluded_namespaces: Iterable[str] = ()
) -> str | None:
    """Why the apiserver cannot call us yet: a configuration missing, one of our webhooks
    missing from it or in it without our CA (or, with `url`, calling another address or
    skipping other namespaces than `excluded_namespaces`); None when all is set."""
    skipped = namespace_selector(excluded_namespaces)
    wanted = base64.b64encode(ca).decode()
    for mutating in (False, True):
        name = MUTATING_CONFIGURATION if mutating else VALIDATING_CONFIGURATION
        kind = "Mutating" if mutating else "Validating"
        try:
            found = await kube.request("GET", f"{_kind_path(mutating)}/{name}")
        except ApiError as error:
            if error.status == 404:
                return (
                    f"{kind}WebhookConfiguration {name!r} not found: install the chart with "
                    "webhooks on, or run with webhooks off (ENABLE_WEBHOOKS=false)"
                )
            raise
        for entry in found.get("webhooks") or ():
            if entry.get("name") not in WEBHOOK_NAMES:
                continue
            client = entry.get("clientConfig") or {}
            if client.get("caBundle") != wanted:
                return (
                    f"{kind}WebhookConfiguration {name!r}: webhook {entry['name']!r} lacks our CA"
                )
            if url and client.get("url") != url.rstrip("/") + _path(entry):
                return f"{kind}WebhookConfiguration {name!r}: webhook {entry['name']!r} calls another URL"
            if url and _hook(entry).skips_namespaces and entry.get("namespaceSelector") != skipped:
                return (
                    f"{kind}WebhookConfiguration {name!r}: webhook {entry['name']!r} skips "
                    "other namespaces"
                )
        present = {entry.get("name") for entry in found.get("webhooks") or ()}
        missing = sorted(
            w.name for w in WEBHOOKS if w.mutating == mutating and w.name not in present
        )
        if missing:
            return f"{kind}WebhookConfiguration {name!r} lacks webhook(s) {', '.join(missing)}"
    return None


def _hook(entry: dict[str, Any]) -> Webhook:
    """Our webhook of an entry, found by its name."""
    return next(w for w in WEBHOOKS if w.name == entry.get("name"))


def _path(entry: dict[str, Any]) -> str:
    """Our path for a webhook entry, found by its name."""
    return _hook(entry).path


async def set_ca_bundle(kube: AsyncKube, ca: bytes) -> None:
    """Put our CA into each of our webhooks in the chart's configurations (in-cluster)."""
    wanted = base64.b64encode(ca).decode()
    for mutating in (False, True):
        name = MUTATING_CONFIGURATION if mutating else VALIDATING_CONFIGURATION
        path = f"{_kind_path(mutating)}/{name}"
        try:
            found = await kube.request("GET", path)
        except ApiError as error:
            if error.status == 404:
                continue  # reported by configuration_problem
            raise
        ops = [
            {"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": wanted}
            for index, entry in enumerate(found.get("webhooks") or ())
            if entry.get("name") in WEBHOOK_NAMES
            and (entry.get("clientConfig") or {}).get("caBundle") != wanted
        ]
        if ops:
            test = {"op": "test", "path": "/metadata/resourceVersion"}
            test["value"] = found["metadata"]["resourceVersion"]
            await kube.request("PATCH", path, [test, *ops], JSON_PATCH)
            log.info("CA bundle set on %d webhook(s) of %s", len(ops), name)
