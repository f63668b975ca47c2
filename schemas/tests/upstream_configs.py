"""config.json documents shaped like upstream's published packages (see the reference notes).

They are the acceptance cases: the validator must accept each, and reject a broken copy.
"""

from __future__ import annotations

from typing import Any


def step(
    path: str,
    *,
    name: str | None = None,
    arguments: list[str] | None = None,
    idempotence: bool = True,
    upgrade_step: bool = False,
) -> dict[str, Any]:
    return {
        "name": name or path.rsplit(".", 1)[0],
        "path": path,
        "arguments": arguments or [],
        "returncodes": [0],
        "on_host": True,
        "env": {},
        "idempotence": idempotence,
        "upgrade_step": upgrade_step,
    }


def config(
    name: str,
    version: str,
    modes: dict[str, list[dict[str, Any]]],
    expected: list[str] | None = None,
) -> dict[str, Any]:
    return {
        "schema_version": "v1",
        "package_name": name,
        "package_version": version,
        "expected_config_files": expected or [],
        "modes": modes,
    }


def shellscript() -> dict[str, Any]:
    modes = [
        "apply",
        "apply-check",
        "config",
        "config-check",
        "post-interrupt",
        "post-interrupt-check",
        "uninstall",
        "uninstall-check",
    ]
    return config(
        "shellscript",
        "1.1.1",
        {
            mode: [step("shellscript_run.sh", name=mode, arguments=[mode.replace("-", "_")])]
            for mode in modes
        },
    )


def tuning() -> dict[str, Any]:
    return config(
        "tuning",
        "1.1.4",
        {
            "config": [step("update_settings.sh")],
            "config-check": [step("update_settings_check.sh")],
            "post-interrupt-check": [step("update_settings_post_check.sh")],
            "uninstall": [step("update_settings_uninstall.sh")],
            "uninstall-check": [step("update_settings_uninstall_check.sh")],
        },
    )


def tuned() -> dict[str, Any]:
    return config(
        "tuned",
        "1.0.0",
        {
            "apply": [step("install_tuned.sh")],
            "apply-check": [step("install_tuned_check.sh")],
            "upgrade": [step("install_tuned.sh")],
            "upgrade-check": [step("install_tuned_check.sh")],
            "config": [step("apply_tuned_profile.sh")],
            "config-check": [step("apply_tuned_profile_check.sh")],
            "post-interrupt-check": [step("post_interrupt_tuned_check.sh")],
            "uninstall": [step("uninstall_tuned.sh")],
            "uninstall-check": [step("uninstall_tuned_check.sh")],
        },
    )


def nvidia_tuned() -> dict[str, Any]:
    """Expected config files, two steps per mode, mixed idempotence, '_' in the name."""
    return config(
        "nvidia_tuned",
        "0.2.3",
        {
            "apply": [step("install_tuned.sh")],
            "apply-check": [step("install_tuned_check.sh")],
            "config": [step("prepare.sh", idempotence=False), step("apply_tuned_profile.sh")],
            "config-check": [step("prepare_check.sh"), step("apply_tuned_profile_check.sh")],
            "uninstall": [step("uninstall_tuned.sh")],
            "uninstall-check": [step("uninstall_tuned_check.sh")],
        },
        expected=["accelerator"],
    )


def with_upgrade_step() -> dict[str, Any]:
    return config(
        "migrator",
        "2.0.0",
        {
            "upgrade": [step("migrate.sh", upgrade_step=True)],
            "upgrade-check": [step("migrate_check.sh")],
        },
    )


ACCEPTED = {
    "shellscript": shellscript,
    "tuning": tuning,
    "tuned": tuned,
    "nvidia_tuned": nvidia_tuned,
    "upgrade_step": with_upgrade_step,
}


def step_paths(document: dict[str, Any]) -> set[str]:
    return {s["path"] for steps in document["modes"].values() for s in steps}
