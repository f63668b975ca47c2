"""`plan`'s pure parts: durations, the table, and reading a manifest."""

from __future__ import annotations

from pathlib import Path

import pytest

from skyhook_cli.app import CliError
from skyhook_cli.commands.plan import duration, read_manifest, render
from skyhook_planner.sim.forecast import Blocked, Forecast, StageRun, Wave


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        pytest.param(0, "0s", id="zero"),
        pytest.param(44.6, "45s", id="rounded"),
        pytest.param(180, "3m0s", id="minutes"),
        pytest.param(3725, "1h2m5s", id="hours"),
    ],
)
def test_duration(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_render() -> None:
    runs = (
        StageRun("node-a", "pkg", "1.0.0", "apply", 0, 30),
        StageRun("node-a", "pkg", "1.0.0", "config", 30, 60),
    )
    result = Forecast(
        skyhook="fleet",
        selected=("node-a", "node-b"),
        already_complete=(),
        waves=(Wave(1, 0, ("node-a",), runs),),
        blocked=(Blocked("node-b", "taints not tolerated: gpu=bad:NoSchedule"),),
        total_s=60,
        ceiling=1,
    )
    assert render(result) == (
        "Skyhook: fleet\n"
        "Selected nodes: 2 (at most 1 at once), already complete: 0, blocked: 1\n"
        "Estimated duration: 1m0s\n"
        "\n"
        "Wave 1 (starts at +0s): node-a\n"
        "NODE    PACKAGE    STAGE   START\n"
        "----    -------    -----   -----\n"
        "node-a  pkg|1.0.0  apply   +0s\n"
        "node-a  pkg|1.0.0  config  +30s\n"
        "\n"
        "Blocked:\n"
        "NODE    REASON\n"
        "----    ------\n"
        "node-b  taints not tolerated: gpu=bad:NoSchedule\n"
    )


SKYHOOK = "apiVersion: skyhook.nvidia.com/v1alpha1\nkind: Skyhook\nmetadata: {name: fleet}\n"
POLICY = "apiVersion: skyhook.nvidia.com/v1alpha1\nkind: DeploymentPolicy\nmetadata: {name: p}\n"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        pytest.param(
            "kind: Pod\n", 'kind "Pod" is neither Skyhook nor DeploymentPolicy', id="kind"
        ),
        pytest.param(POLICY, "expected exactly one Skyhook, found 0", id="no-skyhook"),
        pytest.param(
            SKYHOOK + "---\n" + SKYHOOK, "expected exactly one Skyhook, found 2", id="two"
        ),
        pytest.param("kind: Skyhook\n", "a Skyhook without metadata.name", id="unnamed"),
        pytest.param("a: [", "reading", id="not-yaml"),
    ],
)
def test_read_manifest_errors(tmp_path: Path, text: str, error: str) -> None:
    path = tmp_path / "scr.yaml"
    path.write_text(text)
    with pytest.raises(CliError, match=error):
        read_manifest(path)


def test_read_manifest_with_a_policy(tmp_path: Path) -> None:
    path = tmp_path / "scr.yaml"
    path.write_text(SKYHOOK + "---\n" + POLICY)
    skyhook, policies = read_manifest(path)
    assert skyhook["metadata"]["name"] == "fleet"
    assert [p["metadata"]["name"] for p in policies] == ["p"]
