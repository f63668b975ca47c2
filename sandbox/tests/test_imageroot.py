"""`run: image` without a registry: an unpacked image tree run as a container's root.

The image here is a copy of the plain host-root base (this machine's shell tools and their
libraries) with files of its own; the registry half (skopeo, umoci) is ci/image_tests'.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from skyhook_sandbox import container, hostroot, imageroot
from skyhook_sandbox.container import Mount
from skyhook_sandbox.images import ImageMap, ImageMapError, PullRule, validate_rules
from skyhook_sandbox.podenv import ContainerConfigError
from skyhook_sandbox.pull import ImageConfig
from skyhook_sandbox.shims import KERNEL_DIR, LOG_DIR

ENTRYPOINT = """#!/bin/sh
# The fake image's entrypoint: report what the container sees.
{
  echo "args=$*"
  echo "cwd=$(pwd)"
  echo "id=$(id -u):$(id -g)"
  echo "home=$HOME"
  echo "path=$PATH"
  echo "release=$(cat /etc/os-release)"
  echo "ostype=$(sysctl -n kernel.ostype)"
  echo "proc-ostype=$(cat /proc/sys/kernel/ostype)"
  if [ -e "$MACHINE_FILE" ]; then echo machine-file=visible; else echo machine-file=hidden; fi
} > /data/report
echo written-by-the-container > /tmp/written
echo "to the host root" > /host/from-container
echo "entrypoint done"
"""


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An unpacked image: the plain base, an entrypoint, a user, an absolute symlink."""
    tree = tmp_path_factory.mktemp("image") / "rootfs"
    shutil.copytree(hostroot.build_plain_base(), tree, symlinks=True)
    (tree / "etc/os-release").write_text("NAME=fake-image\n")
    (tree / "etc/passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\napp:x:1234:1234:app:/home/app:/bin/sh\n"
    )
    (tree / "etc/group").write_text("root:x:0:\napp:x:1234:\nstaff:x:50:\n")
    (tree / "home/app").mkdir(parents=True)
    (tree / "srv/real").mkdir(parents=True)
    (tree / "srv/real").chmod(0o777)
    (tree / "data").symlink_to("/srv/real")  # absolute: resolved inside the image
    (tree / "srv/relative").symlink_to("real")
    entrypoint = tree / "usr/local/bin/report"
    entrypoint.write_text(ENTRYPOINT)
    entrypoint.chmod(0o755)
    sysctl = tree / "usr/sbin/sysctl"
    sysctl.write_text("#!/bin/sh\necho the image's own sysctl ran\n")
    sysctl.chmod(0o755)
    return tree


@pytest.mark.parametrize(
    ("path", "follow_last", "expected"),
    [
        ("/data/x", True, "/srv/real/x"),
        ("/data", False, "/data"),
        ("/data/../etc", True, "/srv/etc"),
        ("/../../etc/passwd", True, "/etc/passwd"),
        ("/srv/relative/x", True, "/srv/real/x"),
        ("/no/such/dir", True, "/no/such/dir"),
    ],
    ids=[
        "absolute-link",
        "last-kept",
        "dotdot-after-link",
        "no-escape",
        "relative-link",
        "missing",
    ],
)
def test_paths_resolve_inside_the_image(image, path, follow_last, expected):
    assert imageroot.resolve_in_root(image, path, follow_last) == expected


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        ("", None),
        ("0:0", (0, 0, "/root")),
        ("app", (1234, 1234, "/home/app")),
        ("app:staff", (1234, 50, "/home/app")),
        ("65532:65532", (65532, 65532, "/")),
        ("1234", (1234, 1234, "/home/app")),
    ],
    ids=["none", "root", "name", "name-group", "numeric-unknown", "numeric-known"],
)
def test_the_images_user(image, user, expected):
    assert imageroot.resolve_user(image, user) == expected


def test_a_user_the_image_lacks_is_named(image):
    with pytest.raises(ContainerConfigError, match='user "ghost"'):
        imageroot.resolve_user(image, "ghost")
    with pytest.raises(ContainerConfigError, match='group "wheel"'):
        imageroot.resolve_user(image, "app:wheel")


