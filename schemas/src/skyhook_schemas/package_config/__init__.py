"""The package ``config.json``: schema v1 (data files beside this module), its rules, its loader.

A document is valid when it passes the JSON schema *and* the rules the upstream loader applies
after it (known mode names, no unknown step keys, every action paired with a check, upgrade-only
fields, step files present). :func:`validate_config` reports every problem with its field path;
:func:`parse_config` and :func:`load_config` return a typed :class:`PackageConfig` or raise
:class:`ConfigError`.

A derived package (an image built ``FROM`` another package's image) finds step files in its base
packages' directories too: pass them as ``base_dirs``, bottom layer first, as the image layers are.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, ValidationError
from referencing import Registry, Resource

from skyhook_schemas.errors import ConfigError, FieldError, join_path

ACTION_MODES = ("uninstall", "upgrade", "apply", "config", "post-interrupt")
CHECK_MODES = tuple(f"{mode}-check" for mode in ACTION_MODES)
UPGRADE_MODES = ("upgrade", "upgrade-check")
# "interrupt" is a mode the agent runs, but it takes no steps from config.json.
ALL_MODES = (*ACTION_MODES, *CHECK_MODES, "interrupt")

KNOWN_SCHEMA_VERSIONS = ("v1",)
STEP_KEYS = (
    "name",
    "path",
    "arguments",
    "returncodes",
    "on_host",
    "env",
    "idempotence",
    "upgrade_step",
)
# Accepted and ignored: an old step field some published configs still carry.
LEGACY_STEP_KEYS = ("requires_interrupt",)

CONFIG_FILE = "config.json"
STEP_DIR = "skyhook_dir"
# Where the agent finds the package's configMap files, one per key.
CONFIG_MAP_DIR = "configmaps"


@dataclass(frozen=True)
class Step:
    name: str
    path: str
    arguments: tuple[str, ...]
    returncodes: tuple[int, ...]
    on_host: bool
    idempotence: bool
    upgrade_step: bool
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PackageConfig:
    schema_version: str
    package_name: str
    package_version: str
    expected_config_files: tuple[str, ...]
    modes: Mapping[str, tuple[Step, ...]]
    warnings: tuple[str, ...] = ()

    def steps(self, mode: str) -> tuple[Step, ...]:
        return self.modes.get(mode, ())


@cache
def _validator(schema_version: str) -> Draft202012Validator:
    schema_dir = resources.files(__package__) / schema_version
    registry: Registry[Any] = Registry()
    for entry in schema_dir.iterdir():
        if entry.name.endswith(".json"):
            contents = json.loads(entry.read_text())
            registry = registry.with_resource(contents["$id"], Resource.from_contents(contents))
    root = json.loads((schema_dir / "skyhook-agent-schema.json").read_text())
    return Draft202012Validator(root, registry=registry)


def validate_config(
    document: object, package_dir: Path | None = None, base_dirs: Sequence[Path] = ()
) -> list[FieldError]:
    """Every problem with a parsed ``config.json``; empty when it is valid.

    With ``package_dir`` the step files must also exist under ``skyhook_dir/`` of
    ``package_dir`` or of one of ``base_dirs``.
    """
    if not isinstance(document, dict):
        return [FieldError("", f"config must be a JSON object, got {_json_type(document)}")]
    version = document.get("schema_version")
    if "schema_version" not in document:
        return [FieldError("schema_version", "required property missing")]
    if version not in KNOWN_SCHEMA_VERSIONS:
        known = ", ".join(KNOWN_SCHEMA_VERSIONS)
        return [
            FieldError("schema_version", f"unknown schema version {version!r} (known: {known})")
        ]

    errors = [
        error for raw in _validator(version).iter_errors(document) for error in _field_errors(raw)
    ]
    errors.extend(_loader_errors(document))
    if errors:
        return sorted(set(errors), key=_error_order)
    errors.extend(_mode_rules(document["modes"]))
    errors.extend(_expected_file_rules(document["expected_config_files"]))
    if package_dir is not None:
        layers = [package_dir, *reversed(base_dirs)]
        errors.extend(_missing_step_files(document["modes"], [d / STEP_DIR for d in layers]))
    return errors


def parse_config(
    document: object, package_dir: Path | None = None, base_dirs: Sequence[Path] = ()
) -> PackageConfig:
    """The typed config of a parsed ``config.json``; ConfigError with every problem.

    Step files are checked as :func:`validate_config` does, only when ``package_dir`` is given.
    """
    errors = validate_config(document, package_dir, base_dirs)
    if errors:
        raise ConfigError(errors)
    assert isinstance(document, dict)
    return _build(document)


def load_config(path: Path) -> PackageConfig:
    """Read and validate a ``config.json`` (or the one in a package directory)."""
    config_path = path / CONFIG_FILE if path.is_dir() else path
    package_dir = config_path.parent
    try:
        document = json.loads(config_path.read_text())
    except FileNotFoundError:
        raise ConfigError([FieldError("", f"{CONFIG_FILE} not found at {config_path}")]) from None
    except json.JSONDecodeError as exc:
        message = f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        raise ConfigError([FieldError("", message)], str(config_path)) from None
    except OSError as exc:
        raise ConfigError([FieldError("", f"cannot read {config_path}: {exc.strerror}")]) from None
    errors = validate_config(document, package_dir)
    if errors:
        raise ConfigError(errors, str(config_path))
    return _build(document)


def _build(document: Mapping[str, Any]) -> PackageConfig:
    modes = {
        mode: tuple(
            Step(
                name=raw["name"],
                path=raw["path"],
                arguments=tuple(raw["arguments"]),
                returncodes=tuple(raw["returncodes"]),
                on_host=raw["on_host"],
                idempotence=raw["idempotence"],
                upgrade_step=raw["upgrade_step"],
                env=dict(raw.get("env", {})),
            )
            for raw in steps
        )
        for mode, steps in document["modes"].items()
    }
    return PackageConfig(
        schema_version=document["schema_version"],
        package_name=document["package_name"],
        package_version=document["package_version"],
        expected_config_files=tuple(document["expected_config_files"]),
        modes=modes,
        warnings=tuple(_missing_check_warnings(modes)),
    )


def _field_errors(error: ValidationError) -> Iterator[FieldError]:
    path = list(error.absolute_path)
    if error.validator == "required":
        present = error.instance if isinstance(error.instance, dict) else {}
        required: list[str] = list(error.validator_value)  # type: ignore[arg-type]
        for name in required:
            if name not in present:
                yield FieldError(join_path([*path, name]), "required property missing")
        return
    yield FieldError(join_path(path), _sentence(error))


def _sentence(error: ValidationError) -> str:
    value = error.instance
    match error.validator:
        case "type":
            return f"expected {_article(error.validator_value)}, got {_json_type(value)}"
        case "pattern" if error.absolute_path and error.absolute_path[-1] == "package_version":
            return (
                f"{value!r} is not a strict semver version "
                "(MAJOR.MINOR.PATCH, no leading zeros, no 'v' prefix, e.g. 1.0.0 or 1.0.0-rc.1)"
            )
        case "pattern" if error.absolute_path and error.absolute_path[-1] == "name":
            return f"{value!r} may contain only letters, digits, '_', '-' and '.'"
        case "pattern":
            return f"{value!r} does not match {error.validator_value}"
        case "minItems":
            return f"must have at least {error.validator_value} item(s)"
        case "enum":
            choices: list[object] = list(error.validator_value)  # type: ignore[arg-type]
            allowed = ", ".join(repr(item) for item in choices)
            return f"{value!r} is not one of {allowed}"
        case _:
            return str(error.message)


def _loader_errors(document: Mapping[str, Any]) -> Iterator[FieldError]:
    """Rules the schema leaves open but a loader must enforce: unknown modes and step keys."""
    modes = document.get("modes")
    if not isinstance(modes, dict):
        return
    for mode, steps in modes.items():
        if mode not in ALL_MODES:
            yield FieldError(f"modes.{mode}", f"unknown mode (known: {', '.join(ALL_MODES)})")
            continue
        if mode == "interrupt" or not isinstance(steps, list):
            continue
        for index, step in enumerate(steps):
            if not isinstance(step, dict):
                continue
            for key in step:
                if key not in STEP_KEYS and key not in LEGACY_STEP_KEYS:
                    allowed = ", ".join(STEP_KEYS)
                    path = f"modes.{mode}[{index}].{key}"
                    yield FieldError(path, f"unknown step property (allowed: {allowed})")


def _mode_rules(modes: Mapping[str, list[Mapping[str, Any]]]) -> Iterator[FieldError]:
    step_lists = {mode: steps for mode, steps in modes.items() if mode != "interrupt"}
    if not any(step_lists.values()):
        yield FieldError("modes", "no mode defines any step")
        return
    if not any(mode in modes for mode in ACTION_MODES):
        yield FieldError("modes", f"defines none of the action modes {', '.join(ACTION_MODES)}")
    for mode in ACTION_MODES:
        if step_lists.get(mode) and not step_lists.get(f"{mode}-check"):
            yield FieldError(
                f"modes.{mode}-check", f"{mode} has steps, so {mode}-check needs at least one check"
            )
    for mode, steps in step_lists.items():
        for index, step in enumerate(steps):
            if not step["upgrade_step"]:
                continue
            if mode not in UPGRADE_MODES:
                path = f"modes.{mode}[{index}].upgrade_step"
                yield FieldError(path, "true is only allowed in upgrade and upgrade-check")
            if step["arguments"]:
                yield FieldError(
                    f"modes.{mode}[{index}].arguments",
                    "an upgrade step receives '<previous> <current>' versions and declares none",
                )


def _expected_file_rules(names: Sequence[str]) -> Iterator[FieldError]:
    """Each expected config file must name a file inside the package's `configmaps/`."""
    for index, name in enumerate(names):
        normal = posixpath.normpath(name) if name else ""
        if normal in {"", "."} or name.endswith("/"):
            yield FieldError(f"expected_config_files[{index}]", f"{name!r} names no file")
        elif posixpath.isabs(normal) or normal == ".." or normal.startswith("../"):
            yield FieldError(
                f"expected_config_files[{index}]",
                f"{name!r} points outside {CONFIG_MAP_DIR}/ (give a path relative to it)",
            )


