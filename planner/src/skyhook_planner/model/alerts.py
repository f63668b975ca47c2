"""The alert gate, pure: no new interrupt starts while a matching Prometheus alert fires.

    alertGate: {prometheusURL: http://prometheus.monitoring:9090, matchAlerts: "^Node",
                ignoreAlerts: "^Watchdog$"}

The operator reads `/api/v1/alerts` of each URL some Skyhook names (outside the core) and puts
what it read into the snapshot as an `AlertReading`; this module only decides from it. Only
alerts in state `firing` count (not `pending`). An alert counts when its name matches
`matchAlerts` (every alert when unset) and does not match `ignoreAlerts`; both are Python
regular expressions searched anywhere in the name. The gate fails closed: a URL not read yet or
a failed read holds interrupts like a firing alert.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

from pydantic import Field, PlainValidator

from skyhook_planner.model.decoding import Closed

FIRING = "firing"


@dataclass(frozen=True)
class AlertGate:
    url: str
    match: re.Pattern[str] | None = None
    ignore: re.Pattern[str] | None = None

    def counts(self, name: str) -> bool:
        return (self.match is None or bool(self.match.search(name))) and not (
            self.ignore is not None and self.ignore.search(name)
        )


@dataclass(frozen=True)
class Alert:
    name: str  # the alertname label
    state: str  # firing or pending


@dataclass(frozen=True)
class AlertReading:
    """What one read of a Prometheus URL found: its alerts, or why it failed."""

    url: str
    read_at: datetime
    alerts: tuple[Alert, ...] = ()
    error: str = ""


def firing(gate: AlertGate, reading: AlertReading) -> tuple[str, ...]:
    """The names (sorted, once each) of firing alerts that hold interrupts."""
    return tuple(
        sorted({a.name for a in reading.alerts if a.state == FIRING and gate.counts(a.name)})
    )


def _url(value: object) -> str:
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise ValueError(f"{value!r} is not an http:// or https:// URL")
    return value.rstrip("/")


def _pattern(value: object) -> re.Pattern[str]:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a string")
    try:
        return re.compile(value)
    except re.error as error:
        raise ValueError(f"{value!r} is not a regular expression: {error}") from None


Regex = Annotated[re.Pattern[str], PlainValidator(_pattern)]


class GateWire(Closed):
    """`alertGate` as written, in a Skyhook or a DeploymentPolicy."""

    checked_when_missing = ("prometheusURL",)
    prometheus_url: Annotated[str, PlainValidator(_url)] = Field(alias="prometheusURL")
    match_alerts: Regex | None = None
    ignore_alerts: Regex | None = None

    def decoded(self) -> AlertGate:
        return AlertGate(self.prometheus_url, self.match_alerts, self.ignore_alerts)
