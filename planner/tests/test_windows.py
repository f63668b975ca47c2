"""Maintenance windows: when they are open, when they open next, across midnight and daylight
saving changes, and how a bad window is reported."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from skyhook_planner.model.spec import SpecError, decode_spec
from skyhook_planner.model.windows import APPLIES_TO, MaintenanceWindow
from skyhook_schemas.crds import SKYHOOK_CRD_PATH


def window(
    start: str, end: str, zone: str = "UTC", days: tuple[str, ...] | None = None
) -> MaintenanceWindow:
    raw: dict[str, object] = {"start": start, "end": end, "timeZone": zone}
    if days is not None:
        raw["days"] = list(days)
    found = decode_spec({"maintenanceWindow": raw}).maintenance_window
    assert found is not None
    return found


def local(zone: str, *fields: int, fold: int = 0) -> datetime:
    return datetime(*fields, tzinfo=ZoneInfo(zone), fold=fold)  # type: ignore[misc]


BERLIN, NEW_YORK = "Europe/Berlin", "America/New_York"


@pytest.mark.parametrize(
    ("win", "at", "expected"),
    [
        # Saturday 22:00 to Sunday 04:00, Berlin time.
        (window("22:00", "04:00", BERLIN, ("sat",)), local(BERLIN, 2026, 11, 28, 21, 59), False),
        (window("22:00", "04:00", BERLIN, ("sat",)), local(BERLIN, 2026, 11, 28, 22, 0), True),
        (window("22:00", "04:00", BERLIN, ("sat",)), local(BERLIN, 2026, 11, 29, 3, 59), True),
        (window("22:00", "04:00", BERLIN, ("sat",)), local(BERLIN, 2026, 11, 29, 4, 0), False),
        # Sunday is not listed: its own evening stays closed.
        (window("22:00", "04:00", BERLIN, ("sat",)), local(BERLIN, 2026, 11, 29, 23, 0), False),
        # Equal times: 24 hours from the start.
        (window("00:00", "00:00", "UTC", ("sun",)), local("UTC", 2026, 11, 29, 23, 59), True),
        (window("00:00", "00:00", "UTC", ("sun",)), local("UTC", 2026, 11, 30, 0, 0), False),
        # The same instant, read in the window's own zone.
        (window("09:00", "10:00", NEW_YORK), datetime(2026, 7, 1, 13, 30, tzinfo=UTC), True),
        # Clocks go forward at 02:00 in Berlin on 2026-03-29: 02:30 never happens, the window
        # is open from the jump (03:00 local).
        (window("02:30", "05:00", BERLIN), local(BERLIN, 2026, 3, 29, 1, 59), False),
        (window("02:30", "05:00", BERLIN), local(BERLIN, 2026, 3, 29, 3, 0), True),
        # Clocks go back at 02:00 in New York on 2026-11-01: 01:30 happens twice; both count.
        (window("01:00", "01:45", NEW_YORK), local(NEW_YORK, 2026, 11, 1, 1, 30), True),
        (window("01:00", "01:45", NEW_YORK), local(NEW_YORK, 2026, 11, 1, 1, 30, fold=1), True),
    ],
    ids=[
        "before-saturday-start",
        "at-saturday-start",
        "past-midnight-still-open",
        "closes-at-end",
        "unlisted-day-closed",
        "equal-times-24h-open",
        "equal-times-24h-closed-after",
        "other-zone-instant",
        "dst-gap-before",
        "dst-gap-start-opens-at-jump",
        "dst-repeat-first",
        "dst-repeat-second",
    ],
)
def test_is_open(win: MaintenanceWindow, at: datetime, expected: bool) -> None:
    assert win.is_open(at) is expected


@pytest.mark.parametrize(
    ("win", "at", "opens"),
    [
        (
            window("22:00", "04:00", BERLIN, ("sat",)),
            local(BERLIN, 2026, 11, 24, 12, 0),
            local(BERLIN, 2026, 11, 28, 22, 0),
        ),
        # A start inside the skipped hour opens when the clock jumps (01:00 UTC).
        (
            window("02:30", "05:00", BERLIN),
            local(BERLIN, 2026, 3, 29, 1, 0),
            datetime(2026, 3, 29, 1, 0, tzinfo=UTC),
        ),
        # In the repeated hour, the window opens again when the clock goes back into it.
        (
            window("01:00", "01:45", NEW_YORK),
            local(NEW_YORK, 2026, 11, 1, 1, 50),
            local(NEW_YORK, 2026, 11, 1, 1, 0, fold=1),
        ),
    ],
    ids=["next-saturday", "dst-gap", "dst-repeat"],
)
def test_next_open(win: MaintenanceWindow, at: datetime, opens: datetime) -> None:
    assert win.next_open(at) == opens.astimezone(UTC)


ZONES = st.sampled_from(
    ["UTC", BERLIN, NEW_YORK, "Australia/Lord_Howe", "Asia/Kolkata", "America/Santiago"]
)
TIMES = st.builds(lambda h, m: f"{h:02d}:{m:02d}", st.integers(0, 23), st.sampled_from([0, 30]))
DAYS = st.lists(
    st.sampled_from(["mon", "tue", "wed", "thu", "fri", "sat", "sun"]), min_size=1, unique=True
)
INSTANTS = st.datetimes(
    min_value=datetime(2025, 1, 1), max_value=datetime(2028, 12, 31), timezones=st.just(UTC)
)


@settings(max_examples=300, deadline=None)
@given(
    zone=ZONES,
    start=TIMES,
    end=TIMES,
    days=DAYS,
    now=INSTANTS,
    fraction=st.floats(0, 1, exclude_max=True),
)
def test_next_open_is_the_first_open_instant(
    *, zone: str, start: str, end: str, days: list[str], now: datetime, fraction: float
) -> None:
    """Closed now: the window is open at `next_open`, was closed the second before, and at
    every instant between now and then."""
    win = window(start, end, zone, tuple(days))
    if win.is_open(now):
        return
    opens = win.next_open(now)
    assert opens is not None
    assert opens > now
    assert win.is_open(opens)
    assert not win.is_open(opens - timedelta(seconds=1))
    between = min(now + (opens - now) * fraction, opens - timedelta(microseconds=1))
    assert not win.is_open(between)


@settings(max_examples=200, deadline=None)
@given(ZONES, TIMES, DAYS, INSTANTS)
def test_a_window_across_midnight_spans_the_date_change(
    zone: str, start: str, days: list[str], now: datetime
) -> None:
    """A window from `start` to one minute before it lasts about a day: once open, it is still
    open 23 hours later, whatever the clock change (at most one hour here) in between."""
    hour, minute = map(int, start.split(":"))
    end = (datetime(2000, 1, 1, hour, minute) - timedelta(minutes=1)).strftime("%H:%M")
    win = window(start, end, zone, tuple(days))
    opens = win.next_open(now)
    if opens is None:
        return
    assert win.is_open(opens + timedelta(hours=21))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"start": "22:00"}, "spec.maintenanceWindow.end: None is not a time of day"),
        ({"start": "7:00", "end": "08:00"}, "spec.maintenanceWindow.start: '7:00' is not"),
        (
            {"start": "07:00", "end": "08:00", "days": ["funday"]},
            "spec.maintenanceWindow.days[0]: 'funday' is not a weekday",
        ),
        (
            {"start": "07:00", "end": "08:00", "days": []},
            "spec.maintenanceWindow.days: must be a non-empty list",
        ),
        (
            {"start": "07:00", "end": "08:00", "timeZone": "Mars/Olympus"},
            "spec.maintenanceWindow.timeZone: 'Mars/Olympus' is not an IANA time zone",
        ),
        (
            {"start": "07:00", "end": "08:00", "appliesTo": "reboots"},
            "spec.maintenanceWindow.appliesTo: 'reboots' must be one of: interrupts, all",
        ),
        (
            {"start": "07:00", "end": "08:00", "startAt": "x"},
            "spec.maintenanceWindow.startAt: unknown field",
        ),
        ("weekends", "spec.maintenanceWindow: must be an object"),
    ],
    ids=[
        "missing-end",
        "one-digit-hour",
        "bad-day",
        "no-days",
        "bad-zone",
        "bad-applies-to",
        "unknown-field",
        "not-an-object",
    ],
)
def test_a_bad_window_names_its_field(raw: object, message: str) -> None:
    with pytest.raises(SpecError) as error:
        decode_spec({"maintenanceWindow": raw})
    assert any(m.startswith(message) for m in error.value.messages), error.value.messages


def test_the_crds_accept_what_the_decoders_accept() -> None:
    """Both CRDs carry the same window and gate fields, with the decoder's choices."""
    policies = SKYHOOK_CRD_PATH.with_name("deploymentpolicies.skyhook.nvidia.com.yaml")
    for path in (SKYHOOK_CRD_PATH, policies):
        crd = yaml.safe_load(path.read_text())
        spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        window = spec["properties"]["maintenanceWindow"]
        gate = spec["properties"]["alertGate"]
        assert tuple(window["properties"]["appliesTo"]["enum"]) == APPLIES_TO
        assert set(window["properties"]) == {"days", "start", "end", "timeZone", "appliesTo"}
        assert set(gate["properties"]) == {"prometheusURL", "matchAlerts", "ignoreAlerts"}
