"""The project's images run in a real container runtime: containerd with runc, driven by ctr,
and by nerdctl as kind's provider drives it.

containerd, its runc shim and ctr (containerd's own client) are built by ci/_runtime.py
(cached); runc is BuildKit's. One containerd of this module's own pulls the agent, operator and
package images from our registry over plain HTTP, for linux/amd64 only, and runs them as
containers without a network: each image's entrypoint as its Dockerfile set it, as the user it
set, and a package's files handed to the agent, as the package-copy init container and a stage
pod hand them over on a node. When the module is done containerd is stopped with nothing left
mounted.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _containerd import Containerd
from _runtime import ensure_tools

REPO = Path(__file__).resolve().parents[2]
EXIT_BAD_INPUT = 2  # the agent controller's exit code for a wrong invocation
_container_numbers = itertools.count(1)


def _say(line: str) -> None:
    print(f"[runtime] {line}", flush=True)


@pytest.fixture(scope="module")
def runtime() -> Iterator[Containerd]:
    # A short path: containerd's sockets live in it.
    parent = Path(os.environ.get("SKYHOOK_IMAGES_TEST_DIR", "/var/tmp"))
    with Containerd(parent / f"skyhook-ctd-{os.getpid()}", ensure_tools(_say)) as containerd:
        yield containerd


def succeed(runtime: Containerd, *args: str) -> str:
    """ctr's stdout; the test fails with its output when it exits non-zero."""
    result = runtime.ctr(*args)
    assert result.returncode == 0, f"ctr {' '.join(args)}:\n{result.stdout}{result.stderr}"
    return result.stdout


def content(runtime: Containerd, digest: str) -> Any:
    return json.loads(succeed(runtime, "content", "get", digest))


def pull(runtime: Containerd, image: str) -> dict[str, Any]:
    """Pull `image` (an index for linux/amd64 and linux/arm64) for linux/amd64 alone; the image
    config containerd unpacked it from."""
    succeed(runtime, "images", "pull", "--plain-http", "--platform", "linux/amd64", image)
    (listed,) = succeed(runtime, "images", "list", f"name=={image}").splitlines()[1:]
    index = content(runtime, listed.split()[2])
    manifests = {
        f"{entry['platform']['os']}/{entry['platform']['architecture']}": entry["digest"]
        for entry in index["manifests"]
    }
    amd64 = content(runtime, manifests["linux/amd64"])
    config: dict[str, Any] = content(runtime, amd64["config"]["digest"])
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    # The other platform's own layers stay in the registry.
    stored = set(succeed(runtime, "content", "list", "--quiet").split())
    arm64 = {layer["digest"] for layer in content(runtime, manifests["linux/arm64"])["layers"]}
    shared = {layer["digest"] for layer in amd64["layers"]}
    assert not (arm64 - shared) & stored, f"{image}: linux/arm64 layers pulled"
    assert shared <= stored, f"{image}: linux/amd64 layers missing"
    return config


def run(runtime: Containerd, image: str, *command: str) -> subprocess.CompletedProcess[str]:
    """A container of `image` started as its config says, or with `command` in place of its
    entrypoint and arguments; removed when it exits."""
    return run_with(runtime, (), image, *command)


def run_with(
    runtime: Containerd, flags: tuple[str, ...], image: str, *command: str
) -> subprocess.CompletedProcess[str]:
    name = f"skyhook-{next(_container_numbers)}"
    return runtime.ctr("run", "--rm", *flags, image, name, *command)


def test_agent_image_runs_its_controller_as_root(
    runtime: Containerd, component_image: Callable[[str], str]
) -> None:
    image = component_image("agent")
    config = pull(runtime, image)
    assert config["config"]["User"] == "0:0"

    controller = run(runtime, image)  # the entrypoint, given no stage to run
    assert controller.returncode == EXIT_BAD_INPUT, controller.stdout + controller.stderr
    assert "expected 2 to 4 arguments, got 0" in controller.stdout + controller.stderr

    helped = run(runtime, image, "skyhook-agent", "--help")
    assert helped.returncode == 0, helped.stdout + helped.stderr
    assert "Run Skyhook package stages against a host root" in helped.stdout

    user = run(runtime, image, "id")
    assert user.returncode == 0, user.stderr
    assert user.stdout.split()[:2] == ["uid=0", "gid=0"], user.stdout


