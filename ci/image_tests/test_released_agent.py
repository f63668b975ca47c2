"""The agent image a release builds, run as the stage pods' agent on a sandbox node.

ci/build-image builds the agent at its project version and pushes it to our registry (the
`component_image` fixture, shared with test_component_images.py). The operator is given
`<registry>/skyhook/agent:<tag>` as its agent image, and the sandbox's image map runs that
repository with `run: image`: each stage pod pulls it, and its agent containers run the image's
own ENTRYPOINT with the image's Env and User, chrooted in the image, with the node's host root
at /root. The package is packages/shellscript (the default image map's files rule); its apply
step writes a file on the node saying what ran it: the agent process's command line, the PATH
the agent passed on, whether that process's executable is the python3 of its own root, and
whether that root holds the agent's venv.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from _localbuild import LocalBuild

from skyhook_dev.harness import (
    OperatorProcess,
    apply_skyhook,
    ensure_namespace,
    install_crd,
    node_state,
    node_status,
    wait_until,
)
from skyhook_operator.kube.client import connect
from skyhook_sandbox.images import repository
from skyhook_sandbox.sandbox import Sandbox
from skyhook_schemas import keys

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "skyhook"
LABEL = "skyhook.nvidia.com/test-node"
SCR = "released-agent"
REPORT = "skyhook-released-agent"
# Bash, sourced by the package's step, whose parent process is the agent.
APPLY = f"""agent=/proc/$PPID
{{
  echo "agent=$(tr '\\0' ' ' < $agent/cmdline)"
  echo "path=$PATH"
  if [ $agent/exe -ef $agent/root/usr/bin/python3 ]; then echo python=own-root; else echo python=other; fi
  echo "venv=$(ls $agent/root/opt/skyhook/lib/python3*/site-packages | grep -x skyhook_agent)"
}} > /{REPORT}
echo "released agent test: apply ran"
"""


def test_released_agent_image_applies_a_package_on_a_sandbox_node(
    local_build: LocalBuild, component_image: Callable[[str], str], tmp_path: Path
) -> None:
    agent = component_image("agent")
    image_map = tmp_path / "images.yaml"
    rule = {"image": repository(agent), "run": "image", "insecure": True}
    image_map.write_text(json.dumps({"images": [rule]}))
    version = json.loads((REPO / "packages/shellscript/config.json").read_text())["package_version"]
    with Sandbox(tmp_path / "sandbox", image_map=image_map, backoff_initial=0.5) as sandbox:
        [node] = sandbox.add_nodes(1, labels={LABEL: SCR}, prefix="released")
        kube = connect(str(sandbox.kubeconfig))
        install_crd(kube)
        ensure_namespace(kube, NAMESPACE)
        operator = OperatorProcess(
            sandbox.kubeconfig,
            tmp_path / "operator.log",
            env={
                "SKYHOOK_NAMESPACE": NAMESPACE,
                "SKYHOOK_RETRY_INTERVAL": "1",
                "SKYHOOK_AGENT_IMAGE": agent,
            },
        ).start()
        try:
            operator.wait_ready()
            apply_skyhook(kube, released_skyhook(version))
            wait_until(
                lambda: (
                    node_status(kube.request("GET", f"/api/v1/nodes/{node}"), SCR) == "complete"
                ),
                180,
                "the node complete",
            )
        except BaseException:
            print(operator.log_tail(80))
            print((sandbox.state_dir / "logs" / "nodehost.log").read_text()[-5000:])
            raise
        finally:
            operator.stop()

        labels = kube.request("GET", f"/api/v1/nodes/{node}")["metadata"]["labels"]
        assert labels[keys.node_status_key(SCR)] == "complete"
        state = node_state(kube.request("GET", f"/api/v1/nodes/{node}"), SCR)
        assert state[keys.package_key("shellscript", version)]["state"] == "complete"

        upper = sandbox.host_root_upper(node)
        report = dict(line.split("=", 1) for line in (upper / REPORT).read_text().splitlines())
        # The image's ENTRYPOINT (["python", "-m", "skyhook_agent.controller"]) with the
        # stage pod's args, found on the image's PATH in the image's root.
        assert report["agent"].startswith("python -m skyhook_agent.controller apply /root "), report
        assert report["path"].startswith("/opt/skyhook/bin:"), report
        assert report["python"] == "own-root", report
        assert report["venv"] == "skyhook_agent", report
        # The agent's own record of the step on the node, as upstream's agent keeps it.
        step_logs = list((upper / "var/log/skyhook").rglob("shellscript_run.sh-*.log"))
        assert any("released agent test: apply ran" in p.read_text() for p in step_logs)

        events = kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/events")["items"]
        pulled = [e["message"] for e in events if e["reason"] == "Pulled"]
        assert any(f'"{agent}"' in message for message in pulled), pulled


def released_skyhook(version: str) -> dict[str, object]:
    return {
        "apiVersion": "skyhook.nvidia.com/v1alpha1",
        "kind": "Skyhook",
        "metadata": {"name": SCR},
        "spec": {
            "nodeSelectors": {"matchLabels": {LABEL: SCR}},
            "packages": {
                "shellscript": {
                    "version": version,
                    "image": "ghcr.io/nvidia/skyhook-packages/shellscript",
                    "configMap": {
                        "apply.sh": APPLY,
                        "apply_check.sh": f"test -s /{REPORT}\n",
                    },
                }
            },
        },
    }
