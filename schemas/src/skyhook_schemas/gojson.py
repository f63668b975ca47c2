"""JSON as Go's `encoding/json` writes it, so what we write to annotations is byte-for-byte what
upstream's Go operator would write: compact, `<`, `>`, `&`, U+2028 and U+2029 escaped, `\\b` and
`\\f` spelled as `\\u0008` and `\\u000c`. Dicts are written in their own order: callers pass
struct-like dicts in field order and `sorted_map` for Go maps."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

_GO_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_GO_RAW = re.compile("[<>&\u2028\u2029]")
_SHORT_ESCAPE = re.compile(r"\\\\|\\b|\\f")
_SHORT_TO_GO = {"\\\\": "\\\\", "\\b": "\\u0008", "\\f": "\\u000c"}


def go_json(value: Any) -> str:
    """`json.Marshal(value)` for maps, lists and scalars."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    text = _SHORT_ESCAPE.sub(lambda m: _SHORT_TO_GO[m.group(0)], text)
    return _GO_RAW.sub(lambda m: _GO_ESCAPES[m.group(0)], text)


def sorted_map(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """A Go map as json.Marshal orders it: keys sorted bytewise (= code point order)."""
    return {k: mapping[k] for k in sorted(mapping)}
