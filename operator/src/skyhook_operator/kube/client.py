"""The operator's one Kubernetes API client: JSON over one aiohttp session, on one event loop.

Credentials (kubeconfig, the in-cluster service account and its rotating token, client
certificates, TLS) come from kube/credentials.py; requests go through aiohttp, on the loop the
client was first used from (the operator's one loop: every watch, write, review and the Lease
go through this one session). Patches say exactly which patch type they are and answers stay
the dicts the planner's views decode.

`AsyncKube` is the client. Several views of one session differ only in their write fence
(leader election fences the main view; the Lease, access reviews and webhook certificates use
unfenced ones) and share its connections and request counts. The operator calls it only from
its loop. `connect()` gives `Kube`, the same client with a loop of its own in a daemon thread,
for tools and tests that have no loop: each call runs there and the caller waits.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import importlib.metadata
import logging
import math
import platform
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, unquote, urlencode, urlsplit

import aiohttp
import orjson

from skyhook_operator.kube.credentials import Credentials, load
from skyhook_schemas import keys

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
FIELD_MANAGER = "skyhook-operator"

# Connections the session may hold at once: the watches' three long-lived ones, the writer's
# lanes, evictions, Events, the Lease, reviews. A request beyond it waits for a free one.
CONNECTIONS = 64
# A connection refused before anything was sent is tried this often (with a short pause)
# before the caller sees it, as urllib3 did for us before.
CONNECT_RETRIES = 3
# How long a bearer token is used before the credentials are asked again. Asking reads a token
# file or runs an exec plugin's loader, and a token the apiserver refuses (401) is asked again
# at once anyway.
CREDENTIALS_TTL = 30.0
# An answer asking to be tried later (a 429, or a 500-504 with Retry-After) is tried again
# after the seconds it names, at most this often, as client-go does; a longer wait is cut to
# RETRY_AFTER_CAP, and a fenced write waits only while its fence leaves time to send it.
THROTTLED_RETRIES = 10
RETRY_AFTER_CAP = 60.0  # seconds
# Go's names of the machines Python calls otherwise (the User-Agent says GOOS/GOARCH).
_GOARCH = {"x86_64": "amd64", "aarch64": "arm64", "i686": "386", "armv7l": "arm"}

log = logging.getLogger(__name__)

Json = dict[str, Any]
T = TypeVar("T")


class ApiError(Exception):
    """A non-2xx answer: `status` is the HTTP code, `reason` the apiserver's message."""

    def __init__(
        self,
        status: int,
        reason: str,
        method: str = "",
        path: str = "",
        fields: tuple[str, ...] = (),
        *,
        causes: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(f"{method} {path}: {status} {reason}".strip())
        self.status = status
        self.reason = reason
        self.fields = fields  # the fields a 422 (Invalid) names, from the Status's causes
        # Every cause as (type, message): a 429 from a PodDisruptionBudget says so this way.
        self.causes = causes


class NotLeading(ApiError):
    """A write refused before it was sent: this replica does not hold the leader Lease."""

    def __init__(self, method: str, path: str) -> None:
        super().__init__(0, "not the leader: writes are fenced off", method, path)


# A fenced write with less time than this left is not sent: it could not be answered.
_LEAST_WRITE_TIME = 0.01  # seconds


class Unreachable(ConnectionError):
    """No answer: the connection failed, dropped, or the timeout ran out (an OSError, so
    callers that handle network errors catch it)."""


class Paths:
    """The API paths we use."""

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


@functools.cache
def user_agent() -> str:
    """`skyhook-operator/<version> (<os>/<arch>) skyhook/<commit>`, client-go's
    DefaultKubernetesUserAgent format (`<command>/<version> (<GOOS>/<GOARCH>) kubernetes/<short
    commit>`) for this program: the version without any `-suffix`, the commit `unknown` unless
    the package runs from a git checkout."""
    version = importlib.metadata.version("skyhook-operator").split("-", 1)[0] or "unknown"
    machine = platform.machine().lower()
    return (
        f"skyhook-operator/{version} ({sys.platform}/{_GOARCH.get(machine, machine)}) "
        f"skyhook/{_source_commit()}"
    )


def _source_commit() -> str:
    """The checkout's short commit when the package is imported from one, else `unknown`."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short=7", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() or "unknown"


def _retry_after(response: aiohttp.ClientResponse) -> float | None:
    """The seconds an answer asks to be tried again after, as client-go reads them: a 429 or a
    500-504 with a Retry-After of whole seconds; None for any other answer."""
    if response.status != 429 and not 500 <= response.status <= 504:
        return None
    value = response.headers.get("Retry-After", "")
    if not value.isdigit():
        return None
    return min(float(value), RETRY_AFTER_CAP)


def _proxy_and_headers(proxy: str | None) -> tuple[str | None, dict[str, str] | None]:
    """The proxy URL without its user and password, and the Proxy-Authorization they make,
    as Go sends them (aiohttp would leave a URL's user and password out of the CONNECT)."""
    if not proxy:
        return None, None
    parts = urlsplit(proxy)
    if parts.username is None:
        return proxy, None
    bare = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
    pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
    return bare, {"Proxy-Authorization": f"Basic {base64.b64encode(pair).decode()}"}


class _Session:
    """One aiohttp session and the request counts of every view of it. The session is opened
    on the loop of the first request and lives on that loop (aiohttp binds it there)."""

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials
        self.host = credentials.host.rstrip("/")
        self._http: aiohttp.ClientSession | None = None
        self._tls = credentials.tls_context()
        self._counted = threading.Lock()  # the counts are read from threads (telemetry)
        self.requests: Counter[tuple[str, str]] = Counter()  # (verb, resource[/sub])
        self.errors: Counter[tuple[str, str, str]] = Counter()  # (verb, resource, code)
        self._authorization: str | None = None
        self._authorization_until = 0.0  # time.monotonic()
        self._proxy, self._proxy_headers = _proxy_and_headers(credentials.proxy)

    def http(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._tls, limit=CONNECTIONS)
            )
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    def count(self, verb: str, path: str) -> tuple[str, str]:
        what = (verb, resource_of(path))
        with self._counted:
            self.requests[what] += 1
        return what

    def count_error(self, what: tuple[str, str], code: str) -> None:
        with self._counted:
            self.errors[(*what, code)] += 1

    def totals(self) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str, str], int]]:
        with self._counted:
            return dict(self.requests), dict(self.errors)

    def options(self) -> dict[str, Any]:
        """What every request carries besides its headers: the proxy, and the name the
        apiserver's certificate is checked against."""
        options: dict[str, Any] = {"proxy": self._proxy, "proxy_headers": self._proxy_headers}
        if self.credentials.tls_server_name:
            options["server_hostname"] = self.credentials.tls_server_name
        return options

    def headers(self, content_type: str = "application/json") -> dict[str, str]:
        headers = {
            "Accept": "application/json",
            "Content-Type": content_type,
            "User-Agent": user_agent(),
        }
        if not self.credentials.compression:  # the kubeconfig's disable-compression
            headers["Accept-Encoding"] = "identity"
        now = time.monotonic()
        if now >= self._authorization_until:
            # A rotated service-account token or an exec plugin's new one comes from here.
            self._authorization = self.credentials.authorization()
            self._authorization_until = now + CREDENTIALS_TTL
        if self._authorization:
            headers["Authorization"] = self._authorization
        return headers

    def forget_credentials(self) -> None:
        """The apiserver refused the token: ask for the credentials again next time."""
        self._authorization_until = 0.0


