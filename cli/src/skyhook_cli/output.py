"""Printing results: aligned tables, JSON and YAML, byte for byte as upstream's plugin.

Tables are what Go's tabwriter prints with padding 2: every column but the last is as wide as
its widest cell plus two spaces; a row of dashes as long as each header follows the headers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import yaml

FORMATS = ("table", "json", "yaml", "wide", "name")
NAME = "name"


def names(kind: str, listed: Sequence[str]) -> list[str]:
    """`-o name` as kubectl prints it: `<kind>/<name>` for each object, once, in listed order."""
    return [f"{kind}/{name}" for name in dict.fromkeys(listed)]


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = [list(headers), ["-" * len(header) for header in headers], *map(list, rows)]
    widths = [max(len(line[column]) for line in lines) + 2 for column in range(len(headers) - 1)]
    rendered = []
    for line in lines:
        cells = [cell.ljust(width) for cell, width in zip(line, widths, strict=False)]
        rendered.append("".join(cells) + line[-1])
    return "\n".join(rendered) + "\n"


def to_json(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def to_yaml(data: Any) -> str:
    """YAML with keys sorted, as Go's JSON-then-YAML conversion prints them."""
    return str(yaml.safe_dump(data, sort_keys=True, default_flow_style=False, allow_unicode=True))
