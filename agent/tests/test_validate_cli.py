"""``skyhook-agent validate PATH`` for package authors (upstream has no such command)."""

import json
import subprocess
import sys
from pathlib import Path

from conftest import config, step

REPO = Path(__file__).resolve().parents[2]


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "skyhook_agent", "validate", str(path)],
                          capture_output=True, text=True)  # fmt: skip


def write(package: Path, document: object, scripts: dict[str, int]) -> None:
    (package / "skyhook_dir").mkdir(parents=True)
    (package / "config.json").write_text(json.dumps(document))
    for name, mode in scripts.items():
        (package / "skyhook_dir" / name).write_text("#!/bin/bash\n")
        (package / "skyhook_dir" / name).chmod(mode)


def test_shipped_shellscript_package_is_valid() -> None:
    for target in (REPO / "packages/shellscript", REPO / "packages/shellscript/config.json"):
        result = validate(target)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip().endswith(": valid")


def test_every_problem_is_reported_with_its_field_path(tmp_path: Path) -> None:
    document = config({"apply": [step("apply.sh")], "apply-check": [step("apply_check.sh")],
                       "config": [step("config.sh")]}, version="v1.0.0")  # fmt: skip
    write(tmp_path, document, {"apply_check.sh": 0o644, "config.sh": 0o755})
    result = validate(tmp_path)
    assert result.returncode == 1
    errors = result.stderr.splitlines()
    assert "error: package_version: 'v1.0.0' is not a strict semver version" in result.stderr
    document["package_version"] = "1.0.0"
    (tmp_path / "config.json").write_text(json.dumps(document))
    errors = validate(tmp_path).stderr.splitlines()
    assert errors == [
        "error: modes.config-check: config has steps, so config-check needs at least one check",
        "error: modes.apply[0].path: file not found in skyhook_dir/: apply.sh",
        "error: skyhook_dir/apply_check.sh: not executable (run: chmod +x "
        "skyhook_dir/apply_check.sh)",
        f"{tmp_path}: 3 problem(s)",
    ]


def test_missing_and_unparsable_config(tmp_path: Path) -> None:
    missing = validate(tmp_path)
    assert missing.returncode == 1
    assert f"error: config.json: not found: {tmp_path}/config.json" in missing.stderr
    (tmp_path / "config.json").write_text("{")
    broken = validate(tmp_path / "config.json")
    assert broken.returncode == 1
    assert "error: config.json: cannot be read as JSON" in broken.stderr


def test_missing_check_is_a_warning_not_an_error(tmp_path: Path) -> None:
    write(tmp_path, config({"apply": [step("apply.sh")], "apply-check": [step("verify.sh")]}),
          {"apply.sh": 0o755, "verify.sh": 0o755})  # fmt: skip
    result = validate(tmp_path)
    assert result.returncode == 0
    assert "warning: apply: step apply.sh has no matching check apply_check.sh" in result.stdout


def test_run_subcommand_needs_an_interrupt_payload_in_interrupt_mode(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "skyhook_agent", "run", "interrupt", "/var/lib/skyhook/x",
         "--root-mount", str(tmp_path)],
        capture_output=True, text=True,
        env={"SKYHOOK_RESOURCE_ID": "a-1_p_1.0.0", "COPY_RESOLV": "false"},
    )  # fmt: skip
    assert result.returncode == 2
    assert "error: interrupt: the interrupt mode needs the base64 interrupt argument" in (
        result.stderr
    )
    assert list(tmp_path.iterdir()) == []
