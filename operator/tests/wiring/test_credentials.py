"""A rotated token: the operator's client keeps its credentials for a while (asking for them
costs more than a request), and a token the apiserver refuses (401) is asked for again at once,
so a rotated service-account token or a refreshed exec-plugin token costs one refused request,
not a failed write."""

from __future__ import annotations

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from skyhook_operator.kube.client import connect

from .conftest import StartHttps


class _Apiserver(ThreadingHTTPServer):
    valid: str = "first"
    seen: list[tuple[str, int]]


class _Answer(BaseHTTPRequestHandler):
    server: _Apiserver

    def do_GET(self) -> None:
        token = self.headers.get("Authorization", "").removeprefix("Bearer ")
        status = 200 if token == self.server.valid else 401
        self.server.seen.append((token, status))
        body = json.dumps({"kind": "Status", "code": status}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def apiserver(start_https: StartHttps[_Apiserver]) -> _Apiserver:
    server = start_https(_Apiserver, _Answer)
    server.seen = []
    return server


def _kubeconfig(path: Path, server: str, user: dict[str, Any], **cluster: Any) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


def test_a_refused_token_is_asked_for_again_and_the_request_goes_through(
    apiserver: _Apiserver, tmp_path: Path
) -> None:
    server = f"https://127.0.0.1:{apiserver.server_address[1]}"
    token = tmp_path / "token"
    token.write_text("first\n")
    kubeconfig = _kubeconfig(
        tmp_path / "kubeconfig",
        server,
        {"tokenFile": "token"},
        **{"insecure-skip-tls-verify": True},
    )
    kube = connect(str(kubeconfig))
    try:
        for _ in range(3):
            assert kube.request("GET", "/version")["code"] == 200
        token.write_text("second\n")  # rotated, as the kubelet rotates a projected token
        apiserver.valid = "second"
        assert kube.request("GET", "/version")["code"] == 200
        assert kube.request("GET", "/version")["code"] == 200
    finally:
        kube.close()

    assert apiserver.seen == [
        ("first", 200),
        ("first", 200),
        ("first", 200),
        ("first", 401),
        ("second", 200),
        ("second", 200),
    ]


def test_an_exec_plugin_issues_the_token(apiserver: _Apiserver, tmp_path: Path) -> None:
    """A kubeconfig whose user runs an exec plugin (as EKS's and GKE's do) sends the token the
    plugin prints."""
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', "
        "'kind': 'ExecCredential', 'status': {'token': 'first'}}))\n"
    )
    exec_user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(plugin)],
            "interactiveMode": "Never",
        }
    }
    server = f"https://127.0.0.1:{apiserver.server_address[1]}"
    kubeconfig = _kubeconfig(
        tmp_path / "kubeconfig", server, exec_user, **{"insecure-skip-tls-verify": True}
    )
    kube = connect(str(kubeconfig))
    try:
        assert kube.request("GET", "/version")["code"] == 200
    finally:
        kube.close()
    assert apiserver.seen == [("first", 200)]
