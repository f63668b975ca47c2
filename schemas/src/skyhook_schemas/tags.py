"""The ``<package>/<version>`` release tag: one tag publishes one package image.

A tag ``shellscript/1.1.1`` builds ``packages/shellscript`` as ``<registry>/shellscript:1.1.1``.
The tag's version must equal ``package_version`` in that package's config.json, because the
agent names host paths (flags, history, logs) after the config's version: a mismatch would
make two releases share state on a node.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from skyhook_schemas.errors import FieldError
from skyhook_schemas.package_config import CONFIG_FILE, validate_config
from skyhook_schemas.versions import VersionError, parse_version

PACKAGE_NAME = re.compile(r"^[a-z][a-z0-9_-]*[a-z0-9]$")


class TagError(ValueError):
    """A release tag that does not follow ``<package>/<version>``."""


@dataclass(frozen=True)
class PackageTag:
    package: str
    version: str

    def __str__(self) -> str:
        return f"{self.package}/{self.version}"


def parse_tag(tag: str) -> PackageTag:
    package, slash, version = tag.partition("/")
    if not slash or not package or not version or "/" in version:
        raise TagError(f"tag {tag!r} must look like <package>/<version>, e.g. shellscript/1.1.1")
    if not PACKAGE_NAME.match(package):
        raise TagError(
            f"tag {tag!r}: package {package!r} must be lowercase letters, digits, '-' or '_', "
            "starting with a letter"
        )
    try:
        parse_version(version)
    except VersionError as exc:
        raise TagError(f"tag {tag!r}: {exc}") from None
    return PackageTag(package, version)


def check_tag(tag: str, packages_root: Path) -> list[FieldError]:
    """Every reason ``tag`` must not be released from ``packages_root``; empty when it may."""
    try:
        parsed = parse_tag(tag)
    except TagError as exc:
        return [FieldError("tag", str(exc))]
    package_dir = packages_root / parsed.package
    config_path = package_dir / CONFIG_FILE
    if not config_path.is_file():
        return [FieldError("tag", f"no package {parsed.package!r}: {config_path} does not exist")]
    try:
        document = json.loads(config_path.read_text())
    except json.JSONDecodeError as exc:
        return [FieldError(str(config_path), f"not valid JSON: {exc.msg} at line {exc.lineno}")]
    errors = validate_config(document, package_dir)
    declared = document.get("package_version") if isinstance(document, dict) else None
    if declared != parsed.version:
        errors.insert(
            0,
            FieldError(
                "package_version",
                f"{config_path} says {declared!r} but the tag says {parsed.version!r}: "
                "bump package_version together with the tag",
            ),
        )
    return errors
