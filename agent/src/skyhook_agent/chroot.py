"""The only place that starts step and interrupt processes.

A process runs either chrooted into the host root (what upstream does for every step) or in
the agent's own filesystem. Its stdout and stderr are read as they come and handed to an
OutputSink, so a long step shows progress in ``kubectl logs`` while it runs.
"""

import os
import selectors
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from skyhook_agent.logs import OutputSink

EXEC_FAILED = 127
"""Return code reported when the process could not be started (as shells report it)."""
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class ProcessSpec:
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    """Working directory as the process sees it (inside the chroot when there is one)."""
    chroot: Path | None
    """Host root to chroot into; None runs the process in the agent's own filesystem."""


def _enter(root: Path | None, cwd: str) -> Callable[[], None]:
    # Runs in the forked child before exec. Popen's own cwd= is applied *before* preexec_fn,
    # i.e. outside the chroot, so the chdir has to happen here, after the chroot.
    def enter() -> None:
        if root is not None:
            os.chroot(root)
        os.chdir(cwd)

    return enter


def run_process(spec: ProcessSpec, sink: OutputSink, buffer_limit: int) -> int:
    """Run to completion, streaming output; returns the exit code (negative = killed by signal).

    A process that cannot start (missing file or interpreter in the host root, no exec bit,
    cwd missing) is reported on the err stream and counts as exit code 127.
    """
    env = dict(spec.env)
    env.setdefault("PATH", DEFAULT_PATH)
    try:
        process = subprocess.Popen(
            spec.argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=_enter(spec.chroot, spec.cwd),  # noqa: PLW1509 (single-threaded agent)
        )
    except (OSError, subprocess.SubprocessError) as exc:
        where = f"host root {spec.chroot}" if spec.chroot else "the agent's filesystem"
        sink.write("err", f"cannot start {spec.argv[0]} in {where}: {exc}\n".encode())
        sink.close()
        return EXEC_FAILED
    assert process.stdout is not None and process.stderr is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ, "out")
        selector.register(process.stderr, selectors.EVENT_READ, "err")
        open_streams = 2
        while open_streams:
            # Once the process has exited, only drain what is buffered: a daemon it started in
            # the background may hold the pipes open forever.
            exited = process.poll() is not None
            events = selector.select(timeout=0 if exited else 0.5)
            if exited and not events:
                break
            for key, _ in events:
                data = os.read(key.fd, buffer_limit)
                if data:
                    sink.write(key.data, data)
                else:
                    selector.unregister(key.fileobj)
                    open_streams -= 1
    process.stdout.close()
    process.stderr.close()
    sink.close()
    return process.wait()
