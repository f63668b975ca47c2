"""A containerd of its own, and ctr and nerdctl pointed at it: the images run as a cluster node
runs them, and a kind node's image store is filled before the node exists.

`Containerd(state_dir, tools)` starts containerd with its root, state, socket and config under
`state_dir` (a short path: the socket lives in it), the CRI and NRI plugins off (ctr needs
neither), and PATH leading to our runc and runc shim, the runtime its containers get. Leaving
the `with` block removes every container, stops containerd and checks that nothing is left
mounted under `state_dir`. Given `root`, containerd keeps its store there instead, and the store
outlives it (a node image copies it to /var/lib/containerd).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

NAMESPACE = "skyhook-test"
_DISABLED_PLUGINS = (
    "io.containerd.grpc.v1.cri",
    "io.containerd.cri.v1.images",
    "io.containerd.cri.v1.runtime",
    "io.containerd.nri.v1.nri",
    "io.containerd.podsandbox.controller.v1.podsandbox",
)


def containerd_config(state_dir: Path, root: Path | None = None) -> str:
    """config.toml (version 4, containerd 2.4's): everything under `state_dir`, the store in
    `root` when given."""
    disabled = ", ".join(f'"{plugin}"' for plugin in _DISABLED_PLUGINS)
    return "\n".join(
        [
            "version = 4",
            f'root = "{root or state_dir / "root"}"',
            f'state = "{state_dir / "state"}"',
            f'temp = "{state_dir / "tmp"}"',
            f"disabled_plugins = [{disabled}]",
            '[plugins."io.containerd.server.v1.grpc"]',
            f'  address = "{state_dir / "containerd.sock"}"',
            '[plugins."io.containerd.server.v1.ttrpc"]',
            f'  address = "{state_dir / "containerd.sock.ttrpc"}"',
            '[plugins."io.containerd.internal.v1.opt"]',
            f'  path = "{state_dir / "opt"}"',
            "",
        ]
    )


def mounts_under(directory: Path) -> list[str]:
    """Mount points at or below `directory`, from this process's mount table."""
    prefix = str(directory)
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [point for point in points if point == prefix or point.startswith(prefix + "/")]


@dataclass
class Containerd:
    state_dir: Path
    tools: dict[str, Path]  # ci/_runtime.py's, by name
    snapshotter: str = "overlayfs"
    namespace: str = NAMESPACE
    root: Path | None = None  # where the store is kept after containerd stops
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def socket(self) -> Path:
        return self.state_dir / "containerd.sock"

    @property
    def log(self) -> Path:
        return self.state_dir / "containerd.log"

    def __enter__(self) -> Containerd:
        self.state_dir.mkdir(parents=True)
        config = self.state_dir / "config.toml"
        config.write_text(containerd_config(self.state_dir, self.root))
        # The shim is found on containerd's PATH, and runc on the shim's.
        path = [self.tools["containerd-shim-runc-v2"].parent, self.tools["runc"].parent]
        env = {**os.environ, "PATH": os.pathsep.join([*map(str, path), os.environ["PATH"]])}
        with self.log.open("wb") as log:
            self._process = subprocess.Popen(
                [str(self.tools["containerd"]), "--config", str(config)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_ready()
        except BaseException:
            self._shut_down()  # the error carries containerd's log
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._shut_down()

    def _shut_down(self) -> None:
        self._stop()
        left = mounts_under(self.state_dir)
        if left:
            raise AssertionError(f"left mounted after containerd stopped: {left}")
        shutil.rmtree(self.state_dir)

    def ctr(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run ctr against our containerd; the result is returned whatever its exit code."""
        command = [
            str(self.tools["ctr"]),
            "--address", str(self.socket),
            "--namespace", self.namespace,
            *args,
        ]  # fmt: skip
        env = {**os.environ, "CONTAINERD_SNAPSHOTTER": self.snapshotter}
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)

    def nerdctl_settings(self) -> dict[str, str]:
        """Where nerdctl finds our containerd and keeps its own data (under `state_dir`)."""
        return {
            "address": str(self.socket),
            "namespace": self.namespace,
            "snapshotter": self.snapshotter,
            "data_root": str(self.state_dir / "nerdctl"),
            "cni_path": str(self.tools["bridge"].parent),
            "cni_netconfpath": str(self.state_dir / "cni"),
        }

    def nerdctl_toml(self) -> Path:
        """The settings as nerdctl.toml ($NERDCTL_TOML), for a nerdctl run without flags, as
        kind's provider runs it."""
        toml = self.state_dir / "nerdctl.toml"
        settings = self.nerdctl_settings().items()
        toml.write_text("".join(f'{key} = "{value}"\n' for key, value in settings))
        return toml

    def nerdctl(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run nerdctl against our containerd with the settings as flags; the result is
        returned whatever its exit code."""
        flags = [
            part
            for key, value in self.nerdctl_settings().items()
            for part in (f"--{key.replace('_', '-')}", value)
        ]
        command = [str(self.tools["nerdctl"]), *flags, *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout)

    def _wait_ready(self, timeout: float = 60) -> None:
        assert self._process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"containerd exited {self._process.returncode}:\n{self._tail()}")
            if self.socket.exists() and self.ctr("version", timeout=30).returncode == 0:
                return
            time.sleep(0.5)
        raise RuntimeError(f"containerd not ready after {timeout:.0f}s:\n{self._tail()}")

    def _stop(self) -> None:
        if self._process is None:
            return
        if self._process.poll() is None:
            for task in self.ctr("tasks", "list", "--quiet", timeout=60).stdout.split():
                self.ctr("tasks", "kill", "--signal", "SIGKILL", task, timeout=60)
                self.ctr("tasks", "delete", "--force", task, timeout=60)
            for container in self.ctr("containers", "list", "--quiet", timeout=60).stdout.split():
                self.ctr("containers", "delete", container, timeout=60)
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def _tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""
