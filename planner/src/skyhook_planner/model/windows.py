"""Maintenance windows, pure: when may a Skyhook interrupt nodes (or, optionally, run stages)?

A window is written as weekdays, a start and an end time of day, and an IANA time zone:

    maintenanceWindow: {days: [sat, sun], start: "22:00", end: "04:00", timeZone: Europe/Berlin}

It opens on each listed day at `start` and closes at the following `end`: an end at or before
the start closes the next day (22:00 to 04:00 runs past midnight; equal times make 24 hours).
Times are wall-clock times in the zone, so a window keeps its local hours across daylight
saving changes:
- a start in the hour skipped when clocks go forward opens when the clock jumps past it;
- in the hour repeated when clocks go back, a wall-clock time inside the window counts both
  times it occurs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

DAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# Weekday numbers (Monday 0) by full or three-letter name.
_DAYS = {n: i for i, name in enumerate(DAY_NAMES) for n in (name, name[:3])}
INTERRUPTS = "interrupts"  # appliesTo: only new interrupts wait (the default)
ALL_STAGES = "all"  # appliesTo: no new stage of any kind starts outside the window
APPLIES_TO = (INTERRUPTS, ALL_STAGES)
_TIME = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")
# A window that is closed now opens within 8 days, unless a daylight saving change swallows
# it on its only day; two weeks covers that.
_SEARCH_DAYS = 15


class Problems(Protocol):
    """Where a decoder reports each problem, named by its field path (spec.py's collector)."""

    def add(self, path: str, problem: str) -> None: ...


@dataclass(frozen=True)
class MaintenanceWindow:
    days: frozenset[int]  # weekday numbers, Monday 0
    start: time
    end: time
    zone: ZoneInfo
    applies_to: str = INTERRUPTS

    @property
    def zone_name(self) -> str:
        return self.zone.key

    def _spans(self, day: date) -> tuple[datetime, datetime]:
        """The window opening on `day`, as naive wall-clock times in the zone."""
        opens = datetime.combine(day, self.start)
        closes = datetime.combine(day, self.end)
        if closes <= opens:
            closes += timedelta(days=1)
        return opens, closes

    def is_open(self, now: datetime) -> bool:
        wall = now.astimezone(self.zone).replace(tzinfo=None)
        for day in (wall.date(), wall.date() - timedelta(days=1)):
            if day.weekday() in self.days:
                opens, closes = self._spans(day)
                if opens <= wall < closes:
                    return True
        return False

    def next_open(self, now: datetime) -> datetime | None:
        """The first instant after `now` at which the window is open (UTC), or None when it
        does not open within two weeks (only a window swallowed by a clock change)."""
        today = now.astimezone(self.zone).date()
        found: list[datetime] = []
        for offset in range(-1, _SEARCH_DAYS):
            day = today + timedelta(days=offset)
            if day.weekday() not in self.days:
                continue
            opens, _ = self._spans(day)
            found += [t for t in _instants_reading(opens, self.zone) if t > now]
        return min((t for t in found if self.is_open(t)), default=None)


def _instants_reading(wall: datetime, zone: ZoneInfo) -> list[datetime]:
    """The instants (UTC) at which the zone's clock starts to read `wall` or later: one
    normally, two in a repeated hour, and the end of the jump when `wall` is skipped."""
    earlier = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    later = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if earlier.astimezone(zone).replace(tzinfo=None) == wall:
        return [earlier] if earlier == later else [earlier, later]
    # Skipped: `later` (the new offset) is before the jump, `earlier` after it. The jump is
    # the first second whose wall-clock time is at or past `wall`.
    low, high = min(earlier, later), max(earlier, later)
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) / 2
        middle = middle.replace(microsecond=0)
        if middle.astimezone(zone).replace(tzinfo=None) >= wall:
            high = middle
        else:
            low = middle
    return [high]


def _decode_time(raw: Mapping[str, object], key: str, path: str, errors: Problems) -> time:
    value = raw.get(key)
    match = _TIME.match(value) if isinstance(value, str) else None
    if match is None:
        errors.add(f"{path}.{key}", f'{value!r} is not a time of day written "HH:MM" (24-hour)')
        return time(0, 0)
    return time(int(match[1]), int(match[2]))


def decode_window(raw: object, path: str, errors: Problems) -> MaintenanceWindow | None:
    """`maintenanceWindow` at `path` (None when absent); problems go to `errors`."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        errors.add(path, "must be an object with start, end and optionally days and timeZone")
        return None
    known = {"days", "start", "end", "timeZone", "appliesTo"}
    for key in sorted(set(raw) - known):
        errors.add(f"{path}.{key}", f"unknown field; known: {', '.join(sorted(known))}")
    days: set[int] = set()
    raw_days = raw.get("days")
    if raw_days is None:
        days = set(range(7))
    elif not isinstance(raw_days, list) or not raw_days:
        errors.add(f"{path}.days", "must be a non-empty list of weekdays (mon ... sun)")
    else:
        for index, name in enumerate(raw_days):
            number = _DAYS.get(name.lower()) if isinstance(name, str) else None
            if number is None:
                errors.add(f"{path}.days[{index}]", f"{name!r} is not a weekday (mon ... sun)")
            else:
                days.add(number)
    zone_name = raw.get("timeZone", "UTC")
    zone = ZoneInfo("UTC")
    try:
        if not isinstance(zone_name, str):
            raise ValueError
        zone = ZoneInfo(zone_name)
    except (ZoneInfoNotFoundError, ValueError):
        errors.add(f"{path}.timeZone", f"{zone_name!r} is not an IANA time zone name")
    applies_to = raw.get("appliesTo", INTERRUPTS)
    if applies_to not in APPLIES_TO:
        errors.add(f"{path}.appliesTo", f"{applies_to!r} must be one of: {', '.join(APPLIES_TO)}")
        applies_to = INTERRUPTS
    return MaintenanceWindow(
        frozenset(days),
        _decode_time(raw, "start", path, errors),
        _decode_time(raw, "end", path, errors),
        zone,
        str(applies_to),
    )
