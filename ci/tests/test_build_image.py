"""ci/build-image in dry-run, and the component Dockerfiles.

The build stage's install step is also replayed in a fresh venv from the same COPY sources, in
seconds; `tox -e images` (ci/image_tests/) builds the images for real with BuildKit.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "ci" / "build-image"
COMPONENTS = ("agent", "operator")


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=REPO
    )


def head() -> str:
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()


def load_script() -> types.ModuleType:
    sys.path.insert(0, str(SCRIPT.parent))
    loader = importlib.machinery.SourceFileLoader("build_image", str(SCRIPT))
    spec = importlib.util.spec_from_loader("build_image", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_image"] = module  # dataclasses look their module up while executing
    loader.exec_module(module)
    return module


build_image = load_script()
project_version = build_image.project_version


# --- the command ----------------------------------------------------------------------------


@pytest.mark.parametrize("component", COMPONENTS)
def test_dry_run_prints_the_exact_buildx_command(component: str) -> None:
    version = f"v{project_version(component)}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SKYHOOK_")}
    result = run("--dry-run", f"{component}/{version}", env=env)
    assert result.returncode == 0, result.stderr
    assert shlex.split(result.stdout) == [
        "docker", "buildx", "build",
        "--platform", "linux/amd64,linux/arm64",
        "-f", f"{component}/Dockerfile",
        "-t", f"ghcr.io/nvidia/skyhook/{component}:{version}",
        "--build-arg", f"VERSION={version}",
        "--build-arg", f"REVISION={head()}",
        "--push", ".",
    ]  # fmt: skip


def test_registry_and_platforms_are_configurable() -> None:
    version = f"v{project_version('agent')}"
    flags = ["--registry", "localhost:5000/sky/", "--platforms", "linux/arm64"]
    result = run("--dry-run", *flags, f"agent/{version}")
    assert result.returncode == 0, result.stderr
    argv = shlex.split(result.stdout)
    assert argv[argv.index("--platform") + 1] == "linux/arm64"
    assert argv[argv.index("-t") + 1] == f"localhost:5000/sky/agent:{version}"
    env = {
        **os.environ,
        "SKYHOOK_REGISTRY": "registry.example.com/team",
        "SKYHOOK_PLATFORMS": "linux/amd64",
    }
    argv = shlex.split(run("--dry-run", f"agent/{version}", env=env).stdout)
    assert argv[argv.index("-t") + 1] == f"registry.example.com/team/agent:{version}"
    assert argv[argv.index("--platform") + 1] == "linux/amd64"


def test_build_args_follow_version_and_revision() -> None:
    version = f"v{project_version('agent')}"
    result = run(
        "--dry-run", f"agent/{version}", "--build-arg", "PYTHON_IMAGE=127.0.0.1:5000/base/py:3"
    )
    assert result.returncode == 0, result.stderr
    argv = shlex.split(result.stdout)
    assert [argv[i + 1] for i, word in enumerate(argv) if word == "--build-arg"] == [
        f"VERSION={version}",
        f"REVISION={head()}",
        "PYTHON_IMAGE=127.0.0.1:5000/base/py:3",
    ]
    bad = run("--dry-run", f"agent/{version}", "--build-arg", "=x")
    assert bad.returncode == 2
    assert "--build-arg: =x not NAME=VALUE" in bad.stderr


def test_without_docker_the_build_stops_with_a_clear_message(tmp_path: Path) -> None:
    version = f"v{project_version('operator')}"
    git = shutil.which("git")
    assert git is not None
    (tmp_path / "git").symlink_to(git)
    env = {**os.environ, "PATH": str(tmp_path)}  # git, but no docker on PATH
    result = run(f"operator/{version}", env=env)
    assert result.returncode == 2
    assert "docker is not on PATH" in result.stderr
    assert shlex.split(result.stdout)[:3] == ["docker", "buildx", "build"]  # still says what


# --- tag and version checks -------------------------------------------------------------------


def test_tag_must_match_the_project_version() -> None:
    declared = project_version("operator")
    major, minor, patch = (int(part) for part in declared.split("."))
    result = run("--dry-run", f"operator/v{major}.{minor}.{patch + 1}")
    assert result.returncode == 1
    assert f"differs from operator/pyproject.toml version {declared}" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("tag", "message"),
    [
        ("agent/0.1.0", "carry a 'v' before the version (agent/v0.1.0)"),
        ("agent/v1.2", "give all three parts MAJOR.MINOR.PATCH (1.2.0)"),
        ("agent/v01.2.3", "leading zeros"),
        ("agent/vv1.2.3", "not a strict semver version"),
        ("agent/v0.1.0+build.5", "build metadata (+build.5) cannot appear in an image tag"),
        ("chart/v0.1.0", "component one of agent, operator"),
        ("shellscript/1.1.1", "component one of agent, operator"),
        ("agent", "must be <component>/vX.Y.Z"),
    ],
)
def test_bad_tags_are_rejected_with_the_reason(tag: str, message: str) -> None:
    result = run("--dry-run", tag)
    assert result.returncode == 1
    assert message in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--platforms", "linux/amd64,amd64"], "--platforms: amd64 not os/arch"),
        (["--platforms", ","], "--platforms: give at least one platform"),
        (["--registry", "ghcr.io/NVIDIA/skyhook"], "--registry: 'ghcr.io/NVIDIA/skyhook'"),
        (["--registry", "ghcr.io/a b"], "--registry:"),
    ],
)
def test_bad_options_are_rejected_naming_the_option(flags: list[str], message: str) -> None:
    result = run("--dry-run", *flags, f"agent/v{project_version('agent')}")
    assert result.returncode == 2
    assert message in result.stderr


@given(
    st.sampled_from(COMPONENTS),
    st.integers(0, 10_000),
    st.integers(0, 10_000),
    st.integers(0, 10_000),
    st.one_of(st.none(), st.from_regex(r"\A(alpha|beta|rc)\.[1-9][0-9]?\Z")),
)
def test_any_strict_semver_tag_parses_to_its_parts(
    component: str, major: int, minor: int, patch: int, prerelease: str | None
) -> None:
    version = f"{major}.{minor}.{patch}" + (f"-{prerelease}" if prerelease else "")
    tag = build_image.parse_component_tag(f"{component}/v{version}")
    assert (tag.component, tag.version, tag.image_tag) == (component, version, f"v{version}")


# --- the Dockerfiles --------------------------------------------------------------------------


def stages(component: str) -> list[list[str]]:
    """Instruction lines per stage, continuation lines joined."""
    text = (REPO / component / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    instructions = [line for line in lines if line and not line.startswith("#")]
    found: list[list[str]] = []
    for line in instructions:
        if line.startswith("FROM "):
            found.append([])
        if found:
            found[-1].append(line)
    return found


@pytest.mark.parametrize(
    ("component", "entrypoint", "user"),
    [
        ("agent", ["python", "-m", "skyhook_agent.controller"], "0:0"),
        ("operator", ["skyhook-operator", "run"], "65532:65532"),
    ],
)
def test_final_stage_entrypoint_and_user(component: str, entrypoint: list[str], user: str) -> None:
    build, final = stages(component)
    # The build stage runs on the build machine's platform: no target-architecture RUN step.
    assert build[0] == "FROM --platform=$BUILDPLATFORM ${PYTHON_IMAGE} AS build"
    assert not [line for line in final if line.startswith("RUN ")], "COPY-only final stage"
    assert final[0] == "FROM ${PYTHON_IMAGE}", "same base, so the copied venv's python exists"
    assert any(line == "COPY --from=build /opt/skyhook /opt/skyhook" for line in final)
    entry = [line for line in final if line.startswith("ENTRYPOINT ")]
    assert [json.loads(line.removeprefix("ENTRYPOINT ")) for line in entry] == [entrypoint]
    assert [line for line in final if line.startswith("USER ")][-1] == f"USER {user}"


def copied_sources(component: str) -> list[str]:
    """What the build stage copies from the context: projects (`schemas/`) and files (the lock)."""
    build = stages(component)[0]
    return [line.split()[1] for line in build if line.startswith("COPY ")]


def copied_projects(component: str) -> list[str]:
    return [source.rstrip("/") for source in copied_sources(component) if source.endswith("/")]


@pytest.mark.parametrize("component", COMPONENTS)
def test_dockerignore_lets_every_copied_project_through(component: str) -> None:
    ignore = (REPO / component / "Dockerfile.dockerignore").read_text().splitlines()
    rules = [line for line in ignore if line and not line.startswith("#")]
    assert rules[0] == "*", "allowlist: everything excluded first"
    for project in copied_projects(component):
        assert f"!{project}/pyproject.toml" in ignore and f"!{project}/src" in ignore
        assert (REPO / project / "pyproject.toml").is_file()
    files = [source for source in copied_sources(component) if not source.endswith("/")]
    assert files == ["constraints.txt"], "the lock, which the install step reads"
    assert all(f"!{name}" in ignore and (REPO / name).is_file() for name in files)


@pytest.mark.slow
@pytest.mark.parametrize("component", COMPONENTS)
def test_build_stage_install_step_works_outside_docker(component: str, tmp_path: Path) -> None:
    """Replays the build stage's venv + RUN lines with the COPY sources, as docker would."""
    build = stages(component)[0]
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy2(REPO / "constraints.txt", src / "constraints.txt")
    for project in copied_projects(component):
        for part in ("pyproject.toml", "src"):
            origin, target = REPO / project / part, src / project / part
            if origin.is_dir():
                shutil.copytree(
                    origin, target, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
                )
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, target)
    venv = tmp_path / "venv"
    runs = [line.removeprefix("RUN ") for line in build if line.startswith("RUN ")]
    assert runs[0] == "python3 -m venv /opt/skyhook"
    script = " && ".join(
        re.sub(r"/src/", f"{src}/", line).replace("/opt/skyhook", str(venv))
        for line in [f"{sys.executable} -m venv /opt/skyhook", *runs[1:]]
    )
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
