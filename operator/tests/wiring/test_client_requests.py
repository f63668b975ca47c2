"""What the operator's API client sends and honours, seen by a stand-in apiserver: the
User-Agent client-go's format gives it, a Retry-After waited out a bounded number of times (and
never past a fenced write's time), the kubeconfig's tls-server-name and proxy-url, and
HTTPS_PROXY / NO_PROXY as Go reads them, through a CONNECT proxy that records where it was
asked to go."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import itertools
import json
import platform
import select
import socket
import socketserver
import ssl
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from skyhook_operator.kube import client, credentials, drain, webhooks
from skyhook_operator.kube.client import ApiError, Unreachable, connect, connect_async
from skyhook_operator.kube.credentials import CredentialsError
from skyhook_operator.store import Key
from skyhook_planner.model.actions import EvictPod

NAME = "apiserver.test"  # a name no resolver knows: only the proxy (or tls-server-name) reaches it


class _Apiserver(ThreadingHTTPServer):
    """Answers each request with the next of `answers` (status, Retry-After), then 200; keeps
    every request's headers and when it came."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.answers: list[tuple[int, str]] = []
        self.seen: list[tuple[float, dict[str, str]]] = []
        self.causes: list[dict[str, str]] = []  # in every refusal's Status
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server: _Apiserver
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        with self.server.lock:
            self.server.seen.append((time.monotonic(), dict(self.headers.items())))
            status, retry_after = self.server.answers.pop(0) if self.server.answers else (200, "")
        status_object: dict[str, Any] = {"kind": "Status", "message": f"answered {status}"}
        if status >= 300:
            status_object["details"] = {"causes": self.server.causes}
        body = json.dumps(status_object).encode()
        self.send_response(status)
        if retry_after:
            self.send_header("Retry-After", retry_after)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PATCH = do_POST = do_DELETE = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def apiserver(tmp_path: Path) -> Iterator[tuple[_Apiserver, bytes]]:
    """The stand-in apiserver on loopback, its certificate for NAME and 127.0.0.1; with its CA."""
    made = webhooks.generate([NAME, "127.0.0.1"], dt.datetime.now(dt.UTC))
    (tmp_path / "tls.crt").write_bytes(made.cert)
    (tmp_path / "tls.key").write_bytes(made.key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    server = _Apiserver(("127.0.0.1", 0), _Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, made.ca
    server.shutdown()
    server.server_close()


class _ConnectProxy(socketserver.ThreadingTCPServer):
    """An HTTP proxy for CONNECT only: records each target and tunnels it to `upstream`,
    whatever name it was asked for (so NAME needs no resolver)."""

    daemon_threads = True

    def __init__(self, upstream: tuple[str, int]) -> None:
        super().__init__(("127.0.0.1", 0), _Tunnel)
        self.upstream = upstream
        self.connects: list[str] = []
        self.authorizations: list[str] = []  # each CONNECT's Proxy-Authorization


class _Tunnel(socketserver.StreamRequestHandler):
    server: _ConnectProxy

    def handle(self) -> None:
        request = self.rfile.readline().decode().split()
        while (line := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "proxy-authorization":
                self.server.authorizations.append(value.strip())
        if request[:1] != ["CONNECT"]:
            self.wfile.write(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
            return
        self.server.connects.append(request[1])
        with socket.create_connection(self.server.upstream) as upstream:
            self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            self.wfile.flush()
            ends = [self.connection, upstream]
            while True:
                readable, _, _ = select.select(ends, [], [], 10)
                if not readable:
                    return
                for end in readable:
                    data = end.recv(65536)
                    if not data:
                        return
                    (upstream if end is self.connection else self.connection).sendall(data)


@pytest.fixture
def proxy(apiserver: tuple[_Apiserver, bytes]) -> Iterator[_ConnectProxy]:
    server = _ConnectProxy(apiserver[0].server_address[:2])
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _kubeconfig(tmp_path: Path, server: str, ca: bytes, **cluster: Any) -> str:
    path = tmp_path / "kubeconfig"
    entry = {"server": server, "certificate-authority-data": base64.b64encode(ca).decode()}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {**entry, **cluster}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return str(path)


def _local(apiserver: tuple[_Apiserver, bytes], tmp_path: Path, **cluster: Any) -> str:
    server, ca = apiserver
    return _kubeconfig(tmp_path, f"https://127.0.0.1:{server.server_address[1]}", ca, **cluster)


def test_every_request_names_the_operator_as_client_go_names_its_programs(
    apiserver: tuple[_Apiserver, bytes], tmp_path: Path
) -> None:
    kube = connect(_local(apiserver, tmp_path, **{"disable-compression": True}))
    try:
        kube.request("GET", "/version")
        kube.request("PATCH", "/api/v1/nodes/n1", {}, "application/merge-patch+json")
    finally:
        kube.close()
    assert {headers["Accept-Encoding"] for _, headers in apiserver[0].seen} == {"identity"}
    agents = {headers["User-Agent"] for _, headers in apiserver[0].seen}
    (agent,) = agents
    product, system, source = agent.split(" ")
    assert product == "skyhook-operator/1.0.0"
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    assert system == f"({sys.platform}/{arch})"
    name, commit = source.split("/")
    assert name == "skyhook" and (commit == "unknown" or len(commit) == 7)


def test_a_retry_after_is_waited_out_then_the_request_is_sent_again(
    apiserver: tuple[_Apiserver, bytes], tmp_path: Path
) -> None:
    server = apiserver[0]
    server.answers = [(429, "1"), (503, "1")]
    kube = connect(_local(apiserver, tmp_path))
    try:
        answer = kube.request("GET", "/api/v1/nodes")
    finally:
        kube.close()
    assert answer["message"] == "answered 200"
    times = [when for when, _ in server.seen]
    assert len(times) == 3
    assert all(0.9 <= later - earlier < 3.0 for earlier, later in itertools.pairwise(times))


def test_retry_after_is_capped_and_tried_a_bounded_number_of_times(
    apiserver: tuple[_Apiserver, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client, "RETRY_AFTER_CAP", 0.05)
    server = apiserver[0]
    server.answers = [(429, "3600")] * 20
    kube = connect(_local(apiserver, tmp_path))
    began = time.monotonic()
    try:
        with pytest.raises(ApiError) as refused:
            kube.request("GET", "/api/v1/nodes")
        # A 500 without Retry-After is not tried again.
        server.answers = [(500, "")]
        with pytest.raises(ApiError):
            kube.request("GET", "/api/v1/pods")
    finally:
        kube.close()
    assert refused.value.status == 429
    assert time.monotonic() - began < 10.0, "an hour's Retry-After was cut to the cap"
    assert len(server.seen) == 1 + client.THROTTLED_RETRIES + 1


def test_a_fenced_write_does_not_wait_past_its_fence(
    apiserver: tuple[_Apiserver, bytes], tmp_path: Path
) -> None:
    server = apiserver[0]
    server.answers = [(429, "5"), (429, "5")]

    async def run() -> float:
        kube = connect_async(_local(apiserver, tmp_path))
        try:
            deadline = time.monotonic() + 2.0
            kube.fence(lambda: deadline - time.monotonic())
            began = time.monotonic()
            with pytest.raises(ApiError) as refused:
                await kube.request("PATCH", "/api/v1/nodes/n1", {}, "application/merge-patch+json")
            assert refused.value.status == 429
            return time.monotonic() - began
        finally:
            await kube.close()

    assert asyncio.run(run()) < 1.0, "a 5 s wait outlives the 2 s fence: refused at once"
    assert len(server.seen) == 1


class _OnePod:
    """The pod index of a drain that holds one pod, gone as soon as it is asked about."""

    def uid(self, key: Key) -> str | None:
        return "uid-1"

    async def until_gone(self, key: Key, uid: str, timeout: float) -> None:
        return None


def test_an_evictions_429_is_the_drains_wait_not_a_retry_in_the_client(
    apiserver: tuple[_Apiserver, bytes], tmp_path: Path
) -> None:
    """A budget's 429 is the drain's to wait out (kube/drain.py): the client does not send the
    eviction again whatever Retry-After says, as client-go's eviction does not. A drain by
    delete is an ordinary request: retried after its Retry-After."""
    server = apiserver[0]
    server.causes = [{"reason": drain.DISRUPTION_BUDGET, "message": "needs 1 healthy pod"}]

    async def run(action: EvictPod) -> tuple[float, drain.Evictor]:
        kube = connect_async(_local(apiserver, tmp_path))
        changed = asyncio.Event()
        evictor = drain.Evictor(kube, _OnePod(), 10.0, changed.set)
        try:
            began = time.monotonic()
            assert evictor.ensure(action)
            await asyncio.wait_for(changed.wait(), 10)
            return time.monotonic() - began, evictor
        finally:
            evictor.cancel()
            await kube.close()

    server.answers = [(429, "1"), (429, "1")]
    took, evictor = asyncio.run(run(EvictPod("ns", "p", "n1")))
    assert took < 0.9, "refused at the first answer"
    assert len(server.seen) == 1
    assert evictor.refusals()[("ns", "p")].by_budget

    server.answers = [(429, "1")]
    took, evictor = asyncio.run(run(EvictPod("ns", "p", "n1", delete=True)))
    assert took >= 0.9 and len(server.seen) == 3
    assert not evictor.refusals(), "the delete was sent again and accepted"


def test_tls_server_name_checks_the_certificate_against_that_name(
    apiserver: tuple[_Apiserver, bytes], tmp_path: Path
) -> None:
    server, ca = apiserver
    url = f"https://127.0.0.1:{server.server_address[1]}"
    # The server's certificate names NAME: checked against it, it holds; against a name it
    # does not carry, the handshake fails.
    for name, holds in ((NAME, True), ("other.test", False)):
        kube = connect(_kubeconfig(tmp_path, url, ca, **{"tls-server-name": name}))
        try:
            if holds:
                assert kube.request("GET", "/version")["message"] == "answered 200"
            else:
                with pytest.raises(Unreachable, match=r"other\.test"):
                    kube.request("GET", "/version")
        finally:
            kube.close()
    assert len(server.seen) == 1


def test_proxy_url_sends_every_request_through_the_proxy(
    apiserver: tuple[_Apiserver, bytes], proxy: _ConnectProxy, tmp_path: Path
) -> None:
    port = apiserver[0].server_address[1]
    via = f"http://user:secret@127.0.0.1:{proxy.server_address[1]}"
    kube = connect(
        _kubeconfig(tmp_path, f"https://{NAME}:{port}", apiserver[1], **{"proxy-url": via})
    )
    try:
        assert kube.request("GET", "/version")["message"] == "answered 200"
    finally:
        kube.close()
    assert proxy.connects == [f"{NAME}:{port}"]
    assert proxy.authorizations == [f"Basic {base64.b64encode(b'user:secret').decode()}"]


def test_https_proxy_is_used_unless_no_proxy_names_the_apiserver(
    apiserver: tuple[_Apiserver, bytes],
    proxy: _ConnectProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = apiserver[0].server_address[1]
    kubeconfig = _kubeconfig(tmp_path, f"https://{NAME}:{port}", apiserver[1])
    monkeypatch.setenv("https_proxy", f"127.0.0.1:{proxy.server_address[1]}")
    monkeypatch.setenv("NO_PROXY", "elsewhere.example,10.0.0.0/8")
    kube = connect(kubeconfig)
    try:
        assert kube.request("GET", "/version")["message"] == "answered 200"
    finally:
        kube.close()
    assert proxy.connects == [f"{NAME}:{port}"]
    monkeypatch.setenv("NO_PROXY", "elsewhere.example,.test")
    kube = connect(kubeconfig)
    try:
        with pytest.raises(Unreachable):  # straight to NAME, which no resolver knows
            kube.request("GET", "/version")
    finally:
        kube.close()
    assert proxy.connects == [f"{NAME}:{port}"], "NO_PROXY's domain went around the proxy"


@pytest.mark.parametrize(
    ("url", "environment", "expected"),
    [
        ("https://api.example:6443", {"HTTPS_PROXY": "http://p:3128"}, "http://p:3128"),
        ("https://api.example:6443", {"https_proxy": "p:3128"}, "http://p:3128"),
        ("https://api.example:6443", {"HTTP_PROXY": "http://p:3128"}, None),  # https only
        ("http://api.example", {"HTTP_PROXY": "http://p:3128"}, "http://p:3128"),
        (
            "https://api.example",
            {"HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:1"},
            "http://upper:1",
        ),
        ("https://127.0.0.1:6443", {"HTTPS_PROXY": "http://p:1"}, None),  # loopback
        ("https://localhost:6443", {"HTTPS_PROXY": "http://p:1"}, None),
        ("https://api.example", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "*"}, None),
        ("https://api.example", {"HTTPS_PROXY": "http://p:1", "no_proxy": "api.example"}, None),
        ("https://a.b.example", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "b.example"}, None),
        ("https://a.b.example", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": ".b.example"}, None),
        ("https://a.b.example", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "x, *.b.example"}, None),
        (
            "https://notb.example",
            {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "b.example"},
            "http://p:1",
        ),
        ("https://10.1.2.3:6443", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "10.0.0.0/8"}, None),
        ("https://[fd00::1]", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "fd00::/8"}, None),
        ("https://11.1.2.3", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "10.0.0.0/8"}, "http://p:1"),
        ("https://10.1.2.3:6443", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "10.1.2.3"}, None),
        (
            "https://api.example:6443",
            {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "api.example:6443"},
            None,
        ),
        (
            "https://api.example:6443",
            {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "api.example:443"},
            "http://p:1",
        ),
    ],
)
def test_the_environments_proxy_is_chosen_as_go_chooses_it(
    url: str, environment: dict[str, str], expected: str | None
) -> None:
    assert credentials.proxy_from_environment(url, environment) == expected


