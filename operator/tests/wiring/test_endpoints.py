"""The HTTP side of observability: what `/metrics`, `/healthz` and `/readyz` answer, and that
`0` turns an endpoint off."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509

from skyhook_operator.kube import webhooks
from skyhook_operator.kube.reviews import UNAUTHORIZED, ReviewFailed, Verdict
from skyhook_operator.observability import Secure, ServingTls, Telemetry, serve
from skyhook_sandbox.processes import free_port


@dataclass
class FakeHealth:
    ready: bool = False
    problem: str | None = None

    def alive(self) -> str | None:
        return self.problem


async def get(url: str, authorization: str = "", verify: bool = True) -> tuple[int, str, str]:
    headers = {"Authorization": authorization} if authorization else {}
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, headers=headers, ssl=verify) as response,
    ):
        return response.status, response.headers["Content-Type"], await response.text()


def test_probes_follow_the_reconciler_and_metrics_are_text() -> None:
    async def scenario() -> None:
        health = FakeHealth()
        telemetry = Telemetry(lambda: ({("GET", "pods"): 2}, {}), lambda: 3)
        metrics, probes = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
        endpoints = await serve(telemetry, health, metrics, probes)
        try:
            status, _, text = await get(f"http://{probes}/readyz")
            assert (status, text) == (503, "waiting for the first full view of the cluster")
            health.ready = True
            assert (await get(f"http://{probes}/readyz"))[0] == 200
            assert (await get(f"http://{probes}/healthz"))[:1] == (200,)
            health.problem = "the reconcile loop has stopped"
            status, _, text = await get(f"http://{probes}/healthz")
            assert (status, text) == (500, "the reconcile loop has stopped")
            status, kind, text = await get(f"http://{metrics}/metrics")
            assert (status, kind) == (200, "text/plain; version=0.0.4; charset=utf-8")
            assert "skyhook_operator_write_queue_depth 3" in text.splitlines()
            assert 'skyhook_operator_api_requests_total{resource="pods",verb="GET"} 2' in text
        finally:
            await endpoints.stop()

    asyncio.run(scenario())


def test_zero_turns_an_endpoint_off() -> None:
    async def scenario() -> None:
        probes = f"127.0.0.1:{free_port()}"
        endpoints = await serve(Telemetry(lambda: ({}, {}), lambda: 0), FakeHealth(), "0", probes)
        try:
            assert len(endpoints.runners) == 1
            assert (await get(f"http://{probes}/healthz"))[0] == 200
        finally:
            await endpoints.stop()

    asyncio.run(scenario())


def test_a_port_in_use_is_an_error() -> None:
    async def scenario() -> None:
        taken = f"127.0.0.1:{free_port()}"
        first = await serve(Telemetry(lambda: ({}, {}), lambda: 0), FakeHealth(), taken, "0")
        try:
            with pytest.raises(OSError):
                await serve(Telemetry(lambda: ({}, {}), lambda: 0), FakeHealth(), taken, "0")
        finally:
            await first.stop()

    asyncio.run(scenario())


@dataclass
class TableAccess:
    """Verdicts by token, standing in for the apiserver's reviews (kube/reviews.py, tested on
    the sandbox in test_metrics_auth.py); `None` fails the review."""

    verdicts: dict[str, Verdict | None]

    async def review(self, token: str, verb: str, path: str) -> Verdict:
        assert (verb, path) == ("get", "/metrics")
        verdict = self.verdicts.get(token, UNAUTHORIZED)
        if verdict is None:
            raise ReviewFailed("Authentication failed: connection refused")
        return verdict


def test_secure_metrics_are_https_and_answer_as_access_says() -> None:
    access = TableAccess(
        {
            "reader": Verdict(200),
            "stranger": Verdict(403, "Authorization denied for user stranger"),
            "unlucky": None,
        }
    )
    tls = ServingTls("")  # self-signed, as with no certificate directory
    address = f"127.0.0.1:{free_port()}"

    async def scenario() -> None:
        telemetry = Telemetry(lambda: ({}, {}), lambda: 1)
        secure = Secure(access, tls)
        endpoints = await serve(telemetry, FakeHealth(), address, "0", secure=secure)
        url = f"https://{address}/metrics"
        try:
            assert (await get(url, verify=False))[::2] == (401, "Unauthorized")
            assert (await get(url, "Basic eDp5", verify=False))[::2] == (401, "Unauthorized")
            assert (await get(url, "Bearer stranger", verify=False))[::2] == (
                403,
                "Authorization denied for user stranger",
            )
            assert (await get(url, "Bearer unlucky", verify=False))[::2] == (
                500,
                "Authentication failed",
            )
            status, _, text = await get(url, "Bearer reader", verify=False)
            assert status == 200 and "skyhook_operator_write_queue_depth 1" in text
            with pytest.raises(aiohttp.ClientError):
                await get(f"http://{address}/metrics")
        finally:
            await endpoints.stop()

    asyncio.run(scenario())
    served = x509.load_pem_x509_certificate((tls.directory / "tls.crt").read_bytes())
    names = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("127.0.0.1") in names.get_values_for_type(x509.IPAddress)


def test_a_changed_certificate_is_served_to_new_connections(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    webhooks.write_files(tmp_path, webhooks.generate(["first.example"], now))
    tls = ServingTls(str(tmp_path))
    address = f"127.0.0.1:{free_port()}"
    host, port = address.split(":")

    async def scenario() -> None:
        telemetry = Telemetry(lambda: ({}, {}), lambda: 0)
        secure = Secure(TableAccess({}), tls)
        endpoints = await serve(telemetry, FakeHealth(), address, "0", secure=secure)
        try:
            first = await asyncio.to_thread(ssl.get_server_certificate, (host, int(port)))
            assert first.encode() == (tmp_path / "tls.crt").read_bytes()
            second = webhooks.generate(["second.example"], now)
            os.utime(tmp_path / "tls.crt", (0, 0))  # a different mtime even within a tick
            webhooks.write_files(tmp_path, second)
            tls.refresh()
            served = await asyncio.to_thread(ssl.get_server_certificate, (host, int(port)))
            assert served.encode() == second.cert
        finally:
            await endpoints.stop()

    asyncio.run(scenario())
