"""ci/e2e-kind without docker or kind: bash syntax, the dry-run plan, and the checks it runs.

The real run needs docker, kind, kubectl and helm (none usable here); its judging logic lives
in ci/e2e/kind_checks.py and is exercised below on node objects shaped like the real ones.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from skyhook_schemas.crds import SKYHOOK_CRD_PATH

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "ci" / "e2e-kind"
DEMO_SCR = REPO / "dev/src/skyhook_dev/demo-scr.yaml"
sys.path.insert(0, str(REPO / "ci" / "e2e"))
import kind_checks  # noqa: E402

TOOLS = ("docker", "kind", "kubectl", "helm")


@pytest.fixture
def fake_tools(tmp_path: Path) -> Path:
    """docker/kind/kubectl/helm that record any call, first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        fake = bin_dir / tool
        fake.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{tmp_path}/called"\n')
        fake.chmod(0o755)
    return bin_dir


def dry_run(fake_tools: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PATH": f"{fake_tools}:{os.environ['PATH']}", **env}
    return subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", *args], capture_output=True, text=True, env=environ
    )


def commands(output: str) -> list[str]:
    return [line[2:].strip() for line in output.splitlines() if line.startswith("+ ")]


def test_script_is_valid_bash() -> None:
    result = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_dry_run_prints_the_whole_plan_and_runs_nothing(fake_tools: Path) -> None:
    result = dry_run(fake_tools)
    assert result.returncode == 0, result.stderr
    assert not (fake_tools.parent / "called").exists(), "dry run invoked a tool"
    plan = commands(result.stdout)
    expected_order = [
        r"^docker run -d .*--name skyhook-e2e-registry registry:2",
        r"^kind create cluster --name skyhook-e2e --config ",
        r"^kubectl label nodes .* skyhook\.nvidia\.com/test-node=demo",
        r"^docker build -f agent/Dockerfile -t ghcr\.io/nvidia/skyhook/agent:e2e \.",
        r"^docker build -f operator/Dockerfile -t ghcr\.io/nvidia/skyhook/operator:e2e \.",
        r"^kind load docker-image --name skyhook-e2e ghcr\.io/nvidia/skyhook/agent:e2e",
        r"^helm install skyhook-operator chart --namespace skyhook .*operator\.image\.tag=e2e "
        r".*agent\.image\.tag=e2e",
        r"^docker build -t ghcr\.io/nvidia/skyhook-packages/shellscript:\S+ packages/shellscript",
        r"^kubectl apply -f dev/src/skyhook_dev/demo-scr\.yaml",
        r"^kubectl wait skyhook/demo --for=jsonpath=.*status\.status.*=complete",
        r"^check: complete demo",
        r"^kubectl delete skyhook/demo",
        r"^check: clean demo",
        r"^kind delete cluster --name skyhook-e2e",
        r"^docker rm -f skyhook-e2e-registry",
    ]
    position = 0
    for pattern in expected_order:
        found = next(
            (i for i, line in enumerate(plan[position:], position) if re.search(pattern, line)),
            None,
        )
        assert found is not None, f"{pattern!r} missing or out of order in:\n" + "\n".join(plan)
        position = found + 1


