"""One simulated node: a real Node object, a Lease heartbeat, and the pods bound to it.

The node reports Ready through its status like a kubelet and renews its Lease in
kube-node-lease so the node lifecycle controller keeps it Ready (and lifts the not-ready
taint). A reboot marks it NotReady, kills its containers, clears /run and /tmp of its host root,
takes a new boot ID and comes back Ready; restartable pods then run their init containers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import platform
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyhook_sandbox import hostroot, simkernel
from skyhook_sandbox.hostroot import NodeRoot
from skyhook_sandbox.images import ImageMap
from skyhook_sandbox.kubeclient import ApiError, KubeClient
from skyhook_sandbox.podstatus import now
from skyhook_sandbox.podworker import Backoff, PodWorker
from skyhook_sandbox.pull import MACHINE_ARCH
from skyhook_sandbox.shims import REBOOT_REQUEST, shim_script
from skyhook_sandbox.versions import KUBERNETES_VERSION

JsonDict = dict[str, Any]
log = logging.getLogger("skyhook_sandbox.node")
LEASE_SECONDS = 40
ARCH = MACHINE_ARCH


@dataclass
class NodeSettings:
    """What every node of one node host shares."""

    client: KubeClient
    images: ImageMap
    backoff: Backoff
    kubelet_port: int
    machine_shims_dir: Path
    machine_shim_targets: list[str]
    reboot_grace: float = 2.0
    reboot_downtime: float = 1.0
    # A fake kubelet: pods run no process; their init containers together take this long.
    fake_pod_seconds: float | None = None
    # False: the Lease is created once and never renewed (Sandbox's lease_renewals).
    lease_renewals: bool = True
    capacity: dict[str, str] = field(
        default_factory=lambda: {
            "cpu": "8",
            "memory": "32Gi",
            "pods": "110",
            "ephemeral-storage": "100Gi",
        }
    )


def micro_time() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class SimulatedNode:
    def __init__(
        self,
        settings: NodeSettings,
        *,
        name: str,
        labels: dict[str, str],
        taints: list[JsonDict],
        root: NodeRoot,
        node_dir: Path,
        index: int,
    ) -> None:
        self.settings = settings
        self.client = settings.client
        self.images = settings.images
        self.backoff = settings.backoff
        self.fake_pod_seconds = settings.fake_pod_seconds
        self.name = name
        self.labels = labels
        self.taints = taints
        self.root = root
        self.node_dir = node_dir
        self.pods_dir = node_dir / "pods"
        self.index = index
        self.host_ip = "127.0.0.1"
        self.boot_id = str(uuid.uuid4())
        self.ready = False
        self.rebooting = False
        self.reboots = 0
        # A test's broken node: a reboot it is asked for never happens (boot id unchanged, the
        # process that asked waits for ever), as a reboot hung in shutdown would.
        self.reboot_hangs = False
        # Conditions something else on the node reports (a problem detector, a health check),
        # by type: kept in every status the node posts.
        self.extra_conditions: dict[str, str] = {}
        self.workers: dict[str, PodWorker] = {}
        self._next_ip = 2
        self._tasks: list[asyncio.Task[None]] = []
        self._background: set[asyncio.Task[None]] = set()
        # A fake kubelet's node runs no process: no host root to boot, no shims to bind.
        self.has_host_root = self.fake_pod_seconds is None
        self.machine_shims = self._write_machine_shims() if self.has_host_root else []
        self._reboot_request = str(root.merged / REBOOT_REQUEST)
        if self.has_host_root:
            simkernel.boot(root.merged)

    def _write_machine_shims(self) -> list[tuple[str, str]]:
        """Copies of the shim for this node, bound over the machine's own reboot/systemctl."""
        shim = self.node_dir / "machine-shim"
        shim.write_text(shim_script(str(self.root.merged)))
        shim.chmod(0o755)
        return [(str(shim), target) for target in self.settings.machine_shim_targets]

    def allocate_pod_ip(self) -> str:
        ip = f"10.{64 + self.index // 256}.{self.index % 256}.{self._next_ip}"
        self._next_ip = self._next_ip % 250 + 2
        return ip

    # -- the Node object and its Lease ---------------------------------------------------------

    def node_object(self) -> JsonDict:
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": ARCH,
            "beta.kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": ARCH,
            **self.labels,
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": {"skyhook-sandbox/simulated": "true"},
            },
            "spec": {"taints": self.taints} if self.taints else {},
        }

    def node_status(self) -> JsonDict:
        stamp = now()
        ready = {
            "type": "Ready",
            "status": "True" if self.ready else "False",
            "reason": "KubeletReady" if self.ready else "KubeletNotReady",
            "message": "kubelet is posting ready status" if self.ready else "node is rebooting",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
        pressure = [
            {"type": kind, "status": "False", "reason": f"KubeletHas{reason}", "message": "ok",
             "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}
            for kind, reason in (("MemoryPressure", "SufficientMemory"),
                                 ("DiskPressure", "NoDiskPressure"), ("PIDPressure", "SufficientPID"))
        ]  # fmt: skip
        extra = [
            {"type": kind, "status": status, "reason": "Reported", "message": "set by a test",
             "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}
            for kind, status in sorted(self.extra_conditions.items())
        ]  # fmt: skip
        return {
            "capacity": self.settings.capacity,
            "allocatable": self.settings.capacity,
            "conditions": [*pressure, ready, *extra],
            "addresses": [
                {"type": "InternalIP", "address": self.host_ip},
                {"type": "Hostname", "address": self.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.settings.kubelet_port}},
            "nodeInfo": {
                "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, self.name).hex,
                "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_URL, self.name)),
                "bootID": self.boot_id,
                "kernelVersion": platform.release(),
                "osImage": "skyhook-sandbox simulated node",
                "containerRuntimeVersion": "skyhook-sandbox://0.1.0",
                "kubeletVersion": KUBERNETES_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": ARCH,
            },
        }

    async def post_status(self) -> None:
        await self.client.merge_patch(
            f"/api/v1/nodes/{self.name}/status", {"status": self.node_status()}
        )

    async def register(self) -> None:
        self.ready = True
        try:
            created = await self.client.create("/api/v1/nodes", self.node_object())
        except ApiError as error:
            if error.status != 409:
                raise
            created = await self.client.merge_patch(
                f"/api/v1/nodes/{self.name}", self.node_object()
            )
        self.uid = created["metadata"]["uid"]
        await self.post_status()
        await self._renew_lease()
        if self.settings.lease_renewals:
            self._tasks.append(asyncio.create_task(self._heartbeat(), name=f"lease {self.name}"))

    def _lease(self) -> JsonDict:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": "kube-node-lease",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self.uid}
                ],
            },
            "spec": {
                "holderIdentity": self.name,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": micro_time(),
            },
        }

    async def _renew_lease(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.name}"
        try:
            await self.client.merge_patch(path, {"spec": {"renewTime": micro_time()}}, answer=False)
        except ApiError as error:
            if error.status != 404:
                raise
            await self.client.create(
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", self._lease()
            )

    async def _heartbeat(self) -> None:
        # Spread the nodes' renewals over the interval instead of all at once.
        await asyncio.sleep((self.index * 0.37) % (LEASE_SECONDS / 4))
        while True:
            if not self.rebooting:
                try:
                    await self._renew_lease()
                except (ApiError, OSError) as error:
                    log.warning("node %s: lease renewal failed: %s", self.name, error)
            await asyncio.sleep(LEASE_SECONDS / 4)

    # -- pods ------------------------------------------------------------------------------------

    def pod_event(self, kind: str, pod: JsonDict) -> None:
        uid = pod["metadata"]["uid"]
        worker = self.workers.get(uid)
        if kind == "DELETED":
            if worker is not None:
                del self.workers[uid]
                task = asyncio.create_task(worker.forget())
                self._background.add(task)
                task.add_done_callback(self._background.discard)
            return
        if worker is None:
            phase = (pod.get("status") or {}).get("phase")
            deleting = pod["metadata"].get("deletionTimestamp")
            if phase in ("Succeeded", "Failed") and not deleting:
                return
            worker = PodWorker(self, pod)
            self.workers[uid] = worker
            if phase in ("Succeeded", "Failed"):
                worker.phase = phase
            elif not deleting and not self.rebooting:
                worker.start()  # pods that arrive during a reboot start when the node is up
        worker.update(pod)

    async def event(self, pod: JsonDict, reason: str, message: str, kind: str) -> None:
        meta = pod["metadata"]
        await self._event(
            meta["namespace"],
            {"kind": "Pod", "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"],
             "apiVersion": "v1"},
            reason, message, kind,
        )  # fmt: skip

    async def _event(
        self, namespace: str, involved: JsonDict, reason: str, message: str, kind: str
    ) -> None:
        stamp = now()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{involved['name']}.", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": "kubelet", "host": self.name},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        with contextlib.suppress(ApiError, OSError):
            await self.client.create(f"/api/v1/namespaces/{namespace}/events", body)

    # -- reboot ----------------------------------------------------------------------------------

    def reboot_requested(self) -> bool:
        # Polled for every node twice a second: a plain string path, no pathlib per call.
        try:
            os.unlink(self._reboot_request)
        except FileNotFoundError:
            return False
        return True

    async def reboot(self) -> str:
        """Simulate a reboot; returns the new boot ID once the node is Ready again (the
        old one at once when `reboot_hangs`)."""
        if self.reboot_hangs:
            return self.boot_id
        if self.rebooting:
            while self.rebooting:
                await asyncio.sleep(0.1)
            return self.boot_id
        self.rebooting = True
        try:
            self.ready = False
            await self.post_status()
            workers = list(self.workers.values())
            await asyncio.gather(*(w.node_going_down(self.settings.reboot_grace) for w in workers))
            if self.has_host_root:
                hostroot.clear_volatile(self.root)
                await asyncio.to_thread(simkernel.boot, self.root.merged)
                (self.root.merged / REBOOT_REQUEST).unlink(missing_ok=True)
            self.boot_id = str(uuid.uuid4())
            self.reboots += 1
            await asyncio.sleep(self.settings.reboot_downtime)
            self.ready = True
            await self.post_status()
            await self._renew_lease()
            await self._event("default", {"kind": "Node", "name": self.name, "uid": self.name,
                                          "apiVersion": "v1"},
                              "Rebooted", f"Node {self.name} has been rebooted, boot id: {self.boot_id}",
                              "Warning")  # fmt: skip
        finally:
            self.rebooting = False
        for worker in list(self.workers.values()):
            await worker.node_came_up()
        return self.boot_id

    # -- removal ---------------------------------------------------------------------------------

    async def stop(self, delete_node: bool) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(
            *(w.forget() for w in list(self.workers.values())), return_exceptions=True
        )
        self.workers.clear()
        if delete_node:
            # No kubelet will finalize this node's pods any more: do it now, like a drain would.
            with contextlib.suppress(ApiError):
                pods = await self.client.get(
                    "/api/v1/pods", {"fieldSelector": f"spec.nodeName={self.name}"}
                )
                for pod in pods.get("items", []):
                    meta = pod["metadata"]
                    with contextlib.suppress(ApiError):
                        await self.client.delete(
                            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                            {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
                        )
            with contextlib.suppress(ApiError):
                await self.client.delete(f"/api/v1/nodes/{self.name}")
