"""What holds a Skyhook's nodes back this pass: a closed maintenance window (windows.py) or a
firing alert (alerts.py). Pure: decided from the spec, the alert readings in the snapshot and
the pass's clock.

A hold only stops new work from starting: an interrupt (or, with `appliesTo: all`, a stage)
that runs already is never cut short. Each gate a Skyhook sets has a status condition saying
whether it holds now and why; a node that waits on a hold is listed in the plan
(`actions.Held`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from skyhook_planner.model import alerts as alert_gate
from skyhook_planner.model import status as statuses
from skyhook_planner.model.alerts import AlertGate, AlertReading
from skyhook_planner.model.snapshot import ClusterSnapshot
from skyhook_planner.model.windows import ALL_STAGES, DAY_NAMES, MaintenanceWindow
from skyhook_schemas import keys

CONDITION_WINDOW = f"{keys.GROUP}/MaintenanceWindowClosed"
CONDITION_ALERTS = f"{keys.GROUP}/AlertsFiring"
HOLD_CONDITIONS = (CONDITION_WINDOW, CONDITION_ALERTS)

WINDOW_CLOSED = "MaintenanceWindowClosed"
ALERTS_FIRING = "AlertsFiring"
ALERT_QUERY_FAILED = "AlertQueryFailed"
ALERTS_NOT_READ = "AlertsNotRead"
REASONS = (WINDOW_CLOSED, ALERTS_FIRING, ALERT_QUERY_FAILED, ALERTS_NOT_READ)
# A window that never opens in the search range (see windows.py) is looked at again hourly.
_NO_OPENING_RECHECK_S = 3600.0


@dataclass(frozen=True)
class Hold:
    reason: str  # one of REASONS
    message: str
    recheck_s: float  # when the hold may have ended


@dataclass(frozen=True)
class Holds:
    interrupts: Hold | None = None  # no new interrupt (or cordon, drain) starts
    stages: Hold | None = None  # no new stage of any kind starts
    conditions: tuple[dict[str, Any], ...] = ()


NO_HOLDS = Holds()


def describe(window: MaintenanceWindow) -> str:
    days = (
        "every day"
        if len(window.days) == 7
        else ",".join(DAY_NAMES[d][:3] for d in sorted(window.days))
    )
    return f"{days} {window.start:%H:%M}-{window.end:%H:%M} {window.zone_name}"


def _window(window: MaintenanceWindow, now: datetime, generation: int) -> tuple[Hold | None, Any]:
    what = describe(window)
    if window.is_open(now):
        return None, statuses.condition(
            CONDITION_WINDOW,
            False,
            "MaintenanceWindowOpen",
            f"Inside the maintenance window ({what}).",
            now,
            generation=generation,
        )
    opens = window.next_open(now)
    held = "every stage waits" if window.applies_to == ALL_STAGES else "interrupts wait"
    if opens is None:
        message = f"Outside the maintenance window ({what}): {held}; it opens in no day of the next two weeks."
        recheck = _NO_OPENING_RECHECK_S
    else:
        local = opens.astimezone(window.zone).isoformat()
        message = f"Outside the maintenance window ({what}): {held} until it opens at {local}."
        recheck = (opens - now).total_seconds()
    hold = Hold(WINDOW_CLOSED, message, recheck)
    return hold, statuses.condition(
        CONDITION_WINDOW, True, WINDOW_CLOSED, message, now, generation=generation
    )


def _alerts(
    gate: AlertGate,
    reading: AlertReading | None,
    now: datetime,
    recheck_s: float,
    generation: int,
) -> tuple[Hold | None, Any]:
    if reading is None:
        reason = ALERTS_NOT_READ
        message = f"Interrupts wait: the alerts at {gate.url} have not been read yet."
    elif reading.error:
        reason = ALERT_QUERY_FAILED
        message = f"Interrupts wait: reading the alerts at {gate.url} failed: {reading.error}"
    else:
        names = alert_gate.firing(gate, reading)
        if not names:
            return None, statuses.condition(
                CONDITION_ALERTS,
                False,
                "NoAlertsFiring",
                f"No matching alert fires at {gate.url}.",
                now,
                generation=generation,
            )
        reason = ALERTS_FIRING
        message = f"Interrupts wait while alerts fire at {gate.url}: {', '.join(names)}."
    return Hold(reason, message, recheck_s), statuses.condition(
        CONDITION_ALERTS, True, reason, message, now, generation=generation
    )


def evaluate(
    window: MaintenanceWindow | None,
    gate: AlertGate | None,
    readings: Mapping[str, AlertReading],
    now: datetime,
    *,
    alert_recheck_s: float,
    generation: int = 0,
) -> Holds:
    """The holds of one Skyhook now. The window's hold comes first when both hold."""
    held: list[Hold] = []
    conditions = []
    window_hold = None
    if window is not None:
        window_hold, condition = _window(window, now, generation)
        conditions.append(condition)
        if window_hold is not None:
            held.append(window_hold)
    if gate is not None:
        alert_hold, condition = _alerts(
            gate, readings.get(gate.url), now, alert_recheck_s, generation
        )
        conditions.append(condition)
        if alert_hold is not None:
            held.append(alert_hold)
    stages = window_hold if window is not None and window.applies_to == ALL_STAGES else None
    return Holds(held[0] if held else None, stages, tuple(conditions))


def alert_urls(snapshot: ClusterSnapshot) -> set[str]:
    """The Prometheus URLs the operator must read for this snapshot's alert gates."""
    gates = [s.spec.alert_gate for s in snapshot.skyhooks if s.spec is not None and not s.deleting]
    gates += [p.policy.alert_gate for p in snapshot.policies if p.policy is not None]
    return {g.url for g in gates if g is not None}