def test_operator_image_runs_as_its_nonroot_user(
    runtime: Containerd, component_image: Callable[[str], str]
) -> None:
    image = component_image("operator")
    config = pull(runtime, image)
    assert config["config"]["User"] == "65532:65532"

    # The entrypoint, `skyhook-operator run`, starts the operator, which looks for a cluster:
    # neither a service account (not in a pod) nor a kubeconfig is there.
    started = run(runtime, image)
    assert started.returncode == 1, started.stdout + started.stderr
    assert "kubeconfig ~/.kube/config: no such file" in started.stderr, started.stderr

    helped = run(runtime, image, "skyhook-operator", "run", "--help")
    assert helped.returncode == 0, helped.stdout + helped.stderr
    assert "Usage: skyhook-operator run [OPTIONS]" in helped.stdout
    assert "Run the operator until SIGTERM/SIGINT." in helped.stdout

    user = run(runtime, image, "id")
    assert user.returncode == 0, user.stderr
    assert user.stdout.split()[:2] == ["uid=65532", "gid=65532"], user.stdout


def test_package_image_hands_its_files_to_the_agent(
    runtime: Containerd,
    component_image: Callable[[str], str],
    shellscript_package: str,
    tmp_path: Path,
) -> None:
    pull(runtime, shellscript_package)
    shown = run(runtime, shellscript_package, "cat", "/skyhook-package/config.json")
    assert shown.returncode == 0, shown.stderr
    config = json.loads((REPO / "packages" / "shellscript" / "config.json").read_text())
    assert json.loads(shown.stdout) == config

    # What the package-copy init container does: copy the package to a volume.
    volume = tmp_path / "volume"
    volume.mkdir()
    mount = f"type=bind,src={volume},dst=/copy,options=rbind:rw"
    copied = run_with(
        runtime, ("--mount", mount), shellscript_package, "cp", "-r", "/skyhook-package", "/copy"
    )
    assert copied.returncode == 0, copied.stderr
    assert (volume / "skyhook-package" / "config.json").is_file()

    agent = component_image("agent")
    pull(runtime, agent)
    mount = f"type=bind,src={volume},dst=/skyhook,options=rbind:ro"
    checked = run_with(
        runtime, ("--mount", mount), agent, "skyhook-agent", "validate", "/skyhook/skyhook-package"
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.splitlines()[-1] == "/skyhook/skyhook-package: valid"


def test_nerdctl_reads_the_runtime_as_kind_does_and_runs_the_agent_image(
    runtime: Containerd, component_image: Callable[[str], str]
) -> None:
    """kind's nerdctl provider reads `nerdctl info` for the cgroup version and limits, then
    pulls and runs its node image with nerdctl; here the agent image stands in for it."""
    result = runtime.nerdctl("info", "--format", "{{json .}}")
    assert result.returncode == 0, result.stdout + result.stderr
    info = json.loads(result.stdout)
    cgroup2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
    assert info["CgroupVersion"] == ("2" if cgroup2 else "1")
    assert info["CgroupDriver"] in ("cgroupfs", "systemd")

    image = component_image("agent")
    pulled = runtime.nerdctl("pull", "--insecure-registry", "--platform", "linux/amd64", image)
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    # As docker's CLI, nerdctl appends the arguments to the image's entrypoint: the controller.
    controller = runtime.nerdctl("run", "--rm", "--net", "none", image, "--help")
    assert controller.returncode == EXIT_BAD_INPUT, controller.stdout + controller.stderr
    assert "expected 2 to 4 arguments, got 1" in controller.stdout + controller.stderr
    helped = runtime.nerdctl(
        "run", "--rm", "--net", "none", "--entrypoint", "skyhook-agent", image, "--help"
    )
    assert helped.returncode == 0, helped.stdout + helped.stderr
    assert "Run Skyhook package stages against a host root" in helped.stdout
    user = runtime.nerdctl("run", "--rm", "--net", "none", "--entrypoint", "id", image, "-u")
    assert user.returncode == 0, user.stdout + user.stderr
    assert user.stdout.strip() == "0"
