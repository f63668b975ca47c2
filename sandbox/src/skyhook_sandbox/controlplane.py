"""etcd + kube-apiserver + kube-controller-manager on loopback, with fresh free ports.

The apiserver runs with service-account signing, RBAC (plus the Node authorizer), the default
admission plugins and privileged pods allowed; eviction works because policy/v1 is served.
The controller-manager supplies what a cluster needs beyond the API: default service accounts
and tokens, the kube-root-ca.crt ConfigMap, garbage collection, namespace deletion and the node
lifecycle controller that lifts the not-ready taint from Ready nodes.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from skyhook_sandbox import processes
from skyhook_sandbox.binaries import ControlPlaneBinaries
from skyhook_sandbox.pki import Pki, ensure_pki
from skyhook_sandbox.processes import ManagedProcess


class ControlPlaneError(RuntimeError):
    """The control plane did not come up; the message names the log to read."""


@dataclass(frozen=True)
class Endpoints:
    etcd_client: int
    etcd_peer: int
    apiserver: int

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver}"


def write_kubeconfig(path: Path, server: str, ca_cert: Path, user: str, token: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "skyhook-sandbox",
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_cert.read_bytes()).decode(),
                },
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [
            {"name": "skyhook-sandbox", "context": {"cluster": "skyhook-sandbox", "user": user}}
        ],
        "current-context": "skyhook-sandbox",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)


def etcd_argv(binaries: ControlPlaneBinaries, data_dir: Path, ports: Endpoints) -> list[str]:
    client = f"http://127.0.0.1:{ports.etcd_client}"
    return [
        str(binaries.etcd),
        "--name=sandbox",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls=http://127.0.0.1:{ports.etcd_peer}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{ports.etcd_peer}",
        f"--initial-cluster=sandbox=http://127.0.0.1:{ports.etcd_peer}",
        "--unsafe-no-fsync",  # throwaway data: fsync only slows tests down
        "--log-level=warn",
    ]


def apiserver_argv(binaries: ControlPlaneBinaries, pki: Pki, ports: Endpoints) -> list[str]:
    return [
        str(binaries.kube_apiserver),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={pki.serving_cert}",
        f"--tls-private-key-file={pki.serving_key}",
        f"--client-ca-file={pki.ca_cert}",
        f"--token-auth-file={pki.token_file}",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        "--service-account-issuer=https://kubernetes.default.svc",
        "--authorization-mode=Node,RBAC",
        "--service-cluster-ip-range=10.0.0.0/24",
        "--allow-privileged=true",
        "--endpoint-reconciler-type=none",
        "--kubelet-preferred-address-types=InternalIP",
        "--profiling=false",
    ]


def controller_manager_argv(
    binaries: ControlPlaneBinaries,
    pki: Pki,
    kubeconfig: Path,
    port: int,
    node_monitor_grace_s: int | None = None,
) -> list[str]:
    # Nodes that never renew their Lease (see Sandbox's lease_renewals) stay Ready only if the
    # node lifecycle controller waits longer than the run before calling them unreachable.
    grace = [f"--node-monitor-grace-period={node_monitor_grace_s}s"] if node_monitor_grace_s else []
    return [
        str(binaries.kube_controller_manager),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--service-account-private-key-file={pki.sa_key}",
        f"--root-ca-file={pki.ca_cert}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        "--controllers=*",
        # Notice Ready nodes quickly so their not-ready taint goes away within seconds.
        "--node-monitor-period=1s",
        # The default client rate (20 QPS) makes lifting taints from hundreds of nodes crawl.
        "--kube-api-qps=200",
        "--kube-api-burst=400",
        "--profiling=false",
        *grace,
    ]


@dataclass
class ControlPlaneState:
    """What `down` and `status` need, persisted as JSON in the state dir."""

    endpoints: Endpoints
    kubeconfig: str
    processes: list[ManagedProcess]

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ControlPlaneState:
        endpoints = Endpoints(**data["endpoints"])  # type: ignore[arg-type]
        procs = [ManagedProcess(**p) for p in data["processes"]]  # type: ignore[attr-defined]
        return cls(endpoints=endpoints, kubeconfig=str(data["kubeconfig"]), processes=procs)


def start_control_plane(
    state_dir: Path,
    binaries: ControlPlaneBinaries,
    timeout: float = 120.0,
    node_monitor_grace_s: int | None = None,
) -> ControlPlaneState:
    pki = ensure_pki(state_dir / "pki")
    ports = Endpoints(processes.free_port(), processes.free_port(), processes.free_port())
    logs = state_dir / "logs"
    kubeconfig = state_dir / "kubeconfig"
    write_kubeconfig(kubeconfig, ports.server, pki.ca_cert, "admin", pki.admin_token)
    kcm_kubeconfig = state_dir / "pki" / "controller-manager.kubeconfig"
    write_kubeconfig(
        kcm_kubeconfig, ports.server, pki.ca_cert, "controller-manager", pki.controller_token
    )
    started: list[ManagedProcess] = []
    try:
        etcd = processes.spawn(
            "etcd", etcd_argv(binaries, state_dir / "etcd", ports), logs / "etcd.log"
        )
        started.append(etcd)
        apiserver = processes.spawn(
            "kube-apiserver", apiserver_argv(binaries, pki, ports), logs / "kube-apiserver.log"
        )
        started.append(apiserver)
        _wait_ready(ports.server, pki, [etcd, apiserver], timeout)
        kcm = processes.spawn(
            "kube-controller-manager",
            controller_manager_argv(
                binaries, pki, kcm_kubeconfig, processes.free_port(), node_monitor_grace_s
            ),
            logs / "kube-controller-manager.log",
        )
        started.append(kcm)
        _wait_for_default_service_account(ports.server, pki, kcm, timeout)
    except BaseException:
        for process in reversed(started):
            processes.stop(process, grace=2)
        raise
    return ControlPlaneState(endpoints=ports, kubeconfig=str(kubeconfig), processes=started)


def stop_control_plane(state: ControlPlaneState) -> None:
    for process in reversed(state.processes):
        processes.stop(process)


def _get(server: str, pki: Pki, path: str) -> tuple[int, bytes]:
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    request = urllib.request.Request(
        server + path, headers={"Authorization": f"Bearer {pki.admin_token}"}
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _check_alive(procs: list[ManagedProcess]) -> None:
    for process in procs:
        if not processes.is_running(process):
            tail = Path(process.log).read_text(errors="replace").splitlines()[-15:]
            raise ControlPlaneError(
                f"{process.name} exited during start-up; log {process.log}:\n" + "\n".join(tail)
            )


def wait_ready(server: str, pki_dir: Path, procs: list[ManagedProcess], timeout: float) -> None:
    """Until the apiserver answers /readyz with 200 (raises if a process of `procs` exits)."""
    _wait_ready(server, ensure_pki(pki_dir), procs, timeout)


def _wait_ready(server: str, pki: Pki, procs: list[ManagedProcess], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while time.monotonic() < deadline:
        _check_alive(procs)
        try:
            status, body = _get(server, pki, "/readyz")
            if status == 200:
                return
            last = f"HTTP {status}: {body.decode(errors='replace')[-300:]}"
        except OSError as error:
            last = str(error)
        time.sleep(0.25)
    raise ControlPlaneError(f"kube-apiserver not ready after {timeout:.0f} s ({last})")


def _wait_for_default_service_account(
    server: str, pki: Pki, kcm: ManagedProcess, timeout: float
) -> None:
    """The controller-manager works once it has made the default namespace's ServiceAccount."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _check_alive([kcm])
        status, body = _get(server, pki, "/api/v1/namespaces/default/serviceaccounts/default")
        if status == 200 and json.loads(body).get("metadata"):
            return
        time.sleep(0.25)
    raise ControlPlaneError(
        f"kube-controller-manager made no default ServiceAccount in {timeout:.0f} s; log {kcm.log}"
    )
