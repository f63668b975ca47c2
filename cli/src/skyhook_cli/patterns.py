"""Node name patterns, as upstream's plugin reads them.

A pattern holding any regular-expression character is a regex that must match the whole
name; anything else must equal the name. So `worker-1` is exact, `worker-.*` and
`node.example.com` (dots) are regexes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REGEX_CHARACTERS = frozenset(".*+?^${}[]|()\\")


class PatternError(ValueError):
    """A pattern that is not a valid regular expression."""


def is_regex(pattern: str) -> bool:
    return any(character in REGEX_CHARACTERS for character in pattern)


def match_nodes(patterns: Iterable[str], names: Iterable[str]) -> list[str]:
    """The names matching any pattern, sorted (each name once)."""
    names = list(names)
    matched: set[str] = set()
    for pattern in patterns:
        if not is_regex(pattern):
            matched.update(name for name in names if name == pattern)
            continue
        try:
            expression = re.compile(pattern)
        except re.error as error:
            raise PatternError(f"invalid regex pattern {quote(pattern)}: {error}") from None
        matched.update(name for name in names if expression.fullmatch(name))
    return sorted(matched)


def quote(text: str) -> str:
    """`text` in double quotes with escapes, as Go's %q prints names in messages."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    escaped = escaped.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")
    return f'"{escaped}"'
