"""The kubelet's HTTPS endpoint, as far as `kubectl logs` needs it.

The apiserver proxies a log request to `https://<node InternalIP>:<kubeletEndpoint port>/
containerLogs/<namespace>/<pod>/<container>`. All simulated nodes share 127.0.0.1 and one
port; namespace and pod name identify the container anyway.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, Protocol

from aiohttp import web


class WorkerFinder(Protocol):
    """The node host as this endpoint uses it: a Protocol rather than `NodeHost` itself,
    because nodehost.py imports this module to start the server."""

    def find_worker(self, namespace: str, name: str) -> Any: ...


class ServingConfig(Protocol):
    """The parts of `NodeHostConfig` the endpoint uses (a Protocol for the same reason)."""

    serving_cert: str
    serving_key: str
    kubelet_port: int


def _tail(text: str, lines: str | None) -> str:
    if lines is None:
        return text
    count = int(lines)
    kept = text.splitlines(keepends=True)
    return "".join(kept[-count:]) if count > 0 else ""


async def start_kubelet_server(host: WorkerFinder, config: ServingConfig) -> web.AppRunner:
    async def container_logs(request: web.Request) -> web.StreamResponse:
        namespace, pod, name = (request.match_info[k] for k in ("namespace", "pod", "container"))
        worker: Any = host.find_worker(namespace, pod)
        if worker is None:
            raise web.HTTPNotFound(text=f"pod {namespace}/{pod} is not on a simulated node\n")
        record = next((r for r in [*worker.inits, *worker.mains] if r.name == name), None)
        if record is None:
            raise web.HTTPNotFound(text=f"container {name} is not in pod {namespace}/{pod}\n")
        run = record.restart_count - (1 if request.query.get("previous") == "true" else 0)
        path = worker.log_path(name, run)
        if not path.exists():
            raise web.HTTPBadRequest(text=f"container {name} in pod {pod} has no log (yet)\n")
        text = _tail(path.read_text(errors="replace"), request.query.get("tailLines"))
        if request.query.get("follow") != "true":
            return web.Response(text=text)
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(text.encode())
        offset = path.stat().st_size
        while record.running or path.stat().st_size > offset:
            await asyncio.sleep(0.5)
            with open(path, "rb") as handle:
                handle.seek(offset)
                chunk = handle.read()
            offset += len(chunk)
            if chunk:
                await response.write(chunk)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/containerLogs/{namespace}/{pod}/{container}", container_logs)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(config.serving_cert, config.serving_key)
    await web.TCPSite(runner, "127.0.0.1", config.kubelet_port, ssl_context=context).start()
    return runner