class AsyncKube(Paths):
    """JSON requests against one apiserver, on the event loop."""

    def __init__(self, session: _Session) -> None:
        self._session = session
        self._write_time_left: Callable[[], float] = lambda: math.inf

    @property
    def credentials(self) -> Credentials:
        return self._session.credentials

    def unfenced(self) -> AsyncKube:
        """Another view of the same session, without this view's write fence."""
        return AsyncKube(self._session)

    def fence(self, write_time_left: Callable[[], float]) -> None:
        """Bound every request but a GET by `write_time_left()` seconds: refused unsent
        (NotLeading) when none are left, else timed out within them, by this client and by
        the apiserver (its `timeout` parameter), so no write outlives the lease it was sent
        under."""
        self._write_time_left = write_time_left

    def request_counts(self) -> str:
        """What this session asked so far, busiest first (the shutdown log line)."""
        made, _ = self._session.totals()
        ordered = sorted(made.items(), key=lambda item: -item[1])
        return ", ".join(f"{verb} {what} {n}" for (verb, what), n in ordered) or "none"

    def request_totals(self) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str, str], int]]:
        """Requests by (verb, resource) and failed ones by (verb, resource, HTTP status code,
        or `network` when no answer came), counted since the session was opened."""
        return self._session.totals()

    async def close(self) -> None:
        """Close the session's connections (every view's)."""
        await self._session.close()

    async def request(
        self,
        method: str,
        path: str,
        body: object | None = None,
        content_type: str = "application/json",
        *,
        query: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        retries: int = CONNECT_RETRIES,
        throttled_retries: int = THROTTLED_RETRIES,
    ) -> Json:
        """One request, its answer decoded. The whole call takes at most `timeout` per
        attempt; a connection refused before anything was sent is tried `retries` more
        times, an answer with a Retry-After (`_retry_after`) `throttled_retries` more times
        after the time it asks for."""
        text = await self._call(
            method,
            path,
            body,
            content_type,
            query=query,
            timeout=timeout,
            retries=retries,
            throttled_retries=throttled_retries,
        )
        return orjson.loads(text) if text else {}

    async def get_text(self, path: str, timeout: float = 30.0) -> str:
        """A GET of a non-JSON endpoint (the apiserver's /metrics, a pod's log), as text."""
        return await self._call(
            "GET",
            path,
            None,
            "application/json",
            query=None,
            timeout=timeout,
            retries=0,
            throttled_retries=THROTTLED_RETRIES,
        )

    async def _call(
        self,
        method: str,
        path: str,
        body: object | None,
        content_type: str,
        *,
        query: Mapping[str, str] | None,
        timeout: float,
        retries: int,
        throttled_retries: int,
    ) -> str:
        session = self._session
        bounded, query_now = self._bounded(method, path, timeout, query)
        what = session.count(method, path)
        payload = None if body is None else orjson.dumps(body, default=_plain)
        attempt = throttled = 0
        reauthenticated = False
        while True:
            if attempt or throttled or reauthenticated:  # time went by: bound it anew
                bounded, query_now = self._bounded(method, path, timeout, query)
            url = session.host + path + ("?" + urlencode(query_now) if query_now else "")
            try:
                async with session.http().request(
                    method,
                    url,
                    data=payload,
                    headers=session.headers(content_type),
                    timeout=aiohttp.ClientTimeout(total=bounded),
                    **session.options(),
                ) as response:
                    text = await response.text()
            except aiohttp.ClientConnectorError as error:
                if attempt < retries:
                    attempt += 1
                    await asyncio.sleep(0.2 * attempt)
                    continue
                session.count_error(what, "network")
                raise Unreachable(f"{method} {path}: {error}") from error
            except (aiohttp.ClientError, TimeoutError) as error:
                session.count_error(what, "network")
                raise Unreachable(f"{method} {path}: {error or type(error).__name__}") from error
            if response.status == 401 and not reauthenticated:  # an expired token: ask again
                reauthenticated = True
                session.forget_credentials()
                continue
            wait = _retry_after(response)
            if wait is not None and throttled < throttled_retries and self._may_wait(method, wait):
                throttled += 1
                log.info("%s %s: %s, tried again in %g s", method, path, response.status, wait)
                await asyncio.sleep(wait)
                continue
            break
        if response.status >= 300:
            session.count_error(what, str(response.status))
            raise _api_error(response.status, response.reason or "", text, method, path)
        return text

    def _may_wait(self, method: str, seconds: float) -> bool:
        """Whether a request may wait `seconds` and still be sent: a write only while its
        fence leaves time after the wait."""
        return method == "GET" or self._write_time_left() - seconds >= _LEAST_WRITE_TIME

    def _bounded(
        self, method: str, path: str, timeout: float, query: Mapping[str, str] | None
    ) -> tuple[float, Mapping[str, str] | None]:
        """The timeout and query for a request sent now: a write's within the fence's time
        left (NotLeading when there is none)."""
        if method == "GET":
            return timeout, query
        left = self._write_time_left()
        if left < _LEAST_WRITE_TIME:
            raise NotLeading(method, path)
        if left >= timeout:
            return timeout, query
        return left, {**(query or {}), "timeout": f"{int(left * 1000)}ms"}

    async def stream(
        self, path: str, query: Mapping[str, str], read_timeout: float = 330.0
    ) -> AsyncGenerator[tuple[str, Json]]:
        """(type, object) pairs of a watch request, as the apiserver sends them; a connection
        the apiserver drops just ends it (callers watch again)."""
        session = self._session
        url = session.host + path + "?" + urlencode(query)
        what = session.count("WATCH", path)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=read_timeout)
        try:
            async with session.http().get(
                url, headers=session.headers(), timeout=timeout, **session.options()
            ) as response:
                if response.status >= 300:
                    session.count_error(what, str(response.status))
                    if response.status == 401:
                        session.forget_credentials()  # the watch is tried again: ask anew
                    text = await response.text()
                    raise _api_error(response.status, response.reason or "", text, "WATCH", path)
                buffer = b""
                # Chunks, not lines: aiohttp refuses a line over 64 KiB, and a node's object
                # can be longer than that.
                async for chunk in response.content.iter_chunked(65536):
                    lines = (buffer + chunk).split(b"\n")
                    buffer = lines.pop()  # the start of the next event, if any
                    for line in lines:
                        if line.strip():
                            event = orjson.loads(line)
                            yield event["type"], event["object"]
        except aiohttp.ClientPayloadError:
            return
        except (aiohttp.ClientError, TimeoutError) as error:
            session.count_error(what, "network")
            raise Unreachable(f"WATCH {path}: {error or type(error).__name__}") from error


