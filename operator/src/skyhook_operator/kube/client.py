"""One Kubernetes API connection per process, built at startup and shared through kopf's memo.

Configuration (kubeconfig, in-cluster service account, TLS, tokens) comes from the official
`kubernetes` client; requests go through its urllib3 pool as plain JSON, so patches say
exactly which patch type they are and responses stay the dicts the planner's views decode.
Called from worker threads (`asyncio.to_thread`): a slow write never stalls kopf's watches.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
from kubernetes import client, config

from skyhook_schemas import keys

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
FIELD_MANAGER = "skyhook-operator"

log = logging.getLogger(__name__)

Json = dict[str, Any]


class ApiError(Exception):
    """A non-2xx answer: `status` is the HTTP code, `reason` the apiserver's message."""

    def __init__(
        self,
        status: int,
        reason: str,
        method: str = "",
        path: str = "",
        fields: tuple[str, ...] = (),
    ) -> None:
        super().__init__(f"{method} {path}: {status} {reason}".strip())
        self.status = status
        self.reason = reason
        self.fields = fields  # the fields a 422 (Invalid) names, from the Status's causes


class NotLeading(ApiError):
    """A write refused before it was sent: this replica does not hold the leader Lease."""

    def __init__(self, method: str, path: str) -> None:
        super().__init__(0, "not the leader: writes are fenced off", method, path)


class Kube:
    """JSON requests against one apiserver, with helpers for the paths we use."""

    def __init__(self, configuration: client.Configuration) -> None:
        self.configuration = configuration
        self.api_client = client.ApiClient(configuration)
        self._pool = self.api_client.rest_client.pool_manager
        self._counted = threading.Lock()
        self._requests: Counter[tuple[str, str]] = Counter()  # (verb, resource[/sub])
        self._errors: Counter[tuple[str, str, str]] = Counter()  # (verb, resource, code)
        self._may_write: Callable[[], bool] = lambda: True

    def fence(self, may_write: Callable[[], bool]) -> None:
        """Refuse every request but a GET (raising NotLeading) while `may_write()` is false."""
        self._may_write = may_write

    def request_counts(self) -> str:
        """What this client asked so far, busiest first (the shutdown log line)."""
        with self._counted:
            counts = self._requests.most_common()
        return ", ".join(f"{verb} {what} {n}" for (verb, what), n in counts) or "none"

    def request_totals(self) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str, str], int]]:
        """Requests by (verb, resource) and failed ones by (verb, resource, HTTP status code,
        or `network` when no answer came), counted since the client was built."""
        with self._counted:
            return dict(self._requests), dict(self._errors)

    def _count(self, verb: str, path: str) -> tuple[str, str]:
        what = (verb, resource_of(path))
        with self._counted:
            self._requests[what] += 1
        return what

    def _count_error(self, what: tuple[str, str], code: str) -> None:
        with self._counted:
            self._errors[(*what, code)] += 1

    def request(
        self,
        method: str,
        path: str,
        body: object | None = None,
        content_type: str = "application/json",
        *,
        query: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        retries: int | None = None,
    ) -> Json:
        """One request; `retries` (default: urllib3's three) bounds how often a failed
        connection or read is tried again, so `retries=0` bounds the whole call by `timeout`
        (once to connect, once to read)."""
        if method != "GET" and not self._may_write():
            raise NotLeading(method, path)
        url = self.configuration.host.rstrip("/") + path
        if query:
            url += "?" + urlencode(query)
        what = self._count(method, path)
        headers = self._headers(content_type)
        payload = None if body is None else json.dumps(body).encode()
        try:
            response = self._pool.request(
                method,
                url,
                body=payload,
                headers=headers,
                timeout=timeout,
                **({} if retries is None else {"retries": urllib3.Retry(retries)}),
            )
        except urllib3.exceptions.HTTPError:
            self._count_error(what, "network")
            raise
        data = response.data.decode() if response.data else ""
        if response.status >= 300:
            self._count_error(what, str(response.status))
            try:
                answer = json.loads(data)
                reason = answer.get("message", data)
                causes = (answer.get("details") or {}).get("causes") or ()
                fields = tuple(str(c["field"]) for c in causes if c.get("field"))
            except (ValueError, AttributeError, TypeError):
                reason, fields = data or str(response.reason), ()
            raise ApiError(response.status, reason, method, path, fields)
        return json.loads(data) if data else {}

    def get_text(self, path: str) -> str:
        """A GET of a non-JSON endpoint (the apiserver's /metrics), as text."""
        url = self.configuration.host.rstrip("/") + path
        response = self._pool.request("GET", url, headers=self._headers(), timeout=30.0)
        if response.status >= 300:
            raise ApiError(response.status, response.data.decode(errors="replace"), "GET", path)
        return str(response.data.decode())

    def stream(
        self, path: str, query: Mapping[str, str], read_timeout: float = 330.0
    ) -> Iterator[tuple[str, Json]]:
        """(type, object) pairs of a watch request, as the apiserver sends them."""
        url = self.configuration.host.rstrip("/") + path + "?" + urlencode(query)
        what = self._count("WATCH", path)
        try:
            response = self._pool.request(
                "GET",
                url,
                headers=self._headers(),
                preload_content=False,
                timeout=urllib3.Timeout(connect=10.0, read=read_timeout),
            )
        except urllib3.exceptions.HTTPError:
            self._count_error(what, "network")
            raise
        try:
            if response.status >= 300:
                self._count_error(what, str(response.status))
                raise ApiError(
                    response.status, response.data.decode(errors="replace"), "WATCH", path
                )
            buffer = b""
            for chunk in _chunks(response):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        event = json.loads(line)
                        yield event["type"], event["object"]
        finally:
            response.release_conn()

    def _headers(self, content_type: str = "application/json") -> dict[str, str]:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        token = self.configuration.get_api_key_with_prefix(
            "BearerToken"
        ) or self.configuration.get_api_key_with_prefix("authorization")
        if token:
            headers["Authorization"] = token
        return headers

    # --- paths --------------------------------------------------------------------------------

    @staticmethod
    def node_path(name: str, subresource: str = "") -> str:
        return f"/api/v1/nodes/{quote(name)}" + (f"/{subresource}" if subresource else "")

    @staticmethod
    def namespaced_path(kind: str, namespace: str, name: str = "", subresource: str = "") -> str:
        path = f"/api/v1/namespaces/{quote(namespace)}/{kind}"
        if name:
            path += f"/{quote(name)}"
        return path + (f"/{subresource}" if subresource else "")

    @staticmethod
    def skyhook_path(name: str = "", subresource: str = "") -> str:
        path = f"/apis/{keys.GROUP}/{keys.VERSION}/{keys.PLURAL}"
        if name:
            path += f"/{quote(name)}"
        return path + (f"/{subresource}" if subresource else "")

    @staticmethod
    def policy_path(name: str = "") -> str:
        path = f"/apis/{keys.GROUP}/{keys.VERSION}/{keys.POLICY_PLURAL}"
        return path + (f"/{quote(name)}" if name else "")


