"""A live rich table of a rollout: one row per node and package, fed by watches.

Two watch threads (nodes, and the SCR's pods) push what they see into `RolloutView`; the
caller's loop renders it. Used by the demo and by the benchmark's progress line.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rich.table import Table
from rich.text import Text

from skyhook_dev.harness import node_state, node_status, watch
from skyhook_operator.kube.client import ApiError, Json, Kube
from skyhook_schemas import keys

_STATUS_STYLE = {
    "complete": "green",
    "in_progress": "yellow",
    "erroring": "red",
    "blocked": "magenta",
    "waiting": "cyan",
}


@dataclass
class NodeRow:
    status: str = ""
    packages: dict[str, Any] = field(default_factory=dict)
    cordoned: bool = False
    pod: str = ""  # what the node's current stage pod is doing


@dataclass
class RolloutView:
    """What the watches have shown so far for one SCR on its nodes."""

    scr: str
    nodes: Mapping[str, NodeRow]
    started: float = field(default_factory=time.monotonic)

    def apply_node(self, obj: Json) -> None:
        row = self.nodes.get(obj["metadata"]["name"])
        if row is None:
            return
        row.status = node_status(obj, self.scr)
        row.packages = node_state(obj, self.scr)
        row.cordoned = bool(obj.get("spec", {}).get("unschedulable"))

    def apply_pod(self, kind: str, obj: Json) -> None:
        row = self.nodes.get(obj.get("spec", {}).get("nodeName", ""))
        if row is None:
            return
        row.pod = "" if kind == "DELETED" else _pod_activity(obj)

    @property
    def done(self) -> bool:
        return bool(self.nodes) and all(r.status == "complete" for r in self.nodes.values())

    def lines(self) -> dict[str, str]:
        """One plain line per node: what a log (no terminal) shows when it changes."""
        rendered = {}
        for name, row in sorted(self.nodes.items()):
            packages = ", ".join(
                f"{key.replace('|', ' ')} {entry.get('stage', '-')}/{entry.get('state', '-')}"
                for key, entry in sorted(row.packages.items())
            )
            cordon = " (cordoned)" if row.cordoned else ""
            pod = f"  pod: {row.pod}" if row.pod else ""
            rendered[name] = f"{name}: {row.status or '-'}{cordon}  {packages or '-'}{pod}"
        return rendered

    def table(self) -> Table:
        elapsed = time.monotonic() - self.started
        table = Table(title=f"Skyhook [bold]{self.scr}[/bold] rollout  ({elapsed:.0f} s)")
        for column in ("node", "status", "package", "stage", "state", "pod"):
            table.add_column(column)
        for name, row in sorted(self.nodes.items()):
            status = Text(row.status or "-", style=_STATUS_STYLE.get(row.status, ""))
            if row.cordoned:
                status.append(" (cordoned)", style="dim")
            entries = sorted(row.packages.items()) or [("", {})]
            for index, (key, entry) in enumerate(entries):
                table.add_row(
                    name if index == 0 else "",
                    status if index == 0 else Text(""),
                    key.replace("|", " ") or "-",
                    entry.get("stage", "-"),
                    Text(
                        entry.get("state", "-"), style=_STATUS_STYLE.get(entry.get("state", ""), "")
                    ),
                    row.pod if index == 0 else "",
                )
        return table


def _pod_activity(pod: Json) -> str:
    """What a stage pod is doing: `tuning-apply running`, `finished`, `pending`."""
    statuses = pod.get("status", {}).get("initContainerStatuses") or []
    for status in statuses:
        state = status.get("state") or {}
        if "running" in state:
            return f"{status['name']} running"
        if "waiting" in state and state["waiting"].get("reason") not in (None, "PodInitializing"):
            return f"{status['name']} {state['waiting']['reason']}"
        terminated = state.get("terminated")
        if terminated and terminated.get("exitCode"):
            return f"{status['name']} exit {terminated['exitCode']}"
    expected = len(pod.get("spec", {}).get("initContainers") or [])
    if (
        statuses
        and len(statuses) == expected
        and all("terminated" in (s.get("state") or {}) for s in statuses)
    ):
        return "finished"
    return str(pod.get("status", {}).get("phase", "Pending")).lower()


class Watchers:
    """Background watches on nodes and the SCR's pods, delivering into a queue."""

    def __init__(self, kube: Kube, scr: str, timeout: float) -> None:
        self.events: queue.Queue[tuple[str, str, Json]] = queue.Queue()
        self._threads = [
            threading.Thread(
                target=self._pump, args=("node", kube, "/api/v1/nodes", None, timeout), daemon=True
            ),
            threading.Thread(
                target=self._pump,
                args=(
                    "pod",
                    kube,
                    "/api/v1/pods",
                    {"labelSelector": f"{keys.NAME_LABEL}={scr}"},
                    timeout,
                ),
                daemon=True,
            ),
        ]

    def start(self) -> Watchers:
        for thread in self._threads:
            thread.start()
        return self

    def _pump(
        self, what: str, kube: Kube, path: str, query: Mapping[str, str] | None, timeout: float
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                for kind, obj in watch(kube, path, query, timeout=deadline - time.monotonic()):
                    if kind != "SYNCED":
                        self.events.put((what, kind, obj))
            except (ApiError, OSError):
                time.sleep(1)  # the demo tears the cluster down at the end; just stop quietly

    def drain_into(self, view: RolloutView, wait: float) -> None:
        """Apply everything queued (waiting up to `wait` s for the first item)."""
        try:
            item = self.events.get(timeout=wait)
        except queue.Empty:
            return
        while True:
            what, kind, obj = item
            if what == "node":
                view.apply_node(obj)
            else:
                view.apply_pod(kind, obj)
            try:
                item = self.events.get_nowait()
            except queue.Empty:
                return
