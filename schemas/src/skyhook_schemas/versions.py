"""Strict semantic versions, and the direction of a version change.

The operator compares the version an SCR asks for with the one a node has: a higher version
runs the package's upgrade stage, a lower one uninstalls the old version and applies the new one.
Only full SemVer 2.0 versions are accepted, so that decision is never a guess.
"""

from __future__ import annotations

import re
from enum import Enum

import semver

_SHORTHAND = re.compile(r"^\d+(\.\d+)?$")


class VersionError(ValueError):
    """A version string that is not strict SemVer 2.0; the message says how to fix it."""


class VersionChange(Enum):
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    SAME = "same"


def parse_version(text: str) -> semver.Version:
    if not isinstance(text, str) or not text:
        raise VersionError(f"{text!r} is not a version: expected MAJOR.MINOR.PATCH such as 1.2.0")
    try:
        return semver.Version.parse(text)
    except ValueError:
        raise VersionError(f"{text!r} is not a strict semver version: {_hint(text)}") from None


def is_valid_version(text: str) -> bool:
    try:
        parse_version(text)
    except VersionError:
        return False
    return True


def compare_versions(left: str, right: str) -> int:
    """-1, 0 or 1, by SemVer precedence (build metadata does not count)."""
    return int(parse_version(left).compare(parse_version(right)))


def version_change(old: str, new: str) -> VersionChange:
    """What moving a node from ``old`` to ``new`` means."""
    order = compare_versions(new, old)
    if order > 0:
        return VersionChange.UPGRADE
    if order < 0:
        return VersionChange.DOWNGRADE
    return VersionChange.SAME


def _hint(text: str) -> str:
    if text[:1] in "vV" and semver.Version.is_valid(text[1:]):
        return f"drop the leading 'v' ({text[1:]})"
    if _SHORTHAND.match(text):
        padded = ".".join(([*text.split("."), "0", "0"])[:3])
        return f"give all three parts MAJOR.MINOR.PATCH ({padded})"
    if re.search(r"(^|\.)0\d", text):
        return "numeric parts must not have leading zeros"
    return "expected MAJOR.MINOR.PATCH[-prerelease][+build], such as 1.2.0 or 2.0.0-rc.1"
