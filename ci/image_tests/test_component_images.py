"""ci/build-image for real: the agent and operator images for linux/amd64 and linux/arm64,
each platform's image with its SPDX SBOM attached.

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
from _sbom import SBOM_ARTIFACT_TYPE, attach_sboms
from _sbom import ensure_tools as sbom_tools
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
        # and the certificate child process, the only code that loads `cryptography`
        'skyhook-operator --help && echo \'{"names": ["smoke.example"], "now": '
        '"2026-01-01T00:00:00+00:00"}\' | python -m skyhook_operator.certificates make'
        " > /dev/null",
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


DEPENDENCY = {"agent": "jsonschema", "operator": "orjson"}  # a third-party one each installs


@pytest.mark.parametrize("component", COMPONENTS)
def test_each_platform_image_has_its_sbom_attached(
    component: str,
    component_image: Callable[[str], str],
    local_build: LocalBuild,
    registry: Registry,
    tmp_path: Path,
) -> None:
    """The SBOM of each platform's image is a referrer of that image's manifest digest, as
    `oras discover` finds it: an SPDX document of that image, listing the component's own
    distribution at the released version and what it depends on. (Our test base is unpacked
    Debian packages without dpkg's database, so its Debian packages are not listed here; on a
    python:slim base they are.)"""
    image = component_image(component)
    repository = f"skyhook/{component}"
    version = project_version(component)
    index, _ = registry.manifest(repository, f"v{version}")
    oras = str(sbom_tools()["oras"])
    platforms = {
        e["platform"]["architecture"]: e["digest"]
        for e in index["manifests"]
        if e["platform"]["os"] != "unknown"
    }
    assert set(platforms) == {"amd64", "arm64"}
    sboms: dict[str, str] = {}  # platform manifest digest -> its SBOM's
    for arch, digest in platforms.items():
        subject = f"{local_build.registry}/{repository}@{digest}"
        found = json.loads(
            _oras(
                oras, "discover", "--format", "json", "--artifact-type", SBOM_ARTIFACT_TYPE, subject
            )
        )
        (referrer,) = found["referrers"]
        assert referrer["artifactType"] == SBOM_ARTIFACT_TYPE
        target = tmp_path / arch
        _oras(
            oras,
            "pull",
            "-o",
            str(target),
            f"{local_build.registry}/{repository}@{referrer['digest']}",
        )
        (document,) = target.glob("*.spdx.json")
        sbom = json.loads(document.read_text())
        assert sbom["spdxVersion"].startswith("SPDX-2."), sbom["spdxVersion"]
        roots = [p for p in sbom["packages"] if p["SPDXID"].startswith("SPDXRef-DocumentRoot")]
        assert roots, (arch, sbom["packages"][:3])
        assert any(digest in json.dumps(root) for root in roots), (arch, digest, roots)
        versions = {p["name"]: p.get("versionInfo") for p in sbom["packages"]}
        assert versions.get(f"skyhook-{component}") == version, (arch, sorted(versions)[:50])
        assert versions.get("skyhook-schemas") == project_version("schemas"), arch
        assert versions.get(DEPENDENCY[component]), (arch, sorted(versions)[:50])
        sboms[digest] = referrer["digest"]

    # A rerun (a release job retried) attaches nothing more.
    again = attach_sboms(image, say=lambda _: None)
    assert {(a.subject, a.digest, a.packages) for a in again} == {
        (subject, sbom, None) for subject, sbom in sboms.items()
    }


def _oras(oras: str, *args: str) -> str:
    result = subprocess.run(
        [oras, *args[:1], "--plain-http", *args[1:]], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    return result.stdout