def _missing_step_files(
    modes: Mapping[str, list[Mapping[str, Any]]], step_dirs: Sequence[Path]
) -> Iterator[FieldError]:
    """Steps whose file is in none of ``step_dirs`` (the package's own first, then its bases)."""
    where_looked = (
        f"{STEP_DIR}/" if len(step_dirs) == 1 else f"{STEP_DIR}/ of the package or its bases"
    )
    for mode, steps in modes.items():
        if mode == "interrupt":
            continue
        for index, step in enumerate(steps):
            where = f"modes.{mode}[{index}].path"
            targets = [(d / step["path"]).resolve() for d in step_dirs]
            if not targets[0].is_relative_to(step_dirs[0].resolve()):
                yield FieldError(where, f"{step['path']!r} points outside {STEP_DIR}/")
            elif not any(target.is_file() for target in targets):
                yield FieldError(where, f"file not found in {where_looked}: {step['path']}")


def _missing_check_warnings(modes: Mapping[str, tuple[Step, ...]]) -> Iterator[str]:
    for mode in ACTION_MODES:
        check_paths = {step.path for step in modes.get(f"{mode}-check", ())}
        for step in modes.get(mode, ()):
            stem, dot, extension = step.path.rpartition(".")
            expected = f"{stem}_check{dot}{extension}" if dot else f"{step.path}_check"
            if expected not in check_paths:
                yield f"{mode}: step {step.path} has no matching check {expected} in {mode}-check"


def _error_order(error: FieldError) -> tuple[str, str]:
    return (error.path, error.message)


def _json_type(value: object) -> str:
    names = {
        dict: "object",
        list: "array",
        str: "string",
        bool: "boolean",
        int: "integer",
        float: "number",
    }
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _article(type_name: object) -> str:
    name = str(type_name)
    return f"an {name}" if name[:1] in "aeiou" else f"a {name}"
