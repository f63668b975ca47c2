from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from upstream_configs import ACCEPTED, shellscript, step, step_paths, tuned, tuning

from skyhook_schemas import ConfigError
from skyhook_schemas.package_config import load_config, parse_config, validate_config


def messages(document: object, package_dir: Path | None = None) -> list[str]:
    return [str(error) for error in validate_config(document, package_dir)]


def write_package(root: Path, document: dict[str, Any], missing: set[str] = frozenset()) -> Path:
    (root / "skyhook_dir").mkdir(parents=True)
    for path in step_paths(document) - missing:
        target = root / "skyhook_dir" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("#!/bin/bash\n")
    (root / "config.json").write_text(json.dumps(document))
    return root


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_upstream_shaped_configs_are_accepted_with_their_files(name: str, tmp_path: Path) -> None:
    document = ACCEPTED[name]()
    assert messages(document, write_package(tmp_path, document)) == []
    loaded = load_config(tmp_path)
    assert loaded.package_name == document["package_name"]
    assert set(loaded.modes) == set(document["modes"])


def broken(document: dict[str, Any], edit: Any) -> dict[str, Any]:
    copied = copy.deepcopy(document)
    edit(copied)
    return copied


BROKEN_CASES = [
    pytest.param(
        shellscript,
        lambda d: d["modes"]["apply"][0].pop("path"),
        "modes.apply[0].path: required property missing",
        id="shellscript-missing-path",
    ),
    pytest.param(
        shellscript,
        lambda d: d["modes"]["config"][0].update(returncodes=[]),
        "modes.config[0].returncodes: must have at least 1 item(s)",
        id="shellscript-no-rc",
    ),
    pytest.param(
        shellscript,
        lambda d: d.update(package_version="1.1"),
        "package_version: '1.1' is not a strict semver version",
        id="shellscript-short-version",
    ),
    pytest.param(
        tuning,
        lambda d: d["modes"]["config"][0].update(on_host="yes"),
        "modes.config[0].on_host: expected a boolean, got string",
        id="tuning-on-host-type",
    ),
    pytest.param(
        tuning,
        lambda d: d["modes"].pop("config-check"),
        "modes.config-check: config has steps, so config-check needs at least one check",
        id="tuning-config-without-check",
    ),
    pytest.param(
        tuned,
        lambda d: d["modes"]["apply"][0].update(name="install tuned"),
        "modes.apply[0].name: 'install tuned' may contain only letters",
        id="tuned-bad-name",
    ),
    pytest.param(
        tuned,
        lambda d: d["modes"]["upgrade"][0].update(upgrade_step=True, arguments=["x"]),
        "modes.upgrade[0].arguments: an upgrade step receives",
        id="tuned-upgrade-step-args",
    ),
    pytest.param(
        tuned,
        lambda d: d["modes"]["apply"][0].update(upgrade_step=True),
        "modes.apply[0].upgrade_step: true is only allowed in upgrade",
        id="tuned-upgrade-step-apply",
    ),
    pytest.param(
        tuned,
        lambda d: d["modes"]["apply"][0].update(timeout=3),
        "modes.apply[0].timeout: unknown step property",
        id="tuned-extra-step-key",
    ),
    pytest.param(
        tuned,
        lambda d: d["modes"].update(install=[]),
        "modes.install: unknown mode",
        id="tuned-unknown-mode",
    ),
    pytest.param(
        tuned,
        lambda d: d.pop("expected_config_files"),
        "expected_config_files: required property missing",
        id="tuned-no-expected-files",
    ),
    pytest.param(
        tuned,
        lambda d: d.update(expected_config_files=["ok.conf", "../../etc/shadow"]),
        "expected_config_files[1]: '../../etc/shadow' points outside configmaps/",
        id="expected-file-escapes-with-dotdot",
    ),
    pytest.param(
        tuned,
        lambda d: d.update(expected_config_files=["a/../../b"]),
        "expected_config_files[0]: 'a/../../b' points outside configmaps/",
        id="expected-file-escapes-after-normalising",
    ),
    pytest.param(
        tuned,
        lambda d: d.update(expected_config_files=["/etc/passwd"]),
        "expected_config_files[0]: '/etc/passwd' points outside configmaps/",
        id="expected-file-absolute",
    ),
    pytest.param(
        tuned,
        lambda d: d.update(expected_config_files=[""]),
        "expected_config_files[0]: '' names no file",
        id="expected-file-empty",
    ),
    pytest.param(
        shellscript,
        lambda d: d.update(schema_version="latest"),
        "schema_version: unknown schema version 'latest'",
        id="latest-is-not-a-version",
    ),
    pytest.param(
        shellscript,
        lambda d: d.update(schema_version="v2"),
        "schema_version: unknown schema version 'v2' (known: v1)",
        id="unknown-version",
    ),
]


@pytest.mark.parametrize(("make", "edit", "expected"), BROKEN_CASES)
def test_broken_copies_are_rejected_naming_the_field(make: Any, edit: Any, expected: str) -> None:
    found = messages(broken(make(), edit))
    assert any(line.startswith(expected) for line in found), found


