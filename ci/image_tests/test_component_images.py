"""ci/build-image for real: the agent and operator images for linux/amd64 and linux/arm64.

Their base is our Debian python3 one (upstream's python:3.11-slim-bookworm cannot be pulled
here). The build stage runs on this machine's platform and fetches each target's binary wheels,
so the arm64 image is built without executing arm64 code. Read back from the registry: one
index with both platforms, each image's compiled extensions built for its architecture, the
entrypoint and user of the Dockerfile; and the amd64 image really runs its entrypoint (a RUN
step on top of it, which BuildKit executes here).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from _localbuild import LocalBuild
from _project import project_version
from registry import Registry

ELF_MACHINE = {"amd64": 0x3E, "arm64": 0xB7}  # e_machine: EM_X86_64, EM_AARCH64
COMPONENTS = {
    # component: (package directory in the venv, entrypoint, user, a command proving it runs)
    "agent": (
        "skyhook_agent",
        ["python", "-m", "skyhook_agent.controller"],
        "0:0",
        "skyhook-agent --help",
    ),
    "operator": (
        "skyhook_operator",
        ["skyhook-operator", "run"],
        "65532:65532",
        "skyhook-operator --help",
    ),
}


@pytest.mark.parametrize("component", COMPONENTS)
def test_component_image_for_both_platforms(
    component: str,
    component_image: Callable[[str], str],
    local_build: LocalBuild,
    registry: Registry,
    tmp_path: Path,
) -> None:
    package, entrypoint, user, smoke = COMPONENTS[component]
    tag = f"v{project_version(component)}"
    assert component_image(component) == f"{local_build.registry}/skyhook/{component}:{tag}"

    repository = f"skyhook/{component}"
    images = registry.platforms(repository, tag)
    assert set(images) == {"linux/amd64", "linux/arm64"}
    for platform, manifest in images.items():
        arch = platform.split("/")[1]
        config = json.loads(registry.blob(repository, manifest["config"]["digest"]))
        assert (config["os"], config["architecture"]) == ("linux", arch)
        assert config["config"]["Entrypoint"] == entrypoint
        assert config["config"]["User"] == user
        assert config["config"]["Labels"]["org.opencontainers.image.version"] == tag
        venv = registry.layer_members(repository, manifest["layers"][-1])
        assert any(f"/site-packages/{package}/" in name for name in venv), platform
        extensions = [name for name, member in venv.items() if name.endswith(".so")]
        assert extensions, f"{platform}: no compiled extension in the venv"
        for name in extensions:
            data = registry.layer_file(repository, manifest["layers"][-1], name)
            assert int.from_bytes(data[18:20], "little") == ELF_MACHINE[arch], f"{platform}: {name}"

    (tmp_path / "Dockerfile").write_text(
        f"FROM {local_build.registry}/{repository}:{tag}\nRUN {smoke}\n"
    )
    ran = subprocess.run(
        ["docker", "buildx", "build", "--platform", "linux/amd64", "--progress", "plain",
         str(tmp_path)],
        env={**os.environ, **local_build.env()},
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "Usage: " in ran.stderr
