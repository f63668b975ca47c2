"""Pure construction of a pod's status the way a kubelet reports it."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

JsonDict = dict[str, Any]


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def exit_code(returncode: int) -> int:
    """A process killed by signal N reports 128+N, as container runtimes do."""
    return returncode if returncode >= 0 else 128 - returncode


@dataclass
class ContainerRecord:
    name: str
    image: str
    init: bool
    restart_count: int = 0
    state: JsonDict = field(default_factory=lambda: {"waiting": {"reason": "PodInitializing"}})
    last_state: JsonDict = field(default_factory=dict)
    container_id: str = ""

    @property
    def running(self) -> bool:
        return "running" in self.state

    @property
    def terminated(self) -> JsonDict | None:
        return self.state.get("terminated")

    def wait(self, reason: str, message: str = "") -> None:
        self.state = {"waiting": {"reason": reason, **({"message": message} if message else {})}}

    def run(self, container_id: str) -> None:
        if self.terminated:
            self.last_state = {"terminated": self.terminated}
        self.container_id = container_id
        self.state = {"running": {"startedAt": now()}}

    def finish(self, code: int, reason: str | None = None, message: str = "") -> None:
        started = self.state.get("running", {}).get("startedAt", now())
        self.state = {
            "terminated": {
                "exitCode": code,
                "reason": reason or ("Completed" if code == 0 else "Error"),
                "startedAt": started,
                "finishedAt": now(),
                "containerID": self.container_id,
                **({"message": message} if message else {}),
            }
        }

    def lost(self, message: str) -> None:
        """The process died with its node; what it did is unknown (a runtime reports 255)."""
        finished = self.terminated or {}
        self.state = {
            "terminated": {
                "exitCode": 255,
                "reason": "Unknown",
                "message": message,
                "startedAt": finished.get("startedAt", now()),
                "finishedAt": finished.get("finishedAt", now()),
                "containerID": self.container_id,
            }
        }

    def restart_waiting(self, reason: str, message: str) -> None:
        """Between two runs: the last run moves to lastState, the state says why we wait."""
        if self.terminated:
            self.last_state = {"terminated": self.terminated}
        self.wait(reason, message)

    def to_status(self) -> JsonDict:
        status: JsonDict = {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "ready": self.running and not self.init,
            "restartCount": self.restart_count,
            "started": self.running,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.container_id:
            status["containerID"] = self.container_id
        return status


def _condition(kind: str, ok: bool, reason: str = "", message: str = "") -> JsonDict:
    condition: JsonDict = {"type": kind, "status": "True" if ok else "False"}
    if not ok and reason:
        condition["reason"] = reason
    if not ok and message:
        condition["message"] = message
    return condition


def conditions(
    phase: str, volumes_ready: bool, inits: list[ContainerRecord], mains: list[ContainerRecord]
) -> list[JsonDict]:
    pending_inits = [c.name for c in inits if not (c.terminated and c.terminated["exitCode"] == 0)]
    unready = [c.name for c in mains if not c.running]
    initialized = not pending_inits or phase == "Succeeded"
    ready = not unready and phase == "Running"
    ready_reason = "PodCompleted" if phase in ("Succeeded", "Failed") else "ContainersNotReady"
    ready_message = (
        ""
        if ready_reason == "PodCompleted"
        else f"containers with unready status: [{' '.join(unready)}]"
    )
    return [
        _condition("PodReadyToStartContainers", volumes_ready),
        _condition(
            "Initialized",
            initialized,
            "ContainersNotInitialized",
            f"containers with incomplete status: [{' '.join(pending_inits)}]",
        ),
        _condition("Ready", ready, ready_reason, ready_message),
        _condition("ContainersReady", ready, ready_reason, ready_message),
        _condition("PodScheduled", True),
    ]


def pod_status(
    phase: str,
    *,
    host_ip: str,
    pod_ip: str,
    start_time: str,
    volumes_ready: bool,
    inits: list[ContainerRecord],
    mains: list[ContainerRecord],
    reason: str = "",
    message: str = "",
) -> JsonDict:
    """`reason` and `message` are the pod's own, as a kubelet sets them when it fails a pod
    (DeadlineExceeded)."""
    return {
        "phase": phase,
        **({"reason": reason} if reason else {}),
        **({"message": message} if message else {}),
        "conditions": conditions(phase, volumes_ready, inits, mains),
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": start_time,
        "initContainerStatuses": [c.to_status() for c in inits],
        "containerStatuses": [c.to_status() for c in mains],
    }
