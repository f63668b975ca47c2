"""The alert gate's reads of a Prometheus URL: what a failed read says goes into the Skyhook's
conditions, so it describes the answer (status, content type, the kind of parse error) and
never quotes it; and an answer is read only up to a size."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from skyhook_operator.kube.prometheus import MAX_ANSWER_BYTES, AlertPoller

SECRET = "internal-token-7f3a"  # what the URL's owner never meant to publish


class _Answers(ThreadingHTTPServer):
    status = 200
    content_type = "application/json"
    body = b""


class _Handler(BaseHTTPRequestHandler):
    server: _Answers

    def do_GET(self) -> None:
        self.send_response(self.server.status)
        self.send_header("Content-Type", self.server.content_type)
        self.send_header("Content-Length", str(len(self.server.body)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # read only in part
            self.wfile.write(self.server.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def answers() -> Iterator[_Answers]:
    server = _Answers(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _error(server: _Answers) -> str:
    async def read() -> str:
        poller = AlertPoller(poll_interval=60, timeout=10)
        try:
            url = f"http://127.0.0.1:{server.server_address[1]}"
            (reading,) = await poller.readings([url])
        finally:
            await poller.close()
        assert reading.error is not None
        return reading.error.split(": ", 1)[1]

    return asyncio.run(read())


@pytest.mark.parametrize(
    ("status", "content_type", "body", "said"),
    [
        pytest.param(
            500,
            "text/plain",
            f"rule evaluation stuck: {SECRET}".encode(),
            "HTTP 500 (text/plain)",
            id="http-error",
        ),
        pytest.param(
            200,
            "text/html",
            f"<html>{SECRET}</html>".encode(),
            "the answer (text/html) is not JSON: JSONDecodeError",
            id="not-json",
        ),
        pytest.param(
            200,
            "application/json",
            f'{{"status": "error", "error": "{SECRET}"}}'.encode(),
            "the answer's status is not success",
            id="prometheus-error",
        ),
        pytest.param(
            200,
            "application/json",
            b'{"status": "success", "data": [' + b" " * MAX_ANSWER_BYTES + b"]}",
            f"the answer (application/json) is larger than {MAX_ANSWER_BYTES} bytes",
            id="too-large",
        ),
    ],
)
def test_a_failed_read_is_described_never_quoted(
    answers: _Answers, status: int, content_type: str, body: bytes, said: str
) -> None:
    answers.status, answers.content_type, answers.body = status, content_type, body
    assert _error(answers) == said
