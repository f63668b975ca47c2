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

import contextlib
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import PlainValidator

from skyhook_planner.model.decoding import Closed, check

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


def _weekday(name: object) -> int:
    number = _DAYS.get(name.lower()) if isinstance(name, str) else None
    if number is None:
        raise ValueError(f"{name!r} is not a weekday (mon ... sun)")
    return number


def _time_of_day(value: object) -> time:
    match = _TIME.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f'{value!r} is not a time of day written "HH:MM" (24-hour)')
    return time(int(match[1]), int(match[2]))


def _zone(name: object) -> ZoneInfo:
    if isinstance(name, str):
        # OSError: a name such as "America" that is a directory of zones.
        with contextlib.suppress(ZoneInfoNotFoundError, ValueError, OSError):
            return ZoneInfo(name)
    raise ValueError(f"{name!r} is not an IANA time zone name")


def _applies_to(value: object) -> str:
    if value not in APPLIES_TO:
        raise ValueError(f"{value!r} must be one of: {', '.join(APPLIES_TO)}")
    return str(value)


TimeOfDay = Annotated[time, PlainValidator(_time_of_day)]
Weekdays = Annotated[
    tuple[Annotated[int, PlainValidator(_weekday)], ...],
    check(lambda days: None if days else "must be a non-empty list of weekdays (mon ... sun)"),
]


class WindowWire(Closed):
    """`maintenanceWindow` as written, in a Skyhook or a DeploymentPolicy."""

    checked_when_missing = ("start", "end")
    days: Weekdays = tuple(range(7))
    start: TimeOfDay
    end: TimeOfDay
    time_zone: Annotated[ZoneInfo, PlainValidator(_zone)] = ZoneInfo("UTC")
    applies_to: Annotated[str, PlainValidator(_applies_to)] = INTERRUPTS

    def decoded(self) -> MaintenanceWindow:
        return MaintenanceWindow(
            frozenset(self.days), self.start, self.end, self.time_zone, self.applies_to
        )