def _plain(value: object) -> object:
    """What orjson cannot write itself: the read-only mappings plans are made of."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def _api_error(status: int, http_reason: str, text: str, method: str, path: str) -> ApiError:
    try:
        answer = orjson.loads(text)
        reason = answer.get("message", text)
        causes = (answer.get("details") or {}).get("causes") or ()
        fields = tuple(str(c["field"]) for c in causes if c.get("field"))
        # A cause's type goes out as "reason" (Go's StatusCause.Type has that JSON name).
        kinds = tuple((str(c.get("reason") or ""), str(c.get("message") or "")) for c in causes)
    except (ValueError, AttributeError, TypeError):
        reason, fields, kinds = text or http_reason, (), ()
    return ApiError(status, reason, method, path, fields, causes=kinds)


class Kube(Paths):
    """The blocking client of tools and tests that have no event loop (`connect`): an
    `AsyncKube` on a loop of its own, in a daemon thread; each call runs there and the caller
    waits for its answer. The operator does not use it."""

    def __init__(self, aio: AsyncKube, loop: asyncio.AbstractEventLoop) -> None:
        self.aio = aio
        self._loop = loop  # the client's own, stopped by `close`

    @property
    def credentials(self) -> Credentials:
        return self.aio.credentials

    def close(self) -> None:
        """Close the session's connections and stop the client's loop."""
        self._wait(self.aio.close())
        self._loop.call_soon_threadsafe(self._loop.stop)

    def request(
        self,
        method: str,
        path: str,
        body: object | None = None,
        content_type: str = "application/json",
        *,
        query: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        retries: int = CONNECT_RETRIES,
        throttled_retries: int = THROTTLED_RETRIES,
    ) -> Json:
        return self._wait(
            self.aio.request(
                method,
                path,
                body,
                content_type,
                query=query,
                timeout=timeout,
                retries=retries,
                throttled_retries=throttled_retries,
            )
        )

    def get_text(self, path: str, timeout: float = 30.0) -> str:
        return self._wait(self.aio.get_text(path, timeout))

    def stream(
        self, path: str, query: Mapping[str, str], read_timeout: float = 330.0
    ) -> Iterator[tuple[str, Json]]:
        events = self.aio.stream(path, query, read_timeout)
        try:
            while True:
                try:
                    yield self._wait(anext(events))
                except StopAsyncIteration:
                    return
        finally:
            self._wait(events.aclose())

    def _wait(self, call: Awaitable[T]) -> T:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            raise RuntimeError("a blocking Kube call on its own event loop would wait forever")
        return asyncio.run_coroutine_threadsafe(_awaited(call), self._loop).result()


async def _awaited(call: Awaitable[T]) -> T:
    return await call


def connect_async(kubeconfig: str | None = None) -> AsyncKube:
    """The client of this process, opened on the loop that first uses it."""
    credentials = load(kubeconfig)
    if not credentials.verify:
        _unverified(credentials.host)
    return AsyncKube(_Session(credentials))


def connect(kubeconfig: str | None = None) -> Kube:
    """A blocking client with an event loop of its own (in a daemon thread), for tools and
    tests that have no loop."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="kube-client", daemon=True).start()
    return Kube(connect_async(kubeconfig), loop)


_warned_hosts: set[str] = set()
_warned = threading.Lock()


def _unverified(host: str) -> None:
    """Say once per process and apiserver that its certificate is not checked."""
    with _warned:
        if host in _warned_hosts:
            return
        _warned_hosts.add(host)
    log.warning(
        "TLS verification is off for %s (insecure-skip-tls-verify): the apiserver's "
        "certificate is not checked",
        host,
    )
