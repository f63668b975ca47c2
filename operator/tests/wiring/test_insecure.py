"""A kubeconfig with `insecure-skip-tls-verify`: the operator says once that the apiserver's
certificate is not checked, however many clients it builds and requests it makes.

urllib3 warns (InsecureRequestWarning) on every unverified request; Python shows a warning
once per call site, but only until some code changes the warning filters, which resets that
memory: libraries do so all the time, and one 1,000-node run printed it 10,984 times.
"""

from __future__ import annotations

import json
import logging
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import urllib3
import yaml

from skyhook_operator.kube.client import connect

from .conftest import StartHttps


class _Version(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"major": "1", "minor": "34"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def apiserver(start_https: StartHttps[ThreadingHTTPServer]) -> str:
    """An HTTPS server with a certificate no client trusts, answering every GET."""
    server = start_https(ThreadingHTTPServer, _Version)
    return f"https://127.0.0.1:{server.server_address[1]}"


def test_an_unverified_apiserver_is_warned_about_once(
    apiserver: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {"server": apiserver, "insecure-skip-tls-verify": True},
                    }
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    caplog.set_level(logging.WARNING, logger="skyhook_operator")
    with warnings.catch_warnings(record=True) as shown:
        warnings.resetwarnings()
        warnings.simplefilter("default")  # Python's own: once per call site
        for _ in range(3):  # the operator's client, the elector's, the certificates'
            kube = connect(str(kubeconfig))
            for _ in range(4):
                assert kube.request("GET", "/version")["major"] == "1"
                # What libraries do between two requests: any filter change resets the
                # once-per-call-site memory of every module.
                warnings.filterwarnings("ignore", message="an unrelated warning")
            kube.close()

    insecure = [w for w in shown if issubclass(w.category, urllib3.exceptions.HTTPWarning)]
    said = [r.getMessage() for r in caplog.records if "TLS verification is off" in r.getMessage()]
    assert insecure == []
    assert said == [
        f"TLS verification is off for {apiserver} (insecure-skip-tls-verify): the apiserver's "
        "certificate is not checked"
    ]
