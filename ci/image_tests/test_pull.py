"""The sandbox's image pull (skopeo + umoci) against our registry: layers applied in order.

An image whose second layer deletes a file of the first (a whiteout) and replaces a directory
(an opaque whiteout) must unpack without them, as a container runtime would show it; its
config (what `run: image` starts the container with) comes back as the Dockerfile set it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

from _localbuild import LocalBuild

from skyhook_sandbox.pull import ImagePuller

DOCKERFILE = """\
FROM {base}
COPY first/ /data/
RUN rm /data/gone && rm -r /data/dir && mkdir /data/dir && echo new > /data/dir/kept
ENV GREETING="hello there"
WORKDIR /data
USER 1000:1000
ENTRYPOINT ["/bin/cat"]
CMD ["stays"]
"""


def test_pull_honours_whiteouts(local_build: LocalBuild, busybox_base: str, tmp_path: Path) -> None:
    context = tmp_path / "context"
    (context / "first" / "dir").mkdir(parents=True)
    (context / "first" / "gone").write_text("deleted in the next layer\n")
    (context / "first" / "stays").write_text("stays\n")
    (context / "first" / "dir" / "old").write_text("replaced directory\n")
    (context / "Dockerfile").write_text(DOCKERFILE.format(base=busybox_base))
    image = f"{local_build.registry}/test/whiteouts:1"
    subprocess.run(
        ["docker", "buildx", "build", "--platform", "linux/amd64", "-t", image, "--push",
         str(context)],
        env={**os.environ, **local_build.env()}, check=True, capture_output=True,
    )  # fmt: skip

    pulled = asyncio.run(ImagePuller(tmp_path / "pulled").pull(image, "amd64", insecure=True))
    rootfs = pulled.rootfs
    data = rootfs / "data"
    assert sorted(p.name for p in data.iterdir()) == ["dir", "stays"]
    assert [p.name for p in (data / "dir").iterdir()] == ["kept"]
    assert (rootfs / "bin" / "busybox").is_file()
    config = pulled.config
    assert (config.entrypoint, config.cmd) == (["/bin/cat"], ["stays"])
    assert config.env["GREETING"] == "hello there"
    assert (config.working_dir, config.user) == ("/data", "1000:1000")
