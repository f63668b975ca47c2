"""Reading a package directory: its config (through skyhook_schemas) and its config files.

Also the package author's validation (``skyhook-agent validate``), which adds to the config
rules the requirement that every ``*.sh`` in the package is executable. A derived package (an
image built ``FROM`` another package's image) is validated over its base package directories,
layered as the image is: a file in a higher layer hides the same path in a lower one.
"""

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from skyhook_agent.errors import InputError
from skyhook_schemas.errors import ConfigError
from skyhook_schemas.package_config import STEP_DIR, PackageConfig, load_config, parse_config

CONFIG_NAME = "config.json"


def load_package(package_dir: Path) -> PackageConfig:
    """The validated config of a package dir; InputError listing every problem."""
    if not (package_dir / CONFIG_NAME).is_file():
        raise InputError([f"{CONFIG_NAME}: not found in package directory {package_dir}"])
    try:
        return load_config(package_dir)
    except ConfigError as exc:
        raise InputError(map(str, exc.errors)) from None


def missing_config_files(config: PackageConfig, package_dir: Path) -> list[str]:
    """``expected_config_files`` entries absent from ``<package>/configmaps/``."""
    return [
        f"expected_config_files[{index}]: {name} not found in {package_dir / 'configmaps'}"
        for index, name in enumerate(config.expected_config_files)
        if not (package_dir / "configmaps" / name).is_file()
    ]


def non_executable_scripts(package_dir: Path, base_dirs: Sequence[Path] = ()) -> list[str]:
    """Every ``*.sh`` of the layered package (hidden dirs skipped) lacking the owner exec bit.

    Files of the package itself are named relative to it; files only a base provides are
    named with that base's path.
    """
    visible: dict[Path, Path] = {}  # path inside the image -> the layer dir providing it
    for layer in [*base_dirs, package_dir]:
        for current, dirs, files in os.walk(layer):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for name in files:
                visible[Path(current, name).relative_to(layer)] = layer
    problems = []
    for relative, layer in sorted(visible.items()):
        path = layer / relative
        if relative.suffix == ".sh" and not os.stat(path).st_mode & 0o100:
            shown = relative if layer == package_dir else path
            problems.append(f"{shown}: not executable (run: chmod +x {shown})")
    return problems


@dataclass(frozen=True)
class Validation:
    """What ``skyhook-agent validate`` found."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    """Step files left unchecked (config-only validation), as ``skyhook_dir/<path>``."""
    config_source: Path | None = None
    """The config.json that was read: the package's own, or one inherited from a base."""


def validate_package(
    path: Path, base_dirs: Sequence[Path] = (), *, config_only: bool = False
) -> Validation:
    """Author validation of a config.json or package dir, over ``base_dirs`` (bottom first)."""
    own_config = path / CONFIG_NAME if path.is_dir() else path
    package_dir = own_config.parent
    # A derived package may leave config.json to its base image, as upstream's packages can.
    candidates = [own_config, *(base / CONFIG_NAME for base in reversed(base_dirs))]
    config_path = next((c for c in candidates if c.is_file()), candidates[0])
    try:
        document = json.loads(config_path.read_text())
    except FileNotFoundError:
        where = " or in any --base" if base_dirs else ""
        return Validation([f"{CONFIG_NAME}: not found: {config_path}{where}"])
    except (OSError, ValueError) as exc:
        return Validation([f"{CONFIG_NAME}: cannot be read as JSON: {exc}"])
    try:
        config = parse_config(document, None if config_only else package_dir, base_dirs)
    except ConfigError as exc:
        errors = [str(error) for error in exc.errors]
        if not config_only:
            errors += non_executable_scripts(package_dir, base_dirs)
        return Validation(errors, config_source=config_path)
    if config_only:
        steps = {step.path: None for mode in config.modes.values() for step in mode}
        unchecked = [f"{STEP_DIR}/{step_path}" for step_path in steps]
        return Validation([], list(config.warnings), unchecked, config_path)
    errors = non_executable_scripts(package_dir, base_dirs)
    warnings = [] if errors else list(config.warnings)
    return Validation(errors, warnings, config_source=config_path)
