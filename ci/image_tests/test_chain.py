"""The whole release chain, played here: commit, tag, build and push, roll out, host file.

In a clone of this repository: a commit adds a marker file to the shellscript package and is
tagged `shellscript/<version>`; the clone's own ci/build-package builds that tag for linux/amd64
and linux/arm64 and pushes it to the local registry. A sandbox whose image map pulls
`<registry>/skyhook-packages/*` from the registry (skopeo + umoci, for the node's architecture),
the operator, and an SCR naming `<registry>/skyhook-packages/shellscript` at that version: the
stage pods pull the image, the agent runs the package from it, and each node's host root gets
the file the package's apply step writes, holding the marker the tagged commit added.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from _localbuild import LocalBuild

from skyhook_dev.harness import (
    OperatorProcess,
    apply_skyhook,
    ensure_namespace,
    install_crd,
    node_status,
    wait_until,
)
from skyhook_operator.kube.client import connect
from skyhook_sandbox.sandbox import Sandbox

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "skyhook"
LABEL = "skyhook.nvidia.com/test-node"


def git(clone: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=chain", "-c", "user.email=chain@example.com", *args],
        cwd=clone, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def tag_a_release(tmp_path: Path, marker: str) -> tuple[Path, str]:
    """A clone of HEAD with one more commit (the marker file, and the next patch version, as
    the released one is tagged already), tagged; returns (clone, tag)."""
    clone = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", "--shared", str(REPO), str(clone)], check=True)
    package = clone / "packages" / "shellscript"
    (package / "skyhook_dir" / "chain-marker").write_text(marker + "\n")
    config_path = package / "config.json"
    config = json.loads(config_path.read_text())
    major, minor, patch = config["package_version"].split(".")
    version = f"{major}.{minor}.{int(patch) + 1}"
    config_path.write_text(
        config_path.read_text().replace(
            f'"package_version": "{config["package_version"]}"', f'"package_version": "{version}"'
        )
    )
    assert json.loads(config_path.read_text())["package_version"] == version
    git(clone, "add", "packages/shellscript")
    git(clone, "commit", "-q", "-m", "feat(shellscript): a marker file for the release chain test")
    tag = f"shellscript/{version}"
    git(clone, "tag", "-a", tag, "-m", tag)
    return clone, tag


def test_tagged_package_rolls_out_from_the_registry_to_every_node(
    local_build: LocalBuild, busybox_base: str, tmp_path: Path
) -> None:
    marker = f"built from the tagged commit in {tmp_path.name}"
    clone, tag = tag_a_release(tmp_path, marker)
    version = tag.partition("/")[2]
    built = subprocess.run(
        [
            sys.executable, str(clone / "ci" / "build-package"), tag,
            "--registry", f"{local_build.registry}/skyhook-packages",
            "--build-arg", f"BASE_IMAGE={busybox_base}",
        ],
        env={**os.environ, **local_build.env()},
        cwd=clone, capture_output=True, text=True,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]

    image_map = tmp_path / "images.yaml"
    rule = {
        "image": f"{local_build.registry}/skyhook-packages/*",
        "run": "pull",
        "path": "/skyhook-package",
        "insecure": True,
    }
    image_map.write_text(json.dumps({"images": [rule]}))
    with Sandbox(tmp_path / "sandbox", image_map=image_map, backoff_initial=0.5) as sandbox:
        nodes = sandbox.add_nodes(2, labels={LABEL: "chain"}, prefix="chain")
        kube = connect(str(sandbox.kubeconfig))
        install_crd(kube)
        ensure_namespace(kube, NAMESPACE)
        operator = OperatorProcess(
            sandbox.kubeconfig,
            tmp_path / "operator.log",
            env={"SKYHOOK_NAMESPACE": NAMESPACE, "SKYHOOK_RETRY_INTERVAL": "1"},
        ).start()
        try:
            operator.wait_ready()
            apply_skyhook(kube, chain_skyhook(f"{local_build.registry}/skyhook-packages", version))

            def complete() -> bool:
                return all(
                    node_status(kube.request("GET", f"/api/v1/nodes/{name}"), "chain") == "complete"
                    for name in nodes
                )

            wait_until(complete, 180, "both nodes complete")
        except BaseException:
            print(operator.log_tail(80))
            raise
        finally:
            operator.stop()
        for name in nodes:
            landed = sandbox.host_root_upper(name) / "skyhook-chain"
            assert landed.read_text() == marker + "\n", name
        events = kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/events")["items"]
        pulled = [e for e in events if e["reason"] == "Pulled"]
        assert any(f"{local_build.registry}/skyhook-packages/shellscript:{version}" in e["message"]
                   for e in pulled)  # fmt: skip


def chain_skyhook(repository: str, version: str) -> dict[str, object]:
    return {
        "apiVersion": "skyhook.nvidia.com/v1alpha1",
        "kind": "Skyhook",
        "metadata": {"name": "chain"},
        "spec": {
            "nodeSelectors": {"matchLabels": {LABEL: "chain"}},
            "packages": {
                "shellscript": {
                    "version": version,
                    "image": f"{repository}/shellscript",
                    "configMap": {
                        "apply.sh": 'cp "$SKYHOOK_DIR/skyhook_dir/chain-marker" /skyhook-chain\n',
                        "apply_check.sh": "test -s /skyhook-chain\n",
                    },
                }
            },
        },
    }
