"""``skyhook-agent validate --base/--config-only`` for derived packages.

The derived package here is built the way upstream's nvidia-tuning-gke is: an image ``FROM`` the
tuning package that adds a step copying baked-in profiles into place, while every other step
is one of tuning's own scripts, present only in the base image.
"""

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import step

REPO = Path(__file__).resolve().parents[2]
TUNING = REPO / "packages/tuning"
INHERITED = [
    "update_settings.sh",
    "update_settings_check.sh",
    "update_settings_post_check.sh",
    "update_settings_uninstall.sh",
    "update_settings_uninstall_check.sh",
]


def validate(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "skyhook_agent", "validate", *map(str, args)],
                          capture_output=True, text=True)  # fmt: skip


@pytest.fixture
def derived(tmp_path: Path) -> Path:
    """A tuning-gke style package: its own profile and prepare step, tuning's other steps."""
    package = tmp_path / "tuning-gke"
    (package / "skyhook_dir").mkdir(parents=True)
    (package / "profiles").mkdir()
    (package / "profiles" / "inference.sysctl").write_text("vm.swappiness=10\n")
    (package / "Dockerfile").write_text(
        "FROM ghcr.io/example/skyhook-packages/tuning:1.1.4\nCOPY . /skyhook-package\n"
    )
    for name in ("prepare_configs.sh", "prepare_configs_check.sh"):
        (package / "skyhook_dir" / name).write_text("#!/bin/bash\n")
        (package / "skyhook_dir" / name).chmod(0o755)
    document = json.loads((TUNING / "config.json").read_text())
    document["package_name"] = "tuning-gke"
    document["package_version"] = "0.1.0"
    document["modes"]["config"].insert(0, step("prepare_configs.sh", idempotence=True))
    document["modes"]["config-check"].insert(0, step("prepare_configs_check.sh", idempotence=True))
    (package / "config.json").write_text(json.dumps(document))
    return package


def edit_config(package: Path, edit: Callable[[dict[str, Any]], object]) -> None:
    document = json.loads((package / "config.json").read_text())
    edit(document)
    (package / "config.json").write_text(json.dumps(document))


def test_without_base_every_inherited_step_file_is_missing(derived: Path) -> None:
    result = validate(derived)
    assert result.returncode == 1
    missing = [line for line in result.stderr.splitlines() if "file not found" in line]
    assert [line.rsplit(": ", 1)[1] for line in missing] == sorted(INHERITED)
    assert "modes.config[1].path: file not found in skyhook_dir/: update_settings.sh" in (
        result.stderr
    )
    assert "prepare_configs" not in result.stderr


def test_with_its_base_the_derived_package_is_valid(derived: Path) -> None:
    result = validate(derived, "--base", TUNING)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == f"{derived}: valid"
    assert validate(derived / "config.json", "--base", TUNING).returncode == 0


def test_a_step_file_in_no_layer_is_still_reported(derived: Path) -> None:
    edit_config(derived, lambda d: d["modes"]["uninstall"].append(step("forgotten.sh")))
    result = validate(derived, "--base", TUNING)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "error: modes.uninstall[1].path: file not found in skyhook_dir/ of the package or its "
        "bases: forgotten.sh",
        f"{derived}: 1 problem(s)",
    ]


def test_layers_hide_lower_files_as_the_image_does(derived: Path, tmp_path: Path) -> None:
    base = tmp_path / "tuning"
    shutil.copytree(TUNING, base)
    (base / "skyhook_dir" / "update_settings_check.sh").chmod(0o644)
    broken = validate(derived, "--base", base)
    assert broken.returncode == 1
    shown = base / "skyhook_dir/update_settings_check.sh"
    assert f"error: {shown}: not executable (run: chmod +x {shown})" in broken.stderr
    # A later --base layer, then the derived package itself, each hide the broken file.
    fixed_layer = tmp_path / "fix"
    (fixed_layer / "skyhook_dir").mkdir(parents=True)
    (fixed_layer / "skyhook_dir" / "update_settings_check.sh").write_text("#!/bin/bash\n")
    (fixed_layer / "skyhook_dir" / "update_settings_check.sh").chmod(0o755)
    assert validate(derived, "--base", base, "--base", fixed_layer).returncode == 0
    assert validate(derived, "--base", fixed_layer, "--base", base).returncode == 1
    own = derived / "skyhook_dir" / "update_settings_check.sh"
    own.write_text("#!/bin/bash\n")
    own.chmod(0o644)
    result = validate(derived, "--base", base, "--base", fixed_layer)
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == (
        "error: skyhook_dir/update_settings_check.sh: not executable "
        "(run: chmod +x skyhook_dir/update_settings_check.sh)"
    )


def test_config_json_may_be_inherited_from_the_base(derived: Path) -> None:
    (derived / "config.json").unlink()
    result = validate(derived, "--base", TUNING)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"config.json: inherited from {TUNING / 'config.json'}",
        f"{derived}: valid",
    ]
    alone = validate(derived)
    assert alone.returncode == 1
    assert f"error: config.json: not found: {derived / 'config.json'}" in alone.stderr


def test_config_only_checks_the_document_and_lists_unchecked_files(derived: Path) -> None:
    result = validate(derived, "--config-only")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        *(
            f"not checked: skyhook_dir/{name} (--config-only)"
            for name in [
                "prepare_configs.sh",
                "update_settings.sh",
                "prepare_configs_check.sh",
                "update_settings_check.sh",
                "update_settings_post_check.sh",
                "update_settings_uninstall.sh",
                "update_settings_uninstall_check.sh",
            ]
        ),
        f"{derived}: valid (config.json only)",
    ]
    edit_config(derived, lambda d: d.update(package_version="v0.1.0"))
    bad = validate(derived / "config.json", "--config-only")
    assert bad.returncode == 1
    assert "error: package_version: 'v0.1.0' is not a strict semver version" in bad.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--config-only", "--base", TUNING], "--config-only checks no files",
                     id="config-only-with-base"),
        pytest.param(["--base", "/nonexistent"], "'--base': Directory '/nonexistent' does not exist",
                     id="missing-base"),
        pytest.param(["--base", TUNING / "config.json"], "is a file", id="base-is-a-file"),
    ],
)  # fmt: skip
def test_bad_flags_are_usage_errors(derived: Path, args: list[object], message: str) -> None:
    result = validate(derived, *args)
    assert result.returncode == 2
    assert message in result.stderr
