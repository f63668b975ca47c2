"""A stand-in apiserver for the client's own tests: HTTPS on loopback, with a certificate no
client trusts (so kubeconfigs reach it with `insecure-skip-tls-verify`)."""

from __future__ import annotations

import datetime as dt
import ssl
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TypeVar

import pytest

from skyhook_operator.kube import webhooks

Server = TypeVar("Server", bound=ThreadingHTTPServer)
StartHttps = Callable[[type[Server], type[BaseHTTPRequestHandler]], Server]


@pytest.fixture
def start_https(tmp_path: Path) -> Iterator[StartHttps[ThreadingHTTPServer]]:
    """Starts `server_class` answering with `handler` over HTTPS; stopped after the test."""
    certificate = webhooks.generate(["127.0.0.1"], dt.datetime.now(dt.UTC))
    (tmp_path / "tls.crt").write_bytes(certificate.cert)
    (tmp_path / "tls.key").write_bytes(certificate.key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    started: list[ThreadingHTTPServer] = []

    def start(server_class: type[Server], handler: type[BaseHTTPRequestHandler]) -> Server:
        server = server_class(("127.0.0.1", 0), handler)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.shutdown()
        server.server_close()
