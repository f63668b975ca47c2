"""ci/build-package for real: buildx on our BuildKit builds both platforms and pushes one index.

The package's base is our busybox-static one (upstream's bash:5.2 cannot be pulled here); what
the test reads back is the registry's own answer over HTTP: an index with linux/amd64 and
linux/arm64, each image's base layer holding busybox built for that architecture, and its top
layer the package at /skyhook-package, every file as in the checkout with its mode.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from _localbuild import LocalBuild
from bases import busybox_rootfs
from registry import Registry

from skyhook_planner.podbuilder import PACKAGE_COPY_COMMAND

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "packages" / "shellscript"
ELF_MACHINE = {"amd64": 0x3E, "arm64": 0xB7}  # e_machine: EM_X86_64, EM_AARCH64


def shipped_files() -> dict[str, Path]:
    """The package's tracked files the image holds (its .dockerignore leaves out tests/)."""
    listed = subprocess.run(
        ["git", "ls-files"], cwd=PACKAGE, capture_output=True, text=True, check=True
    ).stdout.split()
    return {name: PACKAGE / name for name in listed if not name.startswith("tests/")}


def elf_machine(binary: bytes) -> int:
    assert binary[:4] == b"\x7fELF", "not an ELF binary"
    return int.from_bytes(binary[18:20], "little")


def test_shellscript_is_built_and_pushed_for_both_platforms(
    local_build: LocalBuild, registry: Registry, shellscript_package: str
) -> None:
    version = json.loads((PACKAGE / "config.json").read_text())["package_version"]
    assert shellscript_package == (f"{local_build.registry}/skyhook-packages/shellscript:{version}")

    _, media_type = registry.manifest("skyhook-packages/shellscript", version)
    assert media_type == "application/vnd.oci.image.index.v1+json"  # one OCI index
    images = registry.platforms("skyhook-packages/shellscript", version)
    assert set(images) == {"linux/amd64", "linux/arm64"}
    expected = shipped_files()
    for platform, manifest in images.items():
        arch = platform.split("/")[1]
        config = json.loads(
            registry.blob("skyhook-packages/shellscript", manifest["config"]["digest"])
        )
        assert (config["os"], config["architecture"]) == ("linux", arch)
        base, package = manifest["layers"][0], manifest["layers"][-1]
        busybox = registry.layer_file("skyhook-packages/shellscript", base, "bin/busybox")
        assert elf_machine(busybox) == ELF_MACHINE[arch], platform

        members = registry.layer_members("skyhook-packages/shellscript", package)
        files = {
            name.removeprefix("skyhook-package/"): member
            for name, member in members.items()
            if member.isfile()
        }
        assert set(files) == set(expected), platform
        for name, path in expected.items():
            data = registry.layer_file(
                "skyhook-packages/shellscript", package, f"skyhook-package/{name}"
            )
            assert data == path.read_bytes(), f"{platform}: {name}"
            assert files[name].mode & 0o111 == path.stat().st_mode & 0o111, f"{platform}: {name}"


def test_every_stage_copies_the_package_over_the_last_with_the_images_busybox(
    tmp_path: Path,
) -> None:
    """A generation's stages copy into one directory, node metadata included: a configMap
    volume, whose files are symlinks (`..data` and the files through it, as the kubelet writes
    them). The init container's command, run twice by the busybox the package images are built
    on, must succeed both times and leave the second stage's metadata."""
    root = busybox_rootfs("amd64", tmp_path / "root")
    for stage in ("apply", "config"):
        metadata = root / "skyhook-package" / "node-metadata"
        shutil.rmtree(metadata, ignore_errors=True)
        (metadata / f"..2026_{stage}").mkdir(parents=True)
        (metadata / f"..2026_{stage}" / "labels.json").write_text(f'{{"stage": "{stage}"}}')
        (metadata / "..data").symlink_to(f"..2026_{stage}")
        (metadata / "labels.json").symlink_to("..data/labels.json")
        copied = subprocess.run(
            ["chroot", str(root), "/bin/sh", "-c", PACKAGE_COPY_COMMAND],
            env={"PATH": "/bin:/sbin:/usr/bin", "SKYHOOK_DIR": "/var/lib/skyhook/demo/x-1"},
            capture_output=True,
            text=True,
        )
        assert copied.returncode == 0, f"{stage}: {copied.stderr}"
    labels = root / "root/var/lib/skyhook/demo/x-1/node-metadata/labels.json"
    assert json.loads(labels.read_text()) == {"stage": "config"}
