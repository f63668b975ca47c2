"""A small asyncio REST client for the few calls a kubelet makes, working on plain dicts.

Hundreds of simulated nodes share one client (one connection pool); objects stay JSON dicts,
which is all a kubelet stand-in needs and much cheaper than generated model classes.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

JsonDict = dict[str, Any]


class ApiError(Exception):
    """The apiserver refused a request, or could not be reached (`status` 0: retry later, as a
    kubelet does through an apiserver restart or an etcd outage)."""

    def __init__(self, status: int, body: str, method: str, path: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


class KubeClient:
    def __init__(self, server: str, token: str, ca_file: str) -> None:
        self.server = server.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._ssl = ssl.create_default_context(cafile=ca_file)
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                headers=self._headers,
                connector=aiohttp.TCPConnector(ssl=self._ssl, limit=64),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self,
        method: str,
        path: str,
        body: object | None = None,
        params: dict[str, str] | None = None,
        content_type: str = "application/json",
        *,
        answer: bool = True,
    ) -> JsonDict:
        """The decoded answer; `answer=False` skips decoding it (returns {}) for writes whose
        result nobody reads (lease renewals, pod status): most of a busy node host's JSON."""
        try:
            return await self._request(method, path, body, params, content_type, answer=answer)
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            raise ApiError(0, f"{type(error).__name__}: {error}", method, path) from error

    async def _request(
        self,
        method: str,
        path: str,
        body: object | None,
        params: dict[str, str] | None,
        content_type: str,
        *,
        answer: bool,
    ) -> JsonDict:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if body is not None else {}
        async with self.session.request(
            method,
            self.server + path,
            data=data,
            params=params,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=30),
        ) as response:
            if response.status >= 400:
                raise ApiError(response.status, await response.text(), method, path)
            if not answer:
                await response.read()
                return {}
            text = await response.text()
            return json.loads(text) if text else {}

    async def get(self, path: str, params: dict[str, str] | None = None) -> JsonDict:
        return await self.request("GET", path, params=params)

    async def create(self, path: str, body: JsonDict) -> JsonDict:
        return await self.request("POST", path, body)

    async def merge_patch(self, path: str, body: JsonDict, *, answer: bool = True) -> JsonDict:
        return await self.request(
            "PATCH", path, body, content_type="application/merge-patch+json", answer=answer
        )

    async def strategic_patch(self, path: str, body: JsonDict) -> JsonDict:
        return await self.request(
            "PATCH", path, body, content_type="application/strategic-merge-patch+json"
        )

    async def delete(self, path: str, body: JsonDict | None = None) -> JsonDict:
        return await self.request("DELETE", path, body)

    async def watch(
        self, path: str, params: dict[str, str], timeout_seconds: int = 300
    ) -> AsyncIterator[JsonDict]:
        """Yield watch events until the server ends the stream."""
        query = {**params, "watch": "1", "timeoutSeconds": str(timeout_seconds),
                 "allowWatchBookmarks": "true"}  # fmt: skip
        async with self.session.get(
            self.server + path,
            params=query,
            timeout=aiohttp.ClientTimeout(
                total=timeout_seconds + 30, sock_read=timeout_seconds + 30
            ),
            read_bufsize=1 << 22,
        ) as response:
            if response.status >= 400:
                raise ApiError(response.status, await response.text(), "WATCH", path)
            async for line in response.content:
                if line.strip():
                    yield json.loads(line)
