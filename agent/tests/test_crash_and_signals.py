"""A killed agent resumes where it stopped; SIGTERM stops before the next step."""

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable

from conftest import Host, config, marker_script, step

# Blocks while /block exists on the host, so the test controls when the step is "in flight".
BLOCKING = marker_script("two", "while [ -e /block ]; do sleep 0.05; done")


def wait_for(condition: Callable[[], bool], what: str, deadline: float = 20.0) -> None:
    end = time.monotonic() + deadline
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def three_step_package(host: Host) -> None:
    host.write_package(
        config({"apply": [step("one.sh"), step("two.sh"), step("three.sh")],
                "apply-check": [step("one.sh")]}),
        {"one.sh": marker_script("one"), "two.sh": BLOCKING, "three.sh": marker_script("three")},
    )  # fmt: skip


def test_rerun_after_sigkill_mid_stage_resumes_at_the_unfinished_step(host: Host) -> None:
    three_step_package(host)
    host.path("/block").touch()
    # Its own session, so the kill takes the step too, as when a container is killed.
    agent = subprocess.Popen(host.agent_argv("apply"), env=host.agent_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)  # fmt: skip
    try:
        wait_for(lambda: "two " in host.markers(), "step two to start")
    finally:
        os.killpg(agent.pid, signal.SIGKILL)
        agent.wait()
    host.path("/block").unlink()

    rerun = host.run("apply")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert host.markers() == ["one ", "two ", "two ", "three "]
    assert "apply 1/3 SKIPPED one.sh" in rerun.stdout


def test_sigterm_lets_the_running_step_finish_then_stops_and_fails(host: Host) -> None:
    three_step_package(host)
    host.path("/block").touch()
    agent = subprocess.Popen(host.agent_argv("apply"), env=host.agent_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(agent.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()
    wait_for(lambda: "two " in host.markers(), "step two to start")
    agent.send_signal(signal.SIGTERM)  # to the agent only, as kubelet signals the container
    wait_for(lambda: any("SIGTERM received" in line for line in lines), "the agent to see SIGTERM")
    host.path("/block").unlink()
    agent.wait(timeout=20)
    reader.join(timeout=5)
    out = "".join(lines)
    assert agent.returncode == 1
    assert host.markers() == ["one ", "two "]
    assert "apply 2/3 OK" in out
    assert "apply 3/3 FAILED  three.sh (SIGTERM received; stopped before this step)" in out
    # Step two finished, so its flag is recorded and a rerun goes straight to three.
    assert host.run("apply").returncode == 0
    assert host.markers() == ["one ", "two ", "three "]
