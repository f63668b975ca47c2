"""Pods shaped exactly like the operator's stage pods run the real agent and a real package,
and host roots can be a real Debian root."""

from __future__ import annotations

import json

from helpers import NAMESPACE, pod_dict, pod_manifest, shell, terminated, wait_phase

COPY_DIR = "/var/lib/skyhook/demo/shellscript-1.1.1-uid-1"
AGENT_ENV = [
    {"name": "SKYHOOK_LOG_DIR", "value": "/var/log/skyhook/demo"},
    {"name": "SKYHOOK_ROOT_DIR", "value": "/var/lib/skyhook/demo"},
    {"name": "COPY_RESOLV", "value": "false"},
    {"name": "SKYHOOK_RESOURCE_ID", "value": "demo-uid-1_shellscript_1.1.1"},
]


def stage_pod(name: str, node: str, stage: str) -> dict:
    mounts = [
        {"name": "root-mount", "mountPath": "/root", "mountPropagation": "HostToContainer"},
        {"name": "metadata", "mountPath": "/skyhook-package/node-metadata"},
        {"name": "shellscript", "mountPath": "/skyhook-package/configmaps"},
    ]
    agent = {"image": "ghcr.io/nvidia/skyhook/agent:v6.3.0", "env": AGENT_ENV, "volumeMounts": mounts,
             "securityContext": {"privileged": True}}  # fmt: skip
    return pod_manifest(
        name,
        node,
        restartPolicy="OnFailure",
        hostPID=True,
        hostNetwork=True,
        tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}],
        volumes=[
            {"name": "root-mount", "hostPath": {"path": "/"}},
            {"name": "metadata", "configMap": {"name": f"demo-{node}-metadata"}},
            {"name": "shellscript", "configMap": {"name": "demo-shellscript-1.1.1"}},
        ],
        initContainers=[
            {
                "name": "shellscript-init",
                "image": "ghcr.io/nvidia/skyhook-packages/shellscript:1.1.1",
                "command": ["/bin/sh"],
                "args": [
                    "-c",
                    "mkdir -p /root/${SKYHOOK_DIR} && cp -rf /skyhook-package/* /root/${SKYHOOK_DIR}",
                ],
                "env": [{"name": "SKYHOOK_DIR", "value": COPY_DIR}],
                "volumeMounts": mounts,
                "securityContext": {"privileged": True},
            },
            {"name": f"shellscript-{stage}", "args": [stage, "/root", COPY_DIR], **agent},
            {
                "name": f"shellscript-{stage}check",
                "args": [f"{stage}-check", "/root", COPY_DIR],
                **agent,
            },
        ],
        containers=[{"name": "pause", "image": "registry.k8s.io/pause:3.10"}],
    )


def test_operator_shaped_stage_pod_runs_the_agent_against_the_host_root(
    api, sandbox, sandbox_nodes
):
    (node,) = sandbox_nodes()
    api.create_namespaced_config_map(
        NAMESPACE,
        {"metadata": {"name": "demo-shellscript-1.1.1"},
         "data": {"apply.sh": "echo applied-on-$(hostname) > /applied.txt\nsystemctl restart containerd\n",
                  "apply_check.sh": "grep -q applied /applied.txt\n"}},
    )  # fmt: skip
    api.create_namespaced_config_map(
        NAMESPACE,
        {
            "metadata": {"name": f"demo-{node}-metadata"},
            "data": {"labels.json": json.dumps({"a": "b"})},
        },
    )
    try:
        api.create_namespaced_pod(NAMESPACE, stage_pod("stage-apply", node, "apply"))
        pod = wait_phase(api, "stage-apply", ("Running", "Failed"), timeout=60)
        inits = pod["status"]["initContainerStatuses"]
        assert [terminated(s).get("exitCode") for s in inits] == [0, 0, 0], inits
        assert all(s["restartCount"] == 0 for s in inits)
    finally:
        api.delete_namespaced_config_map("demo-shellscript-1.1.1", NAMESPACE)
        api.delete_namespaced_config_map(f"demo-{node}-metadata", NAMESPACE)
    upper = sandbox.host_root_upper(node)
    assert (upper / "applied.txt").read_text().startswith("applied-on-")
    # The package copy landed on the host, the agent kept its state and logs there.
    assert (upper / COPY_DIR.lstrip("/") / "config.json").is_file()
    assert (upper / COPY_DIR.lstrip("/") / "configmaps" / "apply.sh").is_file()
    assert (upper / "var/lib/skyhook/demo/history/shellscript.json").is_file()
    assert (
        "systemctl restart containerd"
        in (upper / "var/log/skyhook-sandbox/systemctl.log").read_text()
    )
    log = api.read_namespaced_pod_log("stage-apply", NAMESPACE, container="shellscript-apply")
    assert "apply" in log


def test_debian_host_root(api, sandbox, sandbox_nodes):
    (node,) = sandbox_nodes(host_root="debian")
    script = (
        "chroot /root cat /etc/debian_version > /root/version-seen && "
        "chroot /root dpkg-query -W -f='${Status}' coreutils > /root/dpkg-seen && "
        "chroot /root /usr/bin/systemctl restart kubelet"
    )
    api.create_namespaced_pod(
        NAMESPACE,
        pod_manifest("on-debian", node, restartPolicy="Never",
                     volumes=[{"name": "host", "hostPath": {"path": "/"}}],
                     containers=[shell("c", script, volumeMounts=[{"name": "host", "mountPath": "/root"}])]),
    )  # fmt: skip
    status = wait_phase(api, "on-debian", ("Succeeded", "Failed"), timeout=60)["status"]
    assert status["phase"] == "Succeeded", pod_dict(api, "on-debian")
    upper = sandbox.host_root_upper(node)
    assert (upper / "version-seen").read_text().strip()[:2].isdigit()
    assert (upper / "dpkg-seen").read_text() == "install ok installed"
    assert (
        upper / "var/log/skyhook-sandbox/systemctl.log"
    ).read_text() == "systemctl restart kubelet\n"
    # The base stays shared and untouched: only this node's upper dir holds the writes.
    assert not (sandbox.host_root(node) / "version-seen").is_symlink()
