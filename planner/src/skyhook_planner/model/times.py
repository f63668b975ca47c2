"""Times as the planner writes and reads them: whole seconds in messages, the instant itself
where a later pass measures a wait from it (a start recorded to the second would make every
wait up to a second short)."""

from __future__ import annotations

from datetime import UTC, datetime


def describe(seconds: float) -> str:
    """A duration as Go writes the short ones: 45s, 30m, 1h30m, 2h0m5s."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s" if secs else f"{hours}h{minutes}m"
    if minutes:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    return f"{secs}s"


def stamp(at: datetime) -> str:
    """A time for people to read: RFC 3339 to the second."""
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def exact_stamp(at: datetime) -> str:
    """A time a later pass measures from: RFC 3339 with the fraction, as Go's RFC3339Nano."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".") + "Z"


def parse_stamp(text: str | None) -> datetime | None:
    """A time we wrote (a status field, a node annotation: RFC 3339, with or without fractions
    of a second); None for none, or an edited one that does not read (as if nothing had
    started)."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None
