"""The HTTP side of observability: what `/metrics`, `/healthz` and `/readyz` answer, and that
`0` turns an endpoint off."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp
import pytest

from skyhook_dev.harness import free_port
from skyhook_operator.observability import Telemetry, serve


@dataclass
class FakeHealth:
    ready: bool = False
    problem: str | None = None

    def alive(self) -> str | None:
        return self.problem


async def get(url: str) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
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