def test_dry_run_follows_the_environment_and_keep(fake_tools: Path) -> None:
    result = dry_run(
        fake_tools, "--keep", CLUSTER_NAME="ci-x", IMAGE_TAG="t1", WORKERS="3", NAMESPACE="ops"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("- role: worker") == 3
    plan = commands(result.stdout)
    assert any(line.startswith("kind create cluster --name ci-x ") for line in plan)
    assert any("ghcr.io/nvidia/skyhook/agent:t1" in line for line in plan)
    assert any(
        line.startswith("helm install skyhook-operator chart --namespace ops") for line in plan
    )
    assert not any(line.startswith("kind delete cluster") for line in plan)
    assert "keeping cluster ci-x" in result.stdout


def test_unknown_argument_is_refused(fake_tools: Path) -> None:
    result = dry_run(fake_tools, "--fast")
    assert result.returncode == 2
    assert "unknown argument '--fast'" in result.stderr


def test_real_run_without_the_tools_says_which_are_missing(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "mktemp", "rm"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    result = subprocess.run(
        [str(bin_dir / "bash"), str(SCRIPT)],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": str(bin_dir)},
    )
    assert result.returncode == 2
    assert "missing tools: docker kind kubectl helm python3" in result.stderr


# --- the checks -----------------------------------------------------------------------------

SCR: dict[str, Any] = yaml.safe_load(DEMO_SCR.read_text())
STATE_KEY = "skyhook.nvidia.com/nodeState_demo"
STATUS_KEY = "skyhook.nvidia.com/status_demo"


def node(
    name: str, *, selected: bool = True, state: dict[str, Any] | None = None
) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name}
    annotations: dict[str, str] = {}
    if selected:
        labels["skyhook.nvidia.com/test-node"] = "demo"
    if state is not None:
        annotations[STATE_KEY] = json.dumps(state, separators=(",", ":"))
        done = all(entry["state"] == "complete" for entry in state.values())
        labels[STATUS_KEY] = "complete" if done else "in_progress"
    return {
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def entry(stage: str, state: str) -> dict[str, Any]:
    image = "ghcr.io/nvidia/skyhook-packages/shellscript"
    return {"name": "tuning", "version": "1.1.0", "image": image, "stage": stage, "state": state}


def test_package_images_of_the_demo_scr() -> None:
    assert kind_checks.package_images(SCR) == ["ghcr.io/nvidia/skyhook-packages/shellscript:1.1.0"]


def test_complete_when_every_selected_node_finished_every_package() -> None:
    done = {"tuning|1.1.0": entry("config", "complete")}
    nodes = [node("w1", state=done), node("w2", state=done), node("cp", selected=False)]
    assert kind_checks.completion_problems(SCR, nodes) == []


def test_incomplete_nodes_are_named() -> None:
    nodes = [
        node("w1", state={"tuning|1.1.0": entry("apply", "in_progress")}),
        node("w2"),
        node("w3", state={"tuning|1.0.0": entry("config", "complete")}),
    ]
    problems = kind_checks.completion_problems(SCR, nodes)
    assert "w1: tuning|1.1.0 is apply/in_progress, not complete" in problems
    assert "w1: label skyhook.nvidia.com/status_demo is 'in_progress'" in problems
    assert "w2: no skyhook.nvidia.com/nodeState_demo annotation" in problems
    assert any(p.startswith("w3: nodeState has ['tuning|1.0.0']") for p in problems)
    assert kind_checks.completion_problems(SCR, [node("cp", selected=False)]) == [
        "no node matches the nodeSelectors of demo"
    ]


def test_clean_nodes_pass_and_leftovers_are_named() -> None:
    clean = node("w1")
    assert kind_checks.leftover_problems("demo", [clean], []) == []
    dirty = node("w2", state={"tuning|1.1.0": entry("config", "complete")})
    dirty["metadata"]["annotations"]["skyhook.nvidia.com/cordon_demo"] = "true"
    dirty["metadata"]["annotations"]["skyhook.nvidia.com/nodeState_other"] = "{}"  # not ours
    dirty["spec"]["unschedulable"] = True
    dirty["status"]["conditions"].append({"type": "skyhook.nvidia.com/demo/NotReady"})
    pod = {"kind": "Pod", "metadata": {"namespace": "skyhook", "name": "demo-w2-tuning-apply"}}
    problems = kind_checks.leftover_problems("demo", [clean, dirty], [pod])
    assert sorted(problems) == sorted(
        [
            f"w2: annotation {STATE_KEY} left",
            "w2: annotation skyhook.nvidia.com/cordon_demo left",
            f"w2: label {STATUS_KEY} left",
            "w2: condition skyhook.nvidia.com/demo/NotReady left",
            "w2: still cordoned",
            "Pod skyhook/demo-w2-tuning-apply left",
        ]
    )


# --- the checks' kubectl plumbing, on a real apiserver ---------------------------------------

CHECKS = REPO / "ci" / "e2e" / "kind_checks.py"


def run_checks(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECKS), *args, "--settle", "0"],
        capture_output=True,
        text=True,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
    )


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> None:
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.sandbox
def test_checks_read_a_real_cluster(sandbox_kubeconfig: Path, sandbox_nodes: Any) -> None:
    """What the e2e run sees after a rollout, written by hand: the checks must judge it."""
    kubectl(sandbox_kubeconfig, "apply", "--server-side", "-f", str(SKYHOOK_CRD_PATH))
    kubectl(
        sandbox_kubeconfig,
        "wait",
        "--for=condition=Established",
        "crd/skyhooks.skyhook.nvidia.com",
        "--timeout=60s",
    )
    images = run_checks(sandbox_kubeconfig, "package-images", str(DEMO_SCR))
    assert images.returncode == 0, images.stderr
    assert images.stdout.split() == ["ghcr.io/nvidia/skyhook-packages/shellscript:1.1.0"]

    scr = {**SCR, "metadata": {"name": "kindcheck"}}
    kubectl(sandbox_kubeconfig, "apply", "-f", "-", stdin=json.dumps(scr))
    try:
        names = sandbox_nodes(2, labels={"skyhook.nvidia.com/test-node": "demo"})
        missing = run_checks(sandbox_kubeconfig, "complete", "kindcheck")
        assert missing.returncode == 1
        assert f"{names[0]}: no skyhook.nvidia.com/nodeState_kindcheck annotation" in missing.stderr

        state = json.dumps({"tuning|1.1.0": entry("config", "complete")})
        for name in names:
            kubectl(
                sandbox_kubeconfig, "annotate", "node", name,
                f"skyhook.nvidia.com/nodeState_kindcheck={state}",
            )  # fmt: skip
            kubectl(
                sandbox_kubeconfig, "label", "node", name,
                "skyhook.nvidia.com/status_kindcheck=complete",
            )  # fmt: skip
        done = run_checks(sandbox_kubeconfig, "complete", "kindcheck")
        assert done.returncode == 0, done.stderr
        assert "ok: kindcheck complete on every selected node" in done.stdout

        left = run_checks(sandbox_kubeconfig, "clean", "kindcheck")
        assert left.returncode == 1
        assert f"{names[1]}: label skyhook.nvidia.com/status_kindcheck left" in left.stderr
        for name in names:
            kubectl(
                sandbox_kubeconfig, "annotate", "node", name,
                "skyhook.nvidia.com/nodeState_kindcheck-",
            )  # fmt: skip
            kubectl(
                sandbox_kubeconfig, "label", "node", name, "skyhook.nvidia.com/status_kindcheck-"
            )
        clean = run_checks(sandbox_kubeconfig, "clean", "kindcheck")
        assert clean.returncode == 0, clean.stderr
    finally:
        kubectl(sandbox_kubeconfig, "delete", "skyhooks.skyhook.nvidia.com", "kindcheck")