def resource_of(path: str) -> str:
    """`/api/v1/namespaces/ns/pods/p/status` -> `pods/status`; `/apis/g/v/things` -> `things`."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if parts[:1] == ["namespaces"] and len(parts) > 2:
        parts = parts[2:]
    return "/".join(parts[:1] + parts[2:3]) or path


def connect(kubeconfig: str | None = None, pool_size: int = 32) -> Kube:
    """A client from `kubeconfig`, `$KUBECONFIG`, the in-cluster service account, or ~/.kube."""
    configuration = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        config.load_kube_config(config_file=path, client_configuration=configuration)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)
    else:
        config.load_kube_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = pool_size
    if not configuration.verify_ssl:
        _unverified(configuration.host)
    return Kube(configuration)


_warned_hosts: set[str] = set()
_warned = threading.Lock()


def _unverified(host: str) -> None:
    """Say once per process and apiserver that its certificate is not checked, instead of
    urllib3's InsecureRequestWarning on every request: Python shows a warning once per call
    site only until any code changes the warning filters, which libraries do all the time,
    so one 1,000-node run printed it 10,984 times."""
    warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    with _warned:
        if host in _warned_hosts:
            return
        _warned_hosts.add(host)
    log.warning(
        "TLS verification is off for %s (insecure-skip-tls-verify): the apiserver's "
        "certificate is not checked",
        host,
    )


def _chunks(response: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    """The body of a watch; a connection the apiserver drops just ends it (callers re-watch)."""
    try:
        yield from response.stream(65536)
    except urllib3.exceptions.ProtocolError:
        return