def test_image_config_as_skopeo_gives_it():
    config = ImageConfig.from_json(
        {
            "architecture": "amd64",
            "config": {
                "Env": ["PATH=/opt/skyhook/bin:/usr/bin", "EMPTY=", "A=b=c"],
                "Entrypoint": ["python", "-m", "skyhook_agent.controller"],
                "User": "0:0",
            },
        }
    )
    assert config == ImageConfig(
        entrypoint=["python", "-m", "skyhook_agent.controller"],
        env={"PATH": "/opt/skyhook/bin:/usr/bin", "EMPTY": "", "A": "b=c"},
        user="0:0",
    )


def test_run_image_rules(tmp_path):
    rule = {"image": "127.0.0.1:5000/skyhook/agent", "run": "image", "insecure": True}
    images = ImageMap([rule, {**rule, "image": "x/y", "args": ["--help"]}], packages_dir=tmp_path)
    assert images.resolve("127.0.0.1:5000/skyhook/agent:v1").pull == PullRule(
        "127.0.0.1:5000/skyhook/agent:v1", "/", True, as_root=True
    )
    assert images.resolve("x/y:1").pull == PullRule(
        "x/y:1", "/", True, as_root=True, args=("--help",)
    )
    with pytest.raises(ImageMapError, match=r"images\[0\]\.path: not used by run: image"):
        validate_rules([{**rule, "path": "/skyhook-package"}], "map.yaml")
    with pytest.raises(ImageMapError, match=r"images\[0\]\.insecure"):
        validate_rules([{**rule, "insecure": "yes"}], "map.yaml")


def test_container_runs_chrooted_in_the_image_with_its_settings(image, tmp_path):
    host = tmp_path / "node-root"  # the node's host root, mounted at /host
    (host / KERNEL_DIR / "sys/kernel").mkdir(parents=True)
    (host / LOG_DIR).mkdir(parents=True)
    for directory in (host, host / LOG_DIR):
        directory.chmod(0o777)  # the image's user writes there, and the shim logs its call
    (host / KERNEL_DIR / "sys/kernel/ostype").write_text("SimulatedLinux\n")
    machine_only = tmp_path / "machine-only"
    machine_only.write_text("visible only outside the container\n")
    before = sorted(str(p.relative_to(image)) for p in image.rglob("*"))
    spec = imageroot.container_spec(
        image,
        tmp_path / "run",
        argv=["/usr/local/bin/report", "one", "two"],
        env={"PATH": "/usr/local/bin:/usr/sbin:/usr/bin", "MACHINE_FILE": str(machine_only)},
        working_dir="/data",
        user="app",
        mounts=[Mount(str(host), "/host", host_root=True)],
        node_root=host,
    )

    async def run() -> int:
        process = await container.start(spec, tmp_path / "log", "node-1")
        return await process.wait()

    code = asyncio.run(run())
    log = (tmp_path / "log").read_text()
    assert code == 0, log
    assert log.strip() == "entrypoint done"
    lines = (tmp_path / "run/rootfs-upper/srv/real/report").read_text().splitlines()
    report = dict(line.split("=", 1) for line in lines)
    assert report == {
        "args": "one two",
        "cwd": "/srv/real",
        "id": "1234:1234",
        "home": "/home/app",
        "path": "/usr/local/bin:/usr/sbin:/usr/bin",
        "release": "NAME=fake-image",
        "ostype": "SimulatedLinux",  # the node's shim replaced the image's sysctl
        "proc-ostype": "SimulatedLinux",
        "machine-file": "hidden",
    }
    assert (host / LOG_DIR / "sysctl.log").read_text() == "sysctl -n kernel.ostype\n"
    assert (host / "from-container").read_text() == "to the host root\n"
    # Copy-on-write: the container's writes stay in its run, the image is unchanged.
    assert (tmp_path / "run/rootfs-upper/tmp/written").is_file()
    assert sorted(str(p.relative_to(image)) for p in image.rglob("*")) == before
    assert not (tmp_path / "run/rootfs").exists() or not os.listdir(tmp_path / "run/rootfs")
