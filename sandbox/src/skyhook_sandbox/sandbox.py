"""The public Python API: a whole sandbox cluster as one object.

    with Sandbox() as sandbox:                      # control plane + node host
        names = sandbox.add_nodes(3, labels={"gpu": "true"})
        kubeconfig = sandbox.kubeconfig
        sandbox.reboot(names[0])                    # returns the new boot ID
        sandbox.host_root_upper(names[0])           # what was written on that node

`Sandbox(fake_pod_seconds=2)` makes the nodes fake kubelets for scale runs: a pod's init
containers finish (exit 0) 2 s after it starts, together, and its app containers run until
it is deleted, without a process, volume or image behind them; the nodes get no host root.

`Sandbox(lease_renewals=False)` makes each node create its Lease once and never renew it, and
has the node lifecycle controller wait a day before calling a node unreachable: a benchmark
then sees the operator's own requests, without a real fleet's heartbeats (one Lease write per
node every 10 s) on the same two cores.

Everything runs in processes of its own (etcd, kube-apiserver, kube-controller-manager and
the node host), so tests may block freely while nodes keep running pods.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from skyhook_sandbox import hostroot, processes
from skyhook_sandbox.binaries import ensure_binaries
from skyhook_sandbox.controlplane import (
    ControlPlaneError,
    ControlPlaneState,
    start_control_plane,
    stop_control_plane,
    wait_ready,
)
from skyhook_sandbox.kubeapi import ready_nodes
from skyhook_sandbox.nodehost import CONFIG_NAME, SOCKET_NAME, NodeHostConfig
from skyhook_sandbox.pki import ensure_pki
from skyhook_sandbox.processes import ManagedProcess
from skyhook_sandbox.progress import BuildProgress

JsonDict = dict[str, Any]
STATE_FILE = "sandbox.json"
# With lease renewals off: longer than any run, so no node is called unreachable (a day).
NO_LEASE_GRACE_S = 86400
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class SandboxError(RuntimeError):
    """A sandbox operation failed; the message says what to do."""


def default_state_dir(name: str = "default") -> Path:
    """$SKYHOOK_SANDBOX_DIR, else /var/tmp/skyhook-sandbox/<name> (outside /root on purpose:
    stage pods mount a node's host root at /root, which would hide anything kept there)."""
    override = os.environ.get("SKYHOOK_SANDBOX_DIR")
    return Path(override) if override else Path("/var/tmp/skyhook-sandbox") / name


def _check_state_dir(path: Path) -> Path:
    resolved = path.resolve()
    if resolved == Path("/root") or Path("/root") in resolved.parents:
        raise SandboxError(
            f"state dir {resolved} is under /root, which stage pods hide by mounting the node's "
            "host root there; choose a directory elsewhere (e.g. /var/tmp/skyhook-sandbox)"
        )
    return resolved


class Sandbox:
    def __init__(
        self,
        state_dir: Path | str | None = None,
        *,
        image_map: Path | str | None = None,
        backoff_initial: float = 1.0,
        backoff_max: float = 10.0,
        reboot_grace: float = 2.0,
        reboot_downtime: float = 1.0,
        fake_pod_seconds: float | None = None,
        lease_renewals: bool = True,
        progress: BuildProgress | None = None,
    ) -> None:
        self.state_dir = _check_state_dir(Path(state_dir) if state_dir else default_state_dir())
        self.image_map = str(Path(image_map).resolve()) if image_map else None
        self.backoff = (backoff_initial, backoff_max)
        self.reboot_timing = (reboot_grace, reboot_downtime)
        self.fake_pod_seconds = fake_pod_seconds
        self.lease_renewals = lease_renewals
        self.progress = progress or BuildProgress()
        self.control_plane: ControlPlaneState | None = None
        self.nodehost: ManagedProcess | None = None
        self._counter = 0

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 180.0) -> Sandbox:
        state_file = self.state_dir / STATE_FILE
        if state_file.exists():
            previous = Sandbox.attach(self.state_dir)
            if previous.is_running():
                raise SandboxError(
                    f"a sandbox is already running in {self.state_dir} "
                    "(`skyhook-sandbox down` stops it, or pick another state dir)"
                )
            previous.stop()
        binaries = ensure_binaries(self.progress)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        for stale in ("etcd", "nodes", "nodes.json", "nodehost.ready"):
            target = self.state_dir / stale
            if target.is_dir():
                shutil.rmtree(target)
            else:
                target.unlink(missing_ok=True)
        self.control_plane = start_control_plane(
            self.state_dir,
            binaries,
            timeout,
            node_monitor_grace_s=None if self.lease_renewals else NO_LEASE_GRACE_S,
        )
        self._save()
        try:
            self._start_nodehost(timeout)
        except BaseException:
            self.stop()
            raise
        self._save()
        return self

    def _start_nodehost(self, timeout: float) -> None:
        assert self.control_plane is not None
        pki = ensure_pki(self.state_dir / "pki")
        config = NodeHostConfig(
            server=self.control_plane.endpoints.server,
            token=pki.node_token,
            ca_file=str(pki.ca_cert),
            serving_cert=str(pki.serving_cert),
            serving_key=str(pki.serving_key),
            kubelet_port=processes.free_port(),
            image_map=self.image_map,
            backoff_initial=self.backoff[0],
            backoff_max=self.backoff[1],
            reboot_grace=self.reboot_timing[0],
            reboot_downtime=self.reboot_timing[1],
            fake_pod_seconds=self.fake_pod_seconds,
            lease_renewals=self.lease_renewals,
        )
        (self.state_dir / CONFIG_NAME).write_text(json.dumps(asdict(config), indent=1))
        self.nodehost = processes.spawn(
            "nodehost",
            [sys.executable, "-m", "skyhook_sandbox.nodehost", str(self.state_dir)],
            self.state_dir / "logs" / "nodehost.log",
            env=dict(os.environ),
        )
        deadline = time.monotonic() + timeout
        while not (self.state_dir / "nodehost.ready").exists():
            if not processes.is_running(self.nodehost):
                tail = Path(self.nodehost.log).read_text(errors="replace")[-3000:]
                raise SandboxError(
                    f"the node host exited during start-up ({self.nodehost.log}):\n{tail}"
                )
            if time.monotonic() > deadline:
                raise SandboxError(
                    f"the node host did not start in {timeout:.0f} s ({self.nodehost.log})"
                )
            time.sleep(0.1)

    def _save(self) -> None:
        state = {
            "control_plane": self.control_plane.to_json() if self.control_plane else None,
            "nodehost": asdict(self.nodehost) if self.nodehost else None,
        }
        (self.state_dir / STATE_FILE).write_text(json.dumps(state, indent=1))

    @classmethod
    def attach(cls, state_dir: Path | str | None = None) -> Sandbox:
        """A handle on a sandbox started elsewhere (e.g. by `skyhook-sandbox up`)."""
        sandbox = cls(state_dir)
        state_file = sandbox.state_dir / STATE_FILE
        if not state_file.exists():
            raise SandboxError(
                f"no sandbox in {sandbox.state_dir} (start one with `skyhook-sandbox up`)"
            )
        state = json.loads(state_file.read_text())
        if state.get("control_plane"):
            sandbox.control_plane = ControlPlaneState.from_json(state["control_plane"])
        if state.get("nodehost"):
            sandbox.nodehost = ManagedProcess(**state["nodehost"])
        return sandbox

    def is_running(self) -> bool:
        procs = [*(self.control_plane.processes if self.control_plane else []), self.nodehost]
        return any(p is not None and processes.is_running(p) for p in procs)

    def stop(self) -> None:
        """Stop the node host (its containers die, host roots unmount), then the control plane."""
        if self.nodehost is not None and processes.is_running(self.nodehost):
            try:
                self._call({"op": "shutdown"}, timeout=10)
                deadline = time.monotonic() + 20
                while processes.is_running(self.nodehost) and time.monotonic() < deadline:
                    time.sleep(0.1)
            except (OSError, SandboxError):
                pass
            processes.stop(self.nodehost, grace=5)
        if self.control_plane is not None:
            stop_control_plane(self.control_plane)
        for mount in hostroot.mounts_under(self.state_dir):
            hostroot.unmount(mount)
        (self.state_dir / STATE_FILE).unlink(missing_ok=True)

    # -- facts -------------------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        if self.control_plane is None:
            raise SandboxError("the sandbox is not started")
        return Path(self.control_plane.kubeconfig)

    @property
    def server(self) -> str:
        if self.control_plane is None:
            raise SandboxError("the sandbox is not started")
        return self.control_plane.endpoints.server

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory of each sandbox process tree (containers count to the node host)."""
        procs = [*(self.control_plane.processes if self.control_plane else []), self.nodehost]
        return {p.name: processes.tree_rss_bytes(p.pid) for p in procs if p is not None}

    # -- control-plane faults ---------------------------------------------------------------------

    def stop_component(self, name: str) -> list[str]:
        """Stop one control-plane process ("etcd", "kube-apiserver", "kube-controller-manager")
        as an outage would; returns its command line for `start_component`."""
        process = self._component(name)
        argv = Path(f"/proc/{process.pid}/cmdline").read_bytes().decode().split("\0")[:-1]
        processes.stop(process, grace=5)
        return argv

    def start_component(self, name: str, argv: list[str], timeout: float = 120.0) -> None:
        """Start a stopped component again with the same command line (etcd keeps its data
        dir), then wait until the apiserver answers ready."""
        assert self.control_plane is not None
        old = self._component(name)
        new = processes.spawn(name, argv, Path(old.log))
        self.control_plane.processes = [
            new if p.name == name else p for p in self.control_plane.processes
        ]
        self._save()
        wait_ready(self.server, self.state_dir / "pki", self.control_plane.processes, timeout)

    def restart_component(self, name: str, timeout: float = 120.0) -> None:
        self.start_component(name, self.stop_component(name), timeout)

    def _component(self, name: str) -> ManagedProcess:
        if self.control_plane is None:
            raise SandboxError("the sandbox is not started")
        for process in self.control_plane.processes:
            if process.name == name:
                return process
        known = ", ".join(p.name for p in self.control_plane.processes)
        raise SandboxError(f"no control-plane process named {name!r} (known: {known})")

    # -- node host control ---------------------------------------------------------------------------

    def _call(self, request: JsonDict, timeout: float = 300.0) -> JsonDict:
        path = self.state_dir / SOCKET_NAME
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                connection.settimeout(timeout)
                connection.connect(str(path))
                connection.sendall(json.dumps(request).encode() + b"\n")
                data = b""
                while not data.endswith(b"\n"):
                    chunk = connection.recv(1 << 16)
                    if not chunk:
                        break
                    data += chunk
        except OSError as error:
            raise SandboxError(f"cannot reach the node host at {path}: {error}") from error
        response: JsonDict = json.loads(data)
        if not response.get("ok"):
            raise SandboxError(f"node host: {response.get('error')}")
        return response

    def add_nodes(
        self,
        count: int = 1,
        *,
        labels: dict[str, str] | None = None,
        prefix: str = "node",
        names: list[str] | None = None,
        taints: list[JsonDict] | None = None,
        host_root: str = "plain",
        wait_ready: bool = True,
        timeout: float = 120.0,
    ) -> list[str]:
        """Create simulated nodes; by default waits until they are Ready and untainted."""
        if names is None:
            names = []
            while len(names) < count:
                self._counter += 1
                names.append(f"{prefix}-{self._counter}")
        for name in names:
            if not _NAME.match(name) or len(name) > 63:
                raise SandboxError(f"node name {name!r}: must be a DNS label (a-z, 0-9, -; max 63)")
        specs = [{"name": n, "labels": dict(labels or {}), "taints": list(taints or []),
                  "host_root": host_root} for n in names]  # fmt: skip
        self._call({"op": "add", "nodes": specs})
        if wait_ready:
            self.wait_ready(names, timeout)
        return names

    def remove_nodes(self, names: list[str]) -> None:
        """Delete the Node objects and their pods, stop their containers, unmount host roots."""
        self._call({"op": "remove", "names": names})

    def reboot(self, name: str, wait: bool = True) -> str | None:
        """Reboot a node (NotReady, containers killed, new boot ID, Ready); returns the boot ID."""
        boot_id = self._call({"op": "reboot", "name": name, "wait": wait}).get("boot_id")
        return str(boot_id) if boot_id else None

    def set_node_condition(self, name: str, kind: str, status: str | None) -> None:
        """Report a node condition of type `kind` (a problem detector's, a health check's) in
        every status the node posts from now on; None removes it."""
        self._call({"op": "set-condition", "name": name, "type": kind, "status": status})

    def hang_reboots(self, name: str, hang: bool = True) -> None:
        """Make a node's reboots hang (for tests of nodes that never come back): a reboot its
        host asks for never happens, its boot id stays, the asking process waits for ever."""
        self._call({"op": "hang-reboots", "name": name, "hang": hang})

    def nodes(self) -> list[JsonDict]:
        return list(self._call({"op": "list"})["nodes"])

    def node(self, name: str) -> JsonDict:
        for entry in self.nodes():
            if entry["name"] == name:
                return entry
        raise SandboxError(f"no simulated node named {name!r}")

    def host_root(self, name: str) -> Path:
        """The node's host root as its pods see it (mounted overlay)."""
        return Path(self.node(name)["host_root"])

    def host_root_upper(self, name: str) -> Path:
        """Only the files written on this node (the overlay's upper dir)."""
        return Path(self.node(name)["host_root_upper"])

    def wait_ready(self, names: list[str], timeout: float = 120.0) -> float:
        """Wait until every named node is Ready with no not-ready taint; returns seconds waited."""
        started = time.monotonic()
        wanted = set(names)
        while True:
            missing = wanted - ready_nodes(self)
            if not missing:
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise SandboxError(
                    f"{len(missing)} node(s) not Ready after {timeout:.0f} s: {sorted(missing)[:5]}"
                )
            time.sleep(0.25)


__all__ = ["ControlPlaneError", "Sandbox", "SandboxError", "default_state_dir"]
