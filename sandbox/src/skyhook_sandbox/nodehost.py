"""The node host: one asyncio process running every simulated node of a sandbox.

It watches all pods bound to a node (one watch, dispatched locally), serves a small control
socket (add / remove / reboot / list nodes, JSON lines), polls each host root for reboot
requests from the shims, serves container logs on the kubelet port for `kubectl logs`, and
records its nodes in nodes.json so a restarted node host brings the same nodes back.

Run as `python -m skyhook_sandbox.nodehost <state dir>`; the Sandbox API and CLI start it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import sys
from collections.abc import Coroutine
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from skyhook_sandbox import hostroot, layers, shims
from skyhook_sandbox.images import ImageMap
from skyhook_sandbox.kubeclient import ApiError, KubeClient
from skyhook_sandbox.kubelet_server import start_kubelet_server
from skyhook_sandbox.node import NodeSettings, SimulatedNode
from skyhook_sandbox.podworker import Backoff

JsonDict = dict[str, Any]
log = logging.getLogger("skyhook_sandbox.nodehost")
SOCKET_NAME = "nodehost.sock"
CONFIG_NAME = "nodehost.json"


@dataclass
class NodeHostConfig:
    """Written by the Sandbox before it starts the node host."""

    server: str
    token: str
    ca_file: str
    serving_cert: str
    serving_key: str
    kubelet_port: int
    image_map: str | None = None
    backoff_initial: float = 1.0
    backoff_max: float = 10.0
    reboot_grace: float = 2.0
    reboot_downtime: float = 1.0
    fake_pod_seconds: float | None = None
    lease_renewals: bool = True


@dataclass
class NodeRecord:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[JsonDict] = field(default_factory=list)
    host_root: str = "plain"


class NodeHost:
    def __init__(self, state_dir: Path, config: NodeHostConfig) -> None:
        self.state_dir = state_dir
        self.config = config
        self.client = KubeClient(config.server, config.token, config.ca_file)
        shim_targets = shims.machine_command_paths()
        self.settings = NodeSettings(
            client=self.client,
            images=ImageMap.from_environment(
                Path(config.image_map) if config.image_map else None, state_dir / "images"
            ),
            backoff=Backoff(config.backoff_initial, config.backoff_max),
            kubelet_port=config.kubelet_port,
            machine_shims_dir=state_dir / "nodes",
            machine_shim_targets=shim_targets,
            reboot_grace=config.reboot_grace,
            reboot_downtime=config.reboot_downtime,
            fake_pod_seconds=config.fake_pod_seconds,
            lease_renewals=config.lease_renewals,
        )
        self.fake = config.fake_pod_seconds is not None
        self.nodes: dict[str, SimulatedNode] = {}
        self.records: dict[str, NodeRecord] = {}
        self._layers: dict[str, list[Path]] = {}
        self._index = 0
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        self._background: set[asyncio.Task[Any]] = set()

    # -- nodes -------------------------------------------------------------------------------

    def _save(self) -> None:
        path = self.state_dir / "nodes.json"
        path.write_text(json.dumps([asdict(r) for r in self.records.values()], indent=1))

    async def add_nodes(self, records: list[NodeRecord]) -> list[str]:
        async with self._lock:
            fresh = [r for r in records if r.name not in self.nodes]
            kinds = set() if self.fake else {r.host_root for r in fresh} - self._layers.keys()
            for kind in sorted(kinds):  # a fake kubelet's nodes have no host root to layer
                self._layers[kind] = await asyncio.to_thread(layers.lower_layers, kind)
            created = []
            for record in fresh:
                node_dir = self.state_dir / "nodes" / record.name
                root = (
                    hostroot.unmounted_node_root(node_dir)
                    if self.fake
                    else hostroot.mount_node_root(node_dir, self._layers[record.host_root])
                )
                node = SimulatedNode(
                    self.settings,
                    name=record.name,
                    labels=record.labels,
                    taints=record.taints,
                    root=root,
                    node_dir=node_dir,
                    index=self._index,
                )
                self._index += 1
                self.nodes[record.name] = node
                self.records[record.name] = record
                created.append(node)
            self._save()
        # Register in bounded parallel batches: hundreds at once would only queue in the client.
        semaphore = asyncio.Semaphore(32)

        async def register(node: SimulatedNode) -> None:
            async with semaphore:
                await node.register()
                await self._adopt_existing_pods(node)

        await asyncio.gather(*(register(node) for node in created))
        return [r.name for r in records]

    async def _adopt_existing_pods(self, node: SimulatedNode) -> None:
        pods = await self.client.get(
            "/api/v1/pods", {"fieldSelector": f"spec.nodeName={node.name}"}
        )
        for pod in pods.get("items", []):
            node.pod_event("ADDED", pod)

    async def remove_nodes(self, names: list[str], delete: bool = True) -> None:
        for name in names:
            node = self.nodes.pop(name, None)
            self.records.pop(name, None)
            if node is None:
                continue
            await node.stop(delete_node=delete)
            if not self.fake:
                hostroot.unmount(node.root.merged)
        self._save()

    def describe(self) -> list[JsonDict]:
        return [
            {
                "name": node.name,
                "labels": node.labels,
                "boot_id": node.boot_id,
                "ready": node.ready and not node.rebooting,
                "reboots": node.reboots,
                "host_root": str(node.root.merged),
                "host_root_upper": str(node.root.upper),
                "host_root_kind": self.records[node.name].host_root,
                "pods": sorted(f"{w.namespace}/{w.name}" for w in node.workers.values()),
            }
            for node in self.nodes.values()
        ]

    # -- pods ----------------------------------------------------------------------------------

    async def watch_pods(self) -> None:
        params = {"fieldSelector": "spec.nodeName!="}
        while not self._stop.is_set():
            try:
                listing = await self.client.get("/api/v1/pods", params)
                for pod in listing.get("items", []):
                    self._dispatch("ADDED", pod)
                self._forget_missing({pod["metadata"]["uid"] for pod in listing.get("items", [])})
                version = listing["metadata"]["resourceVersion"]
                while not self._stop.is_set():
                    async for event in self.client.watch(
                        "/api/v1/pods", {**params, "resourceVersion": version}
                    ):
                        kind, obj = event["type"], event["object"]
                        if kind == "ERROR":
                            raise ApiError(
                                obj.get("code", 500), obj.get("message", ""), "WATCH", "pods"
                            )
                        version = obj["metadata"]["resourceVersion"]
                        if kind != "BOOKMARK":
                            self._dispatch(kind, obj)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a dropped or expired watch: list again
                log.info("pod watch restarting: %s", error)
                await asyncio.sleep(0.5)

    def _forget_missing(self, present: set[str]) -> None:
        """Pods deleted while no watch was open never sent DELETED: drop them after a list."""
        for node in self.nodes.values():
            for uid, worker in list(node.workers.items()):
                if uid not in present:
                    node.pod_event("DELETED", worker.pod)

    def _dispatch(self, kind: str, pod: JsonDict) -> None:
        node = self.nodes.get(pod.get("spec", {}).get("nodeName", ""))
        if node is not None:
            node.pod_event(kind, pod)

    def find_worker(self, namespace: str, name: str) -> Any:
        for node in self.nodes.values():
            for worker in node.workers.values():
                if worker.namespace == namespace and worker.name == name:
                    return worker
        return None

    async def poll_reboot_requests(self) -> None:
        while not self._stop.is_set():
            for node in list(self.nodes.values()):
                if not node.rebooting and node.reboot_requested():
                    log.info("node %s: reboot requested from inside the host root", node.name)
                    self._spawn(node.reboot())
            await asyncio.sleep(0.5)

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- control socket -------------------------------------------------------------------------

    async def handle(self, request: JsonDict) -> JsonDict:
        op = request.get("op")
        if op == "ping":
            return {"ok": True}
        if op == "add":
            records = [NodeRecord(**spec) for spec in request["nodes"]]
            return {"ok": True, "nodes": await self.add_nodes(records)}
        if op == "remove":
            await self.remove_nodes(list(request["names"]))
            return {"ok": True}
        if op == "reboot":
            node = self.nodes.get(request["name"])
            if node is None:
                return {"ok": False, "error": f"no simulated node named {request['name']!r}"}
            task = asyncio.create_task(node.reboot())
            boot_id = await task if request.get("wait", True) else None
            return {"ok": True, "boot_id": boot_id}
        if op == "set-condition":
            node = self.nodes.get(request["name"])
            if node is None:
                return {"ok": False, "error": f"no simulated node named {request['name']!r}"}
            if request.get("status") is None:
                node.extra_conditions.pop(request["type"], None)
            else:
                node.extra_conditions[request["type"]] = str(request["status"])
            await node.post_status()
            return {"ok": True}
        if op == "hang-reboots":
            node = self.nodes.get(request["name"])
            if node is None:
                return {"ok": False, "error": f"no simulated node named {request['name']!r}"}
            node.reboot_hangs = bool(request.get("hang", True))
            return {"ok": True}
        if op == "list":
            return {"ok": True, "nodes": self.describe()}
        if op == "shutdown":
            self._stop.set()
            return {"ok": True}
        return {"ok": False, "error": f"unknown op {op!r}"}

    async def _serve_client(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await self._answer(reader, writer)
        writer.close()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            try:
                response = await self.handle(json.loads(line))
            except Exception as error:
                log.exception("control request failed")
                response = {"ok": False, "error": f"{type(error).__name__}: {error}"}
            writer.write(json.dumps(response).encode() + b"\n")
            await writer.drain()

    async def run(self) -> None:
        socket_path = self.state_dir / SOCKET_NAME
        socket_path.unlink(missing_ok=True)
        server = await asyncio.start_unix_server(
            self._serve_client, path=str(socket_path), limit=1 << 24
        )
        kubelet = await start_kubelet_server(self, self.config)
        saved = self.state_dir / "nodes.json"
        if saved.exists():
            await self.add_nodes([NodeRecord(**r) for r in json.loads(saved.read_text())])
        tasks = [asyncio.create_task(self.watch_pods())]
        if not self.fake:  # a fake kubelet runs no process that could ask for a reboot
            tasks.append(asyncio.create_task(self.poll_reboot_requests()))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        (self.state_dir / "nodehost.ready").write_text("ready\n")
        await self._stop.wait()
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for node in list(self.nodes.values()):
            await node.stop(delete_node=False)
            if not self.fake:
                hostroot.unmount(node.root.merged)
        await kubelet.cleanup()
        await self.client.close()
        socket_path.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> None:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        raise SystemExit("usage: python -m skyhook_sandbox.nodehost <state dir>")
    state_dir = Path(args[0])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    config = NodeHostConfig(**json.loads((state_dir / CONFIG_NAME).read_text()))
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(NodeHost(state_dir, config).run())


if __name__ == "__main__":
    main()
