"""Reads the alerts of the Prometheus URLs that alertGates name (`GET <url>/api/v1/alerts`).

The reconciler asks before each pass; a URL read less than half a poll interval ago is not
read again, so a burst of passes costs one request. One aiohttp session, opened at the first
read, serves every read (Prometheus is not the apiserver: its TLS and credentials are not the
API client's). A read that fails (no answer, a timeout,
an HTTP error, a body that is not Prometheus's answer) becomes an `AlertReading` with `error`
set: the planner holds interrupts on it (rules/holds.py), it never raises here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import aiohttp

from skyhook_planner.model.alerts import Alert, AlertReading

log = logging.getLogger(__name__)

ALERTS_PATH = "/api/v1/alerts"


def parse_alerts(body: Any) -> tuple[Alert, ...]:
    """The alerts of a Prometheus `/api/v1/alerts` answer; ValueError when it is not one."""
    if not isinstance(body, dict) or body.get("status") != "success":
        error = body.get("error") if isinstance(body, dict) else None
        raise ValueError(f"Prometheus answered {error or 'without status success'}")
    alerts = (body.get("data") or {}).get("alerts")
    if not isinstance(alerts, list):
        raise ValueError("the answer has no data.alerts list")
    return tuple(
        Alert(str((a.get("labels") or {}).get("alertname", "")), str(a.get("state", "")))
        for a in alerts
        if isinstance(a, dict)
    )


class AlertPoller:
    def __init__(self, poll_interval: float, timeout: float) -> None:
        self._poll_interval = poll_interval
        self._timeout = timeout
        self._last: dict[str, tuple[float, AlertReading]] = {}
        self._session: aiohttp.ClientSession | None = None

    async def readings(self, urls: Iterable[str]) -> tuple[AlertReading, ...]:
        """The latest reading of each URL, reading again those that are due."""
        wanted = sorted(set(urls))
        now = time.monotonic()
        due = [
            u
            for u in wanted
            if u not in self._last or now - self._last[u][0] >= self._poll_interval / 2
        ]
        if due:
            if self._session is None:
                self._session = aiohttp.ClientSession(
                    timeout=aiohttp.ClientTimeout(total=self._timeout)
                )
            fresh = await asyncio.gather(*(self._read(self._session, u) for u in due))
            for url, reading in zip(due, fresh, strict=True):
                if reading.error and not (url in self._last and self._last[url][1].error):
                    log.warning("alert gate: %s", reading.error)
                self._last[url] = (now, reading)
        self._last = {u: self._last[u] for u in wanted}  # forget URLs no gate names any more
        return tuple(self._last[u][1] for u in wanted)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _read(self, session: aiohttp.ClientSession, url: str) -> AlertReading:
        read_at = datetime.now(UTC)
        try:
            async with session.get(url + ALERTS_PATH) as response:
                text = await response.text()
                if response.status != 200:
                    raise ValueError(f"HTTP {response.status}: {text.strip()[:200]}")
                alerts = parse_alerts(json.loads(text))
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            problem = str(error) or type(error).__name__
            return AlertReading(url, read_at, error=f"GET {url}{ALERTS_PATH}: {problem}")
        return AlertReading(url, read_at, alerts)