def test_the_in_cluster_client_uses_the_environments_proxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    account = tmp_path / "account"
    account.mkdir()
    (account / "token").write_text("t")
    monkeypatch.setattr(credentials.in_cluster, "__defaults__", (None, account))
    environment = {
        "KUBERNETES_SERVICE_HOST": "10.96.0.1",
        "KUBERNETES_SERVICE_PORT": "443",
        "HTTPS_PROXY": "http://p:3128",
    }
    found = credentials.in_cluster(environment, account)
    assert found.proxy is None  # chosen by load(), for every kind of credentials
    loaded = credentials.load(None, environment)
    assert loaded.host == "https://10.96.0.1:443"
    assert loaded.proxy == "http://p:3128"
    loaded = credentials.load(None, {**environment, "NO_PROXY": "10.96.0.0/12"})
    assert loaded.proxy is None


@pytest.mark.parametrize(
    ("part", "fields", "named"),
    [
        ("cluster", {"proxy-url": "socks5://p:1080"}, "clusters[c].cluster.proxy-url"),
        (
            "cluster",
            {"certificate-authority-file": "ca.crt"},
            "clusters[c].cluster.certificate-authority-file",
        ),
        ("user", {"as": "admin"}, "users[u].user.as"),
        ("user", {"as-groups": ["system:masters"]}, "users[u].user.as-groups"),
        (
            "context",
            {"cluster": "c", "user": "u", "namespaces": "x"},
            "contexts[x].context.namespaces",
        ),
    ],
)
def test_a_kubeconfig_field_the_operator_cannot_honour_is_refused_naming_it(
    tmp_path: Path, part: str, fields: dict[str, Any], named: str
) -> None:
    document = {
        "clusters": [{"name": "c", "cluster": {"server": "https://api:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    entries = document[f"{part}s"]
    assert isinstance(entries, list)
    entries[0][part].update(fields)
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(CredentialsError, match=named.replace("[", r"\[").replace("]", r"\]")):
        credentials.load(str(path), {})


def test_every_field_client_go_writes_is_honoured_or_refused(tmp_path: Path) -> None:
    honoured = {
        "server": "https://api:6443",
        "insecure-skip-tls-verify": True,
        "tls-server-name": "api.internal",
        "proxy-url": "https://proxy:3129",
        "disable-compression": True,
        "extensions": [{"name": "e", "extension": {}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": honoured}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [
                    {"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "n"}}
                ],
                "current-context": "x",
            }
        )
    )
    found = credentials.load(str(path), {"HTTPS_PROXY": "http://ignored:1"})
    assert found.tls_server_name == "api.internal"
    assert found.proxy == "https://proxy:3129"  # the kubeconfig's wins over the environment's
    assert not found.compression
