"""ci/tag-info (what a tag publishes) and the publishers the release workflow adds to
ci/build-image and ci/build-package: ci/publish-chart (dry run) and ci/build-cli (real wheels).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "ci"))
from _project import project_version  # noqa: E402

SOURCE = "https://github.com/someone/skyhook"
CHART_VERSION = str(yaml.safe_load((REPO / "chart" / "Chart.yaml").read_text())["version"])


def run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "ci" / script), *args], capture_output=True, text=True
    )


def package_version(package: str) -> str:
    return str(
        json.loads((REPO / "packages" / package / "config.json").read_text())["package_version"]
    )


def declared(tag_prefix: str) -> str:
    """The tag ci/release makes for what the checkout declares."""
    component = tag_prefix.partition("/")[0]
    if component in {"tuning", "tuned", "shellscript"}:
        return f"{component}/{package_version(component)}"
    version = CHART_VERSION if component == "chart" else project_version(component)
    return f"{component}/v{version}"


@pytest.mark.parametrize(
    ("component", "publish"),
    [
        ("operator", "image"),
        ("agent", "image"),
        ("shellscript", "package"),
        ("tuning", "package"),
        ("tuned", "package"),
        ("cli", "cli"),
        ("chart", "chart"),
        ("schemas", "none"),
        ("planner", "none"),
    ],
)
def test_each_release_tag_names_what_it_publishes(component: str, publish: str) -> None:
    tag = declared(component)
    result = run("tag-info", tag)
    assert result.returncode == 0, result.stderr
    version = tag.partition("/")[2].removeprefix("v")
    assert result.stdout.splitlines() == [
        f"component={component}",
        f"version={version}",
        f"publish={publish}",
    ]


@pytest.mark.parametrize(
    ("tag", "message"),
    [
        pytest.param("operator", "must be <component>/vX.Y.Z or <package>/X.Y.Z", id="no-slash"),
        pytest.param("operator/0.1.0", "operator tags look like operator/vX.Y.Z", id="no-v"),
        pytest.param("shellscript/v1.1.1", "drop the leading 'v'", id="package-v"),
        pytest.param("operator/v9.9.9", "operator declares version", id="not-declared"),
        pytest.param("operator/v0.1", "not a strict semver", id="short"),
        pytest.param("operator/v0.1.0+sha.1", "build metadata (+sha.1)", id="build"),
        pytest.param("kdump/1.0.0", "component 'kdump' is not releasable", id="unknown"),
        pytest.param("refs/tags/x", "component 'refs' is not releasable", id="ref"),
    ],
)
def test_a_tag_that_names_no_release_fails_the_workflow(tag: str, message: str) -> None:
    result = run("tag-info", tag)
    assert result.returncode == 1
    assert message in result.stderr
    assert result.stdout == ""


def test_publish_chart_packages_then_pushes_the_tagged_version() -> None:
    registry = "oci://ghcr.io/someone/skyhook/charts"
    result = run(
        "publish-chart", "--dry-run", f"chart/v{CHART_VERSION}", "--registry", registry,
        "--source", SOURCE,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    package, push = (shlex.split(line) for line in result.stdout.splitlines())
    destination = package[package.index("--destination") + 1]
    # The stamped copy of the chart, not chart/ itself.
    assert package[:3] == ["helm", "package", f"{destination}/chart"]
    assert push == [
        "helm",
        "push",
        f"{destination}/skyhook-operator-{CHART_VERSION}.tgz",
        registry,
    ]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["chart/v9.0.0", "--registry", "oci://ghcr.io/x"], 1, "chart declares version"),
        (
            [f"operator/v{project_version('operator')}", "--registry", "oci://ghcr.io/x"],
            1,
            "publishes image, not chart",
        ),
        ([f"chart/v{CHART_VERSION}", "--registry", "ghcr.io/x"], 2, "is not oci://host"),
        ([f"chart/v{CHART_VERSION}", "--registry", "oci://ghcr.io/Owner"], 2, "lowercase"),
        (
            [f"chart/v{CHART_VERSION}", "--registry", "oci://ghcr.io/x", "--source", "ghcr.io/x"],
            2,
            "--source: 'ghcr.io/x' is not an https://host/path",
        ),
    ],
    ids=["version", "not-chart", "not-oci", "uppercase", "source-not-https"],
)
def test_publish_chart_refuses(args: list[str], code: int, message: str) -> None:
    if "--source" not in args:
        args = [*args, "--source", SOURCE]
    result = run("publish-chart", "--dry-run", *args)
    assert result.returncode == code
    assert message in result.stderr
    assert "helm" not in result.stdout


def test_build_cli_builds_the_plugin_and_what_it_imports(tmp_path: Path) -> None:
    tag = declared("cli")
    # One platform other than test_build_cli's, for this Python: every platform and Python
    # installs the plugin the same way, and all twelve take minutes.
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    result = run(
        "build-cli", tag, "--dist-dir", str(tmp_path), "--platform", "darwin/arm64",
        "--python", python,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    version = project_version("cli")
    assert (tmp_path / f"kubectl-skyhook-{version}-darwin-arm64.tar.gz").is_file()
    wheels = {wheel.name.split("-")[0]: wheel for wheel in tmp_path.glob("*.whl")}
    assert set(wheels) == {"skyhook_schemas", "skyhook_planner", "skyhook_cli"}
    for project, wheel in wheels.items():
        assert wheel.name.split("-")[1] == project_version(project.removeprefix("skyhook_"))
    with zipfile.ZipFile(wheels["skyhook_cli"]) as archive:
        entry_points = next(n for n in archive.namelist() if n.endswith("entry_points.txt"))
        assert "kubectl-skyhook = skyhook_cli.main:main" in archive.read(entry_points).decode()


def test_build_cli_refuses_another_components_tag(tmp_path: Path) -> None:
    result = run("build-cli", declared("operator"), "--dist-dir", str(tmp_path))
    assert result.returncode == 1
    assert "publishes image, not cli" in result.stderr
    assert not list(tmp_path.iterdir())
