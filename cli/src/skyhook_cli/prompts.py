"""The two confirmation prompts upstream's plugin uses.

Lifecycle commands (pause, resume, disable, enable) accept only `y`/`Y` and treat no answer
(end of input) as "no". The reset and rerun commands accept `y`/`yes` in any case, and end of
input before any answer is an error, so a script that forgot `--confirm` fails loudly.
An answer on a last line without a newline counts as an answer.
"""

from __future__ import annotations

from typing import TextIO


class NoAnswer(Exception):
    """Input ended before an answer."""


def read_answer(stream: TextIO) -> str:
    line = stream.readline()
    if not line:
        raise NoAnswer
    return line.strip()


def lifecycle_confirmed(stream: TextIO) -> bool:
    try:
        return read_answer(stream) in ("y", "Y")
    except NoAnswer:
        return False


def confirmed(stream: TextIO) -> bool:
    """True for y/yes in any case; raises NoAnswer at end of input."""
    return read_answer(stream).lower() in ("y", "yes")
