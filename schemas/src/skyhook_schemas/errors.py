"""Errors that point at the offending field, so a user can fix the input without a traceback."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class FieldError:
    """One problem with one field: ``path`` is dotted with list indexes, e.g. ``modes.apply[0].path``."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigError(Exception):
    """Raised with every problem found, never just the first."""

    def __init__(self, errors: Sequence[FieldError], source: str = "") -> None:
        self.errors = list(errors)
        self.source = source
        super().__init__(str(self))

    def __str__(self) -> str:
        header = f"{self.source}: " if self.source else ""
        count = len(self.errors)
        lines = "\n".join(f"  {error}" for error in self.errors)
        return f"{header}{count} problem{'s' if count != 1 else ''}:\n{lines}"


def join_path(parts: Iterable[str | int]) -> str:
    """Render ``["modes", "apply", 0, "path"]`` as ``modes.apply[0].path``."""
    rendered = ""
    for part in parts:
        if isinstance(part, int):
            rendered += f"[{part}]"
        else:
            rendered += f".{part}" if rendered else str(part)
    return rendered
