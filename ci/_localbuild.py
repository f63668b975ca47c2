"""A local image build service: CNCF distribution's registry and a BuildKit daemon on loopback.

`LocalBuild(state_dir).start()` runs, from the pinned binaries of ci/_buildkit.py:
  - `registry serve` on 127.0.0.1:<free port>, storing under <state>/registry;
  - `buildkitd` with the OCI worker (our runc, host network, no seccomp filter: runc is built
    without libseccomp) on unix://<state>/buildkitd.sock, told that the registry speaks HTTP;
  - a buildx builder `skyhook-local` using buildx's remote driver pointed at that daemon, in a
    docker CLI config of its own (<state>/docker, with the buildx plugin), so the user's docker
    config is untouched.
`env()` gives DOCKER_CONFIG and BUILDX_BUILDER: with them `docker buildx build --push` (what
ci/build-package and ci/build-image run) builds in our daemon and pushes to our registry; no
docker engine is involved. `stop()` ends both daemons (by their pids, kept in the state dir).

Image builds for a platform the machine cannot execute (linux/arm64 here: no QEMU) work as long
as no RUN step runs on that platform: COPY-only stages, or content built on $BUILDPLATFORM.
Needs root (the OCI worker mounts overlayfs and creates namespaces).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from _buildkit import ensure_tools
from _gotool import Say

BUILDER = "skyhook-local"
# A unix socket path longer than this cannot be bound (sun_path is 108 bytes).
_MAX_SOCKET_PATH = 100


class LocalBuildError(RuntimeError):
    """A daemon did not start; the message quotes the end of its log."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def registry_config(storage: Path, address: str) -> str:
    """distribution's YAML config: filesystem storage, deletes allowed, plain HTTP on loopback."""
    return json.dumps(  # JSON is YAML
        {
            "version": 0.1,
            "log": {"level": "warn", "accesslog": {"disabled": True}},
            "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
            "http": {"addr": address},
        },
        indent=2,
    )


def buildkitd_config(root: Path, runc: Path, registry: str) -> str:
    """buildkitd.toml: the OCI worker on our runc, and `registry` reached over plain HTTP."""
    return "\n".join(
        [
            f'root = "{root}"',
            "[worker.oci]",
            "  enabled = true",
            f'  binary = "{runc}"',
            '  snapshotter = "overlayfs"',
            '  networkMode = "host"',
            # Built images are kept only while this daemon lives: keep its cache small.
            "  gc = true",
            '  reservedSpace = "1GB"',
            "[worker.containerd]",
            "  enabled = false",
            f'[registry."{registry}"]',
            "  http = true",
            "",
        ]
    )


