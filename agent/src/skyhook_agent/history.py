"""Installed-version history per package: ``<state>/history/<package>.json`` (upstream shape).

``{"current-version": str, "history": [{"version": str, "time": UTC ISO}, ...]}``, newest
first. Upgrade steps learn the previous version from it; apply-check, upgrade-check and
uninstall-check record into it.
"""

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from skyhook_agent.fsutil import write_atomic

UNKNOWN = "unknown"
"""PREVIOUS_VERSION when no history file exists (first install), as upstream."""
UNINSTALLED = "uninstalled"
"""The version recorded by a successful uninstall-check, as upstream."""


@dataclass(frozen=True)
class HistoryRead:
    document: dict[str, Any]
    previous_version: str
    note: str | None = None
    """Something the user should see, e.g. that a corrupt file was moved aside."""


def read_history(path: Path) -> HistoryRead:
    """Read the history; a corrupt file is moved to ``<file>.backup`` and treated as empty."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return HistoryRead({"current-version": UNKNOWN, "history": []}, UNKNOWN)
    try:
        document = json.loads(text)
        if not isinstance(document, dict) or not isinstance(document.get("history", []), list):
            raise ValueError("not a history object")
    except ValueError:
        backup = path.with_name(path.name + ".backup")
        path.replace(backup)
        empty: dict[str, Any] = {"current-version": "", "history": []}
        return HistoryRead(empty, "", f"history file {path} was corrupt; moved to {backup}")
    return HistoryRead(document, str(document.get("current-version", "")))


def with_entry(document: dict[str, Any], version: str, now_utc: datetime) -> dict[str, Any]:
    """A new document with ``version`` current and prepended to the history (pure)."""
    entry = {"version": version, "time": now_utc.isoformat()}
    return {
        **document,
        "current-version": version,
        "history": [entry, *document.get("history", [])],
    }


def record_version(path: Path, version: str, now_utc: datetime) -> str | None:
    """Record ``version`` as installed now; returns a note when the old file was corrupt."""
    read = read_history(path)
    write_atomic(path, json.dumps(with_entry(read.document, version, now_utc)))
    return read.note