def test_every_error_is_reported_not_just_the_first() -> None:
    document = shellscript()
    document["modes"]["apply"][0].pop("path")
    document["modes"]["config"][0]["returncodes"] = "0"
    document["package_version"] = "v1.0.0"
    found = messages(document)
    assert len(found) == 3, found
    assert {line.split(":")[0] for line in found} == {
        "modes.apply[0].path",
        "modes.config[0].returncodes",
        "package_version",
    }


@pytest.mark.parametrize(
    "version", ["1.0.0", "1.0.0-dev", "1.0.0+build1", "2024.12.19", "0.0.1-rc.1"]
)
def test_package_version_accepts_semver(version: str) -> None:
    assert messages(broken(tuning(), lambda d: d.update(package_version=version))) == []


@pytest.mark.parametrize("version", ["1.0", "a", "1.0.0-", "1.0.0_", "2024.01.01", "v1.0.0"])
def test_package_version_rejects_non_semver(version: str) -> None:
    found = messages(broken(tuning(), lambda d: d.update(package_version=version)))
    assert found and found[0].startswith("package_version:"), found


def test_mode_rules() -> None:
    only_checks = broken(tuning(), lambda d: d.update(modes={"apply-check": [step("a_check.sh")]}))
    assert messages(only_checks) == [
        "modes: defines none of the action modes uninstall, upgrade, apply, config, post-interrupt"
    ]
    empty = broken(tuning(), lambda d: d.update(modes={"apply": [], "apply-check": []}))
    assert messages(empty) == ["modes: no mode defines any step"]
    # A check mode may exist without its action mode (tuning: post-interrupt-check only).
    assert messages(tuning()) == []


def test_step_files_must_exist_and_stay_inside_skyhook_dir(tmp_path: Path) -> None:
    document = tuned()
    document["modes"]["config"].append(step("../escape.sh", name="escape"))
    package = write_package(tmp_path, document, missing={"uninstall_tuned.sh", "../escape.sh"})
    found = messages(document, package)
    assert "modes.uninstall[0].path: file not found in skyhook_dir/: uninstall_tuned.sh" in found
    assert "modes.config[1].path: '../escape.sh' points outside skyhook_dir/" in found


def test_step_files_may_come_from_base_packages(tmp_path: Path) -> None:
    """A derived package's own skyhook_dir, then its bases' (any layer may hold a file)."""
    document = tuned()
    document["modes"]["config"].append(step("extra.sh"))
    document["modes"]["config-check"].append(step("extra_check.sh"))
    bottom = write_package(tmp_path / "bottom", document, missing={"extra.sh", "extra_check.sh"})
    middle = tmp_path / "middle"
    (middle / "skyhook_dir").mkdir(parents=True)
    (middle / "skyhook_dir" / "extra.sh").write_text("#!/bin/bash\n")
    derived = tmp_path / "derived"
    (derived / "skyhook_dir").mkdir(parents=True)
    assert messages_with_bases(document, derived, [bottom, middle]) == [
        "modes.config-check[1].path: file not found in skyhook_dir/ of the package or its bases: "
        "extra_check.sh"
    ]
    (derived / "skyhook_dir" / "extra_check.sh").write_text("#!/bin/bash\n")
    assert parse_config(document, derived, [bottom, middle]).package_name == "tuned"
    with pytest.raises(ConfigError, match=r"uninstall_tuned\.sh"):
        parse_config(document, derived)


def messages_with_bases(document: object, package_dir: Path, bases: list[Path]) -> list[str]:
    return [str(error) for error in validate_config(document, package_dir, bases)]


def test_load_config_raises_every_problem_with_the_file_name(tmp_path: Path) -> None:
    document = shellscript()
    document["modes"]["apply"][0]["arguments"] = [1]
    package = write_package(tmp_path, document, missing={"shellscript_run.sh"})
    with pytest.raises(ConfigError) as raised:
        load_config(package / "config.json")
    assert str(package / "config.json") in str(raised.value)
    assert "modes.apply[0].arguments[0]: expected a string, got integer" in str(raised.value)


def test_load_config_reports_json_syntax_and_absence(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config\.json not found"):
        load_config(tmp_path)
    (tmp_path / "config.json").write_text('{"schema_version": "v1",')
    with pytest.raises(ConfigError, match=r"not valid JSON: .* line 1"):
        load_config(tmp_path)


def test_missing_check_is_a_warning_not_an_error(tmp_path: Path) -> None:
    document = tuned()
    loaded = load_config(write_package(tmp_path, document))
    assert loaded.warnings == ()
    document["modes"]["apply-check"] = [step("verify.sh")]
    loaded = load_config(write_package(tmp_path / "second", document))
    assert loaded.warnings == (
        "apply: step install_tuned.sh has no matching check install_tuned_check.sh in apply-check",
    )


def test_non_object_documents_are_rejected() -> None:
    assert messages([1, 2]) == ["config must be a JSON object, got array"]
    assert messages({}) == ["schema_version: required property missing"]
