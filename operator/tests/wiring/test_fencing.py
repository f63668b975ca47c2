"""Fencing: a write is sent only while the leader may write, and given no more time than is
left until another replica could take the Lease, by this client and by the apiserver."""

from __future__ import annotations

import asyncio
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from skyhook_operator.kube.client import NotLeading, Unreachable, connect_async
from skyhook_operator.kube.lease import write_time_left

from .conftest import StartHttps


@pytest.mark.parametrize(
    ("now", "left"),
    [
        pytest.param(100.0, 15.0, id="just-renewed: the whole lease duration"),
        pytest.param(109.0, 6.0, id="near-the-deadline: until the lease could be taken"),
        pytest.param(110.0, 0.0, id="at-the-deadline: nothing sent"),
        pytest.param(114.0, 0.0, id="past-the-deadline: nothing sent"),
    ],
)
def test_a_write_may_last_until_the_lease_could_be_taken(now: float, left: float) -> None:
    # Renewed at 100 (monotonic), renew deadline 10 s, lease duration 15 s.
    assert write_time_left(now, valid_until=110.0, takeable_at=115.0) == left


class _Slow(ThreadingHTTPServer):
    """Answers every request after `delay` seconds, and keeps each request's query."""

    delay = 5.0

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.queries: list[dict[str, list[str]]] = []
        self.stop = threading.Event()


class _SlowHandler(BaseHTTPRequestHandler):
    server: _Slow

    def do_PATCH(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.queries.append(parse_qs(urlsplit(self.path).query))
        self.server.stop.wait(self.server.delay)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: object) -> None:
        pass


def _kubeconfig(tmp_path: Path, server: str) -> str:
    path = tmp_path / "kubeconfig"
    cluster = {"server": server, "insecure-skip-tls-verify": True}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return str(path)


def test_a_fenced_write_ends_with_the_lease_or_is_not_sent(
    start_https: StartHttps[_Slow], tmp_path: Path
) -> None:
    server = start_https(_Slow, _SlowHandler)
    kubeconfig = _kubeconfig(tmp_path, f"https://127.0.0.1:{server.server_address[1]}")
    patch = ("PATCH", "/api/v1/nodes/n1", {"spec": {"unschedulable": True}})

    async def run() -> float:
        kube = connect_async(kubeconfig)
        try:
            deadline = time.monotonic() + 1.0
            kube.fence(lambda: deadline - time.monotonic())
            began = time.monotonic()
            with pytest.raises(Unreachable):  # the server takes 5 s
                await kube.request(*patch, "application/merge-patch+json", timeout=30.0)
            took = time.monotonic() - began
            kube.fence(lambda: 0.0)
            with pytest.raises(NotLeading):
                await kube.request(*patch, "application/merge-patch+json")
            return took
        finally:
            server.stop.set()
            await kube.close()

    took = asyncio.run(run())
    assert took < 2.0, "the 30 s timeout was cut to the second left of the lease"
    assert len(server.queries) == 1, "nothing sent once no time was left"
    (sent,) = server.queries[0]["timeout"]
    assert sent.endswith("ms") and 500 <= int(sent.removesuffix("ms")) <= 1000
