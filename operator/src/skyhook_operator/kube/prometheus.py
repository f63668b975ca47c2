"""Reads the alerts of the Prometheus URLs that alertGates name (`GET <url>/api/v1/alerts`).

The reconciler asks before each pass; a URL read less than half a poll interval ago is not
read again, so a burst of passes costs one request. One aiohttp session, opened at the first
read, serves every read (Prometheus is not the apiserver: its TLS and credentials are not the
API client's). A read that fails (no answer, a timeout,
an HTTP error, a body that is not Prometheus's answer) becomes an `AlertReading` with `error`
set: the planner holds interrupts on it (rules/holds.py), it never raises here. The error is a
fixed description (the status code, the content type, the kind of parse error), never the
answer's text: it goes into the Skyhook's conditions, which more people read than the URL's
owner meant to answer. An answer is read up to MAX_ANSWER_BYTES.
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
# Far above the alerts of a large cluster; beyond it the answer is not read on.
MAX_ANSWER_BYTES = 8 * 1024 * 1024


class NotAlerts(ValueError):
    """The answer is not Prometheus's alert list; the message never quotes the answer."""


def parse_alerts(body: Any) -> tuple[Alert, ...]:
    """The alerts of a Prometheus `/api/v1/alerts` answer; NotAlerts when it is not one."""
    if not isinstance(body, dict) or body.get("status") != "success":
        raise NotAlerts("the answer's status is not success")
    data = body.get("data")
    alerts = data.get("alerts") if isinstance(data, dict) else None
    if not isinstance(alerts, list):
        raise NotAlerts("the answer has no data.alerts list")
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
                kind = response.headers.get("Content-Type", "no content type")
                if response.status != 200:
                    raise NotAlerts(f"HTTP {response.status} ({kind})")
                answer = await _read_at_most(response.content, MAX_ANSWER_BYTES, kind)
                try:
                    body = json.loads(answer)
                except ValueError as error:  # its text may quote the answer
                    problem = f"the answer ({kind}) is not JSON: {type(error).__name__}"
                    raise NotAlerts(problem) from None
                alerts = parse_alerts(body)
        except (aiohttp.ClientError, TimeoutError, NotAlerts) as error:
            problem = str(error) or type(error).__name__
            return AlertReading(url, read_at, error=f"GET {url}{ALERTS_PATH}: {problem}")
        return AlertReading(url, read_at, alerts)


async def _read_at_most(content: aiohttp.StreamReader, limit: int, kind: str) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise NotAlerts(f"the answer ({kind}) is larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
