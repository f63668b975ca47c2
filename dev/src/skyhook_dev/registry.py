"""A small in-memory OCI registry for tests and demos: the distribution API's pull endpoints
(manifests and blobs by tag or digest) and the monolithic push (POST then PUT of a blob, PUT of
a manifest), enough for ORAS to push and pull artifacts. Plain HTTP on 127.0.0.1; it counts
the GETs it serves so tests can tell a cache hit from a pull, records every request's path (so
a test can tell it was never asked), and can answer a blob's GET with a redirect elsewhere, as
registries send blob downloads to their storage host.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
import uuid
from collections import Counter
from typing import Any

from aiohttp import web

_PATH = re.compile(r"^/v2/(?P<name>.+)/(?P<kind>manifests|blobs)/(?P<ref>[^/]+)$")
_UPLOADS = re.compile(r"^/v2/(?P<name>.+)/blobs/uploads/(?P<session>[^/]*)$")


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class LocalRegistry:
    """`with LocalRegistry() as registry:` serves on `registry.host` (127.0.0.1:<port>)."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[tuple[str, str], tuple[bytes, str]] = {}  # (repo, ref) -> body, type
        self.gets: Counter[tuple[str, str]] = Counter()  # (kind, digest or tag)
        self.requests: list[str] = []  # every request's path, in order
        self.redirects: dict[str, str] = {}  # blob digest -> the URL its GET is redirected to
        self.host = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    def __enter__(self) -> LocalRegistry:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *_: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/v2/", self._base)
        app.router.add_route("*", "/v2/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.host = f"127.0.0.1:{self._runner.addresses[0][1]}"

    async def _base(self, request: web.Request) -> web.Response:
        self.requests.append(request.path)
        return web.json_response({})

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        self.requests.append(path)
        upload = _UPLOADS.match(path)
        if upload is not None:
            return await self._upload(request, upload.group("name"), upload.group("session"))
        found = _PATH.match(path)
        if found is None:
            return _error(404, "NAME_UNKNOWN", path)
        name, kind, ref = found.group("name", "kind", "ref")
        if kind == "blobs":
            if ref in self.redirects and request.method == "GET":
                raise web.HTTPTemporaryRedirect(self.redirects[ref])
            body = self.blobs.get(ref)
            if body is None:
                return _error(404, "BLOB_UNKNOWN", ref)
            if request.method == "GET":
                self.gets["blob", ref] += 1
            return _content(request, body, "application/octet-stream", ref)
        if request.method == "PUT":
            data = await request.read()
            media_type = request.headers.get("Content-Type", "")
            digest = digest_of(data)
            self.manifests[name, ref] = self.manifests[name, digest] = (data, media_type)
            return web.Response(
                status=201,
                headers={
                    "Location": f"/v2/{name}/manifests/{digest}",
                    "Docker-Content-Digest": digest,
                },
            )
        stored = self.manifests.get((name, ref))
        if stored is None:
            return _error(404, "MANIFEST_UNKNOWN", f"{name}:{ref}")
        if request.method == "GET":
            self.gets["manifest", ref] += 1
        return _content(request, stored[0], stored[1], digest_of(stored[0]))

    async def _upload(self, request: web.Request, name: str, session: str) -> web.Response:
        if request.method == "POST":
            location = f"/v2/{name}/blobs/uploads/{uuid.uuid4().hex}"
            return web.Response(status=202, headers={"Location": location})
        if request.method != "PUT":
            return _error(405, "UNSUPPORTED", request.method)
        data = await request.read()
        digest = request.query.get("digest", "")
        if digest != digest_of(data):
            return _error(400, "DIGEST_INVALID", digest)
        self.blobs[digest] = data
        return web.Response(
            status=201,
            headers={"Location": f"/v2/{name}/blobs/{digest}", "Docker-Content-Digest": digest},
        )

    def blob_pulls(self, digest: str) -> int:
        return self.gets["blob", digest]

    def manifest_pulls(self, ref: str) -> int:
        return self.gets["manifest", ref]


def _content(request: web.Request, body: bytes, media_type: str, digest: str) -> web.Response:
    headers: dict[str, Any] = {"Docker-Content-Digest": digest, "Content-Type": media_type}
    if request.method == "HEAD":
        headers["Content-Length"] = str(len(body))
        return web.Response(status=200, headers=headers)
    return web.Response(status=200, body=body, headers=headers)


def _error(status: int, code: str, detail: str) -> web.Response:
    return web.json_response(
        {"errors": [{"code": code, "message": code.lower().replace("_", " "), "detail": detail}]},
        status=status,
    )
