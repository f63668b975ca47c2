"""Go durations (`46s`, `2m`, `1h30m`, `1.5s`, `300ms`, `0`), as upstream's manifests, SCRs and
kubectl flags spell them."""

from __future__ import annotations

import re

_PART = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float | None:
    """The duration in seconds; None when `text` is not one. The grammar of Go's
    time.ParseDuration without a sign."""
    text = text.strip()
    if text == "0":
        return 0.0
    if not text or _PART.sub("", text):
        return None
    return sum(float(n) * _UNITS[u] for n, u in _PART.findall(text))
