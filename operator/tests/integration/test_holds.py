"""Interrupts only when it is safe, on the sandbox: a closed maintenance window cordons nobody
until the (test-moved) clock reaches it, and a firing alert at a Prometheus-compatible server
holds every interrupt until it clears. Both read from watches that record every version."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import urllib3

from skyhook_dev.harness import wait_until
from skyhook_planner.rules import holds

from .helpers import Cluster, Recording, agentless

SERVICE_INTERRUPT = {"type": "service", "services": ["cron"]}


def cordon_times(recording: Recording) -> list[float]:
    """When the watch first saw each node cordoned."""
    first: dict[str, float] = {}
    for at, _, node in recording.of("node"):
        if node["spec"].get("unschedulable"):
            first.setdefault(node["metadata"]["name"], at)
    return sorted(first.values())


def condition(cluster: Cluster, scr: str, kind: str) -> dict[str, Any]:
    for found in cluster.get_skyhook(scr).get("status", {}).get("conditions", []):
        if found["type"] == kind:
            return dict(found)
    return {}


def restart_operator(cluster: Cluster, **env: str) -> None:
    assert cluster.operator is not None
    cluster.operator.stop()
    cluster.operator = cluster.start_operator(
        log_name="operator-holds.log", SKYHOOK_ALERT_POLL_INTERVAL="1", **env
    )


def poke(cluster: Cluster, scr: str) -> None:
    """Any change to the Skyhook wakes the operator for a pass (in production the pass the
    plan scheduled for the opening time does)."""
    cluster.patch_skyhook(scr, {"metadata": {"annotations": {"test/poke": str(time.time())}}})


def test_a_closed_window_cordons_nobody_until_it_opens(cluster: Cluster, tmp_path: Path) -> None:
    offset = tmp_path / "clock-offset"
    offset.write_text("0")
    restart_operator(cluster, SKYHOOK_CLOCK_OFFSET_FILE=str(offset))
    cluster.add_nodes(2)
    opens = (datetime.now(UTC) + timedelta(hours=2)).replace(second=0, microsecond=0)
    window = {
        "start": f"{opens:%H:%M}",
        "end": f"{opens + timedelta(hours=1):%H:%M}",
        "timeZone": "UTC",
    }
    recording = cluster.record("window")
    package = agentless("1.0.0", sleep=0, interrupt=SERVICE_INTERRUPT)
    cluster.skyhook("window", {"kernel": package}, maintenanceWindow=window)

    wait_until(
        lambda: condition(cluster, "window", holds.CONDITION_WINDOW).get("status") == "True",
        30,
        "the window's condition to say closed",
    )
    closed = condition(cluster, "window", holds.CONDITION_WINDOW)
    assert f"until it opens at {opens.isoformat()}" in closed["message"]
    poke(cluster, "window")  # one more full pass with the window closed
    wait_until(
        lambda: cluster.get_skyhook("window")["status"].get("status") == "in_progress",
        30,
        "the rollout to be in progress (and waiting)",
    )
    assert cordon_times(recording) == []
    assert cluster.pods("window") == []

    moved = time.monotonic()
    offset.write_text(str((opens - datetime.now(UTC)).total_seconds() + 60))
    poke(cluster, "window")
    cluster.wait_complete("window", timeout=120)
    cordons = cordon_times(recording)
    assert len(cordons) == 2, "each node is cordoned for its interrupt"
    assert min(cordons) > moved, "a node was cordoned before the window opened"
    assert condition(cluster, "window", holds.CONDITION_WINDOW)["status"] == "False"


class Prometheus:
    """A Prometheus-compatible `/api/v1/alerts` on loopback; `firing` and `fail` are what it
    serves now."""

    def __init__(self) -> None:
        self.firing: list[str] = []
        self.fail = False
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/api/v1/alerts":
                    self.send_error(404)
                    return
                if owner.fail:
                    self.send_error(500, "rule evaluation stuck")
                    return
                alerts = [
                    {"labels": {"alertname": name}, "state": "firing", "value": "1"}
                    for name in owner.firing
                ]
                body = json.dumps({"status": "success", "data": {"alerts": alerts}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def prometheus() -> Iterator[Prometheus]:
    server = Prometheus()
    yield server
    server.server.shutdown()
    server.server.server_close()


def held_metric(cluster: Cluster) -> list[str]:
    assert cluster.operator is not None
    text = urllib3.request("GET", cluster.operator.metrics_url).data.decode()
    return [line for line in text.splitlines() if line.startswith("skyhook_held_")]


def test_a_firing_alert_holds_every_interrupt_until_it_clears(
    cluster: Cluster, prometheus: Prometheus
) -> None:
    restart_operator(cluster)
    cluster.add_nodes(2)
    prometheus.firing = ["NodeDown", "Watchdog"]
    recording = cluster.record("alerts")
    package = agentless("1.0.0", sleep=0, interrupt=SERVICE_INTERRUPT)
    gate = {"prometheusURL": prometheus.url, "ignoreAlerts": "^Watchdog$"}
    cluster.skyhook("alerts", {"kernel": package}, alertGate=gate)

    def reason() -> str:
        return str(condition(cluster, "alerts", holds.CONDITION_ALERTS).get("reason", ""))

    wait_until(lambda: reason() == holds.ALERTS_FIRING, 30, "the alert to hold interrupts")
    message = condition(cluster, "alerts", holds.CONDITION_ALERTS)["message"]
    assert message.endswith(f"alerts fire at {prometheus.url}: NodeDown."), message
    wait_until(
        lambda: any(
            'reason="AlertsFiring",skyhook_name="alerts"} 2' in line
            for line in held_metric(cluster)
        ),
        30,
        "the held-nodes gauge to count both nodes",
    )

    prometheus.fail = True  # fail closed, naming the error
    wait_until(lambda: reason() == holds.ALERT_QUERY_FAILED, 30, "the failed read to hold")
    assert "HTTP 500" in condition(cluster, "alerts", holds.CONDITION_ALERTS)["message"]
    assert cordon_times(recording) == []
    assert cluster.pods("alerts") == []

    cleared = time.monotonic()
    prometheus.fail = False
    prometheus.firing = ["Watchdog"]
    cluster.wait_complete("alerts", timeout=120)
    cordons = cordon_times(recording)
    assert len(cordons) == 2
    assert min(cordons) > cleared, "a node was cordoned while the alert held"
    assert condition(cluster, "alerts", holds.CONDITION_ALERTS)["reason"] == "NoAlertsFiring"
    seconds = [
        line for line in held_metric(cluster) if line.startswith("skyhook_held_seconds_total")
    ]
    assert any('reason="AlertsFiring",skyhook_name="alerts"}' in line for line in seconds)
