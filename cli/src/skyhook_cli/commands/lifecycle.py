"""`pause`, `resume`, `disable`, `enable`: set or remove a Skyhook's control annotation.

Each asks first (`-y/--confirm` skips it); only `y` proceeds, anything else or no input at all
prints `Aborted.` and exits 0. `--dry-run` then says what would happen without calling the API.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import click
import semver

from skyhook_cli import candidates, prompts
from skyhook_cli.app import CliError, current_app, exactly_one, global_flags
from skyhook_cli.patterns import quote
from skyhook_schemas import keys

# Upstream operators before v0.8.0 used `spec.pause` and had no disable annotation. The version
# annotation itself dates from upstream's v0.5.0, so a version below that was written by our
# operator, whose every release supports the annotations.
ANNOTATIONS_SINCE = semver.Version(0, 8, 0)
VERSION_ANNOTATION_SINCE = semver.Version(0, 5, 0)


@dataclass(frozen=True)
class Lifecycle:
    verb: str
    done: str
    annotation: str
    sets: bool
    summary: str


VERBS = (
    Lifecycle("pause", "paused", keys.PAUSE_ANNOTATION, True, "Pause a Skyhook from processing"),
    Lifecycle("resume", "resumed", keys.PAUSE_ANNOTATION, False, "Resume a paused Skyhook"),
    Lifecycle("disable", "disabled", keys.DISABLE_ANNOTATION, True, "Disable a Skyhook completely"),
    Lifecycle("enable", "enabled", keys.DISABLE_ANNOTATION, False, "Enable a disabled Skyhook"),
)


def recorded_version(skyhook: Mapping[str, Any]) -> str | None:
    """The operator version a Skyhook records in its `version` annotation, when semver."""
    annotations = (skyhook.get("metadata") or {}).get("annotations") or {}
    text = str(annotations.get(keys.SKYHOOK_VERSION_ANNOTATION, ""))
    try:
        semver.Version.parse(text.removeprefix("v"))
    except ValueError:
        return None
    return text


def older_than_annotations(version: str) -> bool:
    """Did an upstream operator of `version` still use `spec.pause` (v0.5.0 to v0.7.x)?"""
    parsed = semver.Version.parse(version.removeprefix("v"))
    return VERSION_ANNOTATION_SINCE <= parsed < ANNOTATIONS_SINCE


def too_old(action: Lifecycle, name: str, version: str) -> CliError:
    if action.annotation == keys.PAUSE_ANNOTATION:
        value = "true" if action.sets else "false"
        return CliError(
            f"operator version {version} uses spec.pause instead of annotations; "
            f"use 'kubectl edit skyhook {name}' and set spec.pause: {value}"
        )
    return CliError(
        f"operator version {version} does not support {action.verb}; "
        f"this feature was added in v{ANNOTATIONS_SINCE}"
    )


def run(action: Lifecycle, name: str, confirm: bool) -> None:
    app = current_app()
    if not confirm:
        app.say(f"This will {action.verb} Skyhook {quote(name)}. Continue? [y/N]: ", end="")
        if not prompts.lifecycle_confirmed(app.stdin):
            app.say("Aborted.")
            return
    kube = app.kube
    if app.dry_run:
        app.say(f"[dry-run] Would {action.verb} Skyhook {quote(name)}")
        return
    version = recorded_version(kube.get_skyhook(name))
    if version is not None and older_than_annotations(version):
        raise too_old(action, name, version)
    value = "true" if action.sets else None
    kube.patch_skyhook(name, {"metadata": {"annotations": {action.annotation: value}}})
    app.say(f"Skyhook {quote(name)} {action.done}")


def make(action: Lifecycle) -> click.Command:
    @click.command(action.verb, short_help=action.summary)
    @click.argument(
        "args", nargs=-1, metavar="<skyhook-name>", shell_complete=candidates.skyhook_name
    )
    @click.option("-y", "--confirm", is_flag=True, help="Skip confirmation prompt")
    @global_flags
    def command(args: tuple[str, ...], confirm: bool) -> None:
        run(action, exactly_one(args), confirm)

    command.help = f"{action.summary} (annotation {action.annotation})."
    return command


commands = [make(action) for action in VERBS]
