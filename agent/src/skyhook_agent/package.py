"""Reading a package directory: its config (through skyhook_schemas) and its config files.

Also the package author's validation (``skyhook-agent validate``), which adds to the config
rules the requirement that every ``*.sh`` in the package is executable.
"""

import json
import os
from pathlib import Path

from skyhook_agent.errors import InputError
from skyhook_schemas.errors import ConfigError
from skyhook_schemas.package_config import PackageConfig, load_config, validate_config

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


def non_executable_scripts(package_dir: Path) -> list[str]:
    """Every ``*.sh`` under the package (hidden dirs skipped) lacking the owner exec bit."""
    problems = []
    for current, dirs, files in os.walk(package_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            path = Path(current, name)
            if name.endswith(".sh") and not os.stat(path).st_mode & 0o100:
                relative = path.relative_to(package_dir)
                problems.append(f"{relative}: not executable (run: chmod +x {relative})")
    return problems


def validate_package(path: Path) -> tuple[list[str], list[str]]:
    """Author validation of a config.json or package dir: (errors, warnings)."""
    config_path = path / CONFIG_NAME if path.is_dir() else path
    package_dir = config_path.parent
    try:
        document = json.loads(config_path.read_text())
    except FileNotFoundError:
        return [f"{CONFIG_NAME}: not found: {config_path}"], []
    except (OSError, ValueError) as exc:
        return [f"{CONFIG_NAME}: cannot be read as JSON: {exc}"], []
    errors = [str(error) for error in validate_config(document, package_dir)]
    errors += non_executable_scripts(package_dir)
    if errors:
        return errors, []
    return [], list(load_config(config_path).warnings)
