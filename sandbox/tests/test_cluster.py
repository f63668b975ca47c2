"""The control plane and the nodes as the operator sees them: real Node objects, Leases,
controller-manager duties, the kubeconfig, the CLI."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from click.testing import CliRunner
from helpers import NAMESPACE, pod_manifest, shell, wait_for, wait_phase
from kubernetes.client import CoordinationV1Api

from skyhook_sandbox import hostroot
from skyhook_sandbox.cli import main
from skyhook_sandbox.kubeapi import NOT_READY_TAINT, core_v1
from skyhook_sandbox.node import LEASE_SECONDS
from skyhook_sandbox.sandbox import NO_LEASE_GRACE_S, Sandbox
from skyhook_sandbox.versions import KUBERNETES_VERSION


def test_nodes_are_registered_ready_with_labels_lease_and_no_not_ready_taint(api, sandbox_nodes):
    names = sandbox_nodes(3, labels={"skyhook.nvidia.com/test": "yes", "gpu": "a100"})
    selected = api.list_node(label_selector="gpu=a100").items
    assert sorted(n.metadata.name for n in selected) == sorted(names)
    for node in selected:
        ready = next(c for c in node.status.conditions if c.type == "Ready")
        assert ready.status == "True"
        assert NOT_READY_TAINT not in [t.key for t in node.spec.taints or []]
        assert node.status.node_info.boot_id
        assert node.status.node_info.kubelet_version == KUBERNETES_VERSION
        assert node.metadata.labels["kubernetes.io/hostname"] == node.metadata.name
    leases = CoordinationV1Api(api.api_client)
    lease = leases.read_namespaced_lease(names[0], "kube-node-lease")
    assert lease.spec.holder_identity == names[0]
    assert lease.spec.renew_time is not None


def test_controller_manager_provides_service_accounts_and_root_ca(api):
    api.create_namespace({"metadata": {"name": "fresh-ns"}})
    try:
        wait_for(
            lambda: api.list_namespaced_service_account("fresh-ns").items,
            30,
            "default ServiceAccount",
        )
        wait_for(
            lambda: (
                api.list_namespaced_config_map(
                    "fresh-ns", field_selector="metadata.name=kube-root-ca.crt"
                ).items
            ),
            30,
            "kube-root-ca.crt",
        )
    finally:
        api.delete_namespace("fresh-ns")


def test_projected_service_account_token_is_mounted(api, sandbox, sandbox_nodes):
    (node,) = sandbox_nodes()
    script = "test -s /var/run/secrets/kubernetes.io/serviceaccount/token && cat /var/run/secrets/kubernetes.io/serviceaccount/namespace"
    api.create_namespaced_pod(
        NAMESPACE,
        pod_manifest("sa-token", node, restartPolicy="Never", containers=[shell("c", script)]),
    )
    assert wait_phase(api, "sa-token", ("Succeeded", "Failed"))["status"]["phase"] == "Succeeded"
    assert api.read_namespaced_pod_log("sa-token", NAMESPACE) == NAMESPACE


def test_kubectl_works_with_the_kubeconfig(sandbox):
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(sandbox.kubeconfig), "version", "-o", "json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert f'"gitVersion": "{KUBERNETES_VERSION}"' in result.stdout


def test_cli_status_and_nodes_commands(sandbox):
    runner = CliRunner()
    state = ["--state-dir", str(sandbox.state_dir)]
    added = runner.invoke(
        main, ["nodes", "add", *state, "--nodes", "2", "--label", "cli=yes", "--prefix", "cli"]
    )
    assert added.exit_code == 0, added.output
    names = added.output.split()
    assert len(names) == 2
    try:
        status = runner.invoke(main, ["status", *state])
        assert status.exit_code == 0, status.output
        assert f"kubeconfig: {sandbox.kubeconfig}" in status.output
        assert f"node {names[0]}: Ready" in status.output
        before = sandbox.node(names[0])["boot_id"]
        rebooted = runner.invoke(main, ["nodes", "reboot", *state, names[0]])
        assert rebooted.exit_code == 0, rebooted.output
        assert sandbox.node(names[0])["boot_id"] != before
    finally:
        removed = runner.invoke(main, ["nodes", "remove", *state, *names])
        assert removed.exit_code == 0, removed.output
    assert not {n["name"] for n in sandbox.nodes()} & set(names)


def test_cli_rejects_bad_labels(sandbox):
    result = CliRunner().invoke(
        main, ["nodes", "add", "--state-dir", str(sandbox.state_dir), "--label", "novalue"]
    )
    assert result.exit_code != 0
    assert "--label" in result.output and "key=value" in result.output


def test_cli_up_status_down_beside_another_sandbox(sandbox, tmp_path):
    """A second sandbox (another state dir) runs beside the session's on its own free ports."""
    runner = CliRunner()
    state = ["--state-dir", str(tmp_path / "second")]
    up = runner.invoke(
        main, ["up", *state, "--nodes", "2", "--label", "pool=cli", "--prefix", "second"]
    )
    try:
        assert up.exit_code == 0, up.output
        assert "2 node(s) Ready" in up.output
        kubeconfig = tmp_path / "second" / "kubeconfig"
        assert f"kubeconfig: {kubeconfig}" in up.output
        nodes = subprocess.run(
            ["kubectl", "--kubeconfig", str(kubeconfig), "get", "nodes", "-l", "pool=cli", "-o", "name"],
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        assert nodes == ["node/second-1", "node/second-2"]
        assert "127.0.0.1" in sandbox.server and sandbox.server not in kubeconfig.read_text()
    finally:
        down = runner.invoke(main, ["down", *state])
    assert down.exit_code == 0, down.output
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(tmp_path / "second") not in mounts
    status = runner.invoke(main, ["status", *state])
    assert status.exit_code != 0
    assert "no sandbox in" in status.output


def test_without_lease_renewals_a_node_writes_its_lease_once_and_stays_ready(tmp_path):
    """What a benchmark of the operator's own cost runs: no heartbeat traffic, nodes still
    Ready because the node lifecycle controller waits longer than the run."""
    with Sandbox(tmp_path / "quiet", lease_renewals=False) as quiet:
        (name,) = quiet.add_nodes(1, prefix="quiet")
        api = core_v1(quiet)
        leases = CoordinationV1Api(api.api_client)
        written = leases.read_namespaced_lease(name, "kube-node-lease").spec.renew_time
        time.sleep(LEASE_SECONDS / 4 + 2)  # a renewing node writes its Lease again by now
        assert leases.read_namespaced_lease(name, "kube-node-lease").spec.renew_time == written
        ready = next(c for c in api.read_node(name).status.conditions if c.type == "Ready")
        assert ready.status == "True"
        assert quiet.control_plane is not None
        manager = next(
            p for p in quiet.control_plane.processes if p.name == "kube-controller-manager"
        )
        argv = Path(f"/proc/{manager.pid}/cmdline").read_bytes().split(b"\0")
        assert f"--node-monitor-grace-period={NO_LEASE_GRACE_S}s".encode() in argv


def test_a_fake_kubelet_runs_a_stage_pod_to_the_end_with_no_host_root(tmp_path):
    """What the rollout benchmark runs: init containers finish one after the other within the
    fake time, the pod Succeeds, and no node costs a host root (an overlay mount and a boot
    step each, which kept a node host from carrying thousands of nodes)."""
    with Sandbox(tmp_path / "fake", fake_pod_seconds=2, lease_renewals=False) as fake:
        names = fake.add_nodes(3, prefix="fake")
        assert hostroot.mounts_under(tmp_path / "fake") == []
        api = core_v1(fake)
        wait_for(lambda: api.list_namespaced_service_account("default").items, 30, "account")
        container = {"name": "done", "image": "busybox:1.36", "command": ["true"]}
        api.create_namespaced_pod(
            "default",
            {
                "metadata": {"name": "stage"},
                "spec": {
                    "nodeName": names[0],
                    "restartPolicy": "OnFailure",
                    "initContainers": [
                        {**container, "name": "apply"},
                        {**container, "name": "apply-check"},
                    ],
                    "containers": [container],
                },
            },
        )
        started = time.monotonic()
        pod = wait_for(
            lambda: (
                (found := api.read_namespaced_pod("stage", "default")).status.phase == "Succeeded"
                and found
            ),
            30,
            "the stage pod Succeeded",
        )
        assert time.monotonic() - started >= 2 - 0.5
        inits = {s.name: s.state.terminated for s in pod.status.init_container_statuses}
        assert {name: done.exit_code for name, done in inits.items()} == {
            "apply": 0,
            "apply-check": 0,
        }
        assert inits["apply"].finished_at <= inits["apply-check"].started_at
