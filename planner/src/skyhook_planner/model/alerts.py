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
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from skyhook_planner.model.windows import Problems

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


def _pattern(
    raw: Mapping[str, object], key: str, path: str, errors: Problems
) -> re.Pattern[str] | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        errors.add(f"{path}.{key}", f"{value!r} is not a string")
        return None
    try:
        return re.compile(value)
    except re.error as error:
        errors.add(f"{path}.{key}", f"{value!r} is not a regular expression: {error}")
        return None


def decode_gate(raw: object, path: str, errors: Problems) -> AlertGate | None:
    """`alertGate` at `path` (None when absent); problems go to `errors`."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        errors.add(path, "must be an object with prometheusURL")
        return None
    known = {"prometheusURL", "matchAlerts", "ignoreAlerts"}
    for key in sorted(set(raw) - known):
        errors.add(f"{path}.{key}", f"unknown field; known: {', '.join(sorted(known))}")
    url = raw.get("prometheusURL")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        errors.add(f"{path}.prometheusURL", f"{url!r} is not an http:// or https:// URL")
        url = ""
    return AlertGate(
        url.rstrip("/"),
        _pattern(raw, "matchAlerts", path, errors),
        _pattern(raw, "ignoreAlerts", path, errors),
    )
