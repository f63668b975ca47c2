"""Fixtures for the real image builds: one local registry and BuildKit for the session.

`python3 -m tox -e images` runs these (not in the default run: the first one builds BuildKit,
buildx, runc and the registry from the Go module proxy, about 10 minutes on 2 cores, and each
build takes tens of seconds). Needs root.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

CI_DIR = Path(__file__).resolve().parents[1]
REPO = CI_DIR.parent
sys.path.insert(0, str(CI_DIR))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _localbuild import LocalBuild  # noqa: E402
from _project import project_version  # noqa: E402
from bases import push_busybox_base, push_python_base  # noqa: E402
from registry import Registry  # noqa: E402


def _say(line: str) -> None:
    print(f"[local-build] {line}", file=sys.stderr, flush=True)


@pytest.fixture(scope="session")
def local_build(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBuild]:
    if os.geteuid() != 0:
        pytest.fail("the image builds need root (BuildKit's OCI worker mounts and unshares)")
    # A short path: buildkitd's unix socket lives in it.
    parent = Path(os.environ.get("SKYHOOK_IMAGES_TEST_DIR", "/var/tmp"))
    state = parent / f"skyhook-images-{os.getpid()}"
    with LocalBuild(state, say=_say) as build:
        yield build
    shutil.rmtree(state, ignore_errors=True)


@pytest.fixture(scope="session")
def registry(local_build: LocalBuild) -> Registry:
    return Registry(local_build.registry)


@pytest.fixture(scope="session")
def busybox_base(local_build: LocalBuild, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A linux/amd64 + linux/arm64 busybox base in our registry (Debian's busybox-static)."""
    image = f"{local_build.registry}/base/busybox:1.35"
    push_busybox_base(local_build, tmp_path_factory.mktemp("busybox-base"), image)
    return image


@pytest.fixture(scope="session")
def python_base(local_build: LocalBuild, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A linux/amd64 + linux/arm64 base with Debian bookworm's python3 in our registry."""
    image = f"{local_build.registry}/base/python:3.11"
    push_python_base(local_build, tmp_path_factory.mktemp("python-base"), image)
    return image


@pytest.fixture(scope="session")
def component_image(
    local_build: LocalBuild, registry: Registry, python_base: str
) -> Callable[[str], str]:
    """`component_image("agent")`: ci/build-image `<component>/v<its version>` run once per
    session (linux/amd64 and linux/arm64, pushed to our registry); returns the reference.
    The base is named by tag and digest, as the Dockerfiles' own default is."""
    built: dict[str, str] = {}
    pinned_base = f"{python_base}@{registry.digest('base/python', '3.11')}"

    def build(component: str) -> str:
        if component not in built:
            tag = f"v{project_version(component)}"
            result = subprocess.run(
                [
                    sys.executable, str(CI_DIR / "build-image"), f"{component}/{tag}",
                    "--registry", f"{local_build.registry}/skyhook",
                    "--build-arg", f"PYTHON_IMAGE={pinned_base}",
                ],
                env={**os.environ, **local_build.env()},
                cwd=CI_DIR.parent,
                capture_output=True,
                text=True,
            )  # fmt: skip
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
            built[component] = f"{local_build.registry}/skyhook/{component}:{tag}"
        return built[component]

    return build


@pytest.fixture(scope="session")
def shellscript_package(local_build: LocalBuild, busybox_base: str) -> str:
    """ci/build-package `shellscript/<its version>` on our busybox base (linux/amd64 and
    linux/arm64, pushed to our registry); returns the reference."""
    version = json.loads((REPO / "packages" / "shellscript" / "config.json").read_text())[
        "package_version"
    ]
    result = subprocess.run(
        [
            sys.executable, str(CI_DIR / "build-package"), f"shellscript/{version}",
            "--registry", f"{local_build.registry}/skyhook-packages",
            "--build-arg", f"BASE_IMAGE={busybox_base}",
        ],
        env={**os.environ, **local_build.env()},
        cwd=REPO,
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return f"{local_build.registry}/skyhook-packages/shellscript:{version}"
