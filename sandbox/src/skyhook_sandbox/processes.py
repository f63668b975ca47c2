"""Starting and stopping the sandbox's long-lived processes by pid (recorded in the state file),
so `skyhook-sandbox down` in another shell stops exactly what `up` started."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ManagedProcess:
    name: str
    pid: int
    executable: str
    log: str


# Below the kernel's ephemeral range (32768 and up by default): a port the kernel picks for
# bind(0) can go to the next outgoing connection, or to the next bind(0), before its server
# binds it.
_PORTS = range(20000, 32768)
_handed_out: set[int] = set()
_chooser = random.SystemRandom()


def free_port() -> int:
    """A loopback port nothing listens on now and that this process has not handed out before,
    so the several servers one sandbox or operator starts never get the same one."""
    while True:
        port = _chooser.choice(_PORTS)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port


def spawn(
    name: str, argv: list[str], log: Path, env: dict[str, str] | None = None
) -> ManagedProcess:
    """Start a process in its own session (a Ctrl-C in the caller's terminal does not reach it)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    return ManagedProcess(name=name, pid=process.pid, executable=argv[0], log=str(log))


def is_running(process: ManagedProcess) -> bool:
    """True if the pid is alive and still runs the program we started (pids get reused).

    For our own children `waitpid` is the truth: it also covers the moment between fork and
    exec, when /proc still shows this Python process's command line. Processes started by
    another invocation (`skyhook-sandbox down` after `up`) are recognised by their command line.
    """
    try:
        pid, _ = os.waitpid(process.pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child: judge by /proc below
    else:
        return pid == 0
    try:
        cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes()
        status = Path(f"/proc/{process.pid}/stat").read_text()
    except OSError:
        return False
    if status.rsplit(")", 1)[1].split()[0] == "Z":
        _reap(process.pid)
        return False
    return cmdline.split(b"\0", 1)[0].decode(errors="replace") == process.executable


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def stop(process: ManagedProcess, grace: float = 10.0) -> None:
    """SIGTERM, wait up to `grace` seconds, then SIGKILL the whole process group."""
    if not is_running(process):
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap(process.pid)
        if not is_running(process):
            return
        time.sleep(0.1)
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    for _ in range(50):
        _reap(process.pid)
        if not is_running(process):
            return
        time.sleep(0.1)


def rss_bytes(pid: int) -> int:
    """Resident memory of one process (VmRSS), 0 if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


def tree_rss_bytes(pid: int) -> int:
    """RSS of a process and all its descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        total += rss_bytes(current)
        pending.extend(children.get(current, []))
    return total
