"""Semantic versions, and the direction of a version change.

The operator compares the version an SCR asks for with the one a node has: a higher version
runs the package's upgrade stage, a lower one uninstalls the old version and applies the new one.

Two readings, for two kinds of input:

- :func:`parse_version` is strict SemVer 2.0. Package ``config.json`` ``package_version`` and
  ``<package>/<version>`` release tags use it, because host paths are named after that text.
- :func:`parse_spec_version` reads an SCR package ``version`` the way upstream's operator does:
  an optional ``v`` prefix, and ``1`` or ``1.2`` for ``1.0.0`` or ``1.2.0`` (shorthand takes
  no prerelease or build). It returns the strict form to compare with, and a warning when the
  spelling was not strict. :func:`compare_versions` and :func:`version_change` accept either.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

import semver

# [0-9], not \d: \d also matches non-ASCII digits, which no version parser accepts.
_SHORTHAND = re.compile(r"(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*))?")
_SHORTHAND_WITH_SUFFIX = re.compile(r"(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*))?([-+].*)")


class VersionError(ValueError):
    """A version string that cannot be read; the message says how to fix it."""


class VersionChange(Enum):
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    SAME = "same"


@dataclass(frozen=True)
class SpecVersion:
    """An SCR package version as written, and the strict SemVer it stands for."""

    text: str
    """As written in the SCR; node-state keys and object names keep this spelling."""
    normalized: str
    """Strict SemVer 2.0: ``1.2`` -> ``1.2.0``, ``v1.2.3`` -> ``1.2.3``. Compare these."""
    warning: str | None
    """Set when ``text`` is not strict SemVer: for an admission warning or an Event."""


def parse_version(text: str) -> semver.Version:
    """Strict SemVer 2.0, as config.json ``package_version`` and release tags require."""
    if not isinstance(text, str) or not text:
        raise VersionError(f"{text!r} is not a version: expected MAJOR.MINOR.PATCH such as 1.2.0")
    try:
        return semver.Version.parse(text)
    except ValueError:
        raise VersionError(
            f"{text!r} is not a strict semver version: {_strict_hint(text)}"
        ) from None


def parse_spec_version(text: str) -> SpecVersion:
    """Read an SCR package version as upstream does; VersionError for what upstream rejects."""
    if not isinstance(text, str) or not text:
        raise VersionError(f"{text!r} is not a version: expected MAJOR.MINOR.PATCH such as 1.2.0")
    bare = text.removeprefix("v")
    if _SHORTHAND.fullmatch(bare):
        bare = ".".join([*bare.split("."), "0", "0"][:3])
    try:
        normalized = str(semver.Version.parse(bare))
    except ValueError:
        raise VersionError(f"{text!r} is not a semver version: {_spec_hint(text)}") from None
    warning = None
    if normalized != text:
        warning = f"version {text!r} is not strict SemVer; it is read as {normalized}"
    return SpecVersion(text, normalized, warning)


def compare_versions(left: str, right: str) -> int:
    """-1, 0 or 1, by SemVer precedence (build metadata does not count).

    Either side may be any spelling :func:`parse_spec_version` accepts: ``1.2`` equals ``1.2.0``
    and ``v1.2.0``.
    """
    return int(_comparable(left).compare(_comparable(right)))


def version_change(old: str, new: str) -> VersionChange:
    """What moving a node from ``old`` to ``new`` means."""
    order = compare_versions(new, old)
    if order > 0:
        return VersionChange.UPGRADE
    if order < 0:
        return VersionChange.DOWNGRADE
    return VersionChange.SAME


def _comparable(text: str) -> semver.Version:
    return semver.Version.parse(parse_spec_version(text).normalized)


def _strict_hint(text: str) -> str:
    if text[:1] in "vV" and semver.Version.is_valid(text[1:]):
        return f"drop the leading 'v' ({text[1:]})"
    if _SHORTHAND.fullmatch(text):
        return f"give all three parts MAJOR.MINOR.PATCH ({_padded(text)})"
    return _common_hint(text)


def _spec_hint(text: str) -> str:
    if text[:1] == "V":
        return "the prefix must be a lowercase 'v'"
    bare = text.removeprefix("v")
    suffixed = _SHORTHAND_WITH_SUFFIX.fullmatch(bare)
    if suffixed:
        full = _padded(bare[: suffixed.start(4)]) + suffixed.group(4)
        if semver.Version.is_valid(full):
            return f"a prerelease or build needs all three parts MAJOR.MINOR.PATCH ({full})"
    return _common_hint(text)


def _common_hint(text: str) -> str:
    if re.search(r"(^v?|\.)0[0-9]", text):
        return "numeric parts must not have leading zeros"
    return "expected MAJOR.MINOR.PATCH[-prerelease][+build], such as 1.2.0 or 2.0.0-rc.1"


def _padded(shorthand: str) -> str:
    return ".".join([*shorthand.split("."), "0", "0"][:3])