@dataclass
class LocalBuild:
    state_dir: Path
    say: Say = print

    @property
    def socket_path(self) -> Path:
        return self.state_dir / "buildkitd.sock"

    @property
    def docker_config(self) -> Path:
        return self.state_dir / "docker"

    @property
    def registry(self) -> str:
        """host:port of the running registry."""
        return (self.state_dir / "registry.address").read_text().strip()

    def env(self) -> dict[str, str]:
        """What `docker buildx build` needs to build here and push to our registry."""
        return {"DOCKER_CONFIG": str(self.docker_config), "BUILDX_BUILDER": BUILDER}

    def buildx(self, context: Path, *args: str, platform: str = "linux/amd64") -> None:
        """`docker buildx build` of `context` here (`args`: its outputs and tags); a failure
        raises with the end of buildx's output."""
        result = subprocess.run(
            ["docker", "buildx", "build", "--platform", platform, *args, str(context)],
            env={**os.environ, **self.env()},
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise LocalBuildError(f"docker buildx build {context}:\n{result.stderr[-4000:]}")

    def start(self) -> LocalBuild:
        self.state_dir = self.state_dir.resolve()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if len(str(self.socket_path)) > _MAX_SOCKET_PATH:
            raise LocalBuildError(
                f"{self.socket_path}: too long for a unix socket; use a shorter --state-dir"
            )
        tools = ensure_tools(self.say)
        self._start_registry(tools["registry"])
        self._start_buildkitd(tools["buildkitd"], tools["buildctl"], tools["runc"])
        self._create_builder(tools["buildx"])
        return self

    def stop(self) -> None:
        for name in ("buildkitd", "registry"):
            pid_file = self.state_dir / f"{name}.pid"
            if not pid_file.exists():
                continue
            _terminate(int(pid_file.read_text()))
            pid_file.unlink()

    def __enter__(self) -> LocalBuild:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # --- the daemons ----------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> int:
        log = (self.state_dir / f"{name}.log").open("ab")
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env={**os.environ, **(env or {})},
            start_new_session=True,  # outlives `ci/local-build up`; stopped by pid
        )
        (self.state_dir / f"{name}.pid").write_text(f"{process.pid}\n")
        return process.pid

    def _log_tail(self, name: str) -> str:
        lines = (self.state_dir / f"{name}.log").read_text(errors="replace").splitlines()
        return "\n".join(lines[-15:])

    def _start_registry(self, binary: Path) -> None:
        address = f"127.0.0.1:{free_port()}"
        config = self.state_dir / "registry.yaml"
        config.write_text(registry_config(self.state_dir / "registry", address))
        # No tracing exporter: there is no collector to send spans to.
        pid = self._spawn(
            "registry", [str(binary), "serve", str(config)], {"OTEL_TRACES_EXPORTER": "none"}
        )
        if not _wait(
            lambda: _answers(f"http://{address}/v2/") or not _alive(pid), 30
        ) or not _alive(pid):
            raise LocalBuildError(f"registry did not start:\n{self._log_tail('registry')}")
        (self.state_dir / "registry.address").write_text(address + "\n")
        self.say(f"registry {address} (storage {self.state_dir / 'registry'})")

    def _start_buildkitd(self, binary: Path, buildctl: Path, runc: Path) -> None:
        config = self.state_dir / "buildkitd.toml"
        config.write_text(buildkitd_config(self.state_dir / "buildkit", runc, self.registry))
        self.socket_path.unlink(missing_ok=True)
        argv = [str(binary), "--config", str(config), "--addr", f"unix://{self.socket_path}"]
        pid = self._spawn("buildkitd", argv)
        probe = [str(buildctl), "--addr", f"unix://{self.socket_path}", "debug", "workers"]

        def ready() -> bool:
            return subprocess.run(probe, capture_output=True).returncode == 0

        if not _wait(lambda: not _alive(pid) or ready(), 60) or not _alive(pid):
            raise LocalBuildError(f"buildkitd did not start:\n{self._log_tail('buildkitd')}")
        self.say(f"buildkitd unix://{self.socket_path} (OCI worker, runc {runc})")

    def _create_builder(self, buildx: Path) -> None:
        plugins = self.docker_config / "cli-plugins"
        plugins.mkdir(parents=True, exist_ok=True)
        plugin = plugins / "docker-buildx"
        plugin.unlink(missing_ok=True)
        plugin.symlink_to(buildx)
        env = {**os.environ, **self.env()}
        subprocess.run(["docker", "buildx", "rm", BUILDER], env=env, capture_output=True)
        create = ["docker", "buildx", "create", "--name", BUILDER, "--driver", "remote"]
        for command in (
            [*create, f"unix://{self.socket_path}"],
            ["docker", "buildx", "inspect", "--bootstrap", BUILDER],
        ):
            result = subprocess.run(command, env=env, capture_output=True, text=True)
            if result.returncode != 0:
                raise LocalBuildError(
                    f"{' '.join(command)} failed:\n{result.stdout}{result.stderr}".rstrip()
                )
        self.say(f"buildx builder {BUILDER} (remote driver), DOCKER_CONFIG={self.docker_config}")


def _terminate(pid: int) -> None:
    """SIGTERM, then SIGKILL after 20 s; returns once the process is gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if not _wait(lambda: not _alive(pid), 20):
        os.kill(pid, signal.SIGKILL)
        _wait(lambda: not _alive(pid), 5)


def _alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child (started by an earlier `up`): ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return waited == 0


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def _wait(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return bool(condition())
